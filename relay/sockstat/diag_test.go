package sockstat

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"net"
	"net/netip"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func readHexTestdata(t testing.TB, name string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.TrimSpace(string(readTestdata(t, name))))
	if err != nil {
		t.Fatalf("testdata %s: %v", name, err)
	}
	return b
}

// The kernel's captured answers (testdata/README.md), in each state the
// caller's end goes through as it closes; only the established one is
// live, and the timewait entry's uid 0 is nobody's.
func TestParseDiagAnswerCaptured(t *testing.T) {
	tests := []struct {
		file          string
		seq           uint32
		local, remote netip.AddrPort
		want          TCPSock
		found, live   bool
	}{
		{"diag_established.hex", 1, capturedCaller, capturedRelay, TCPSock{TCPEstablished, 65534, 210309}, true, true},
		{"diag_finwait1.hex", 2, capturedCaller, capturedRelay, TCPSock{TCPFinWait1, 65534, 0}, true, false},
		{"diag_timewait.hex", 3, capturedCaller, capturedRelay, TCPSock{TCPFinWait2, 0, 0}, true, false},
		{"diag_enoent.hex", 4, netip.MustParseAddrPort("127.0.0.1:40001"), capturedRelay, TCPSock{}, false, false},
		{"diag6_established.hex", 1, capturedCaller6, capturedRelay6, TCPSock{TCPEstablished, 65534, 209316}, true, true},
	}
	for _, tt := range tests {
		got, found, err := ParseDiagAnswer(readHexTestdata(t, tt.file), tt.seq, tt.local, tt.remote)
		if err != nil || found != tt.found || got != tt.want || got.Live() != tt.live {
			t.Errorf("%s: got %+v (%s), found %v, live %v, %v; want %+v, found %v, live %v",
				tt.file, got, got.StateName(), found, got.Live(), err, tt.want, tt.found, tt.live)
		}
	}
}

// An answer that is not for the request, or not whole, is an error: the
// caller refuses, never guesses.
func TestParseDiagAnswerErrors(t *testing.T) {
	good := readHexTestdata(t, "diag_established.hex")
	edit := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), good...)) }
	ne := binary.NativeEndian
	errMsg := func(code int32) []byte {
		b := make([]byte, 20)
		ne.PutUint32(b, 20)
		ne.PutUint16(b[4:], unix.NLMSG_ERROR)
		ne.PutUint32(b[8:], 1)
		ne.PutUint32(b[16:], uint32(-code))
		return b
	}
	tests := []struct {
		name          string
		in            []byte
		local, remote netip.AddrPort
		wantErr       string
	}{
		{"empty", nil, capturedCaller, capturedRelay, "shorter than a netlink header"},
		{"cut short", good[:40], capturedCaller, capturedRelay, "answer says 124 bytes, got 40"},
		{"another socket's", good, netip.MustParseAddrPort("127.0.0.1:40001"), capturedRelay, "the kernel answered for 127.0.0.1:40000 to 127.0.0.1:7789"},
		{"the other end's", good, capturedRelay, capturedCaller, "the kernel answered for"},
		{"length says less than a message", edit(func(b []byte) []byte { ne.PutUint32(b, 40); return b }), capturedCaller, capturedRelay, "inet_diag_msg of 24 bytes"},
		{"another type", edit(func(b []byte) []byte { ne.PutUint16(b[4:], 3); return b }), capturedCaller, capturedRelay, "netlink type 3"},
		{"another family", edit(func(b []byte) []byte { b[16] = 1; return b }), capturedCaller, capturedRelay, "address family 1"},
		{"an acknowledgement", errMsg(0), capturedCaller, capturedRelay, "an acknowledgement"},
		{"refused", errMsg(int32(unix.EPERM)), capturedCaller, capturedRelay, "operation not permitted"},
		{"error cut short", errMsg(0)[:18], capturedCaller, capturedRelay, "answer says 20 bytes, got 18"},
	}
	for _, tt := range tests {
		_, _, err := ParseDiagAnswer(tt.in, 1, tt.local, tt.remote)
		if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("%s: got %v, want an error containing %q", tt.name, err, tt.wantErr)
		}
	}
	if _, _, err := ParseDiagAnswer(good, 2, capturedCaller, capturedRelay); err == nil || !strings.Contains(err.Error(), "answer to request 1, want 2") {
		t.Errorf("another request's answer: got %v", err)
	}
}

// An IPv4 request answered for an IPv6 socket with v4-mapped addresses
// (a dual-stack client): the same connection.
func TestParseDiagAnswerMapped(t *testing.T) {
	b := readHexTestdata(t, "diag_established.hex")
	id := b[20 : 20+sizeofDiagSockID]
	b[16] = unix.AF_INET6
	mapped := func(a netip.Addr) []byte { m := a.As16(); return m[:] } // ::ffff:a.b.c.d
	copy(id[4:20], mapped(capturedCaller.Addr()))
	copy(id[20:36], mapped(capturedRelay.Addr()))
	got, found, err := ParseDiagAnswer(b, 1, capturedCaller, capturedRelay)
	if err != nil || !found || got != (TCPSock{TCPEstablished, 65534, 210309}) {
		t.Errorf("got %+v, %v, %v; want the established socket of uid 65534", got, found, err)
	}
}

