// Package repotest gives tests a copy of the repository to run make
// targets and scripts in, as on a fresh clone: what they build and leave
// (bin/, lab/, demo/) goes to the copy, never to the working tree.
package repotest

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Root is the repository's top folder: the one holding go.mod of the
// module the test runs in.
func Root(t testing.TB) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	gomod := strings.TrimSpace(string(out))
	if err != nil || gomod == "" || gomod == os.DevNull {
		t.Fatalf("find the repository: go env GOMOD: %q, %v", gomod, err)
	}
	return filepath.Dir(gomod)
}

// skipped are what builds, demos and labs leave, and git's own.
var skipped = map[string]bool{".git": true, "bin": true, "demo": true, "demo-bench": true, "lab": true}

// Copy copies the repository's files (not .git, nor what builds and labs
// leave) to a fresh temporary folder and returns it.
func Copy(t testing.TB) string {
	t.Helper()
	src, dst := Root(t), t.TempDir()
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if d.IsDir() && skipped[rel] {
			return filepath.SkipDir
		}
		to := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return os.MkdirAll(to, 0o755)
		case info.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			return os.WriteFile(to, b, info.Mode().Perm())
		}
		return nil
	})
	if err != nil {
		t.Fatalf("copy the repository: %v", err)
	}
	return dst
}
