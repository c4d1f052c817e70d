// Package kerneltest lets tests change the kernel's global values safely.
//
// net.core.{r,w}mem_{max,default} are global to the machine (docs/kernel.md), and
// go test runs the test binaries of several packages at once, so every test
// that writes one of them takes a file lock first (LockPath, the one the
// scripts and the lab take too) and restores the values it found when it
// ends. The lock's holder records who it is in the file, so that a waiter
// can say whom it waits for (Holder).
package kerneltest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Keys are the global values saved and restored around each locked test.
var Keys = []string{
	"net.core.rmem_max",
	"net.core.rmem_default",
	"net.core.wmem_max",
	"net.core.wmem_default",
}

// Lock serialises t against every other test (in any package), script
// and lab path that changes a global kernel value, and restores Keys to
// their current values at cleanup. While it waits it says on stderr who
// holds the lock and since when. Under -short it skips t: a test that
// changes the machine's global values needs root and waits behind every
// lab test that holds the lock, which a unit run must not.
func Lock(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("kerneltest: changes the machine's global sysctls; skipped under -short")
	}
	held, err := Take(LockPath, Me(filepath.Base(os.Args[0])+" "+t.Name()), os.Stderr, "kerneltest: "+t.Name())
	if err != nil {
		t.Fatal(err)
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
		held.Release()
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
