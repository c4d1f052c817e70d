package tune

import (
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/relayctl/relayctl/internal/kerneltest"
	"github.com/relayctl/relayctl/relay/sockstat"
)

func TestTruesize(t *testing.T) {
	// The boundaries measured on kernel 6.18 (see sizing.go).
	tests := []struct{ payload, want int }{
		{-1, 832}, {0, 832}, {64, 832}, {120, 832}, {197, 832},
		{198, 1280}, {200, 1280}, {512, 1280}, {645, 1280},
		{646, 2304}, {1200, 2304}, {1472, 2304}, {1669, 2304},
		{1670, 4352}, {3717, 4352},
		{3718, 8448}, {7813, 8448},
		{7814, 16640}, {16004, 16640},
		{16005, 16837}, {20000, 20832}, {65507, 66339},
	}
	for _, tt := range tests {
		if got := Truesize(tt.payload); got != tt.want {
			t.Errorf("Truesize(%d): got %d, want %d", tt.payload, got, tt.want)
		}
	}
}

func TestIncidentDatagramsHeld(t *testing.T) {
	// docs/kernel.md: 212,992 bytes hold only about 160 datagrams of 200 bytes.
	got := DatagramsHeld(212992, 200)
	if got < 150 || got > 170 {
		t.Errorf("DatagramsHeld(212992, 200): got %d, want about 160", got)
	}
	if got != 166 {
		t.Errorf("DatagramsHeld(212992, 200): got %d, want 166 (212992 / 1280)", got)
	}
}

func TestDatagramsHeld(t *testing.T) {
	tests := []struct{ rb, payload, want int }{
		{212992, 64, 256},
		{212992, 200, 166},
		{212992, 1200, 92},
		{425984, 200, 332},
		{8388608, 200, 6553},
		{2304, 2000, 1}, // an empty queue takes one datagram whatever its size
		{2304, 64, 2},
		{0, 200, 0},
		{-5, 200, 0},
	}
	for _, tt := range tests {
		if got := DatagramsHeld(tt.rb, tt.payload); got != tt.want {
			t.Errorf("DatagramsHeld(%d, %d): got %d, want %d", tt.rb, tt.payload, got, tt.want)
		}
	}
}

func TestRcvbufFor(t *testing.T) {
	tests := []struct {
		name                 string
		players, hz, payload int
		stall                time.Duration
		rb, so               int
	}{
		{"one tick, no stall", 100, 60, 200, 0, 128000, 64000},
		{"stall shorter than a tick", 100, 60, 200, 16 * time.Millisecond, 128000, 64000},
		{"stall of exactly one tick at 50 Hz", 100, 50, 200, 20 * time.Millisecond, 256000, 128000},
		{"50 ms at 60 Hz is 3 ticks plus the one in flight", 100, 60, 200, 50 * time.Millisecond, 512000, 256000},
		{"incident 104 players, 100 ms", 104, 60, 200, 100 * time.Millisecond, 931840, 465920},
		{"large payload", 8, 60, 1200, 0, 18432, 9216},
		{"no players floors at SOCK_MIN_RCVBUF", 0, 60, 200, time.Second, 2304, 1152},
		{"negative inputs count as zero", -3, -60, -1, -time.Second, 2304, 1152},
		{"odd rb rounds the request up", 1, 1, 16005, 0, 16837, 8419},
		{"saturates", 1 << 40, 1000, 1200, time.Hour, MaxRcvbuf, MaxRcvbuf / 2},
		{"huge stall saturates", 1, 1 << 40, 200, 1 << 62, MaxRcvbuf, MaxRcvbuf / 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := RcvbufFor(tt.players, tt.hz, tt.payload, tt.stall); got != tt.rb {
				t.Errorf("RcvbufFor(%d, %d, %d, %v): got %d, want %d", tt.players, tt.hz, tt.payload, tt.stall, got, tt.rb)
			}
			so := SoRcvbufFor(tt.players, tt.hz, tt.payload, tt.stall)
			if so != tt.so {
				t.Errorf("SoRcvbufFor(%d, %d, %d, %v): got %d, want %d", tt.players, tt.hz, tt.payload, tt.stall, so, tt.so)
			}
			// What the kernel gives for that request must hold the burst.
			if e := ExpectRcvbuf(so, false, MaxRcvbuf, 212992); e.Effective < tt.rb {
				t.Errorf("asking SO_RCVBUF %d gives rb %d, want at least %d", so, e.Effective, tt.rb)
			}
		})
	}
}

// udpSink is an unread udp4 socket on loopback and a sender aimed at it.
type udpSink struct {
	recv, send *net.UDPConn
	port       int
}

