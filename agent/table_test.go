package agent

import (
	"testing"

	"github.com/relayctl/relayctl/rollout"
)

func primitiveKinds(t *testing.T) []string {
	var out []string
	for _, p := range rollout.Primitives {
		out = append(out, p.Kind)
	}
	return out
}
