package agent

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// The file primitives: folders checked or made, files and symlinks
// written through a temp file and a rename (which replaces a symlink in
// the way, never follows it), and the backups a window's undo restores.
var filePrimitives = map[string]handler{
	"dir":          pDir,
	"file-ok":      pFileOK,
	"link-ok":      pLinkOK,
	"exec-ok":      pExecOK,
	"rename":       pRename,
	"remove":       pRemove,
	"link":         pLink,
	"backup":       pBackup,
	"restore":      pRestore,
	"backup-link":  pBackupLink,
	"restore-link": pRestoreLink,
	"restore-kept": pRestoreKept,
}

// pDir: PATH is (made) a folder that only root can change, and so is
// every folder above it.
func pDir(s *session, r *request) answer {
	if err := safeDir(r.arg(0)); err != nil {
		return errf("%s", err)
	}
	return ok()
}

// pFileOK: PATH is absent, or a regular file and not a symlink.
func pFileOK(s *session, r *request) answer {
	p := r.arg(0)
	fi, err := os.Lstat(p)
	switch {
	case err != nil:
		return ok()
	case fi.Mode()&fs.ModeSymlink != 0:
		return errf("%s is a symlink; relayctl writes no file through or over a symlink: make it a regular file", p)
	case !fi.Mode().IsRegular():
		return errf("%s is not a regular file", p)
	}
	return ok()
}

// pLinkOK: PATH is absent, or a symlink.
func pLinkOK(s *session, r *request) answer {
	p := r.arg(0)
	if fi, err := os.Lstat(p); err == nil && fi.Mode()&fs.ModeSymlink == 0 {
		return errf("%s exists and is not a symlink", p)
	}
	return ok()
}

// pExecOK: PATH is a regular executable only root can change. Whoever can
// change the program (or what its symlink points at) would run as root:
// it and every folder above it, as written and as resolved, must be root's.
func pExecOK(s *session, r *request) answer {
	p := r.arg(0)
	real, err := filepath.EvalSymlinks(p)
	fi, serr := os.Stat(real)
	switch {
	case err != nil || serr != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0:
		return errf("%s is not an executable file", p)
	case !ownedByRootOnly(real):
		return errf("%s is not owned by root or is writable by its group or others: whoever can change it would run as root", real)
	}
	if err := safeParent(p); err != nil {
		return errf("%s", err)
	}
	if err := safeParent(real); err != nil {
		return errf("%s", err)
	}
	return ok()
}

// pRename: FROM TO, an atomic rename in one folder (TO replaced, a
// symlink there included, never followed).
func pRename(s *session, r *request) answer {
	if err := os.Rename(r.arg(0), r.arg(1)); err != nil {
		return errf("rename %s to %s: %s", r.arg(0), r.arg(1), errText(err))
	}
	return ok()
}

// pRemove: PATH unlinked, never what it points at; absent is done.
func pRemove(s *session, r *request) answer {
	if err := os.Remove(r.arg(0)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return errf("remove %s: %s", r.arg(0), errText(err))
	}
	return ok()
}

// pLink: PATH becomes a symlink to TARGET: a new link renamed over it.
func pLink(s *session, r *request) answer {
	if err := replaceLink(r.arg(0), r.arg(1)); err != nil {
		return errf("point %s at %s: %s", r.arg(0), r.arg(1), errText(err))
	}
	return ok()
}

// replaceLink makes path a symlink to target, atomically.
func replaceLink(path, target string) error {
	t := path + ".relayctl-link"
	os.Remove(t)
	if err := os.Symlink(target, t); err != nil {
		return err
	}
	if err := os.Rename(t, path); err != nil {
		os.Remove(t)
		return err
	}
	return nil
}

// pBackup: PATH NAME, PATH's content, mode and owner (or its absence)
// kept in the stage folder for restore.
func pBackup(s *session, r *request) answer {
	p, name := r.arg(0), r.arg(1)
	if !plainName(name) {
		return errf("bad backup name %q", name)
	}
	fi, err := os.Lstat(p)
	switch {
	case err == nil && fi.Mode()&fs.ModeSymlink != 0:
		return errf("%s is a symlink; relayctl writes no file through or over a symlink", p)
	case err == nil && fi.Mode().IsRegular():
		if err := copyFile(p, s.stage+"/"+name, true); err != nil {
			return errf("back up %s: %s", p, errText(err))
		}
		return ok()
	}
	if err := os.WriteFile(s.stage+"/"+name+".absent", nil, 0o644); err != nil {
		return errf("back up %s: %s", p, errText(err))
	}
	return ok()
}

// pRestore: PATH NAME, what backup kept put back, with its mode and owner.
func pRestore(s *session, r *request) answer {
	p, name := r.arg(0), r.arg(1)
	if !plainName(name) {
		return errf("bad backup name %q", name)
	}
	if exists(s.stage + "/" + name + ".absent") {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return errf("remove %s: %s", p, errText(err))
		}
		return ok()
	}
	if err := writeLike(s.stage+"/"+name, p); err != nil {
		return errf("restore %s: %s", p, err)
	}
	return ok()
}

// pBackupLink: PATH NAME, a symlink's target (or its absence) kept.
func pBackupLink(s *session, r *request) answer {
	p, name := r.arg(0), r.arg(1)
	if !plainName(name) {
		return errf("bad backup name %q", name)
	}
	if fi, err := os.Lstat(p); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
		t, err := os.Readlink(p)
		if err == nil {
			err = os.WriteFile(s.stage+"/"+name, []byte(t+"\n"), 0o644)
		}
		if err != nil {
			return errf("read %s", p)
		}
		return ok()
	}
	if err := os.WriteFile(s.stage+"/"+name+".absent", nil, 0o644); err != nil {
		return errf("back up %s: %s", p, errText(err))
	}
	return ok()
}