func FuzzParseDiagAnswer(f *testing.F) {
	for _, name := range []string{"diag_established.hex", "diag_finwait1.hex", "diag_timewait.hex", "diag_enoent.hex", "diag6_established.hex"} {
		f.Add(readHexTestdata(f, name))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, ends := range [][2]netip.AddrPort{{capturedCaller, capturedRelay}, {capturedCaller6, capturedRelay6}} {
			sock, found, err := ParseDiagAnswer(b, 1, ends[0], ends[1])
			if err != nil && !strings.HasPrefix(err.Error(), "sock_diag: ") {
				t.Fatalf("ParseDiagAnswer: an error that does not say what it read: %v", err)
			}
			if (err != nil || !found) && sock != (TCPSock{}) {
				t.Fatalf("ParseDiagAnswer returned %+v with found %v, %v", sock, found, err)
			}
		}
	})
}

// LookupTCP against the real kernel: both ends of a loopback connection,
// IPv4 and IPv6, with the uid and inode the kernel gives them elsewhere
// (fstat of the descriptor, /proc/net/tcp); no socket for a pair nobody
// holds; and, once the caller closes without reading, never a live
// socket again, but the orphan and then the timewait entry of uid 0.
func TestLookupTCPRealKernel(t *testing.T) {
	for _, tt := range []struct{ network, addr, file string }{
		{"tcp4", "127.0.0.1:0", "/proc/self/net/tcp"},
		{"tcp6", "[::1]:0", "/proc/self/net/tcp6"},
	} {
		t.Run(tt.network, func(t *testing.T) {
			ln, err := net.Listen(tt.network, tt.addr)
			if err != nil {
				t.Fatalf("listen: %v", err)
			}
			defer ln.Close()
			caller, err := net.Dial(tt.network, ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer caller.Close()
			relay, err := ln.Accept()
			if err != nil {
				t.Fatal(err)
			}
			defer relay.Close()
			from := caller.LocalAddr().(*net.TCPAddr).AddrPort()
			to := relay.LocalAddr().(*net.TCPAddr).AddrPort()
			for _, end := range []struct {
				name          string
				conn          net.Conn
				local, remote netip.AddrPort
			}{{"the caller's end", caller, from, to}, {"the relay's end", relay, to, from}} {
				got, found, err := LookupTCP(end.local, end.remote)
				want := TCPSock{TCPEstablished, uint32(os.Geteuid()), inodeOf(t, end.conn)}
				if err != nil || !found || got != want || !got.Live() {
					t.Errorf("%s: got %+v, found %v, %v; want %+v", end.name, got, found, err, want)
				}
				if proc := procTCP(t, tt.file, end.local, end.remote); proc != got {
					t.Errorf("%s: sock_diag says %+v, %s %+v", end.name, got, tt.file, proc)
				}
			}
			nobody := netip.AddrPortFrom(from.Addr(), 1)
			if got, found, err := LookupTCP(nobody, to); err != nil || found {
				t.Errorf("%s to %s, which no socket has: got %+v, found %v, %v", nobody, to, got, found, err)
			}
			watchClose(t, caller, from, to)
		})
	}
}

// watchClose writes to the relay and closes the caller, and follows the
// caller's end until the kernel holds it as a timewait entry: it must
// never be live again.
func watchClose(t *testing.T, caller net.Conn, from, to netip.AddrPort) {
	t.Helper()
	if _, err := caller.Write([]byte("POST /drain HTTP/1.0\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	caller.Close()
	var seen []string
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
		got, found, err := LookupTCP(from, to)
		if err != nil {
			t.Fatal(err)
		}
		if found && (len(seen) == 0 || seen[len(seen)-1] != got.StateName()) {
			seen = append(seen, got.StateName())
		}
		if found && got.Live() {
			t.Fatalf("after close: %+v is live", got)
		}
		if found && got.State == TCPFinWait2 && got.Inode == 0 {
			if got.UID != 0 {
				t.Errorf("the timewait entry: uid %d, want 0 (the kernel's)", got.UID)
			}
			t.Logf("the caller's end after close: %s", strings.Join(seen, ", "))
			return
		}
	}
	t.Fatalf("the caller's end went %v in 3 s, never the timewait entry", seen)
}

// inodeOf is the inode fstat gives a connection's descriptor.
func inodeOf(t *testing.T, c net.Conn) uint64 {
	t.Helper()
	raw, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	var serr error
	if err := raw.Control(func(fd uintptr) { serr = syscall.Fstat(int(fd), &st) }); err != nil || serr != nil {
		t.Fatal(errors.Join(err, serr))
	}
	return st.Ino
}

func procTCP(t *testing.T, file string, local, remote netip.AddrPort) TCPSock {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	s, found, err := ProcNetTCPSock(b, local, remote)
	if err != nil || !found {
		t.Fatalf("%s: %s to %s: found %v, %v", file, local, remote, found, err)
	}
	return s
}
