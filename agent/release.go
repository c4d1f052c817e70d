package agent

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/relayctl/relayctl/artifact"
	"github.com/relayctl/relayctl/internal/lazyre"
)

// The release primitives: bytes kept in the release store by their
// sha256 (keep, fetch), a release folder made from the store and checked
// before it is renamed into place (place-release), checked again before a
// window runs it (check-release), described for a receipt (release-sum),
// and old ones removed (prune).
var releasePrimitives = map[string]handler{
	"keep":          pKeep,
	"fetch":         pFetch,
	"place-release": pPlaceRelease,
	"check-release": pCheckRelease,
	"release-sum":   pReleaseSum,
	"prune":         pPrune,
}

// noTree is the TREE of a release of one program file.
const noTree = "-"

// programRe are the paths a release's program may have inside it, as
// relayctl's spec allows them (relay.release.program): a file name for a
// binary, a plain path for a tarball.
var programRe = lazyre.New(`^[A-Za-z0-9._+-]+(/[A-Za-z0-9._+-]+)*$`)

// checkProgram: program is a path inside a release folder, one name for
// a binary (tree -).
func checkProgram(program, tree string) error {
	ok := programRe.MatchString(program) && path.Clean(program) == program && !strings.HasPrefix(program, "./")
	for _, seg := range strings.Split(program, "/") {
		ok = ok && seg != ".." && seg != "."
	}
	if !ok || tree == noTree && strings.Contains(program, "/") {
		return fmt.Errorf("bad program %q: want a path inside the release of letters, digits and ._+-", program)
	}
	return nil
}

// pPlaceRelease: DIR FILE SHA256 PROGRAM TREE, a binary (TREE -) copied
// to DIR/PROGRAM, or a tarball unpacked into DIR, from the store's FILE;
// checked on the host (sha256, tree hash, root's alone all the way down)
// in DIR.relayctl-new before that is renamed to DIR.
func pPlaceRelease(s *session, r *request) answer {
	dir, file, sum, program, tree := r.arg(0), r.arg(1), r.arg(2), r.arg(3), r.arg(4)
	if err := checkProgram(program, tree); err != nil {
		return errf("place %s: %s", dir, err)
	}
	if err := safeParent(dir); err != nil {
		return errf("%s", err)
	}
	f, err := openRegular(file)
	if err != nil {
		return errf("%s is not a regular file", file)
	}
	defer f.Close()
	fresh := dir + ".relayctl-new"
	if err := makeRelease(f, fresh, program, tree, sum); err != nil {
		os.RemoveAll(fresh)
		return errf("%s", tail(err.Error(), 400))
	}
	if err := os.RemoveAll(dir); err != nil {
		os.RemoveAll(fresh)
		return errf("install release folder %s: %s", dir, errText(err))
	}
	if err := os.Rename(fresh, dir); err != nil {
		os.RemoveAll(fresh)
		return errf("install release folder %s: %s", dir, errText(err))
	}
	return ok()
}

// wrongRelease says that the release file in the store is not the one
// reviewed.
func wrongRelease(got, sum string) error {
	return fmt.Errorf("the release on the host has sha256 %s, want %s", got, sum)
}

// makeRelease makes the folder fresh from the release file f (the bytes
// whose sha256 is sum, read from the start), and checks it holds that
// release and root alone can change it. A binary is hashed as it is
// copied, once: the copy is a file made here, in a folder made here, so
// it holds the bytes read. A tarball is hashed whole before anything of
// it is unpacked, and its files once unpacked.
func makeRelease(f *os.File, fresh, program, tree, sum string) error {
	if tree != noTree {
		if got := hashReader(f); got != sum {
			return wrongRelease(got, sum)
		}
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	if err := os.RemoveAll(fresh); err != nil {
		return fmt.Errorf("remove %s: %s", fresh, errText(err))
	}
	if err := os.Mkdir(fresh, 0o755); err != nil {
		return fmt.Errorf("mkdir %s: %s", fresh, errText(err))
	}
	if tree == noTree {
		h := sha256.New()
		if err := copyProgram(io.TeeReader(f, h), fresh+"/"+program); err != nil {
			return err
		}
		if got := hex.EncodeToString(h.Sum(nil)); got != sum {
			return wrongRelease(got, sum)
		}
		return releaseOK(fresh)
	}
	if err := unpackRelease(f, fresh); err != nil {
		return err
	}
	if err := releaseHolds(fresh, program, tree, sum); err != nil {
		return err
	}
	return releaseOK(fresh)
}

// copyProgram writes a binary release as p, a new file, mode 0755.
func copyProgram(src io.Reader, p string) error {
	out, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o755)
	if err != nil {
		return fmt.Errorf("copy the release to %s: %s", p, errText(err))
	}
	_, err = io.Copy(out, src)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(p, 0o755)
	}
	if err != nil {
		return fmt.Errorf("copy the release to %s: %s", p, errText(err))
	}
	return nil
}

