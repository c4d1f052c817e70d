package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The relay's network namespace, entered without nsenter. A relay in a
// container, or a lab host's relay, has sockets, /proc/net tables and a
// control plane of its own namespace (docs/kernel.md): its socket is read
// back there, and its control plane asked there.
//
// A namespace belongs to an OS thread, not to a goroutine
// (docs/kernel.md, reading a socket back): the agent
// enters one on a thread of its own (a goroutine locked to it, setns(2)),
// starts there what must run there (ss inherits the thread's namespace;
// a socket is made in the namespace of the thread that makes it), and
// never unlocks that thread, so it ends with its goroutine rather than
// run anything else of the agent in the relay's namespace.

func init() {
	// The main goroutine keeps the main thread (LockOSThread in an init
	// does so): otherwise a goroutine that entered a namespace could end on
	// the main thread, which Go parks rather than ends, and /proc/self
	// (the main thread's: /proc/self/ns/net, /proc/net) would show the
	// relay's namespace for the rest of the process.
	runtime.LockOSThread()
}

// netnsPath is process pid's network namespace.
func netnsPath(pid string) string { return "/proc/" + pid + "/ns/net" }

// inNetns runs f on a thread of its own set into process pid's network
// namespace, and returns f's error or why the namespace could not be
// entered.
func inNetns(pid string, f func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: see above
		done <- enterNetns(pid, f)
	}()
	return <-done
}

// enterNetns moves the calling (locked) thread into pid's network
// namespace, then runs f.
func enterNetns(pid string, f func() error) error {
	fd, err := unix.Open(netnsPath(pid), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("enter the network namespace of pid %s: %s", pid, errText(err))
	}
	err = unix.Setns(fd, unix.CLONE_NEWNET)
	unix.Close(fd)
	if err != nil {
		return fmt.Errorf("enter the network namespace of pid %s: %s", pid, errText(err))
	}
	return f()
}

// startIn starts c in process pid's network namespace ("" for the
// agent's own).
func startIn(pid string, c *exec.Cmd) error {
	if pid == "" {
		return c.Start()
	}
	return inNetns(pid, c.Start)
}

// dialIn connects to a TCP address from inside process pid's network
// namespace. The socket is made on the thread set into it (an address,
// never a name, so the dial makes one socket on this goroutine); a check
// on that socket's thread refuses a socket made anywhere else.
func dialIn(ctx context.Context, pid string, addr string) (net.Conn, error) {
	want, err := os.Stat(netnsPath(pid))
	if err != nil {
		return nil, fmt.Errorf("enter the network namespace of pid %s: %s", pid, errText(err))
	}
	var conn net.Conn
	err = inNetns(pid, func() error {
		d := net.Dialer{Control: func(_, _ string, _ syscall.RawConn) error { return onNetnsThread(want) }}
		var derr error
		conn, derr = d.DialContext(ctx, "tcp", addr)
		return derr
	})
	return conn, err
}

var errWrongNetns = errors.New("the socket was not made in the relay's network namespace")

// onNetnsThread: the calling thread is in the namespace want.
func onNetnsThread(want os.FileInfo) error {
	got, err := os.Stat("/proc/thread-self/ns/net")
	if err != nil || !os.SameFile(got, want) {
		return errWrongNetns
	}
	return nil
}

// commandIn runs argv in process pid's network namespace ("" for the
// agent's own), stdin empty, stderr dropped, stdout bounded: its output
// and exit status, as observe.sh's emit framed them (124 if it ran out of
// time, as timeout(1) says; 1 if it could not start).
func commandIn(pid string, timeout time.Duration, argv ...string) ([]byte, int) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	c := exec.CommandContext(ctx, argv[0], argv[1:]...)
	out := &boundedBuffer{max: maxProcRead}
	c.Stdout = out
	c.WaitDelay = time.Second
	if err := startIn(pid, c); err != nil {
		return nil, 1
	}
	err := c.Wait()
	switch {
	case ctx.Err() != nil:
		return out.b, 124
	case err == nil:
		return out.b, 0
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() > 0 {
		return out.b, ee.ExitCode()
	}
	return out.b, 1
}

// boundedBuffer keeps the first max bytes written to it.
type boundedBuffer struct {
	b   []byte
	max int
}

func (w *boundedBuffer) Write(p []byte) (int, error) {
	if room := w.max - len(w.b); room > 0 {
		w.b = append(w.b, p[:min(room, len(p))]...)
	}
	return len(p), nil
}
