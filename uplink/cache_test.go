package uplink

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func shaOf(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func openCache(t *testing.T) *Cache {
	t.Helper()
	c, err := OpenCache(filepath.Join(t.TempDir(), "cache", "relayctl"))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// The cache is the user's alone: folders 0700, files 0600.
func TestCacheModes(t *testing.T) {
	c := openCache(t)
	old, _ := releases(t, 64<<10)
	if err := c.PutRelease(old); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{c.Dir(), filepath.Join(c.Dir(), "releases"), filepath.Join(c.Dir(), "forms")} {
		if st, err := os.Stat(p); err != nil || st.Mode().Perm() != 0o700 {
			t.Errorf("%s: %v, mode %v; want 0700", p, err, st.Mode().Perm())
		}
	}
	st, err := os.Stat(c.releasePath(shaOf(old)))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("the release kept: %v, mode %v; want 0600", err, st.Mode().Perm())
	}
	got, err := c.Release(shaOf(old))
	if err != nil || !bytes.Equal(got, old) {
		t.Errorf("read back %d bytes (%v), want %d", len(got), err, len(old))
	}
}

// A cache folder another user can write, or that is a symlink, is refused:
// root under sudo must not write into the invoking user's folders.
func TestCacheRefusesUnsafeFolders(t *testing.T) {
	dir := t.TempDir()
	open := filepath.Join(dir, "open")
	os.Mkdir(open, 0o777)
	os.Chmod(open, 0o777)
	if _, err := OpenCache(filepath.Join(open, "relayctl")); err == nil || !strings.Contains(err.Error(), "can be written by others") {
		t.Errorf("a cache in a folder others can write: %v", err)
	}
	real := filepath.Join(dir, "real")
	os.Mkdir(real, 0o700)
	os.Symlink(real, filepath.Join(dir, "relayctl"))
	if _, err := OpenCache(filepath.Join(dir, "relayctl")); err == nil || !strings.Contains(err.Error(), "is a symlink") {
		t.Errorf("a cache folder that is a symlink: %v", err)
	}
	loose := filepath.Join(dir, "loose")
	os.Mkdir(loose, 0o700)
	os.Mkdir(filepath.Join(loose, "relayctl"), 0o700)
	os.Chmod(filepath.Join(loose, "relayctl"), 0o777)
	if _, err := OpenCache(filepath.Join(loose, "relayctl")); err == nil || !strings.Contains(err.Error(), "can be written by others") {
		t.Errorf("a cache folder others can write: %v", err)
	}
	if os.Geteuid() == 0 {
		theirs := filepath.Join(dir, "theirs")
		os.Mkdir(theirs, 0o755)
		os.Chown(theirs, 65534, 65534)
		if _, err := OpenCache(filepath.Join(theirs, "relayctl")); err == nil || !strings.Contains(err.Error(), "belongs to uid 65534") {
			t.Errorf("a cache in another user's folder: %v", err)
		}
		// Root under sudo -E: HOME is the user's, who has no ~/.cache yet.
		// Nothing is made in their home.
		if _, err := OpenCache(filepath.Join(theirs, ".cache", "relayctl")); err == nil || !strings.Contains(err.Error(), theirs+" belongs to uid 65534") {
			t.Errorf("a cache under another user's home without .cache: %v", err)
		}
		if _, err := os.Lstat(filepath.Join(theirs, ".cache")); err == nil {
			t.Errorf("root made %s in another user's folder", filepath.Join(theirs, ".cache"))
		}
	}
	// Missing folders under one of this user's are made, the user's alone.
	deep := filepath.Join(dir, "home", "me", ".cache", "relayctl")
	if _, err := OpenCache(deep); err != nil {
		t.Errorf("a cache whose folders are missing: %v", err)
	}
	if st, err := os.Stat(filepath.Dir(deep)); err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("%s: %v, %v; want made 0700", filepath.Dir(deep), err, st)
	}
}

// A release whose bytes no longer hash to its name is removed, never used;
// a file that is a symlink is not read.
func TestCacheChecksWhatItReads(t *testing.T) {
	c := openCache(t)
	old, _ := releases(t, 64<<10)
	c.PutRelease(old)
	p := c.releasePath(shaOf(old))
	os.WriteFile(p, append(bytes.Clone(old), 'x'), 0o600)
	if _, err := c.Release(shaOf(old)); err == nil {
		t.Fatal("read a release that does not hash to its name")
	}
	if c.Has(shaOf(old)) {
		t.Error("the damaged release is still there")
	}
	target := filepath.Join(t.TempDir(), "elsewhere")
	os.WriteFile(target, old, 0o600)
	os.Symlink(target, p)
	if _, err := c.Release(shaOf(old)); err == nil {
		t.Error("read a release through a symlink")
	}
}

