package agent

import (
	"fmt"
	"os"
	"strconv"
	"syscall"
	"time"
)

// takeLock checks the state folder is root's alone, takes the host lock
// (flock on STATE/lock; with wait, waiting up to that many seconds for it)
// and answers LOCKED [owner of a dead run], BUSY owner or UNSAFE why.
// It returns the exit status of a session that must end (0: locked).
func (s *session) takeLock(owner, wait string) int {
	unsafe := func(why string) int {
		s.out.WriteString("UNSAFE " + clean(why) + "\n")
		return exitUnsafe
	}
	if err := safeDir(s.state); err != nil {
		return unsafe(err.Error())
	}
	// The folders earlier runs made are written in too: root's alone as
	// well, or a user that owns one (a service whose StateDirectory= was
	// pointed here) could plant a symlink a receipt is then written
	// through. Nobody else can add one while the lock is held.
	for _, d := range []string{s.state + "/receipts", s.stage} {
		if _, err := os.Lstat(d); err == nil && !rootDir(d) {
			return unsafe(d + " is not a folder that belongs to root and only root can write")
		}
	}
	if err := safeDir(s.windows); err != nil {
		return unsafe(err.Error())
	}
	f, err := os.OpenFile(s.state+"/lock", os.O_WRONLY|os.O_APPEND|os.O_CREATE|syscall.O_NOFOLLOW, 0o644)
	if err != nil {
		return unsafe("cannot open " + s.state + "/lock")
	}
	if !flockWithin(f, wait) {
		f.Close()
		s.out.WriteString("BUSY " + clean(trimNewline(readHead(s.state+"/lock.owner", 2000))) + "\n")
		return exitBusy
	}
	// The lock is free: whoever held it is gone (flock dies with its
	// process), so it is ours. A run that died leaves its owner file (and
	// its journal, which relayctl reads with the observe behind this).
	dead := clean(trimNewline(readHead(s.state+"/lock.owner", 2000)))
	if err := os.WriteFile(s.state+"/lock.owner", []byte(owner+"\n"), 0o644); err != nil {
		f.Close()
		return unsafe("cannot write " + s.state + "/lock.owner: " + errText(err))
	}
	s.lock, s.locked = f, true
	if dead != "" {
		s.out.WriteString("LOCKED " + dead + "\n")
	} else {
		s.out.WriteString("LOCKED\n")
	}
	return 0
}

// flockWithin takes f's lock at once, or with wait (seconds), within that.
func flockWithin(f *os.File, wait string) bool {
	secs, _ := strconv.Atoi(wait)
	deadline := time.Now().Add(time.Duration(secs) * time.Second)
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return true
		}
		if err != syscall.EWOULDBLOCK && err != syscall.EINTR || !time.Now().Before(deadline) {
			return false
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// readHead is the first n bytes of a regular file ("" if there are none).
func readHead(p string, n int) string {
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return ""
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return ""
	}
	b := make([]byte, n)
	m, _ := readFull(f, b)
	return string(b[:m])
}

func readFull(f *os.File, b []byte) (int, error) {
	n := 0
	for n < len(b) {
		m, err := f.Read(b[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// unlock ends the session: the owner file goes, and the lock with the
// process.
func unlock(s *session, r *request) answer {
	if err := os.Remove(s.state + "/lock.owner"); err != nil && !os.IsNotExist(err) {
		return errf("remove %s/lock.owner: %s", s.state, errText(err))
	}
	return ok()
}

var _ = fmt.Sprint
