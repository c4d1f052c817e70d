package uplink

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// Cache is where the controller keeps the releases relayctl has shipped,
// by their sha256: a release upgrade is sent as a patch from the one the
// host keeps, and only its own bytes can make that patch. Beside them are
// the forms made of a release (plan makes them to size the review, and
// apply and stage then read them back instead of making them again; each
// is kept with its sha256, and one whose bytes no longer match is made
// again).
//
// Its folder is DIR/releases and DIR/forms, DIR being the user's cache
// folder's relayctl (os.UserCacheDir: $XDG_CACHE_HOME, else ~/.cache):
// folders 0700 and files 0600, the user's alone. relayctl refuses a cache
// folder that another user owns or can write, and makes a missing one only
// in a folder of its user's or root's (root under sudo with the invoking
// user's HOME would otherwise write into that user's folder), and reads no
// file through a symlink. A file is checked when read, by its
// sha256: one that fails is removed (and a form made again), so a damaged
// cache costs time, never a wrong upload (the host checks the sha256 of
// what it decodes in any case).
type Cache struct{ dir string }

// keepReleases is how many releases the cache keeps: the newest stored
// (each a release's size, and its forms beside it).
const keepReleases = 8

// formTag names the encoder settings of a kept form: a form made with
// other settings is not read back (the review's size would differ).
const formTag = "kp1204-best"

// DefaultCacheDir is DIR above.
func DefaultCacheDir() (string, error) {
	d, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(d, "relayctl"), nil
}

// OpenCache opens (and makes) the cache in dir.
func OpenCache(dir string) (*Cache, error) {
	dir = filepath.Clean(dir)
	if err := makeParents(filepath.Dir(dir)); err != nil {
		return nil, fmt.Errorf("open release cache %s: %w", dir, err)
	}
	if err := safeParent(filepath.Dir(dir)); err != nil {
		return nil, fmt.Errorf("open release cache %s: %w", dir, err)
	}
	for _, d := range []string{dir, filepath.Join(dir, "releases"), filepath.Join(dir, "forms")} {
		if err := ownDir(d); err != nil {
			return nil, fmt.Errorf("open release cache %s: %w", dir, err)
		}
	}
	return &Cache{dir: dir}, nil
}

// Dir is the cache's folder.
func (c *Cache) Dir() string { return c.dir }

