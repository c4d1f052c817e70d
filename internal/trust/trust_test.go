package trust

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Chain checks the file and every folder above it, as written and as
// resolved: a folder two levels up that others can write lets them move
// the file's folder away and put their own in its place.
func TestChain(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "a", "b", "inv.sh")
	os.MkdirAll(filepath.Dir(file), 0o755)
	os.WriteFile(file, []byte("#!/bin/sh\n"), 0o755)
	if err := Chain(file); err != nil {
		t.Fatalf("a file only its owner can change, under /tmp (sticky): %v", err)
	}
	// A sticky folder others can write counts as safe, as /tmp does.
	sticky := filepath.Join(dir, "sticky")
	os.Mkdir(sticky, 0o755)
	os.Chmod(sticky, os.ModeSticky|0o777)
	os.WriteFile(filepath.Join(sticky, "f"), nil, 0o644)
	if err := Chain(filepath.Join(sticky, "f")); err != nil {
		t.Errorf("a file in a sticky folder: %v", err)
	}
	// Through a symlink whose target is under an open folder.
	open := filepath.Join(dir, "open")
	os.MkdirAll(filepath.Join(open, "deep"), 0o755)
	os.WriteFile(filepath.Join(open, "deep", "f"), nil, 0o644)
	os.Chmod(open, 0o777)
	link := filepath.Join(dir, "a", "link")
	os.Symlink(filepath.Join(open, "deep"), link)
	// A symlink in a folder others can write: the link itself can be swapped.
	os.Symlink(filepath.Join(dir, "a", "b"), filepath.Join(open, "tob"))
	for _, tt := range []struct {
		name, path, mode, want string
	}{
		{"a folder two levels up writable by others", file, filepath.Join(dir, "a"), filepath.Join(dir, "a") + " is writable by others (mode 0777)"},
		{"the file's own folder", file, filepath.Join(dir, "a", "b"), filepath.Join(dir, "a", "b") + " is writable by others (mode 0777)"},
		{"the file", file, file, file + " is writable by others (mode 0777)"},
		{"through a symlink, the folder it resolves under", filepath.Join(link, "f"), "", open + " is writable by others (mode 0777)"},
		{"a symlink in a folder others can write", filepath.Join(open, "tob", "inv.sh"), "", open + " is writable by others (mode 0777)"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if tt.mode != "" {
				st, _ := os.Stat(tt.mode)
				os.Chmod(tt.mode, 0o777)
				defer os.Chmod(tt.mode, st.Mode().Perm())
			}
			if err := Chain(tt.path); err == nil || err.Error() != tt.want {
				t.Errorf("got %v, want %q", err, tt.want)
			}
		})
	}
	if err := Chain(filepath.Join(dir, "missing")); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("a missing file: got %v", err)
	}
}

// RootChain accepts root alone as the owner; Chain the user running it too.
func TestRootChain(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give a file to another user")
	}
	dir := t.TempDir()
	f := filepath.Join(dir, "list")
	os.WriteFile(f, nil, 0o644)
	if err := RootChain(f); err != nil {
		t.Fatalf("root's own file: %v", err)
	}
	os.Chown(f, 65534, 65534)
	if err := RootChain(f); err == nil || err.Error() != f+" belongs to uid 65534, not root" {
		t.Errorf("RootChain of nobody's file: got %v", err)
	}
	if err := Chain(f); err == nil || err.Error() != f+" belongs to uid 65534, neither root nor you" {
		t.Errorf("Chain of nobody's file: got %v", err)
	}
}