// openRegular opens p for reading if it is a regular file, never through
// a symlink (nor waiting on a fifo).
func openRegular(p string) (*os.File, error) {
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("%s is not a regular file", p)
	}
	return f, nil
}

// pCheckRelease: DIR SHA256 PROGRAM TREE, DIR holds that release
// (releaseHolds), and DIR is root's alone all the way down.
func pCheckRelease(s *session, r *request) answer {
	dir, sum, program, tree := r.arg(0), r.arg(1), r.arg(2), r.arg(3)
	if err := checkProgram(program, tree); err != nil {
		return errf("check %s: %s", dir, err)
	}
	if err := releaseOK(dir); err != nil {
		return errf("%s", err)
	}
	if err := releaseHolds(dir, program, tree, sum); err != nil {
		return errf("the release already in %s is not the one reviewed: %s", dir, err)
	}
	return ok()
}

// releaseHolds: dir holds the release. For a binary (tree -) dir/program
// has sha256 sum; for a tarball, dir's files hash to tree (the tree hash
// relayctl made from the tarball it reviewed) and dir/program is
// executable.
func releaseHolds(dir, program, tree, sum string) error {
	p := dir + "/" + program
	fi, err := os.Lstat(p)
	if err != nil || !fi.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", p)
	}
	if tree == noTree {
		got, _ := sha256File(p)
		if got == sum {
			return nil
		}
		if got == "" {
			got = "none"
		}
		return fmt.Errorf("%s has sha256 %s, want %s", p, got, sum)
	}
	if fi.Mode()&0o111 == 0 {
		return fmt.Errorf("%s is not executable", p)
	}
	got, err := treeOf(dir)
	if err != nil {
		got = "nothing"
	}
	if got != tree {
		return fmt.Errorf("the files in %s hash to %s (find | sort | sha256sum), want %s: not the release reviewed", dir, got, tree)
	}
	return nil
}

// treeOf is dir's tree hash (artifact.TreeHash): its regular files' sha256
// by path, as relayctl computes it from the tarball. Symlinks and other
// special files are not in it (releaseOK refuses a release that holds a
// symlink).
func treeOf(dir string) (string, error) {
	files := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		sum, err := sha256File(p)
		if err != nil {
			return err
		}
		files[filepath.ToSlash(rel)] = sum
		return nil
	})
	if err != nil {
		return "", err
	}
	return artifact.TreeHash(files), nil
}

// pReleaseSum: DIR PROGRAM tree|-, VAL "SHA256 TREE|- CAPS" of the release
// in DIR, for the receipt (what a rollback would go back to, checked then
// by these hashes): its program's sha256, with tree its files' tree hash,
// and the capabilities its marker lists, comma-separated; VAL "" when DIR
// holds no release to describe. Read-only, and never fails the batch.
func pReleaseSum(s *session, r *request) answer {
	dir, program := r.arg(0), r.arg(1)
	if checkProgram(program, "") != nil || !isDir(dir) {
		return val("")
	}
	f, err := openRegular(dir + "/" + program)
	if err != nil {
		return val("")
	}
	defer f.Close()
	sum, caps, err := sumAndMarker(f)
	if err != nil {
		return val("")
	}
	tree := noTree
	if r.arg(2) == "tree" {
		if t, err := treeOf(dir); err == nil {
			tree = t
		}
	}
	return val(sum + " " + tree + " " + strings.ReplaceAll(caps, " ", ","))
}
