package shellhost

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/relayctl/relayctl/artifact"
)

func gzTar(t *testing.T, files map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	z := gzip.NewWriter(&buf)
	w := tar.NewWriter(z)
	for _, name := range []string{"bin/myrelay", "share/notes.txt"} {
		body, ok := files[name]
		if !ok {
			continue
		}
		mode := int64(0o644)
		if strings.HasPrefix(name, "bin/") {
			mode = 0o755
		}
		w.WriteHeader(&tar.Header{Name: name, Mode: mode, Size: int64(len(body)), Typeflag: tar.TypeReg})
		w.Write([]byte(body))
	}
	w.Close()
	z.Close()
	return buf.Bytes()
}

// A tarball release is unpacked by root on the host into a folder of its
// own, root's, and checked there by the tree hash relayctl made from the
// tarball it reviewed: a file changed since is refused, as is a release
// folder with a file the tarball did not have.
func TestAgentPlacesAndChecksATarball(t *testing.T) {
	root := rootDir(t)
	h := lockedAgent(t, filepath.Join(root, "state"))
	r, err := artifact.Tarball(gzTar(t, map[string]string{"bin/myrelay": "#!/bin/sh\necho v2\n", "share/notes.txt": "hello\n"}), "bin/myrelay")
	if err != nil {
		t.Fatal(err)
	}
	store := filepath.Join(root, "releases", ".sha256", r.SHA256, "release.tar")
	if _, err := runOps(h, op("dir", filepath.Dir(store)), keepOp(store, r.SHA256, r.Data, "0644")); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "releases", "2.0.0")
	if _, err := runOps(h, op("place-release", dir, store, r.SHA256, "bin/myrelay", r.TreeSHA256)); err != nil {
		t.Fatalf("place: %v", err)
	}
	st, err := os.Stat(filepath.Join(dir, "bin", "myrelay"))
	if err != nil || st.Mode().Perm() != 0o755 {
		t.Fatalf("the program after unpacking: %v %v", st, err)
	}
	if _, err := runOps(h, op("check-release", dir, r.SHA256, "bin/myrelay", r.TreeSHA256)); err != nil {
		t.Errorf("check of the placed release: %v", err)
	}
	os.WriteFile(filepath.Join(dir, "share", "notes.txt"), []byte("changed\n"), 0o644)
	if _, err := runOps(h, op("check-release", dir, r.SHA256, "bin/myrelay", r.TreeSHA256)); err == nil || !strings.Contains(err.Error(), "not the release reviewed") {
		t.Errorf("a changed file: got %v, want refused", err)
	}
	os.WriteFile(filepath.Join(dir, "share", "notes.txt"), []byte("hello\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "extra"), []byte("x"), 0o644)
	if _, err := runOps(h, op("check-release", dir, r.SHA256, "bin/myrelay", r.TreeSHA256)); err == nil || !strings.Contains(err.Error(), "not the release reviewed") {
		t.Errorf("an extra file: got %v, want refused", err)
	}
	// A wrong tree hash for the store's bytes: nothing placed, nothing left.
	bad := filepath.Join(root, "releases", "2.0.1")
	if _, err := runOps(h, op("place-release", bad, store, r.SHA256, "bin/myrelay", strings.Repeat("0", 64))); err == nil {
		t.Error("placed a release whose files hash to another tree")
	}
	for _, p := range []string{bad, bad + ".relayctl-new"} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s left behind: %v", p, err)
		}
	}
}

// prune removes what it is given, renamed aside first; never the release
// the current link points at; store entries by sha256.
func TestAgentPrunesOldReleases(t *testing.T) {
	root := rootDir(t)
	h := lockedAgent(t, filepath.Join(root, "state"))
	rel := filepath.Join(root, "releases")
	for _, v := range []string{"1.5.0", "1.6.0", "1.7.0"} {
		os.MkdirAll(filepath.Join(rel, v), 0o755)
		os.WriteFile(filepath.Join(rel, v, "relayd"), []byte(v), 0o755)
	}
	sha := strings.Repeat("ab", 32)
	os.MkdirAll(filepath.Join(rel, ".sha256", sha), 0o755)
	current := filepath.Join(root, "current")
	os.Symlink(filepath.Join(rel, "1.6.0"), current)
	o := op("prune", rel, current, "4")
	o.Argv = []string{"v:1.5.0", "v:1.6.0", "s:" + sha, "v:../etc"}
	_, err := runOps(h, o)
	if err == nil || !strings.Contains(err.Error(), "could not remove: v:../etc") {
		t.Errorf("prune: got %v, want the hostile name refused by name", err)
	}
	for p, want := range map[string]bool{"1.5.0": false, "1.6.0": true, "1.7.0": true, ".sha256/" + sha: false, ".relayctl-prune-1.5.0": false} {
		_, err := os.Stat(filepath.Join(rel, p))
		if got := err == nil; got != want {
			t.Errorf("%s there after prune: %v, want %v", p, got, want)
		}
	}
}

// Under a releases folder reached through a symlink (/opt/relay/releases
// -> /srv/relay/releases), prune still never removes the release the
// current link points at, however the link names it: the link's target
// and the folder prune was given are resolved alike.
func TestAgentPruneKeepsTheCurrentReleaseUnderASymlinkedFolder(t *testing.T) {
	root := rootDir(t)
	h := lockedAgent(t, filepath.Join(root, "state"))
	real := filepath.Join(root, "srv", "releases")
	for _, v := range []string{"1.5.0", "1.6.0"} {
		os.MkdirAll(filepath.Join(real, v), 0o755)
		os.WriteFile(filepath.Join(real, v, "relayd"), []byte(v), 0o755)
	}
	rel := filepath.Join(root, "releases")
	if err := os.Symlink(real, rel); err != nil {
		t.Fatal(err)
	}
	for _, target := range []string{"releases/1.6.0", filepath.Join(rel, "1.6.0"), filepath.Join(real, "1.6.0")} {
		current := filepath.Join(root, "current")
		os.Remove(current)
		if err := os.Symlink(target, current); err != nil {
			t.Fatal(err)
		}
		o := op("prune", rel, current, "1")
		o.Argv = []string{"v:1.6.0"}
		if _, err := runOps(h, o); err != nil {
			t.Errorf("current -> %s: prune: %v", target, err)
		}
		if _, err := os.Stat(filepath.Join(real, "1.6.0", "relayd")); err != nil {
			t.Fatalf("current -> %s: prune removed the current release: %v", target, err)
		}
	}
	o := op("prune", rel, filepath.Join(root, "current"), "1")
	o.Argv = []string{"v:1.5.0"}
	if _, err := runOps(h, o); err != nil {
		t.Errorf("prune 1.5.0: %v", err)
	}
	if _, err := os.Stat(filepath.Join(real, "1.5.0")); !os.IsNotExist(err) {
		t.Errorf("1.5.0 after prune: %v, want removed", err)
	}
}
