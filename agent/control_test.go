package agent

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/relayctl/relayctl/plans"
)

// The relay's answers are bounded: a /status over 64 KiB is refused, not
// cut into something that might parse; an answer that never comes ends
// after 3 s; a refused connection and a relay gone say so.
func TestRelayStatusBounds(t *testing.T) {
	pid := newNetns(t)
	big := listenIn(t, pid, "127.0.0.1:0")
	serveRaw(big, func(c net.Conn) {
		bufio.NewReader(c).ReadString('\n')
		io.WriteString(c, "HTTP/1.0 200 OK\r\n\r\n{\"version\": \"1.9.0\", \"pad\": \""+strings.Repeat("x", 100<<10)+"\"}")
	})
	exact := listenIn(t, pid, "127.0.0.1:0")
	serveRaw(exact, func(c net.Conn) {
		bufio.NewReader(c).ReadString('\n')
		head := "HTTP/1.0 200 OK\r\n\r\n"
		io.WriteString(c, head+strings.Repeat(" ", maxStatus-len(head)))
	})
	silent := listenIn(t, pid, "127.0.0.1:0")
	serveRaw(silent, func(c net.Conn) { time.Sleep(5 * time.Second) })
	closed := listenIn(t, pid, "127.0.0.1:0")
	closedAddr := closed.Addr().String()
	closed.Close()

	for _, tt := range []struct {
		name, pid, addr string
		status          int
		want            string
	}{
		{"over 64 KiB", pid, big.Addr().String(), 1, "its /status answer is larger than 65536 bytes: not read"},
		{"silent", pid, silent.Addr().String(), 124, silent.Addr().String() + ": no answer within 3s: timed out"},
		{"refused", pid, closedAddr, 1, closedAddr + ": connection refused"},
		{"a relay gone", "999999999", closedAddr, 1, "enter the network namespace of pid 999999999: No such file or directory"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := &framer{boundary: testBoundary}
			start := time.Now()
			relayStatus(f, tt.pid, tt.addr)
			want := fmt.Sprintf("%s relay-status\n%s\n%s end %d\n", testBoundary, tt.want, testBoundary, tt.status)
			if got := f.out.String(); got != want {
				t.Errorf("got %q, want %q", got, want)
			}
			if d := time.Since(start); d > 4*time.Second {
				t.Errorf("took %v", d)
			}
		})
	}
	f := &framer{boundary: testBoundary}
	relayStatus(f, pid, exact.Addr().String())
	if got := f.out.Len(); got != len(testBoundary)*2+len(" relay-status\n")+maxStatus+len("\n end 0\n") {
		t.Errorf("an answer of exactly %d bytes: framed in %d bytes", maxStatus, got)
	}
}

// The agent takes the control addresses relayctl takes (plans.ValidControl),
// and nothing else: loopback IPv4 and a port, never a name.
func TestValidControlIsRelayctls(t *testing.T) {
	for _, c := range []string{"127.0.0.1:7789", "127.3.2.1:1", "127.0.0.1:07789", "127.0.0.1:65535",
		"127.0.0.1:0", "127.0.0.1:65536", "127.0.0.1:", "127.0.0.1", "localhost:7789", "10.0.0.1:7789", "[::1]:7789",
		"127.1:7789", "127.000.0.1:7789", "127.0.0.1:77 89", "127.0.0.1:-1", " 127.0.0.1:7789", "127.0.0.1:7789:1"} {
		if got, want := validControl(c), plans.ValidControl(c) == nil; got != want {
			t.Errorf("%q: the agent takes it %v, relayctl %v", c, got, want)
		}
	}
}
