package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The relay read in its network namespace (netns.go): its socket by ss
// and the namespace's /proc/net tables, and its control plane. What the
// relay answers is the relay's to write: bounded, and framed like any
// host output.

const (
	// maxStatus bounds the relay's /status answer, headers included.
	maxStatus = 64 << 10
	// controlTimeout bounds a call to the relay's control plane.
	controlTimeout = 3 * time.Second
	// ssTimeout bounds ss: it reads the kernel's tables, and with -p
	// every process's descriptors.
	ssTimeout = 30 * time.Second
)

// ssArgs is ss's read-back of the relay socket on port: every UDP socket
// bound to it, with its buffer (-m), inode (-e) and, with owners, its
// processes (-p, which reads every process's descriptors).
func ssArgs(port string, owners bool) []string {
	a := []string{"ss", "-H", "-O", "-u", "-a", "-n", "-m", "-e"}
	if owners {
		a = append(a, "-p")
	}
	return append(a, "sport = :"+port)
}

// validControl: c is a control address relayctl sends, an IPv4 loopback
// address and a port (plans.ValidControl), never a name to resolve.
func validControl(c string) bool {
	host, port, ok := strings.Cut(c, ":")
	ip := net.ParseIP(host)
	n := atoi(port)
	return ok && strings.HasPrefix(host, "127.") && ip != nil && ip.To4() != nil && len(port) <= 5 && n >= 1 && n <= 65535
}

// validPort: p is a port number, 1 to 65535, in plain digits.
func validPort(p string) bool {
	n := atoi(p)
	return n >= 1 && n <= 65535 && strconv.Itoa(n) == p
}

// validPID: p is a process id in plain digits.
func validPID(p string) bool { return digits(p) && len(p) <= 10 }

// controlCall sends one HTTP/1.0 request to the relay's control plane
// from inside process pid's network namespace and reads the answer whole,
// at most max bytes: over is true when it held more. The connection
// stays open until the answer is read (the relay may check, before it
// acts, that its caller's connection still stands).
func controlCall(pid, addr, request string, max int) (answer []byte, over bool, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), controlTimeout)
	defer cancel()
	conn, err := dialIn(ctx, pid, addr)
	if err != nil {
		return nil, false, controlErr(addr, err)
	}
	defer conn.Close()
	deadline, _ := ctx.Deadline()
	conn.SetDeadline(deadline)
	if _, err := conn.Write([]byte(request)); err != nil {
		return nil, false, controlErr(addr, err)
	}
	b, err := readUpTo(conn, int64(max)+1)
	if err != nil {
		return b, false, controlErr(addr, err)
	}
	if len(b) > max {
		return b[:max], true, nil
	}
	return b, false, nil
}

// errTimedOut is a control call that ran out of time.
var errTimedOut = errors.New("timed out")

// controlErr says why a control call failed, in a few words: relayctl
// shows a status error's first 60 characters.
func controlErr(addr string, err error) error {
	var ne net.Error
	switch {
	case errors.As(err, &ne) && ne.Timeout():
		return fmt.Errorf("%s: no answer within %s: %w", addr, controlTimeout, errTimedOut)
	case errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Errorf("%s: connection refused", addr)
	case errors.Is(err, errWrongNetns):
		return err
	}
	var oe *net.OpError
	if errors.As(err, &oe) {
		return fmt.Errorf("%s: %s", addr, errText(oe.Err))
	}
	return err
}

// relayStatus is GET /status of the relay (pid) at its control address,
// as observe.sh framed it: the raw HTTP answer (relayctl's parseStatus
// reads its status line), status 0; or why it could not be read. An
// answer over maxStatus is not cut into something that might parse: it
// is refused, saying so.
func relayStatus(f *framer, pid, control string) {
	b, over, err := controlCall(pid, control, "GET /status HTTP/1.0\r\n\r\n", maxStatus)
	switch {
	case errors.Is(err, errTimedOut):
		f.value("relay-status", 124, err.Error())
	case err != nil:
		f.value("relay-status", 1, err.Error())
	case over:
		f.value("relay-status", 1, fmt.Sprintf("its /status answer is larger than %d bytes: not read", maxStatus))
	default:
		f.section("relay-status", 0, b)
	}
}

// relayCounters frames the relay socket's read-back in pid's network
// namespace: ss (with the sockets' owners when owners), the namespace's
// UDP table and SNMP counters. pid "" is the agent's own namespace.
func relayCounters(f *framer, pid, port string, owners bool) {
	out, st := commandIn(pid, ssTimeout, ssArgs(port, owners)...)
	f.section("ss", st, out)
	dir := "/proc/net"
	if pid != "" {
		dir = "/proc/" + pid + "/net"
	}
	b, err := procFile(dir + "/udp")
	f.read("proc-net-udp", b, err)
	b, err = procFile(dir + "/snmp")
	f.read("proc-net-snmp", b, err)
}

// relayExe is where process pid's executable is, resolved ("" if it
// cannot be read: a kernel thread, a process gone).
func relayExe(pid string) string {
	exe, _ := os.Readlink("/proc/" + pid + "/exe")
	return exe
}
