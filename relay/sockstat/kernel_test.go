package sockstat

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"syscall"
	"testing"
	"time"
)

// TestParseRealKernel reads a real socket back through real ss and the real
// /proc files: the buffer getsockopt reports, the queued bytes and the drops
// must agree across all of them.
func TestParseRealKernel(t *testing.T) {
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatalf("listen udp4: %v", err)
	}
	defer c.Close()
	port := c.LocalAddr().(*net.UDPAddr).Port
	raw, err := c.SyscallConn()
	if err != nil {
		t.Fatalf("syscall conn: %v", err)
	}
	var rb int
	var serr error
	err = raw.Control(func(fd uintptr) {
		// The smallest buffer (rb 2304) holds one 200-byte datagram, so
		// sending ten makes nine drops.
		if serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 1); serr != nil {
			return
		}
		rb, serr = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF)
	})
	if err != nil || serr != nil {
		t.Fatalf("set SO_RCVBUF: %v %v", err, serr)
	}
	before := readSNMP(t)

	const sent = 10
	s, err := net.DialUDP("udp4", nil, c.LocalAddr().(*net.UDPAddr))
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer s.Close()
	for range sent {
		if _, err := s.Write(make([]byte, 200)); err != nil {
			t.Fatalf("send: %v", err)
		}
	}

	// Loopback delivers in softirq context, normally before write returns;
	// poll (not a timed assertion) until every datagram is queued or dropped.
	var sock Socket
	for try := 0; ; try++ {
		sock = ssPort(t, port)
		if sock.Drops >= sent-1 || try == 200 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if sock.Rcvbuf != uint64(rb) {
		t.Errorf("ss rb: got %d, want getsockopt's %d", sock.Rcvbuf, rb)
	}
	if sock.Local != "127.0.0.1" || sock.State != "UNCONN" {
		t.Errorf("ss local: got %s %s, want UNCONN 127.0.0.1", sock.State, sock.Local)
	}
	if !slices.Contains(sock.PIDs, os.Getpid()) {
		t.Errorf("ss pids: got %v, want to include %d", sock.PIDs, os.Getpid())
	}
	if sock.Drops != sent-1 {
		t.Errorf("ss d: got %d, want %d (one 200-byte datagram fits rb 2304)", sock.Drops, sent-1)
	}

	content, err := os.ReadFile("/proc/net/udp")
	if err != nil {
		t.Fatal(err)
	}
	all, err := ParseProcNetUDP(content)
	if err != nil {
		t.Fatalf("ParseProcNetUDP(/proc/net/udp): %v", err)
	}
	var found []UDPSocket
	for _, u := range all {
		if u.LocalPort == port && u.LocalAddr == "127.0.0.1" {
			found = append(found, u)
		}
	}
	if len(found) != 1 {
		t.Fatalf("/proc/net/udp: got %d sockets on 127.0.0.1:%d, want 1", len(found), port)
	}
	if u := found[0]; u.Drops != sock.Drops || u.RxQueue != sock.Rmem || u.State != 7 {
		t.Errorf("/proc/net/udp: got drops %d rx_queue %d state %d, want ss's d %d r %d and state 7",
			u.Drops, u.RxQueue, u.State, sock.Drops, sock.Rmem)
	}

	// Other tests may drop datagrams in this namespace at the same time, so
	// the counter moves by at least this socket's drops.
	after := readSNMP(t)
	if d := after.RcvbufErrors - before.RcvbufErrors; d < sock.Drops {
		t.Errorf("snmp RcvbufErrors moved by %d, want at least the socket's %d", d, sock.Drops)
	}
	if d := after.InErrors - before.InErrors; d < sock.Drops {
		t.Errorf("snmp InErrors moved by %d, want at least the socket's %d", d, sock.Drops)
	}
}

func ssPort(t *testing.T, port int) Socket {
	t.Helper()
	out, err := exec.Command("ss", "-H", "-O", "-u", "-l", "-n", "-m", "-p", fmt.Sprintf("sport = :%d", port)).Output()
	if err != nil {
		t.Fatalf("ss: %v", err)
	}
	socks, err := ParseSS(out)
	if err != nil {
		t.Fatalf("ParseSS(%q): %v", out, err)
	}
	socks = FilterPort(socks, port)
	if len(socks) != 1 {
		t.Fatalf("ss: got %d sockets on port %d, want 1: %q", len(socks), port, out)
	}
	return socks[0]
}

func readSNMP(t *testing.T) UDPStats {
	t.Helper()
	b, err := os.ReadFile("/proc/net/snmp")
	if err != nil {
		t.Fatal(err)
	}
	st, err := ParseSNMP(b)
	if err != nil {
		t.Fatalf("ParseSNMP(/proc/net/snmp): %v", err)
	}
	return st
}
