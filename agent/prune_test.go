package agent

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func pruneReq(rel, current string, words ...string) string {
	return req("prune", 1, nil, words, rel, current, strconv.Itoa(len(words)))
}

// prune removes what it is given, renamed aside first; never the release
// the current link points at; store entries by sha256; a name that could
// lead elsewhere is refused by name; and what an earlier prune left
// renamed aside goes too.
func TestPrune(t *testing.T) {
	root, state := testRoot(t)
	rel := filepath.Join(root, "releases")
	for _, v := range []string{"1.5.0", "1.6.0", "1.7.0", ".relayctl-prune-1.4.0"} {
		os.MkdirAll(filepath.Join(rel, v), 0o755)
		os.WriteFile(filepath.Join(rel, v, "relayd"), []byte(v), 0o755)
	}
	sha := strings.Repeat("ab", 32)
	os.MkdirAll(filepath.Join(rel, ".sha256", sha), 0o755)
	current := filepath.Join(root, "current")
	os.Symlink(filepath.Join(rel, "1.6.0"), current)
	want(t, locked(t, state, pruneReq(rel, current, "v:1.5.0", "v:1.6.0", "s:"+sha, "v:../etc", "v:1.5/../x", "s:../x", "s:abc", "x:1", "v:9.9.9")),
		"ERR could not remove: v:../etc 1.5/../x ../x x:1")
	for p, there := range map[string]bool{"1.5.0": false, "1.6.0": true, "1.7.0": true, ".sha256/" + sha: false, ".relayctl-prune-1.5.0": false, ".relayctl-prune-1.4.0": false} {
		if _, err := os.Stat(filepath.Join(rel, p)); (err == nil) != there {
			t.Errorf("%s there after prune: %v, want %v", p, err == nil, there)
		}
	}
	want(t, locked(t, state, pruneReq(rel, current, "v:1.7.0")), "VAL 1")
	if j, _ := os.ReadFile(state + "/journal"); !strings.Contains(string(j), " ok prune "+rel+"\n") {
		t.Errorf("the journal does not note it: %q", j)
	}
	// A current link that points at a folder named as a prune leftover
	// keeps it.
	os.MkdirAll(filepath.Join(rel, ".relayctl-prune-2.0.0"), 0o755)
	os.Remove(current)
	os.Symlink(filepath.Join(rel, ".relayctl-prune-2.0.0"), current)
	want(t, locked(t, state, pruneReq(rel, current)), "VAL 0")
	if _, err := os.Stat(filepath.Join(rel, ".relayctl-prune-2.0.0")); err != nil {
		t.Errorf("prune removed the current link's target: %v", err)
	}
}

// Under a releases folder reached through a symlink, prune never removes
// the release the current link points at, however the link names it; a
// store folder that is a symlink leads no removal elsewhere.
func TestPruneThroughSymlinks(t *testing.T) {
	root, state := testRoot(t)
	real := filepath.Join(root, "srv", "releases")
	for _, v := range []string{"1.5.0", "1.6.0"} {
		os.MkdirAll(filepath.Join(real, v), 0o755)
		os.WriteFile(filepath.Join(real, v, "relayd"), []byte(v), 0o755)
	}
	rel := filepath.Join(root, "releases")
	os.Symlink(real, rel)
	current := filepath.Join(root, "current")
	for _, target := range []string{"releases/1.6.0", filepath.Join(rel, "1.6.0"), filepath.Join(real, "1.6.0")} {
		os.Remove(current)
		os.Symlink(target, current)
		want(t, locked(t, state, pruneReq(rel, current, "v:1.6.0")), "VAL 0")
		if _, err := os.Stat(filepath.Join(real, "1.6.0", "relayd")); err != nil {
			t.Fatalf("current -> %s: prune removed the current release: %v", target, err)
		}
	}
	want(t, locked(t, state, pruneReq(rel, current, "v:1.5.0")), "VAL 1")
	if _, err := os.Stat(filepath.Join(real, "1.5.0")); err == nil {
		t.Error("1.5.0 is still there")
	}
	// A version folder that is a symlink is not followed.
	os.MkdirAll(filepath.Join(root, "elsewhere", "keep"), 0o755)
	os.Symlink(filepath.Join(root, "elsewhere"), filepath.Join(real, "1.4.0"))
	want(t, locked(t, state, pruneReq(rel, current, "v:1.4.0")), "VAL 0")
	// Nor is a store folder that is one.
	sha := strings.Repeat("cd", 32)
	os.MkdirAll(filepath.Join(root, "other-store", sha), 0o755)
	os.Symlink(filepath.Join(root, "other-store"), filepath.Join(real, ".sha256"))
	want(t, locked(t, state, pruneReq(rel, current, "s:"+sha)), "ERR could not remove: "+sha)
	for _, p := range []string{filepath.Join(root, "elsewhere", "keep"), filepath.Join(root, "other-store", sha)} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("prune removed %s through a symlink: %v", p, err)
		}
	}
}

// Whatever word prune is given, what it removes is a folder of the
// releases folder's own: one plain name, or one store entry.
func FuzzPruneWord(f *testing.F) {
	for _, w := range []string{"v:1.5.0", "v:../etc", "v:1.5/../x", "s:" + strings.Repeat("ab", 32), "s:../x", "s:abc", "x:1", "v:", "v:.hidden", "v:a..b"} {
		f.Add(w)
	}
	f.Fuzz(func(t *testing.T, w string) {
		target, bad := pruneWord(w)
		if target != "" && bad != "" {
			t.Fatalf("%q: both %q and bad %q", w, target, bad)
		}
		if target == "" {
			return
		}
		if h, ok := strings.CutPrefix(target, ".sha256/"); ok {
			if !isSHA256(h) {
				t.Errorf("%q: a store entry %q", w, target)
			}
			return
		}
		if strings.ContainsAny(target, "/\x00") || strings.Contains(target, "..") || target[0] == '.' || target[0] == '-' || target[0] == '+' {
			t.Errorf("%q: a release folder %q", w, target)
		}
	})
}
