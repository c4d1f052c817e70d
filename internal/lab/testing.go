package lab

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/relayctl/relayctl/relay/capability"
)

// Require marks a lab test: it skips under go test -short (make
// test-unit: a lab test starts sshds, relays or a systemd, seconds each),
// fails when a lab prerequisite is missing and CI=true (a test that skips
// in CI proves nothing), and skips otherwise. CI runs without -short, so
// every lab test runs there.
func Require(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("lab: a lab test; skipped under -short (make test runs it)")
	}
	if err := CheckPrerequisites(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("lab: %v", err)
		}
		t.Skipf("lab: %v (set CI=true to make this a failure)", err)
	}
}

// RequireSystemd is Require for systemd hosts (HostOptions.Systemd).
func RequireSystemd(t testing.TB) {
	t.Helper()
	Require(t)
	if err := CheckSystemdPrerequisites(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("lab: %v", err)
		}
		t.Skipf("lab: %v (set CI=true to make this a failure)", err)
	}
}

// StartT starts a lab for a test (Require, or RequireSystemd, first) and
// closes it at cleanup. An empty o.Dir means a fresh t.TempDir().
func StartT(t testing.TB, o Options) *Lab {
	t.Helper()
	Require(t)
	for _, h := range o.Hosts {
		if h.Systemd {
			RequireSystemd(t)
			break
		}
	}
	if o.Dir == "" {
		o.Dir = t.TempDir()
	}
	l, err := Start(t.Context(), o)
	if err != nil {
		t.Fatalf("start lab: %v", err)
	}
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Errorf("close lab: %v", err)
		}
	})
	return l
}

var relaydBuilds struct {
	sync.Mutex
	dir   string
	paths map[string]string
}

// BuildRelayd builds ./cmd/relayd of this module with main.Version stamped,
// once per version per test binary, and returns the binary's path. The
// builds live in one temporary directory per test binary, which outlives
// the test that built them.
func BuildRelayd(t testing.TB, version string) string {
	t.Helper()
	if err := validVersion(version); err != nil {
		t.Fatalf("build relayd: %v", err)
	}
	relaydBuilds.Lock()
	defer relaydBuilds.Unlock()
	if p, ok := relaydBuilds.paths[version]; ok {
		return p
	}
	if relaydBuilds.dir == "" {
		d, err := os.MkdirTemp("", "relaylab-relayd-")
		if err != nil {
			t.Fatalf("build relayd: %v", err)
		}
		relaydBuilds.dir = d
		relaydBuilds.paths = map[string]string{}
	}
	out := filepath.Join(relaydBuilds.dir, version, "relayd")
	if err := BuildRelaydTo(context.Background(), version, out); err != nil {
		t.Fatal(err)
	}
	relaydBuilds.paths[version] = out
	return out
}

// BuildRelaydTo builds ./cmd/relayd of the module around the working
// directory into out the way `make build` does (BuildFlags): static, so it
// runs in any lab host, and reproducible.
func BuildRelaydTo(ctx context.Context, version, out string) error {
	gomod, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return fmt.Errorf("build relayd: find module: %w", err)
	}
	root := filepath.Dir(strings.TrimSpace(string(gomod)))
	if strings.TrimSpace(string(gomod)) == "" || root == "." {
		return errors.New("build relayd: not inside the relayctl module")
	}
	cmd := exec.CommandContext(ctx, "go", append(append([]string{"build"}, BuildFlags(version)...), "-o", out, "./cmd/relayd")...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build relayd %s: %w: %s", version, err, strings.TrimSpace(string(b)))
	}
	return nil
}

// BuildFlags are the go build flags of a release, as the Makefile's build
// target passes them: no file system paths in the binary (-trimpath), no
// symbol table or DWARF (-s -w), the version stamped with its marker
// (capability.VersionFlags), which relayctl reads from the bytes. With
// CGO_ENABLED=0 the same commit builds the same bytes on any machine.
func BuildFlags(version string) []string {
	return []string{"-trimpath", "-buildvcs=false", "-ldflags", "-s -w " + capability.VersionFlags(version)}
}

// FreePort is a port number free for UDP and TCP both on 127.0.0.1 now: a
// relay in the machine's network namespace listens on it (UDP) and serves
// its control plane on it (TCP), where a bench on the machine reaches it.
func FreePort(t testing.TB) int {
	t.Helper()
	for {
		udp, err := net.ListenPacket("udp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := udp.LocalAddr().(*net.UDPAddr).Port
		tcp, err := net.Listen("tcp4", fmt.Sprintf("127.0.0.1:%d", port))
		udp.Close()
		if err == nil {
			tcp.Close()
			return port
		}
	}
}