func newSink(t *testing.T, soRcvbuf int) *udpSink {
	t.Helper()
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatalf("listen udp4: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	if soRcvbuf > 0 {
		raw, err := c.SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		var serr error
		if err := raw.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, soRcvbuf)
		}); err != nil || serr != nil {
			t.Fatalf("set SO_RCVBUF %d: %v %v", soRcvbuf, err, serr)
		}
	}
	s, err := net.DialUDP("udp4", nil, c.LocalAddr().(*net.UDPAddr))
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return &udpSink{recv: c, send: s, port: c.LocalAddr().(*net.UDPAddr).Port}
}

// fill sends n datagrams of payload bytes and returns the socket as ss sees
// it once every datagram is either queued or dropped.
func (u *udpSink) fill(t *testing.T, n, payload int) sockstat.Socket {
	t.Helper()
	buf := make([]byte, payload)
	for range n {
		if _, err := u.send.Write(buf); err != nil {
			t.Fatalf("send: %v", err)
		}
	}
	// Loopback normally delivers before write returns; poll until the
	// numbers stop moving (not a timed assertion).
	var last sockstat.Socket
	for try := 0; try < 200; try++ {
		s := u.ss(t)
		if try > 0 && s.Rmem == last.Rmem && s.Drops == last.Drops && s.Rmem > 0 {
			return s
		}
		last = s
		time.Sleep(5 * time.Millisecond)
	}
	return last
}

func (u *udpSink) ss(t *testing.T) sockstat.Socket {
	t.Helper()
	out, err := exec.Command("ss", "-H", "-O", "-u", "-l", "-n", "-m", fmt.Sprintf("sport = :%d", u.port)).Output()
	if err != nil {
		t.Fatalf("ss: %v", err)
	}
	socks, err := sockstat.ParseSS(out)
	if err != nil {
		t.Fatalf("parse ss: %v", err)
	}
	socks = sockstat.FilterPort(socks, u.port)
	if len(socks) != 1 {
		t.Fatalf("ss: got %d sockets on port %d, want 1: %q", len(socks), u.port, out)
	}
	return socks[0]
}

// TestTruesizeMeasured repeats the measurement the model is fitted to: r of
// ss's skmem over N unread datagrams of payload P, with a buffer large enough
// that none is dropped.
func TestTruesizeMeasured(t *testing.T) {
	kerneltest.Lock(t)
	kerneltest.Set(t, "net.core.rmem_max", "4194304")
	const n = 20
	for _, p := range []int{64, 120, 200, 512, 1200, 1472, 3000, 8000} {
		t.Run(strconv.Itoa(p), func(t *testing.T) {
			u := newSink(t, 2*1024*1024)
			s := u.fill(t, n, p)
			if s.Drops != 0 {
				t.Fatalf("payload %d: %d drops, want none", p, s.Drops)
			}
			if got, want := int(s.Rmem)/n, Truesize(p); got != want || int(s.Rmem)%n != 0 {
				t.Errorf("payload %d: measured truesize %d (r %d / %d), Truesize says %d", p, got, s.Rmem, n, want)
			}
		})
	}
}

// TestDatagramsHeldMeasured fills a socket past its buffer and checks that
// the kernel keeps exactly DatagramsHeld datagrams and drops the rest, at the
// incident's buffer and at a larger one.
func TestDatagramsHeldMeasured(t *testing.T) {
	kerneltest.Lock(t)
	kerneltest.Set(t, "net.core.rmem_max", "212992")
	kerneltest.Set(t, "net.core.rmem_default", "212992")
	tests := []struct {
		name     string
		soRcvbuf int // 0: never calls setsockopt, gets rmem_default
		payload  int
	}{
		{"incident default buffer, 200 bytes", 0, 200},
		{"incident default buffer, 64 bytes", 0, 64},
		{"capped 4 MiB request, 1200 bytes", 4194304, 1200},
		{"small request, 200 bytes", 4096, 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u := newSink(t, tt.soRcvbuf)
			rb := ExpectRcvbuf(tt.soRcvbuf, false, 212992, 212992).Effective
			held := DatagramsHeld(rb, tt.payload)
			sent := held + 50
			s := u.fill(t, sent, tt.payload)
			if int(s.Rcvbuf) != rb {
				t.Fatalf("rb: got %d, want %d", s.Rcvbuf, rb)
			}
			if gotHeld := int(s.Rmem) / Truesize(tt.payload); gotHeld != held || int(s.Drops) != sent-held {
				t.Errorf("sent %d of %d bytes into rb %d: kernel held %d and dropped %d, want %d and %d",
					sent, tt.payload, rb, gotHeld, s.Drops, held, sent-held)
			}
		})
	}
}
