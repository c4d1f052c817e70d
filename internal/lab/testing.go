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
	"syscall"
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

// RequireBusybox is Require for busybox hosts (HostOptions.Busybox).
func RequireBusybox(t testing.TB) {
	t.Helper()
	Require(t)
	if err := CheckBusyboxPrerequisites(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("lab: %v", err)
		}
		t.Skipf("lab: %v (set CI=true to make this a failure)", err)
	}
}

// RequireServices is RequireSystemd for hosts that run these packaged
// services (HostOptions.Services): a missing package fails the test when
// CI=true and skips it otherwise.
func RequireServices(t testing.TB, units ...string) {
	t.Helper()
	RequireSystemd(t)
	if err := CheckServicePrerequisites(units...); err != nil {
		if os.Getenv("CI") == "true" || !errors.Is(err, ErrPrerequisite) {
			t.Fatalf("lab: %v", err)
		}
		t.Skipf("lab: %v (set CI=true to make this a failure)", err)
	}
}

// StartT starts a lab for a test (Require, RequireSystemd, RequireBusybox
// or RequireServices first) and closes it at cleanup. An empty o.Dir means a
// fresh t.TempDir().
func StartT(t testing.TB, o Options) *Lab {
	t.Helper()
	Require(t)
	for _, h := range o.Hosts {
		if h.Systemd {
			RequireSystemd(t)
		}
		if h.Busybox {
			RequireBusybox(t)
		}
		for _, s := range h.Services {
			RequireServices(t, s.Unit)
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

// RunRemovingBuilds runs a package's tests (m.Run), then RemoveBuilds, and
// returns m.Run's code: a TestMain whose tests build relayd is
// os.Exit(lab.RunRemovingBuilds(m)).
func RunRemovingBuilds(m interface{ Run() int }) int {
	code := m.Run()
	RemoveBuilds()
	return code
}

// RemoveBuilds removes the folder of BuildRelayd's builds once a package's
// tests have run (RunRemovingBuilds): the builds outlive every test, and
// without it each test run would leave tens of megabytes in the machine's
// temporary folder.
func RemoveBuilds() {
	relaydBuilds.Lock()
	defer relaydBuilds.Unlock()
	if relaydBuilds.dir != "" {
		os.RemoveAll(relaydBuilds.dir)
		relaydBuilds.dir, relaydBuilds.paths = "", nil
	}
}

// BuildRelayd builds ./cmd/relayd of this module with main.Version stamped,
// once per version per test binary, and returns the binary's path. The
// builds live in one temporary directory per test binary, which outlives
// the test that built them (the package's TestMain calls RemoveBuilds). It
// is a lab test's: it starts with Require, so under -short it skips t
// before it spends seconds building.
func BuildRelayd(t testing.TB, version string) string {
	t.Helper()
	Require(t)
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
	return BuildRelaydWith(ctx, out, BuildFlags(version)...)
}

// BuildRelaydWith builds ./cmd/relayd of the module around the working
// directory into out with go build's flags as given: how a test makes the
// builds an operator might ship (a plain go build, -ldflags without the
// marker).
func BuildRelaydWith(ctx context.Context, out string, flags ...string) error {
	gomod, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return fmt.Errorf("build relayd: find module: %w", err)
	}
	root := filepath.Dir(strings.TrimSpace(string(gomod)))
	if strings.TrimSpace(string(gomod)) == "" || root == "." {
		return errors.New("build relayd: not inside the relayctl module")
	}
	cmd := exec.CommandContext(ctx, "go", append(append([]string{"build"}, flags...), "-o", out, "./cmd/relayd")...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build relayd %q: %w: %s", flags, err, strings.TrimSpace(string(b)))
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

// FreePort is a port number for a relay in the machine's network
// namespace, which listens on it (UDP) and serves its control plane on it
// (TCP), where a bench on the machine reaches it. The port is the test's
// until it ends: it is taken from below the kernel's ephemeral range
// (net.ipv4.ip_local_port_range), so no socket bound to port 0 can be
// handed it meanwhile, and it is held by a file lock that every test
// binary's FreePort honours. (A probe socket closed before the relay binds,
// as FreePort once was, lost its port to another test in between:
// "address already in use".)
func FreePort(t testing.TB) int {
	t.Helper()
	low := ephemeralLow()
	for port := freePortFirst; port < low && port < 65536; port++ {
		f, err := os.OpenFile(fmt.Sprintf("/tmp/relaylab-port-%d.lock", port), os.O_CREATE|os.O_RDWR, 0o600)
		if err != nil {
			t.Fatalf("free port: %v", err)
		}
		if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
			f.Close()
			continue
		}
		if portFree(port) {
			t.Cleanup(func() { f.Close() })
			return port
		}
		f.Close()
	}
	t.Fatalf("free port: none free from %d below the ephemeral range at %d", freePortFirst, low)
	return 0
}

// freePortFirst is where FreePort starts looking: well above the ports
// of system services and below Linux's default ephemeral range (32768).
const freePortFirst = 24000

// ephemeralLow is the first port the kernel hands out to a bind to port 0.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	var low int
	if _, err := fmt.Sscan(string(b), &low); err != nil || low <= freePortFirst {
		return 32768
	}
	return low
}

// portFree reports whether nothing listens on port, UDP or TCP, on
// 127.0.0.1 now.
func portFree(port int) bool {
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	udp, err := net.ListenPacket("udp4", addr)
	if err != nil {
		return false
	}
	defer udp.Close()
	tcp, err := net.Listen("tcp4", addr)
	if err != nil {
		return false
	}
	tcp.Close()
	return true
}
