package agent

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"slices"
	"strconv"
	"syscall"
)

// Bounded reads of what a host holds. A local user can put a huge file, a
// FIFO or a symlink where observe reads: every read here is bounded, opens
// non-blocking (a FIFO never holds a read up) and checks what it opened,
// not what a path named a moment before.

// maxProcRead bounds a /proc table read whole (/proc/net/udp, snmp) and a
// command's output: relayctl takes at most 16 MiB of one observe.
const maxProcRead = 16 << 20

var errNotRegular = errors.New("not a regular file")

// openHostFile opens p for reading if it is a regular file, following a
// symlink unless nofollow.
func openHostFile(p string, nofollow bool) (*os.File, fs.FileInfo, error) {
	flags := os.O_RDONLY | syscall.O_NONBLOCK
	if nofollow {
		flags |= syscall.O_NOFOLLOW
	}
	f, err := os.OpenFile(p, flags, 0)
	if err != nil {
		return nil, nil, err
	}
	fi, err := f.Stat()
	if err == nil && !fi.Mode().IsRegular() {
		err = errNotRegular
	}
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, fi, nil
}

// readUpTo reads r until end of file or n bytes. Its first read asks for
// up to 64 KiB at once: an integer sysctl gives its value only to a read at
// offset 0 (docs/kernel.md), and /proc's tables a page at a time.
func readUpTo(r io.Reader, n int64) ([]byte, error) {
	b := make([]byte, 0, min(n, 64<<10))
	for int64(len(b)) < n {
		if len(b) == cap(b) {
			b = slices.Grow(b, int(min(n-int64(len(b)), int64(cap(b)))))
		}
		m, err := r.Read(b[len(b):min(int64(cap(b)), n)])
		b = b[:len(b)+m]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return b, err
		}
	}
	return b, nil
}

// headOf is the first n bytes of a regular file (observe.sh's file_of and
// head -c), through a symlink: for files only root can have put there.
func headOf(p string, n int64) ([]byte, error) {
	f, _, err := openHostFile(p, false)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readUpTo(f, n)
}

// procFile is a /proc file read whole (at most maxProcRead bytes): cat.
func procFile(p string) ([]byte, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readUpTo(f, maxProcRead)
}

// tailOf is the last n bytes of a regular file (tail -c).
func tailOf(p string, n int64) ([]byte, error) {
	f, fi, err := openHostFile(p, false)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi.Size() > n {
		if _, err := f.Seek(fi.Size()-n, io.SeekStart); err != nil {
			return nil, err
		}
	}
	return readUpTo(f, n)
}

// modeText is a mode as stat -c %a prints it: octal permissions and
// special bits, no leading zero.
func modeText(st *syscall.Stat_t) string {
	return strconv.FormatUint(uint64(st.Mode&0o7777), 8)
}

// lstatT is p's stat (not followed), with its owner.
func lstatT(p string) (*syscall.Stat_t, error) {
	var st syscall.Stat_t
	if err := syscall.Lstat(p, &st); err != nil {
		return nil, err
	}
	return &st, nil
}

// isRegular: p is a regular file, following a symlink (test -f).
func isRegular(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular()
}

// isDirFollowed: p is a folder, following a symlink (test -d).
func isDirFollowed(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}

// isSymlink: p is a symlink (test -L).
func isSymlink(p string) bool {
	fi, err := os.Lstat(p)
	return err == nil && fi.Mode()&fs.ModeSymlink != 0
}