// A form kept by an earlier run is read back only if its bytes are the
// ones kept; a damaged one is made again.
func TestCacheFormsAreCheckedAndMadeAgain(t *testing.T) {
	c := openCache(t)
	old, new := releases(t, 256<<10)
	c.PutRelease(old)
	r := NewRelease(new, c)
	forms := r.Forms([]string{Gzip, Zstd, ZstdPatch}, []string{shaOf(old)})
	if len(forms) != 2 || forms[0].Encoding != ZstdPatch || forms[0].Base != shaOf(old) || forms[1].Encoding != Zstd {
		t.Fatalf("forms %+v; want a patch from the stored release, then zstd", forms)
	}
	made, _ := forms[0].Bytes()
	p := c.formPath(r.SHA256(), ZstdPatch, shaOf(old))
	if kept, err := os.ReadFile(p); err != nil || !bytes.Equal(kept[32:], made) {
		t.Fatalf("the patch was not kept in the cache: %v", err)
	}
	kept, _ := os.ReadFile(p)
	damaged := bytes.Clone(kept)
	damaged[len(damaged)/2] ^= 0xff
	os.WriteFile(p, damaged, 0o600)
	again, _ := NewRelease(new, c).Forms([]string{ZstdPatch}, []string{shaOf(old)})[0].Bytes()
	if !bytes.Equal(again, made) {
		t.Error("a damaged patch in the cache was used")
	}
	if again, _ := os.ReadFile(p); !bytes.Equal(again, kept) {
		t.Error("the damaged patch was not made again")
	}
}

// The cache keeps the newest releases and the forms of those alone.
func TestCacheKeepsTheNewest(t *testing.T) {
	c := openCache(t)
	defer func() { timeNow = time.Now }()
	at := time.Unix(1_800_000_000, 0)
	var shas []string
	for i := 0; i < keepReleases+2; i++ {
		at = at.Add(time.Minute)
		timeNow = func() time.Time { return at }
		b := bytes.Repeat([]byte{byte(i)}, 100)
		c.PutRelease(b)
		shas = append(shas, shaOf(b))
		c.putForm(shaOf(b), Gzip, "", []byte("x"))
	}
	for i, sha := range shas {
		_, err := os.Stat(c.formPath(sha, Gzip, ""))
		if kept := i >= 2; c.Has(sha) != kept || (err == nil) != kept {
			t.Errorf("release %d: kept %v, its form %v; want %v", i, c.Has(sha), err == nil, kept)
		}
	}
}

// Forms for a host: a patch only from a stored release relayctl has the
// bytes of and a zstd that takes patches; else the best format the host
// decodes; none when it decodes none (the release as it is).
func TestFormsForAHost(t *testing.T) {
	c := openCache(t)
	old, new := releases(t, 256<<10)
	c.PutRelease(old)
	unknown := strings.Repeat("ab", 32)
	r := NewRelease(new, c)
	for _, x := range []struct {
		name             string
		decoders, stored []string
		want             string
	}{
		{"patch", []string{Gzip, Zstd, ZstdPatch}, []string{unknown, shaOf(old)}, "zstd-patch:" + shaOf(old)[:6] + " zstd"},
		{"zstd before 1.4.5", []string{Gzip, Zstd}, []string{shaOf(old)}, "zstd"},
		{"a stored release relayctl has not", []string{Gzip, Zstd, ZstdPatch}, []string{unknown}, "zstd"},
		{"gzip only", []string{Gzip}, []string{shaOf(old)}, "gzip"},
		{"nothing", nil, []string{shaOf(old)}, ""},
		{"the release itself stored", []string{Zstd, ZstdPatch}, []string{r.SHA256()}, "zstd"},
	} {
		var got []string
		for _, f := range r.Forms(x.decoders, x.stored) {
			w := f.Encoding
			if f.Base != "" {
				w += ":" + f.Base[:6]
			}
			got = append(got, w)
		}
		if strings.Join(got, " ") != x.want {
			t.Errorf("%s: forms %v, want %s", x.name, got, x.want)
		}
	}
	if f := NewRelease([]byte("a tiny release"), c).Forms([]string{Gzip, Zstd}, nil); len(f) != 0 {
		t.Errorf("a tiny release is packed: %+v", f)
	}
	if f := NewRelease(new, nil).Forms([]string{Zstd, ZstdPatch}, []string{shaOf(old)}); len(f) != 1 || f[0].Encoding != Zstd {
		t.Errorf("without a cache: %+v, want zstd alone", f)
	}
}
