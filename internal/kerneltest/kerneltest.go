// Package kerneltest lets tests change the kernel's global values safely.
//
// net.core.{r,w}mem_{max,default} are global to the machine (docs/kernel.md), and
// go test runs the test binaries of several packages at once, so every test
// that writes one of them takes a file lock first and restores the values
// it found when it ends.
package kerneltest

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// Keys are the global values saved and restored around each locked test.
var Keys = []string{
	"net.core.rmem_max",
	"net.core.rmem_default",
	"net.core.wmem_max",
	"net.core.wmem_default",
}

const lockPath = "/tmp/relayctl-global-sysctl.lock"

// Lock serialises t against every other test (in any package) that changes a
// global kernel value, and restores Keys to their current values at cleanup.
func Lock(t testing.TB) {
	t.Helper()
	f, err := os.OpenFile(lockPath, os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		t.Fatalf("open kernel lock: %v", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		t.Fatalf("lock %s: %v", lockPath, err)
	}
	saved := map[string]string{}
	for _, k := range Keys {
		saved[k] = Read(t, k)
	}
	t.Cleanup(func() {
		for _, k := range Keys {
			if err := write(k, saved[k]); err != nil {
				t.Errorf("restore %s=%s: %v", k, saved[k], err)
			}
		}
		syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	})
}

// Read returns the runtime value of a sysctl key from /proc/sys.
func Read(t testing.TB, key string) string {
	t.Helper()
	b, err := os.ReadFile(procPath(key))
	if err != nil {
		t.Fatalf("read %s: %v", key, err)
	}
	return strings.TrimSpace(string(b))
}

// Set writes a sysctl value and checks it by reading it back. The test must
// hold Lock when key is one of the global Keys.
func Set(t testing.TB, key, value string) {
	t.Helper()
	if err := write(key, value); err != nil {
		t.Fatalf("set %s=%s: %v", key, value, err)
	}
	if got := Read(t, key); got != value {
		t.Fatalf("set %s: read back %s, want %s", key, got, value)
	}
}

func write(key, value string) error {
	return os.WriteFile(procPath(key), []byte(value+"\n"), 0o644)
}

func procPath(key string) string {
	return filepath.Join("/proc/sys", strings.ReplaceAll(key, ".", "/"))
}
