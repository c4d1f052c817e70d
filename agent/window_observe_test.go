package agent

import (
	"net"
	"strconv"
	"syscall"
	"testing"
)

// The window's own checks read the agent's observe: the relay process and
// its release, its socket's buffer in ss, the current link, a sysctl.
func TestWindowChecksReadTheAgentsObserve(t *testing.T) {
	h := newObsHost(t)
	sock, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	must(t, err)
	defer sock.Close()
	raw, _ := sock.SyscallConn()
	raw.Control(func(fd uintptr) { syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
	h.a.port = strconv.Itoa(sock.LocalAddr().(*net.UDPAddr).Port)
	pid := h.startRelay(t, sock)
	somax := readProc("/proc/sys/net/core/somaxconn", 100)
	_, reading := observeOn(t, h.a.state, h.a.words())
	checks := "pid\t1\t" + h.a.releases + "/1.7.0\nrb\t8192\nlink\treleases/1.7.0\nsysctl\tnet.core.somaxconn\t" + somax + "\n"
	if fail, got := hostChecks(reading, testBoundary, []byte(checks)); fail != "" || got != strconv.Itoa(pid) {
		t.Errorf("checks that hold: %q, pid %s (want %d)", fail, got, pid)
	}
	fail, _ := hostChecks(reading, testBoundary, []byte("rb\t425984\npid\t"+strconv.Itoa(pid)+"\t-\n"))
	if want := "ss rb: got rb8192, want rb425984; relay restarted: got the same pid " + strconv.Itoa(pid) + ", want a new one"; fail != want {
		t.Errorf("checks that fail: %q, want %q", fail, want)
	}
}