// makeParents makes d and the folders above it that are missing (0700),
// only in a folder that passes safeParent: root under sudo -E, with the
// invoking user's HOME and no ~/.cache, would otherwise make a ~/.cache of
// root's in that user's home, and the cache in it.
func makeParents(d string) error {
	var missing []string
	for p := d; ; p = filepath.Dir(p) {
		if _, err := os.Stat(p); err == nil {
			if err := safeParent(p); err != nil {
				return err
			}
			break
		} else if !errors.Is(err, fs.ErrNotExist) || p == filepath.Dir(p) {
			return err
		}
		missing = append(missing, p)
	}
	for i := len(missing) - 1; i >= 0; i-- {
		if err := os.Mkdir(missing[i], 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
	}
	return nil
}

// safeParent: the folder the cache is made in belongs to this user or
// root, and nobody else can write it unless it is sticky (/tmp), where
// nobody else can take a name made in it.
func safeParent(d string) error {
	st, err := os.Stat(d)
	if err != nil {
		return err
	}
	uid := owner(st)
	switch {
	case !st.IsDir():
		return fmt.Errorf("%s is not a folder", d)
	case uid != uint32(os.Geteuid()) && uid != 0:
		return fmt.Errorf("%s belongs to uid %d, not to this user (uid %d): set XDG_CACHE_HOME to a folder of this user's", d, uid, os.Geteuid())
	case st.Mode().Perm()&0o022 != 0 && st.Mode()&fs.ModeSticky == 0:
		return fmt.Errorf("%s can be written by others (mode %o)", d, st.Mode().Perm())
	}
	return nil
}

// ownDir makes d (0700), or finds it: a real folder of this user's that
// nobody else can write.
func ownDir(d string) error {
	if err := os.Mkdir(d, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	st, err := os.Lstat(d)
	if err != nil {
		return err
	}
	switch {
	case st.Mode()&fs.ModeSymlink != 0:
		return fmt.Errorf("%s is a symlink", d)
	case !st.IsDir():
		return fmt.Errorf("%s is not a folder", d)
	case owner(st) != uint32(os.Geteuid()):
		return fmt.Errorf("%s belongs to uid %d, not to this user (uid %d)", d, owner(st), os.Geteuid())
	case st.Mode().Perm()&0o022 != 0:
		return fmt.Errorf("%s can be written by others (mode %o)", d, st.Mode().Perm())
	}
	return nil
}

func owner(st fs.FileInfo) uint32 {
	if s, ok := st.Sys().(*syscall.Stat_t); ok {
		return s.Uid
	}
	return ^uint32(0)
}

func validSHA(s string) bool {
	return len(s) == 64 && strings.Trim(s, "0123456789abcdef") == ""
}

func (c *Cache) releasePath(sha string) string { return filepath.Join(c.dir, "releases", sha) }

// Has reports whether the cache holds the release sha (not yet checked).
func (c *Cache) Has(sha string) bool {
	if c == nil || !validSHA(sha) {
		return false
	}
	st, err := os.Lstat(c.releasePath(sha))
	return err == nil && st.Mode().IsRegular() && owner(st) == uint32(os.Geteuid())
}

// Release reads the release sha, checked against its sha256.
func (c *Cache) Release(sha string) ([]byte, error) {
	if c == nil {
		return nil, errors.New("no release cache")
	}
	if !validSHA(sha) {
		return nil, fmt.Errorf("%q is not a sha256", sha)
	}
	p := c.releasePath(sha)
	b, err := readOwn(p, MaxRelease)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", p, err)
	}
	if sum := sha256.Sum256(b); hex.EncodeToString(sum[:]) != sha {
		os.Remove(p)
		return nil, fmt.Errorf("%s does not hash to its name (removed)", p)
	}
	os.Chtimes(p, timeNow(), timeNow()) // used: the last to go
	return b, nil
}

// MaxRelease bounds a release the cache reads (plans.MaxArtifactSize).
const MaxRelease = 512 << 20

// PutRelease keeps a release relayctl ships, unless it is there already,
// and keeps the cache to its newest keepReleases releases.
func (c *Cache) PutRelease(data []byte) error {
	if c == nil {
		return nil
	}
	sum := sha256.Sum256(data)
	sha := hex.EncodeToString(sum[:])
	if c.Has(sha) {
		os.Chtimes(c.releasePath(sha), timeNow(), timeNow())
		return nil
	}
	if err := writeOwn(filepath.Join(c.dir, "releases"), sha, data); err != nil {
		return fmt.Errorf("keep release %s in %s: %w", short(sha), c.dir, err)
	}
	os.Chtimes(c.releasePath(sha), timeNow(), timeNow())
	c.prune()
	return nil
}

func (c *Cache) formPath(sha, enc, base string) string {
	name := sha + "." + enc
	if base != "" {
		name += "." + base
	}
	return filepath.Join(c.dir, "forms", name+"."+formTag)
}

// form reads back a form of the release sha (of size bytes) made before:
// false when there is none, or its bytes are not the ones kept (a form
// file starts with its bytes' sha256: one that does not match is removed).
func (c *Cache) form(sha, enc, base string, size int) ([]byte, bool) {
	if c == nil || !validSHA(sha) || base != "" && !validSHA(base) || !slices.Contains(Encodings, enc) {
		return nil, false
	}
	p := c.formPath(sha, enc, base)
	b, err := readOwn(p, size+sha256.Size)
	if err != nil || len(b) < sha256.Size {
		return nil, false
	}
	if sum := sha256.Sum256(b[sha256.Size:]); !bytes.Equal(sum[:], b[:sha256.Size]) {
		os.Remove(p)
		return nil, false
	}
	return b[sha256.Size:], true
}

// putForm keeps a form made, its bytes' sha256 first; a cache that
// cannot take it costs the next run the time to make it again.
func (c *Cache) putForm(sha, enc, base string, data []byte) {
	if c == nil || !validSHA(sha) || base != "" && !validSHA(base) || !slices.Contains(Encodings, enc) {
		return
	}
	p := c.formPath(sha, enc, base)
	sum := sha256.Sum256(data)
	writeOwn(filepath.Dir(p), filepath.Base(p), append(sum[:], data...))
}

// readOwn reads a regular file of this user's, never through a symlink,
// of at most max bytes.
func readOwn(p string, max int) ([]byte, error) {
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	switch {
	case !st.Mode().IsRegular():
		return nil, errors.New("not a regular file")
	case owner(st) != uint32(os.Geteuid()):
		return nil, fmt.Errorf("belongs to uid %d", owner(st))
	case st.Size() > int64(max):
		return nil, fmt.Errorf("larger than %d bytes", max)
	}
	return io.ReadAll(io.LimitReader(f, int64(max)+1))
}

// writeOwn writes name in dir through a new temporary file (0600) and a
// rename, so a reader never sees half a file.
func writeOwn(dir, name string, data []byte) error {
	f, err := os.CreateTemp(dir, ".new-*")
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), filepath.Join(dir, name))
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return err
}

// timeNow is when a release was last used (its mtime): a variable for
// the cache's tests.
var timeNow = time.Now

// prune keeps the newest keepReleases releases (by when each was last
// used) and the forms of those alone.
func (c *Cache) prune() {
	rels, err := os.ReadDir(filepath.Join(c.dir, "releases"))
	if err != nil {
		return
	}
	type rel struct {
		sha  string
		used time.Time
	}
	var all []rel
	for _, e := range rels {
		if info, err := e.Info(); err == nil && validSHA(e.Name()) && info.Mode().IsRegular() {
			all = append(all, rel{e.Name(), info.ModTime()})
		}
	}
	slices.SortFunc(all, func(a, b rel) int { return b.used.Compare(a.used) })
	kept := map[string]bool{}
	for i, r := range all {
		if i < keepReleases {
			kept[r.sha] = true
		} else {
			os.Remove(c.releasePath(r.sha))
		}
	}
	forms, _ := os.ReadDir(filepath.Join(c.dir, "forms"))
	for _, e := range forms {
		parts := strings.Split(e.Name(), ".")
		gone := !kept[parts[0]] // a form of a release no longer kept
		if len(parts) == 4 && validSHA(parts[2]) {
			gone = gone || !kept[parts[2]] // or made from one
		}
		if gone && !strings.HasPrefix(e.Name(), ".new-") {
			os.Remove(filepath.Join(c.dir, "forms", e.Name()))
		}
	}
}
