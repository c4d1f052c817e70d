package lab

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// nsID names a namespace the way /proc/PID/ns/* links do ("net:[4026532…]"),
// from either such a link or a bind-mounted namespace file (/run/netns/X).
func nsID(kind, path string) (string, error) {
	if l, err := os.Readlink(path); err == nil {
		return l, nil
	}
	fi, err := os.Stat(path)
	if err != nil {
		return "", fmt.Errorf("stat namespace: %w", err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return "", fmt.Errorf("stat namespace %s: no inode", path)
	}
	return fmt.Sprintf("%s:[%d]", kind, st.Ino), nil
}

// labProcs lists the live processes in mount namespace mnt or in one of the
// network namespaces nets: everything a lab host started, however detached.
func labProcs(mnt string, nets map[string]bool) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	self := os.Getpid()
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		in := false
		if mnt != "" {
			if l, err := os.Readlink(filepath.Join("/proc", e.Name(), "ns/mnt")); err == nil && l == mnt {
				in = true
			}
		}
		if !in && len(nets) > 0 {
			if l, err := os.Readlink(filepath.Join("/proc", e.Name(), "ns/net")); err == nil && nets[l] {
				in = true
			}
		}
		if in && alive(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// procTracker finds a host's processes across repeated scans. An exiting
// process drops its namespaces before it becomes a zombie, so a pid once
// seen stays tracked until it has exited, unless it shows namespaces of
// others (its pid was reused).
//
// The kernel hands a freed namespace's number to the next namespace made, so
// a scan by number after the host's last process exited would find another
// host's processes. A tracker therefore matches by mount namespace only
// while it holds that namespace open (an open descriptor keeps it, and its
// number, alive): pinned from the host's own first process.
type procTracker struct {
	mnt    string
	nets   map[string]bool
	seen   map[int]bool
	pinned *os.File
}

// trackHost tracks the processes in mount namespace mnt, held open by pin
// (which the tracker then owns and release closes) or, without one,
// pinned through owner, the process that made it, and in the network
// namespaces nets. When mnt cannot be pinned, its number may already be
// another's, and the tracker leaves it out.
func trackHost(mnt string, nets map[string]bool, pin *os.File, owner int) *procTracker {
	t := &procTracker{nets: nets, seen: map[int]bool{}}
	if mnt == "" {
		return t
	}
	if pin == nil {
		pin, _ = pinMountNS(owner, mnt)
	}
	if pin != nil {
		t.mnt, t.pinned = mnt, pin
	}
	return t
}

// pinMountNS opens pid's mount namespace, if it is still mnt.
func pinMountNS(pid int, mnt string) (*os.File, error) {
	if pid <= 0 {
		return nil, fmt.Errorf("no process to pin %s through", mnt)
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/ns/mnt", pid))
	if err != nil {
		return nil, err
	}
	if id, err := nsID("mnt", fmt.Sprintf("/proc/self/fd/%d", f.Fd())); err != nil || id != mnt {
		f.Close()
		return nil, fmt.Errorf("pid %d is not in %s any more", pid, mnt)
	}
	return f, nil
}

// scan returns the host's live processes.
func (t *procTracker) scan() []int {
	for _, p := range labProcs(t.mnt, t.nets) {
		t.seen[p] = true
	}
	var ps []int
	for p := range t.seen {
		if t.ours(p) {
			ps = append(ps, p)
		} else {
			delete(t.seen, p)
		}
	}
	return ps
}

// release lets the pinned namespace go.
func (t *procTracker) release() {
	if t.pinned != nil {
		t.pinned.Close()
		t.pinned = nil
	}
}

func (t *procTracker) ours(pid int) bool {
	if !alive(pid) {
		return false
	}
	m, errm := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", pid))
	n, errn := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", pid))
	if errm != nil || errn != nil {
		return true // exiting: namespaces already released
	}
	return (t.mnt != "" && m == t.mnt) || t.nets[n]
}

// alive reports whether pid exists and has not exited. A zombie has exited:
// it only waits for its parent, and PID 1 on these machines reaps orphans
// late.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command name, which is in parentheses and may
	// itself contain ") ".
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return false
	}
	switch b[i+2] {
	case 'Z', 'X', 'x':
		return false
	}
	return true
}

func signalAll(pids []int, sig string) {
	s := syscall.SIGTERM
	if sig == "KILL" {
		s = syscall.SIGKILL
	}
	for _, p := range pids {
		syscall.Kill(p, s)
	}
}

// waitGone polls until procs returns nothing or d has passed; it reports
// whether they are all gone.
func waitGone(procs func() []int, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for {
		if len(procs()) == 0 {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// ipCmd runs ip(8) in the initial namespace and returns its stderr as the
// error.
func ipCmd(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
