package agent

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/relayctl/relayctl/rollout/hostfacts"
)

// The relay's /status and drain gate are asked inside its network
// namespace: a control plane on the same address in the agent's own
// namespace is not the relay's, and is never asked.
func TestControlPlaneInTheRelaysNamespace(t *testing.T) {
	pid := newNetns(t)
	ln := listenIn(t, pid, "127.0.0.1:0")
	addr := ln.Addr().String()
	draining := false
	serveHTTP(t, ln, func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/status":
			fmt.Fprintf(w, `{"where": "inside", "draining": %v}`, draining)
		case r.URL.Path == "/drain" && r.Method == "POST":
			draining = true
			fmt.Fprint(w, `{"draining": true}`)
		case r.URL.Path == "/drain" && r.Method == "DELETE":
			http.Error(w, "not you", http.StatusForbidden)
		}
	})
	if outside, err := net.Listen("tcp4", addr); err == nil {
		defer outside.Close()
		serveHTTP(t, outside, func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, `{"where": "outside"}`) })
	}
	f := &framer{boundary: testBoundary}
	relayStatus(f, pid, addr)
	if got := f.out.String(); !strings.Contains(got, "\r\n\r\n"+`{"where": "inside", "draining": false}`) || !strings.HasSuffix(got, " end 0\n") ||
		!strings.HasPrefix(got, testBoundary+" relay-status\nHTTP/1.") {
		t.Errorf("status: %q", got)
	}
	s := newSession(pathsOf(t.TempDir()), strings.NewReader(""), io.Discard)
	drain := func(verb string) answer {
		return pRelayDrain(s, &request{kind: "relay-drain", args: []string{pid, addr, verb}})
	}
	if a := drain("POST"); a.word != "OK" || !draining {
		t.Errorf("POST /drain: %+v, draining %v", a, draining)
	}
	if a := drain("DELETE"); a.word != "ERR" || !strings.HasPrefix(a.text, "DELETE /drain: HTTP/1.") || !strings.HasSuffix(a.text, " 403 Forbidden") {
		t.Errorf("a refused DELETE /drain: %+v", a)
	}
	for _, tt := range []struct{ args []string }{
		{[]string{"x1", addr, "POST"}}, {[]string{pid, addr, "GET"}}, {[]string{pid, "example.com:80", "POST"}}, {[]string{pid, "10.0.0.1:80", "POST"}},
	} {
		if a := pRelayDrain(s, &request{args: tt.args}); a.word != "ERR" || !strings.HasPrefix(a.text, "bad ") {
			t.Errorf("relay-drain %q: %+v", tt.args, a)
		}
	}
}

// A drain call keeps its connection until it has read the answer: the
// relay may check that its caller's connection still stands before it
// acts (relayd's caller check).
func TestRelayDrainHoldsItsConnectionUntilAnswered(t *testing.T) {
	pid := newNetns(t)
	ln := listenIn(t, pid, "127.0.0.1:0")
	stood := make(chan bool, 1)
	serveRaw(ln, func(c net.Conn) {
		bufio.NewReader(c).ReadString('\n')
		time.Sleep(200 * time.Millisecond)
		c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		_, err := c.Read(make([]byte, 1))
		open := err != nil && os.IsTimeout(err)
		stood <- open
		if open {
			io.WriteString(c, "HTTP/1.0 200 OK\r\n\r\n{\"draining\": true}")
		}
	})
	s := newSession(pathsOf(t.TempDir()), strings.NewReader(""), io.Discard)
	if a := pRelayDrain(s, &request{args: []string{pid, ln.Addr().String(), "POST"}}); a.word != "OK" {
		t.Errorf("POST /drain: %+v", a)
	}
	if !<-stood {
		t.Error("the connection was closed or half-closed before the answer")
	}
}

// sample reads the relay socket in the relay's namespace: the socket ss
// and /proc/PID/net/udp show there, the namespace's counters, and the
// clock; relayctl reads them as the soak does.
func TestSampleInTheRelaysNamespace(t *testing.T) {
	pid := newNetns(t)
	var sock *net.UDPConn
	must(t, inNetns(pid, func() (err error) {
		sock, err = net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		return err
	}))
	defer sock.Close()
	port := sock.LocalAddr().(*net.UDPAddr).Port
	var st syscall.Stat_t
	raw, _ := sock.SyscallConn()
	raw.Control(func(fd uintptr) { syscall.Fstat(int(fd), &st) })
	state := stateDir(t)
	out := runSession(t, state, "lock\ttest\n"+req("sample", 0, nil, nil, testBoundary, pid, strconv.Itoa(port), "-")+"sync\t0\t0\t0\n")
	_, data, _ := strings.Cut(out, "\n")
	head, data, _ := strings.Cut(data, "\n")
	n := atoi(strings.TrimPrefix(head, "DATA "))
	if n < 0 || n > len(data) {
		t.Fatalf("sample: %q", out)
	}
	frames, err := hostfacts.ParseFrames([]byte(data[:n]), testBoundary)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, fr := range frames {
		names = append(names, fr.Name)
	}
	if strings.Join(names, ",") != "clock,ss,proc-net-udp,proc-net-snmp" {
		t.Errorf("sections %q", names)
	}
	d, err := hostfacts.DropsFromFrames(frames, atoi(pid), port)
	if err != nil {
		t.Fatal(err)
	}
	if d.SocketInode != st.Ino || d.Sockets != 1 || d.ClockNanos <= 0 {
		t.Errorf("sampled inode %d (want %d), %d sockets, clock %d", d.SocketInode, st.Ino, d.Sockets, d.ClockNanos)
	}
}

// sample's words are checked before anything is read.
func TestSampleRefusesBadWords(t *testing.T) {
	state := stateDir(t)
	me := strconv.Itoa(os.Getpid())
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"@@relayctl-", me, "7788", "-"}, "ERR bad frame boundary"},
		{[]string{testBoundary, "1 2", "7788", "-"}, "ERR bad pid"},
		{[]string{testBoundary, me, "0", "-"}, "ERR bad port"},
		{[]string{testBoundary, me, "77a", "-"}, "ERR bad port"},
		{[]string{testBoundary, me, "7788", "localhost:7789"}, "ERR bad control address"},
		{[]string{testBoundary, me, "7788", "10.1.1.1:7789"}, "ERR bad control address"},
		{[]string{testBoundary, "999999999", "7788", "-"}, "ERR the relay (pid 999999999) is not running"},
	} {
		got := locked(t, state, req("sample", 0, nil, nil, tt.args...))
		if len(got) != 1 || got[0] != tt.want {
			t.Errorf("sample %q: got %q, want %q", tt.args, got, tt.want)
		}
	}
}
