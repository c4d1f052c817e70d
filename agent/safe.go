package agent

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// Root writes only where nobody else can plant a symlink or swap a file
// between a check and a write: in folders that belong to root, and that
// neither their group nor others may write, all the way up from /, as
// written and as resolved.

// ownedByRootOnly: p (not followed) belongs to root and, unless it is a
// symlink, neither its group nor others may write it.
func ownedByRootOnly(p string) bool {
	fi, err := os.Lstat(p)
	if err != nil {
		return false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || st.Uid != 0 {
		return false
	}
	return fi.Mode()&fs.ModeSymlink != 0 || fi.Mode().Perm()&0o022 == 0
}

// rootDir: p is a folder (not a symlink) of root's alone.
func rootDir(p string) bool {
	fi, err := os.Lstat(p)
	return err == nil && fi.IsDir() && ownedByRootOnly(p)
}

// prefixes are "/" and every folder from it down to p (absolute, clean).
func prefixes(p string) []string {
	out := []string{"/"}
	cur := ""
	for _, seg := range strings.Split(strings.TrimPrefix(p, "/"), "/") {
		if seg == "" {
			continue
		}
		cur += "/" + seg
		out = append(out, cur)
	}
	return out
}

// safeDir makes sure every folder from / down to dir, as written and as
// resolved, belongs to root and only root can write it; missing folders
// are made (0755). The error says which folder breaks the rule.
func safeDir(dir string) error {
	if !filepath.IsAbs(dir) {
		return fmt.Errorf("%s is not an absolute path", dir)
	}
	dir = filepath.Clean(dir)
	all := true
	for _, p := range prefixes(dir) {
		if !rootDir(p) {
			all = false
			break
		}
	}
	if all {
		return nil // the usual case: no symlink, nothing missing
	}
	if !ownedByRootOnly("/") {
		return errors.New("/ is writable by others")
	}
	for _, p := range prefixes(dir)[1:] {
		if _, err := os.Lstat(p); errors.Is(err, fs.ErrNotExist) {
			if err := os.Mkdir(p, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
				return fmt.Errorf("mkdir: cannot create directory '%s': %v", p, errText(err))
			}
		}
		if !ownedByRootOnly(p) {
			return fmt.Errorf("%s is not owned by root or is writable by its group or others", p)
		}
	}
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return fmt.Errorf("cannot resolve %s", dir)
	}
	if fi, err := os.Stat(real); err != nil || !fi.IsDir() {
		return fmt.Errorf("%s is not a folder", dir)
	}
	for _, p := range prefixes(real)[1:] {
		if !ownedByRootOnly(p) {
			return fmt.Errorf("%s (through a symlink in %s) is not owned by root or is writable by its group or others", p, dir)
		}
	}
	return nil
}

// safeParent is safeDir of p's folder.
func safeParent(p string) error { return safeDir(filepath.Dir(p)) }

// errText is an error's cause as the C library words it ("Invalid
// argument"), without the path or call Go wraps it in.
func errText(err error) string {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		s := errno.Error()
		if s != "" {
			return strings.ToUpper(s[:1]) + s[1:]
		}
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return errText(pe.Err)
	}
	return err.Error()
}

// releaseOK: dir is a release folder that root alone can change, all the
// way down: dir and every folder above it (safeDir), and every file and
// folder in it owned by root, writable by nobody else, and no symlink
// among them. Whoever could change a release after its sha256 was checked
// would run as root when the service starts it.
func releaseOK(dir string) error {
	if fi, err := os.Lstat(dir); err != nil || !fi.IsDir() {
		return fmt.Errorf("%s is not a folder", dir)
	}
	if err := safeDir(dir); err != nil {
		return err
	}
	var bad error
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == dir {
			return nil
		}
		if d.Type()&fs.ModeSymlink != 0 {
			bad = fmt.Errorf("%s is a symlink; a release holds only root's own files and folders", p)
			return fs.SkipAll
		}
		if !ownedByRootOnly(p) {
			bad = fmt.Errorf("%s is not owned by root or is writable by its group or others: whoever can change it would run as root", p)
			return fs.SkipAll
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("cannot read %s: %v", dir, err)
	}
	return bad
}

// rootOnlyTail is the last n bytes of p, a regular file that root alone
// can have written: p and every folder above it belong to root, neither
// their group nor others may write them, and none is a symlink (p is
// opened without following one). The error names what breaks the rule.
func rootOnlyTail(p string, n int64) ([]byte, error) {
	if !filepath.IsAbs(p) || filepath.Clean(p) != p {
		return nil, fmt.Errorf("%s is not a clean absolute path", p)
	}
	for _, d := range prefixes(filepath.Dir(p)) {
		if !rootDir(d) {
			return nil, fmt.Errorf("%s: %s is a symlink, or not a folder of root's that only root can write", p, d)
		}
	}
	f, fi, err := openHostFile(p, true)
	switch {
	case errors.Is(err, syscall.ELOOP):
		return nil, fmt.Errorf("%s is a symlink", p)
	case err != nil:
		return nil, fmt.Errorf("%s: %s", p, errText(err))
	}
	defer f.Close()
	if st, ok := fi.Sys().(*syscall.Stat_t); !ok || st.Uid != 0 || fi.Mode().Perm()&0o022 != 0 {
		return nil, fmt.Errorf("%s is not root's alone (mode %s): someone else could have written it", p, fi.Mode().Perm())
	}
	if fi.Size() > n {
		if _, err := f.Seek(fi.Size()-n, io.SeekStart); err != nil {
			return nil, err
		}
	}
	return readUpTo(f, n)
}
