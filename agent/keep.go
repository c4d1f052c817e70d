package agent

import (
	"crypto/sha256"
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

// keep and fetch put bytes on the host by their sha256: kept when the
// file holds them already (checked, never trusted), otherwise written to
// a fresh temp file beside it and renamed into place once their size and
// sha256 are checked; nothing is left behind when they are not the bytes.

// keepRequest is a keep's arguments: PATH SHA256 SIZE MODE [LIKE
// [ENCODING BASE BASESHA]].
type keepRequest struct {
	path, sum string
	size      int64
	mode      fs.FileMode
	like      string // the file whose mode and owner PATH takes; "" for none
	// enc is the packed form the data is in ("" for the bytes as they
	// are); base and baseSHA a patch's base.
	enc, base, baseSHA string
}

func parseKeep(r *request) (keepRequest, error) {
	k := keepRequest{path: r.arg(0), sum: r.arg(1), like: r.arg(4), enc: r.arg(5), base: r.arg(6), baseSHA: r.arg(7)}
	if k.like == "-" {
		k.like = ""
	}
	if !isSHA256(k.sum) {
		return k, fmt.Errorf("bad sha256 %q", k.sum)
	}
	size, err := strconv.ParseInt(r.arg(2), 10, 64)
	if err != nil || size < 0 || !digits(r.arg(2)) {
		return k, fmt.Errorf("bad size %q", r.arg(2))
	}
	k.size = size
	// Permission bits only: root makes no set-id file because a request
	// says so (LIKE's mode, a file's own, is another matter).
	m, err := parseMode(r.arg(3))
	if err != nil || m&^fs.ModePerm != 0 {
		return k, fmt.Errorf("bad mode %q: want permission bits in octal, as 0644", r.arg(3))
	}
	k.mode = m
	return k, nil
}

// pKeep: PATH SHA256 SIZE MODE [LIKE [ENCODING BASE BASESHA]], with the
// bytes as data or none. VAL kept when PATH holds them already; without
// data NEED (the rest of the batch waits for the bytes), or NEED and why
// the form ENCODING names will not do (its bytes are then not sent); with
// data, the bytes (decoded first from ENCODING) checked and renamed into
// place: VAL sent SIZE, or VAL decoded SIZE. Bytes in a packed form that
// are not the file are answered NEED and why: the next form follows.
func pKeep(s *session, r *request) answer {
	k, err := parseKeep(r)
	if err != nil {
		return errf("keep %s: %s", k.path, err)
	}
	held, err := holds(k.path, k.sum, k.size, k.like)
	switch {
	case err != nil:
		return errf("%s", err)
	case held:
		return val("kept")
	case r.dataLeft == 0 && k.enc == "":
		return need("")
	case r.dataLeft == 0:
		if err := decodable(k.enc, k.base, k.baseSHA); err != nil {
			return need(err.Error())
		}
		return need("")
	}
	dir := filepath.Dir(k.path)
	t, err := freshTemp(dir)
	if err != nil {
		return errf("cannot create a file in %s", dir)
	}
	if k.enc != "" {
		return keepPacked(r, k, t)
	}
	return keepSent(r, k, t)
}

// keepSent writes the data, the bytes as they are, into the temp file t.
func keepSent(r *request, k keepRequest, t string) answer {
	if n := int64(r.dataLeft); n != k.size {
		os.Remove(t)
		return errf("received %d of %d bytes for %s", n, k.size, k.path)
	}
	_, got, err := writeInto(t, r.dataReader(), k.size)
	if err != nil {
		os.Remove(t)
		return errf("write %s: %s", k.path, errText(err))
	}
	return settle(t, got, k.path, k.sum, k.mode, k.like, "sent", func(sum string) answer {
		return errf("the bytes received for %s have sha256 %s, want %s", k.path, sum, k.sum)
	})
}

// keepPacked decodes the data, k.enc's form of the bytes, into the temp
// file t. A form the agent cannot take (a patch's base that is not the
// one it was made from), one that does not decode, or decodes to another
// size or other bytes, is removed and answered NEED and why; the data is
// read to its end whatever the decoder did (drain, after the primitive).
// A write that fails (a full disk) is no fault of the form: ERR.
func keepPacked(r *request, k keepRequest, t string) answer {
	refuse := func(err error) answer {
		os.Remove(t)
		return need("the " + k.enc + " form: " + err.Error())
	}
	var base []byte
	if err := knownEncoding(k.enc); err != nil {
		return refuse(err)
	}
	if k.enc == encPatch {
		b, err := readBase(k.base, k.baseSHA)
		if err != nil {
			return refuse(err)
		}
		base = b
	}
	n, got, err := decodeInto(t, k.enc, r.dataReader(), base, k.size)
	var werr writeError
	switch {
	case errors.As(err, &werr):
		os.Remove(t)
		return errf("write %s: %s", k.path, errText(werr.err))
	case err != nil:
		return refuse(err)
	case n > k.size:
		return refuse(fmt.Errorf("it decoded to more than %d bytes, want %d", k.size, k.size))
	case n != k.size:
		return refuse(fmt.Errorf("it decoded to %d bytes, want %d", n, k.size))
	}
	return settle(t, got, k.path, k.sum, k.mode, k.like, "decoded", func(sum string) answer {
		return need(fmt.Sprintf("the %s form decoded to bytes with sha256 %s, want %s", k.enc, sum, k.sum))
	})
}

// holds reports whether path holds the bytes of sha256 sum (and size, when
// not negative) already: checked, not trusted, in a regular file only root
// can change, in a folder (made if missing) only root can change, whose
// owner could otherwise swap them after the check. A file that holds them
// takes like's mode and owner. The error says why path cannot be written
// at all.
func holds(path, sum string, size int64, like string) (bool, error) {
	if err := safeParent(path); err != nil {
		return false, err
	}
	fi, err := os.Lstat(path)
	switch {
	case err != nil:
		return false, nil
	case fi.Mode()&fs.ModeSymlink != 0:
		return false, fmt.Errorf("%s is a symlink; relayctl writes no file through or over a symlink", path)
	case !fi.Mode().IsRegular() || !ownedByRootOnly(path) || size >= 0 && fi.Size() != size:
		return false, nil
	}
	if got, err := sha256File(path); err != nil || got != sum {
		return false, nil
	}
	if err := likeFile(like, path); err != nil {
		return false, fmt.Errorf("cannot set the mode of %s like %s", path, like)
	}
	return true, nil
}

// settle makes the temp file t, whose bytes writeInto wrote with sha256
// got, once that is checked, the file path (mode, or like's mode and
// owner): VAL how SIZE. A file of other bytes is removed, and answered
// mismatch(its sha256).
func settle(t, got, path, sum string, mode fs.FileMode, like, how string, mismatch func(sum string) answer) answer {
	if got != sum {
		os.Remove(t)
		if got == "" {
			got = "none"
		}
		return mismatch(got)
	}
	fi, err := os.Lstat(t)
	if err == nil {
		err = os.Chmod(t, mode)
	}
	if err == nil {
		err = likeFile(like, t)
	}
	if err == nil {
		err = os.Rename(t, path)
	}
	if err != nil {
		os.Remove(t)
		return errf("write %s: %s", path, errText(err))
	}
	return val(how + " " + strconv.FormatInt(fi.Size(), 10))
}

// writeInto writes what src holds, at most max bytes, into the existing
// file t (never through a symlink); n is what it read, max+1 when src
// holds more, and sum the sha256 of what it wrote: a file made in a
// folder root alone can change, so its bytes are those, and settle need
// not read them again. Read errors come back as they are, write errors
// as a writeError.
func writeInto(t string, src io.Reader, max int64) (n int64, sum string, err error) {
	f, err := os.OpenFile(t, os.O_WRONLY|os.O_TRUNC|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return 0, "", writeError{err}
	}
	h := sha256.New()
	n, err = io.Copy(io.MultiWriter(writeErrors{f}, h), io.LimitReader(src, max+1))
	if cerr := f.Close(); err == nil && cerr != nil {
		err = writeError{cerr}
	}
	return n, hex.EncodeToString(h.Sum(nil)), err
}

// writeError is a write that failed (a full disk), told apart from what
// the reader says.
type writeError struct{ err error }

func (e writeError) Error() string { return e.err.Error() }
func (e writeError) Unwrap() error { return e.err }

// writeErrors wraps the errors of a file's writes as writeErrors.
type writeErrors struct{ f *os.File }

func (w writeErrors) Write(p []byte) (int, error) {
	n, err := w.f.Write(p)
	if err != nil {
		err = writeError{err}
	}
	return n, err
}

// isSHA256 is a sha256 as relayctl writes it: 64 lowercase hex digits.
func isSHA256(s string) bool { return len(s) == 64 && isHexString(s) }
