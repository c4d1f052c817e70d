package kerneltest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The scripts that change the global values (make demo, make demo-bench,
// the benches) take the same lock as the tests, through demo-lib.sh's
// demo_start and kernel_lock: while a test holds Lock, a demo waits,
// saying which test holds it, and changes nothing.
func TestDemoWaitsForTheLock(t *testing.T) {
	if testing.Short() {
		t.Skip("builds relayd; skipped under -short")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root: the demo changes net.core.rmem_max")
	}
	if _, err := exec.LookPath("flock"); err != nil {
		t.Skip("flock (util-linux) not installed")
	}
	Lock(t)
	Set(t, "net.core.rmem_max", "4194304")
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", "-c", `set -euo pipefail; . scripts/demo-lib.sh; demo_start demo-test "$1"`, "bash", filepath.Join(t.TempDir(), "demo"))
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "KERNEL_LOCK_WAIT=1")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("demo_start ran while a test held the lock:\n%s", out)
	}
	for _, want := range []string{
		"demo-test: waiting for the machine-wide sysctl lock held by kerneltest.test TestDemoWaitsForTheLock (pid " + strconv.Itoa(os.Getpid()) + ", user ",
		"demo-test: error: could not take /tmp/relayctl-global-sysctl.lock in 1s",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("demo_start said:\n%s\nwant %q", out, want)
		}
	}
	if got := Read(t, "net.core.rmem_max"); got != "4194304" {
		t.Errorf("rmem_max is %s after a demo that waited, want the test's 4194304", got)
	}
}
