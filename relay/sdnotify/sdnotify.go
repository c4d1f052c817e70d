// Package sdnotify tells systemd about a service's state, as sd_notify(3)
// does: one datagram of newline-separated KEY=VALUE assignments sent to the
// unix socket named by $NOTIFY_SOCKET, optionally carrying open file
// descriptors (SCM_RIGHTS), which systemd keeps in the unit's fd store when
// the state holds FDSTORE=1.
//
// It is our own code, not github.com/coreos/go-systemd/v22/daemon: that
// package is not served by the module proxy here, and its SdNotify sends no
// file descriptors, which the fd store (a restart that keeps the relay's
// socket and its queue) needs. The protocol is one sendmsg.
package sdnotify

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// States relayd sends (sd_notify(3)).
const (
	Ready    = "READY=1"    // start-up finished: systemctl start/restart return now
	Stopping = "STOPPING=1" // shutting down
	FDStore  = "FDSTORE=1"  // keep the descriptors sent with this state
	// FDStoreRemove with FDNAME= closes every stored descriptor of that
	// name.
	FDStoreRemove = "FDSTOREREMOVE=1"
	// FDPollOff keeps systemd from watching the stored descriptors: it
	// would close one on POLLHUP or POLLERR.
	FDPollOff = "FDPOLL=0"
)

// Reloading is the state relayd sends when a SIGHUP starts a reload, with
// the monotonic time systemd 253+ (Type=notify-reload) asks for; READY=1
// ends it.
func Reloading() string {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return fmt.Sprintf("RELOADING=1\nMONOTONIC_USEC=%d", ts.Sec*1_000_000+ts.Nsec/1000)
}

// EnvSocket is the environment variable systemd sets for Type=notify units.
const EnvSocket = "NOTIFY_SOCKET"

// ErrUnsupportedSocket is a NOTIFY_SOCKET that is neither a path nor an
// abstract socket name.
var ErrUnsupportedSocket = errors.New("unsupported notify socket")

// SocketFromEnviron returns the value of NOTIFY_SOCKET in environ (as
// os.Environ returns it), or "" when systemd did not set it.
func SocketFromEnviron(environ []string) string {
	for _, kv := range environ {
		if v, ok := strings.CutPrefix(kv, EnvSocket+"="); ok {
			return v
		}
	}
	return ""
}

// Send sends state to the notify socket, with fds passed along as
// SCM_RIGHTS (systemd dups them; the caller keeps its own). socket is a
// path ("/run/systemd/notify") or an abstract name ("@..."), as systemd
// writes it into NOTIFY_SOCKET.
func Send(socket, state string, fds ...int) error {
	addr, err := sockaddr(socket)
	if err != nil {
		return err
	}
	s, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("send notify: open socket: %w", err)
	}
	defer unix.Close(s)
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	n, err := unix.SendmsgN(s, []byte(state), oob, addr, 0)
	if err != nil {
		return fmt.Errorf("send notify to %s: %w", socket, err)
	}
	if n != len(state) {
		return fmt.Errorf("send notify to %s: sent %d of %d bytes", socket, n, len(state))
	}
	return nil
}

// Notify sends state to the socket named in environ. It reports false,
// sending nothing, when NOTIFY_SOCKET is unset (not run by systemd, or not
// as Type=notify).
func Notify(environ []string, state string, fds ...int) (bool, error) {
	socket := SocketFromEnviron(environ)
	if socket == "" {
		return false, nil
	}
	return true, Send(socket, state, fds...)
}

func sockaddr(socket string) (*unix.SockaddrUnix, error) {
	switch {
	case strings.HasPrefix(socket, "/"):
		return &unix.SockaddrUnix{Name: socket}, nil
	case strings.HasPrefix(socket, "@") && len(socket) > 1:
		// Abstract namespace: a leading NUL instead of the @.
		return &unix.SockaddrUnix{Name: "\x00" + socket[1:]}, nil
	}
	return nil, fmt.Errorf("send notify: %w %q: want an absolute path or @name", ErrUnsupportedSocket, socket)
}

// ErrBarrierTimeout is a barrier that systemd did not answer in time.
var ErrBarrierTimeout = errors.New("notify barrier timed out")

// Barrier returns once systemd has processed every message sent to socket
// before it, as sd_notify_barrier(3) does: it sends BARRIER=1 with the
// write end of a pipe and waits for systemd to close its copy, which it
// does only after it has handled the earlier messages. A process that
// stores descriptors and exits calls it first, or systemd may find the
// sender gone and drop what it sent.
func Barrier(socket string, timeout time.Duration) error {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return fmt.Errorf("notify barrier: open pipe: %w", err)
	}
	r, w := p[0], p[1]
	defer unix.Close(r)
	err := Send(socket, "BARRIER=1", w)
	unix.Close(w) // from now on only systemd holds the write end
	if err != nil {
		return fmt.Errorf("notify barrier: %w", err)
	}
	deadline := time.Now().Add(timeout)
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return fmt.Errorf("%w after %v: is %s systemd's?", ErrBarrierTimeout, timeout, socket)
		}
		fds := []unix.PollFd{{Fd: int32(r), Events: unix.POLLHUP}}
		n, err := unix.Poll(fds, int(left.Milliseconds())+1)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("notify barrier: poll: %w", err)
		}
		if n > 0 && fds[0].Revents&unix.POLLHUP != 0 {
			return nil
		}
	}
}
