package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// make install puts the binaries, the man page and the three completions
// where PREFIX says (under DESTDIR), each made by the relayctl just built.
func TestMakeInstall(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("make not installed")
		}
		t.Skip("make not installed")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	dest := t.TempDir()
	cmd := exec.Command("make", "-s", "-C", root, "install", "DESTDIR="+dest, "PREFIX=/opt/relayctl-test")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make install: %v\n%s", err, out)
	}
	prefix := filepath.Join(dest, "opt/relayctl-test")
	want := map[string]os.FileMode{
		"bin/relayctl":              0o755,
		"bin/relayd":                0o755,
		"share/man/man1/relayctl.1": 0o644,
		"share/bash-completion/completions/relayctl":    0o644,
		"share/zsh/site-functions/_relayctl":            0o644,
		"share/fish/vendor_completions.d/relayctl.fish": 0o644,
	}
	for name, mode := range want {
		fi, err := os.Stat(filepath.Join(prefix, name))
		if err != nil {
			t.Errorf("not installed: %v", err)
			continue
		}
		if fi.Mode().Perm() != mode || fi.Size() == 0 {
			t.Errorf("%s: mode %v, %d bytes; want %v and content", name, fi.Mode().Perm(), fi.Size(), mode)
		}
	}
	// The installed relayctl runs, and the man page is the one it prints.
	relayctl := filepath.Join(prefix, "bin/relayctl")
	man, err := exec.Command(relayctl, "man").Output()
	if err != nil {
		t.Fatalf("installed relayctl man: %v", err)
	}
	installed, _ := os.ReadFile(filepath.Join(prefix, "share/man/man1/relayctl.1"))
	if !bytes.Equal(man, installed) {
		t.Error("the installed man page is not what the installed relayctl prints")
	}
}
