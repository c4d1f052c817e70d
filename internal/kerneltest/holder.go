package kerneltest

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/user"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// LockPath is the machine-wide sysctl lock: every test, script and lab
// path that changes a global kernel value holds it (a flock) meanwhile.
// scripts/demo-lib.sh's kernel_lock takes the same file.
const LockPath = "/tmp/relayctl-global-sysctl.lock"

// Holder is who holds the lock, as the holder recorded it in the lock
// file, one line:
//
//	pid=4242 user=root since=2026-12-01T21:30:07Z command=relayctl apply lab.plan
//
// The scripts (kernel_lock) write the same line, so a waiter of either
// kind can name a holder of the other.
type Holder struct {
	PID     int
	User    string
	Since   time.Time
	Command string
}

// String is how a waiter names the holder.
func (h Holder) String() string {
	return fmt.Sprintf("%s (pid %d, user %s) since %s", h.Command, h.PID, h.User, h.Since.UTC().Format(time.RFC3339))
}

func (h Holder) record() string {
	return fmt.Sprintf("pid=%d user=%s since=%s command=%s\n", h.PID, h.User, h.Since.UTC().Format(time.RFC3339), h.Command)
}

// parseHolder reads a record line; false for anything else (an empty
// file: a holder that has not written its line yet, or one that let go).
func parseHolder(line string) (Holder, bool) {
	line, _, _ = strings.Cut(line, "\n")
	f := strings.SplitN(line, " ", 4)
	if len(f) != 4 {
		return Holder{}, false
	}
	var h Holder
	var ok [4]bool
	var pid, since string
	pid, ok[0] = strings.CutPrefix(f[0], "pid=")
	h.User, ok[1] = strings.CutPrefix(f[1], "user=")
	since, ok[2] = strings.CutPrefix(f[2], "since=")
	h.Command, ok[3] = strings.CutPrefix(f[3], "command=")
	if ok != [4]bool{true, true, true, true} {
		return Holder{}, false
	}
	var err error
	if h.PID, err = strconv.Atoi(pid); err != nil || h.PID <= 0 {
		return Holder{}, false
	}
	if h.Since, err = time.Parse(time.RFC3339, since); err != nil {
		return Holder{}, false
	}
	return h, true
}

// ReadHolder returns the holder recorded in the lock file at path, and
// false when there is none or the process it names has exited (a holder
// killed before it could clear its line, or one of a build that writes
// none).
func ReadHolder(path string) (Holder, bool) {
	f, err := os.Open(path)
	if err != nil {
		return Holder{}, false
	}
	defer f.Close()
	return readHolder(f)
}

func readHolder(f *os.File) (Holder, bool) {
	b := make([]byte, 1024)
	n, err := f.ReadAt(b, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return Holder{}, false
	}
	h, ok := parseHolder(string(b[:n]))
	if !ok || !alive(h.PID) {
		return Holder{}, false
	}
	return h, true
}

// Me is the holder record of this process, running command.
func Me(command string) Holder {
	name := strconv.Itoa(os.Geteuid())
	if u, err := user.Current(); err == nil && u.Username != "" && !strings.ContainsAny(u.Username, " \t\n") {
		name = u.Username
	}
	return Holder{PID: os.Getpid(), User: name, Since: time.Now().UTC().Truncate(time.Second), Command: oneLine(command)}
}

// oneLine keeps a command on its record's line and the line short.
func oneLine(s string) string {
	s = strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f {
			return ' '
		}
		return r
	}, s)
	if len(s) > 300 {
		s = s[:300]
	}
	return s
}

// alive reports whether pid is a process that has not exited (a zombie
// has).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 || i+2 >= len(b) {
		return false
	}
	switch b[i+2] {
	case 'Z', 'X', 'x':
		return false
	}
	return true
}

// Held is the lock, taken.
type Held struct {
	f *os.File
}

// Take takes the lock at path, waiting as long as it takes. While it
// waits it writes "NAME: waiting for the machine-wide sysctl lock held by
// WHO since TIME" to w, again whenever the holder changes; once it holds
// the lock it records me in the file.
func Take(path string, me Holder, w io.Writer, name string) (*Held, error) {
	f, err := openLock(path)
	if err != nil {
		return nil, err
	}
	if err := wait(f, path, w, name); err != nil {
		f.Close()
		return nil, err
	}
	me.Since = time.Now().UTC().Truncate(time.Second)
	if err = f.Truncate(0); err == nil {
		_, err = f.WriteAt([]byte(me.record()), 0)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("record the holder in %s: %w", path, err)
	}
	return &Held{f: f}, nil
}

// Release clears the record and lets the lock go.
func (h *Held) Release() {
	h.f.Truncate(0)
	syscall.Flock(int(h.f.Fd()), syscall.LOCK_UN)
	h.f.Close()
}

// openLock opens the lock file, creating it if need be. It is in /tmp,
// which anyone can write, and its holder writes its record into it: so
// never through a symlink (O_NOFOLLOW), and only a regular file of root's
// or this user's.
func openLock(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open the machine-wide sysctl lock: %w", err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("open the machine-wide sysctl lock: %w", err)
	}
	st, _ := fi.Sys().(*syscall.Stat_t)
	switch {
	case !fi.Mode().IsRegular():
		err = fmt.Errorf("%s is not a regular file: remove it", path)
	case st == nil || (st.Uid != 0 && int(st.Uid) != os.Geteuid()):
		err = fmt.Errorf("%s is not root's: remove it", path)
	case st.Nlink != 1:
		err = fmt.Errorf("%s has %d links: remove it", path, st.Nlink)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("open the machine-wide sysctl lock: %w", err)
	}
	return f, nil
}

// unnamedFor is how long a holder may go without a record before a waiter
// says it cannot name it: a holder writes its line just after it takes the
// lock.
const unnamedFor = time.Second

// wait polls for the lock on f, saying on w whom it waits for whenever
// that changes.
func wait(f *os.File, path string, w io.Writer, name string) error {
	shown := ""
	named := time.Now() // when a holder was last named (or the wait began)
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			return fmt.Errorf("lock %s: %w", path, err)
		}
		who := "an unknown process (none recorded in " + path + ")"
		if h, ok := readHolder(f); ok {
			who, named = h.String(), time.Now()
		} else if time.Since(named) < unnamedFor {
			who = shown // not yet: a new holder may be writing its line
		}
		if who != shown {
			fmt.Fprintf(w, "%s: waiting for the machine-wide sysctl lock held by %s\n", name, who)
			shown = who
		}
		time.Sleep(100 * time.Millisecond)
	}
}