// pRestoreLink: PATH NAME, what backup-link kept put back.
func pRestoreLink(s *session, r *request) answer {
	p, name := r.arg(0), r.arg(1)
	if !plainName(name) {
		return errf("bad backup name %q", name)
	}
	if exists(s.stage + "/" + name + ".absent") {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return errf("remove %s: %s", p, errText(err))
		}
		return ok()
	}
	b, err := os.ReadFile(s.stage + "/" + name)
	if err != nil {
		return errf("point %s back: %s", p, errText(err))
	}
	t := trimNewline(string(b))
	if err := replaceLink(p, t); err != nil {
		return errf("point %s back at %s: %s", p, t, errText(err))
	}
	return ok()
}

// pRestoreKept: FROM PATH SHA256, PATH becomes a copy of FROM, a backup
// the host kept beside a receipt (its mode and owner with it), through a
// temp file and a rename once its sha256 is checked; nothing written
// otherwise. Both folders must be root's alone.
func pRestoreKept(s *session, r *request) answer {
	from, p, sum := r.arg(0), r.arg(1), r.arg(2)
	if err := safeParent(from); err != nil {
		return errf("%s", err)
	}
	if fi, err := os.Lstat(from); err != nil || !fi.Mode().IsRegular() {
		return errf("%s is not there (or not a regular file): the host no longer keeps that backup (nothing was written)", from)
	}
	dir := filepath.Dir(p)
	if err := safeDir(dir); err != nil {
		return errf("%s", err)
	}
	t, err := freshTemp(dir)
	if err != nil {
		return errf("cannot create a file in %s", dir)
	}
	if err := copyInto(from, t, true); err != nil {
		os.Remove(t)
		return errf("copy %s: %s (nothing was written)", from, errText(err))
	}
	if got, _ := sha256File(t); got != sum {
		os.Remove(t)
		return errf("the backup %s has sha256 %s, its receipt says %s (nothing was written)", from, got, sum)
	}
	if err := os.Rename(t, p); err != nil {
		os.Remove(t)
		return errf("write %s: %s", p, errText(err))
	}
	return ok()
}

// plainName is a name relayctl gives a file it keeps: one path element.
func plainName(n string) bool {
	if n == "" || n == "." || n == ".." {
		return false
	}
	for _, c := range n {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

func trimNewline(s string) string {
	for len(s) > 0 && s[len(s)-1] == '\n' {
		s = s[:len(s)-1]
	}
	return s
}

// freshTemp is a new, empty, exclusively created file in dir.
func freshTemp(dir string) (string, error) {
	for range 10 {
		b := make([]byte, 6)
		rand.Read(b)
		p := dir + "/.relayctl." + hex.EncodeToString(b)
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
		if err == nil {
			f.Close()
			return p, nil
		}
		if !errors.Is(err, fs.ErrExist) {
			return "", err
		}
	}
	return "", errors.New("no fresh name")
}

// copyFile copies from's bytes to to (created or truncated, never through
// a symlink), with from's mode and, with keep, its owner.
func copyFile(from, to string, keep bool) error {
	os.Remove(to)
	return copyInto(from, to, keep)
}

// copyInto copies from's bytes into the file to (made if missing, never
// followed), then from's mode and, with keep, its owner.
func copyInto(from, to string, keep bool) error {
	in, err := os.OpenFile(from, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return err
	}
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	return modeOf(fi, to, keep)
}

// modeOf gives p fi's mode and, with owner, its owner and group.
func modeOf(fi fs.FileInfo, p string, owner bool) error {
	if err := os.Chmod(p, fi.Mode().Perm()|fi.Mode()&(fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky)); err != nil {
		return err
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && owner {
		return os.Lchown(p, int(st.Uid), int(st.Gid))
	}
	return nil
}

// writeLike writes from's content as path through a fresh temp file in
// path's folder (root's alone) and a rename, which replaces path itself (a
// symlink there is replaced, never followed); path gets from's mode and
// owner.
func writeLike(from, path string) error {
	dir := filepath.Dir(path)
	if err := safeDir(dir); err != nil {
		return err
	}
	t, err := freshTemp(dir)
	if err != nil {
		return errors.New(errText(err))
	}
	if err := copyInto(from, t, true); err != nil {
		os.Remove(t)
		return errors.New(errText(err))
	}
	if err := os.Rename(t, path); err != nil {
		os.Remove(t)
		return errors.New(errText(err))
	}
	return nil
}

// likeFile gives p the mode and owner of like, when like is a regular
// file (not a symlink): a file relayctl replaces keeps its mode and owner,
// so a 0600 config holding a secret stays 0600.
func likeFile(like, p string) error {
	if like == "" || like == "-" {
		return nil
	}
	fi, err := os.Lstat(like)
	if err != nil || !fi.Mode().IsRegular() {
		return nil
	}
	return modeOf(fi, p, true)
}

// parseMode reads an octal file mode (0755).
func parseMode(s string) (fs.FileMode, error) {
	m, err := strconv.ParseUint(s, 8, 32)
	if err != nil || m > 0o7777 {
		return 0, fmt.Errorf("bad mode %q", s)
	}
	return fs.FileMode(m), nil
}
