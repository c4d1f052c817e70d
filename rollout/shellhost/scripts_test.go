package shellhost

import (
	"regexp"
	"testing"

	"github.com/relayctl/relayctl/relay/dist"
)

// Each function of the scripts that run as root on a host is defined
// once: a second definition of a name replaces the first for every caller
// (a helper named like an existing one once did, and the tests that take
// a function by its first definition tested the other).
func TestScriptsDefineEachFunctionOnce(t *testing.T) {
	def := regexp.MustCompile(`(?m)^([A-Za-z_][A-Za-z0-9_]*)\(\) *\{`)
	for name, script := range map[string]string{"boot.sh": bootScript, "relay-service.sh": string(dist.ServiceScript)} {
		seen := map[string]bool{}
		for _, m := range def.FindAllStringSubmatch(script, -1) {
			if seen[m[1]] {
				t.Errorf("%s defines %s twice", name, m[1])
			}
			seen[m[1]] = true
		}
		if len(seen) == 0 {
			t.Errorf("%s: no function definitions found: the pattern is stale", name)
		}
	}
}
