package main

import (
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/relayctl/relayctl/internal/lab"
)

// moduleRoot is the repository around this package.
func moduleRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root: %v", err)
	}
	return root
}

// copyModule copies the module's source (no .git, no bin) to dst.
func copyModule(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if d.IsDir() && (rel == ".git" || rel == "bin" || rel == "demo") {
			return filepath.SkipDir
		}
		to := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			return os.MkdirAll(to, 0o755)
		case d.Type().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			return os.WriteFile(to, b, 0o644)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("copy module: %v", err)
	}
}

// static reports whether the ELF file has no interpreter (ld.so).
func static(t *testing.T, p string) bool {
	t.Helper()
	f, err := elf.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			return false
		}
	}
	return true
}

func sha256File(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// TestReproducibleBuild builds relayd as `make build` does from two copies
// of the source in different folders, the second with an empty build cache,
// and wants the same sha256: a reviewer can rebuild a release and check it.
func TestReproducibleBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("builds relayd from an empty cache (about 40 s)")
	}
	root := moduleRoot(t)
	var sums []string
	for i, dir := range []string{t.TempDir(), filepath.Join(t.TempDir(), "a", "longer", "path")} {
		copyModule(t, root, dir)
		out := filepath.Join(t.TempDir(), "relayd")
		cmd := exec.Command("go", append(append([]string{"build"}, lab.BuildFlags("1.8.0")...), "-o", out, "./cmd/relayd")...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if i == 1 {
			cmd.Env = append(cmd.Env, "GOCACHE="+t.TempDir())
		}
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("build in %s: %v\n%s", dir, err, b)
		}
		if b, err := exec.Command(out, "--version").Output(); err != nil || string(b) != "1.8.0\n" {
			t.Errorf("%s --version: %q, %v; want 1.8.0", out, b, err)
		}
		if !static(t, out) {
			t.Errorf("%s is dynamically linked (has an ELF interpreter)", out)
		}
		sums = append(sums, sha256File(t, out))
	}
	if sums[0] != sums[1] {
		t.Errorf("sha256 %s and %s: the same source built twice differs", sums[0], sums[1])
	}
	t.Logf("relayd 1.8.0 sha256 %s", sums[0])
}

// TestMakeBuildFlags: make build uses the flags lab.BuildFlags gives, so the
// lab's relayd is built as releases are.
func TestMakeBuildFlags(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make not installed")
	}
	out, err := exec.Command("make", "-s", "-n", "-C", moduleRoot(t), "build", "RELAY_VERSION=1.8.0").Output()
	if err != nil {
		t.Fatalf("make -n build: %v", err)
	}
	var line string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, "-o bin/relayd ") {
			line = l
		}
	}
	flags := lab.BuildFlags("1.8.0")
	want := "CGO_ENABLED=0 go build " + strings.Join(flags[:len(flags)-2], " ") + ` -ldflags "` + flags[len(flags)-1] + `" -o bin/relayd ./cmd/relayd`
	if line != want {
		t.Errorf("make build's relayd line:\n%s\nwant:\n%s", line, want)
	}
}
