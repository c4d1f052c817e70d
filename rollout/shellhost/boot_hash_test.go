package shellhost

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The bootstrap hashes the agent with openssl where the host has one, and
// falls back to sha256sum when openssl prints something that is not a
// sha256 (an old or broken openssl): the agent still runs. An openssl that
// prints another well-formed sha256 makes the agent's bytes not the ones
// relayctl expects (NEED), never an agent run on its word alone being
// another's. Run in a mount namespace of its own, where a tmpfs holds
// the state folder (root's alone, as the bootstrap requires) and another
// over /usr/local/bin puts the openssl of each case first in the
// bootstrap's PATH.
func TestBootHashesTheAgentWithOpensslOrSha256sum(t *testing.T) {
	skip := t.Skip
	if os.Getenv("CI") == "true" {
		skip = t.Fatal // CI runs as root with util-linux: a skip there would prove nothing
	}
	if os.Geteuid() != 0 {
		skip("needs root: a mount namespace and a root-only state folder")
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		skip("needs unshare (util-linux)")
	}
	agent := []byte("#!/bin/sh\necho SERVED \"$@\"\n")
	sum := sha256.Sum256(agent)
	sha := hex.EncodeToString(sum[:])
	dir := t.TempDir()
	agentFile := filepath.Join(dir, "agent")
	if err := os.WriteFile(agentFile, agent, 0o700); err != nil {
		t.Fatal(err)
	}
	other := strings.Repeat("ab", 32)
	for _, c := range []struct {
		name, openssl, want string
	}{
		{"no openssl: sha256sum", "", "SERVED serve /mnt/relayctl-state"},
		{"openssl prints the sha256", "#!/bin/sh\necho \"" + sha + " *$4\"\n", "SERVED serve /mnt/relayctl-state"},
		{"openssl prints no sha256: sha256sum", "#!/bin/sh\necho 'SHA2-256(x)= not-a-hash'\n", "SERVED serve /mnt/relayctl-state"},
		{"openssl prints 63 digits: sha256sum", "#!/bin/sh\necho \"" + sha[:63] + " *$4\"\n", "SERVED serve /mnt/relayctl-state"},
		{"openssl fails: sha256sum", "#!/bin/sh\nexit 1\n", "SERVED serve /mnt/relayctl-state"},
		{"openssl prints another sha256", "#!/bin/sh\necho \"" + other + " *$4\"\n", "NEED "},
	} {
		t.Run(c.name, func(t *testing.T) {
			fake := filepath.Join(t.TempDir(), "openssl")
			if c.openssl != "" {
				if err := os.WriteFile(fake, []byte(c.openssl), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			setup := `set -e
mount -t tmpfs -o mode=0755 relayctl-test /mnt
mkdir -p /mnt/relayctl-state/agent
cp "$1" /mnt/relayctl-state/agent/"$2"
chmod 0700 /mnt/relayctl-state/agent/"$2"
mount -t tmpfs -o mode=0755 relayctl-test /usr/local/bin
if [ -f "$3" ]; then cp "$3" /usr/local/bin/openssl; chmod 0755 /usr/local/bin/openssl; fi
set +e
exec sh -c "$4" relayctl-boot /mnt/relayctl-state "x86_64=$2,aarch64=$2" serve`
			out, _ := exec.Command("unshare", "-m", "sh", "-c", setup, "setup", agentFile, sha, fake, bootScript).CombinedOutput()
			if got := string(out); !strings.HasPrefix(got, c.want) {
				t.Errorf("the bootstrap said %q, want it to start %q", got, c.want)
			}
		})
	}
}
