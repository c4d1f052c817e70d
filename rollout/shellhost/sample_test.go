package shellhost

import (
	"fmt"
	"github.com/relayctl/relayctl/internal/agenttest"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// statusServer answers /status as relayd would, with body.
func statusServer(t *testing.T, body func() string) string {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, body()) })}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// socketInode is the inode of the fake relay's socket, as ss -e shows it.
func (r *fakeRelay) socketInode(t *testing.T) uint64 {
	raw, _ := r.conn.SyscallConn()
	var st unix.Stat_t
	raw.Control(func(fd uintptr) { unix.Fstat(int(fd), &st) })
	return st.Ino
}

// flood sends n datagrams to the fake relay, which never reads them: with
// a small buffer most are dropped.
func (r *fakeRelay) flood(t *testing.T, n int) {
	c, err := net.DialUDP("udp4", nil, &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: r.port})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	b := make([]byte, 200)
	for range n {
		c.Write(b)
	}
}

// The real agent's sample reads the socket's drop counters, the
// namespace's, and the relay's /status, with the host clock, in one round
// trip, and a drop shows on every counter of the socket.
func TestAgentSamplesDropCounters(t *testing.T) {
	r := startFakeRelay(t)
	raw, _ := r.conn.SyscallConn()
	raw.Control(func(fd uintptr) { unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, 2048) })
	inode := r.socketInode(t)
	rx := 0
	control := statusServer(t, func() string {
		rx += 10
		return fmt.Sprintf(`{"version":"1.7.0","pid":%d,"socket_inode":%d,"players":12,"counters":{"rx_packets":%d,"rx_drops":7}}`, r.pid, inode, rx)
	})
	h := lockedAgent(t, filepath.Join(rootDir(t), "state"))
	sample := func() Result {
		t.Helper()
		trips := h.RoundTrips()
		res, err := runOps(h, op("sample", strconv.Itoa(r.pid), strconv.Itoa(r.port), control))
		if err != nil || len(res) != 1 || res[0].Drops == nil {
			t.Fatalf("sample: %v, %+v", err, res)
		}
		if h.RoundTrips() != trips+1 {
			t.Errorf("a sample took %d round trips, want 1", h.RoundTrips()-trips)
		}
		return res[0]
	}
	a := sample().Drops
	r.flood(t, 300)
	b := sample().Drops
	if a.SocketInode != inode || b.SocketInode != inode || b.PID != r.pid || b.Sockets != 1 {
		t.Errorf("sampled socket inode %d then %d, pid %d, %d sockets; want inode %d, pid %d, one socket", a.SocketInode, b.SocketInode, b.PID, b.Sockets, inode, r.pid)
	}
	if d := b.SSDrops - a.SSDrops; d < 100 || b.ProcUDPDrops-a.ProcUDPDrops != d || b.RcvbufErrors-a.RcvbufErrors < d || b.InErrors-a.InErrors < d {
		t.Errorf("after 300 datagrams to a 2 KiB buffer: ss d +%d, /proc/net/udp drops +%d, RcvbufErrors +%d, InErrors +%d; want most dropped, on every counter",
			d, b.ProcUDPDrops-a.ProcUDPDrops, b.RcvbufErrors-a.RcvbufErrors, b.InErrors-a.InErrors)
	}
	if b.ClockNanos <= a.ClockNanos || b.RelayRxDrops == nil || *b.RelayRxDrops != 7 || *b.RelayRxPackets != 20 || *b.Players != 12 {
		t.Errorf("clock %d then %d, relay counters %v %v players %v; want a clock that moves and the relay's own numbers", a.ClockNanos, b.ClockNanos, b.RelayRxDrops, b.RelayRxPackets, b.Players)
	}
	// Without a control plane: the kernel's counters only.
	res, err := runOps(h, op("sample", strconv.Itoa(r.pid), strconv.Itoa(r.port), "-"))
	if err != nil || res[0].Drops.RelayRxDrops != nil || res[0].Drops.SocketInode != inode {
		t.Errorf("sample without /status: %v, %+v", err, res)
	}
	// A relay gone is the host's error, and the session goes on.
	if _, err := runOps(h, op("sample", "999999999", strconv.Itoa(r.port), "-")); err == nil || !strings.Contains(err.Error(), "the relay (pid 999999999) is not running") {
		t.Errorf("sample of a gone relay: got %v", err)
	}
	if _, err := runOps(h, op("clock")); err != nil {
		t.Errorf("after a failed sample: %v", err)
	}
}

// A /status that answers for another process or another socket is not
// this relay's: its counters are left out. The frames are parsed as
// strictly as observe's.
func TestDropsFromFramesTrustsOnlyTheRelaysStatus(t *testing.T) {
	const B = "@@relayctl-0123"
	ss := "UNCONN 0 0 0.0.0.0:7788 0.0.0.0:* ino:555 sk:1 <-> skmem:(r0,rb4096,t0,tb212992,f0,w0,o0,bl0,d41)"
	snmp := "Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors\nUdp: 900 0 41 0 41 0\n"
	status := func(pid, inode int) string {
		return fmt.Sprintf("HTTP/1.0 200 OK\r\n\r\n"+`{"version":"1.8.0","pid":%d,"socket_inode":%d,"players":8,"counters":{"rx_packets":100,"rx_drops":41}}`, pid, inode)
	}
	for _, tt := range []struct {
		name   string
		status string
		want   bool
	}{
		{"its own", status(42, 555), true},
		{"another process", status(43, 555), false},
		{"another socket", status(42, 556), false},
		{"not JSON", "HTTP/1.0 200 OK\r\n\r\n<html>", false},
	} {
		frames, err := ParseFrames(framesOf(B, "clock", "1700000000000000000", "ss", ss, "proc-net-snmp", snmp, "relay-status", tt.status), B)
		if err != nil {
			t.Fatal(err)
		}
		c, err := DropsFromFrames(frames, 42, 7788)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if c.SSDrops != 41 || c.RcvbufErrors != 41 || c.InDatagrams != 900 || c.SocketInode != 555 || c.ClockNanos != 1700000000000000000 {
			t.Errorf("%s: kernel counters %+v", tt.name, c)
		}
		if got := c.RelayRxDrops != nil; got != tt.want {
			t.Errorf("%s: relay counters kept %v, want %v", tt.name, got, tt.want)
		}
	}
	for _, bad := range [][]byte{
		framesOf(B, "ss", ss),                             // no clock
		framesOf(B, "clock", "yesterday", "ss", ss),       // a clock that is not one
		framesOf(B, "clock", "17", "ss", "UNCONN broken"), // ss that does not parse
	} {
		frames, err := ParseFrames(bad, B)
		if err != nil {
			continue
		}
		if _, err := DropsFromFrames(frames, 42, 7788); err == nil {
			t.Errorf("%q was read as a sample", bad)
		}
	}
}

func FuzzDropsFromFrames(f *testing.F) {
	const B = "@@relayctl-0123"
	f.Add(framesOf(B, "clock", "1700000000000000000", "ss", "UNCONN 0 0 0.0.0.0:7788 0.0.0.0:* ino:555 sk:1 <-> skmem:(r0,rb4096,t0,tb212992,f0,w0,o0,bl0,d41)",
		"proc-net-snmp", "Udp: InDatagrams InErrors RcvbufErrors\nUdp: 1 2 3\n", "relay-status", `{"version":"1.8.0","pid":42,"counters":{"rx_drops":1}}`))
	f.Add(framesOf(B, "clock", "-1"))
	f.Fuzz(func(t *testing.T, b []byte) {
		frames, err := ParseFrames(b, B)
		if err != nil {
			return
		}
		c, err := DropsFromFrames(frames, 42, 7788)
		if err == nil && (c.ClockNanos <= 0 || c.PID != 42) {
			t.Errorf("accepted a sample without a clock or of another pid: %+v", c)
		}
	})
}

// The soak samples every few seconds for a minute: BenchmarkAgentSample
// against BenchmarkAgentObserve is what the light primitive saves the host
// (and the soak's clock) per reading. Both through one locked agent, as
// the soak does; the fake relay has no /status (each would add the same).
func BenchmarkAgentSample(b *testing.B) {
	r, h := benchAgent(b)
	o := op("sample", strconv.Itoa(r.pid), strconv.Itoa(r.port), "-")
	b.ResetTimer()
	for b.Loop() {
		if _, err := runOps(h, o); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAgentObserve(b *testing.B) {
	r, h := benchAgent(b)
	q := r.query("")
	b.ResetTimer()
	for b.Loop() {
		if _, err := observeOn(h, q); err != nil {
			b.Fatal(err)
		}
	}
}

func benchAgent(b *testing.B) (*fakeRelay, *Host) {
	r := startFakeRelay(b)
	h := New("local", localConn{}, filepath.Join(rootDir(b), "state"), agenttest.Set(b), nil)
	if err := lock(h, "bench"); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { h.Close() })
	return r, h
}

// verify's baseline is the newest receipt that read the relay back after
// a window: a staged run's receipt (no drops_after) after it, a symlink
// and a name relayctl never writes are passed over.
func TestObserveReadsTheLastApply(t *testing.T) {
	r := startFakeRelay(t)
	q := r.query("")
	q.LastApply = true
	dir := q.Paths.StateDir + "/receipts"
	os.MkdirAll(dir, 0o755)
	write := func(name, body string) { os.WriteFile(dir+"/"+name, []byte(body), 0o644) }
	write("20260101T000000Z-p-aaaa.json", `{"plan":"p","plan_checksum":"sha256:aaaa","outcome":"applied","drops_after":{"ss_d":1,"socket_inode":5,"clock_ns":100}}`)
	write("20260102T000000Z-p-bbbb.json", `{"plan":"p","plan_checksum":"sha256:bbbb","outcome":"applied","drops_after":{"ss_d":7,"socket_inode":9,"clock_ns":200}}`)
	write("20260103T000000Z-p-cccc.json", `{"plan":"p","outcome":"staged"}`)
	write("20260104T000000Z-p weird.json", `{"plan":"p","outcome":"applied","drops_after":{"ss_d":99}}`)
	elsewhere := filepath.Join(t.TempDir(), "planted.json") // anyone could have written it
	os.WriteFile(elsewhere, []byte(`{"plan":"p","outcome":"applied","drops_after":{"ss_d":99,"socket_inode":9,"clock_ns":300}}`), 0o644)
	os.Symlink(elsewhere, dir+"/20260105T000000Z-p-link.json")
	f, err := observeWith(t, localRunner{}, "here", q)
	if err != nil {
		t.Fatal(err)
	}
	la := f.LastApply
	if la == nil || la.Receipt != "20260102T000000Z-p-bbbb.json" || la.Checksum != "sha256:bbbb" || la.Drops.SSDrops != 7 || la.Drops.SocketInode != 9 || la.Drops.ClockNanos != 200 {
		t.Errorf("last apply: got %+v, want the 2026-01-02 receipt", la)
	}
	// Not asked, not read.
	q.LastApply = false
	if f, err := observeWith(t, localRunner{}, "here", q); err != nil || f.LastApply != nil {
		t.Errorf("without LastApply: %+v, %v", f.LastApply, err)
	}
}

// relayctl checks a sample's words before they leave (rollout's
// Op.Validate), and the agent checks them again: a request that is not a
// pid, a port and a loopback control address is refused on the host, and
// nothing in it runs.
func TestAgentSampleRefusesBadArguments(t *testing.T) {
	state := filepath.Join(rootDir(t), "state")
	made := filepath.Join(filepath.Dir(state), "made")
	var in strings.Builder
	in.WriteString("lock\ttest\n")
	bad := [][3]string{
		{"1 2", "7788", "-"},
		{"$(touch " + made + ")", "7788", "-"},
		{"1", "7788;touch " + made, "-"},
		{"1", "7788", "0.0.0.0:7789"},
		{"1", "7788", "127.0.0.1:7789;touch"},
		{"1", "7788", "127.0.0.1:$(touch)"},
	}
	for _, b := range bad {
		fmt.Fprintf(&in, "sample\t0\t0\t0\t@@relayctl-x\t%s\t%s\t%s\nsync\t0\t0\t0\n", b[0], b[1], b[2])
	}
	in.WriteString("unlock\t0\t0\t0\n")
	cmd := agentCmd(t, state)
	cmd.Stdin = strings.NewReader(in.String())
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("agent: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 2+2*len(bad) {
		t.Fatalf("answers:\n%s", out)
	}
	for i, b := range bad {
		if got := lines[1+2*i]; !strings.HasPrefix(got, "ERR bad ") || lines[2+2*i] != "OK" {
			t.Errorf("sample %q: answered %q then %q; want ERR bad ... then the sync's OK", b, got, lines[2+2*i])
		}
	}
	if fileExists(made) {
		t.Error("a command in a sample's arguments ran")
	}
}

// A receipt on the host is relayctl's own file, read as untrusted as any
// host output: whatever it holds, verify gets a baseline or none, and no
// text of it that a terminal could act on.
func FuzzLastApply(f *testing.F) {
	f.Add("20260102T000000Z-p-bbbb.json", []byte(`{"plan":"p","plan_checksum":"sha256:bbbb","outcome":"applied","drops_after":{"ss_d":7,"socket_inode":9,"clock_ns":200}}`))
	f.Add("x y.json", []byte(`{"drops_after":null}`))
	f.Add("r.json", []byte("{\"plan\":\"\\u001b[31m\",\"drops_after\":{}}"))
	f.Fuzz(func(t *testing.T, name string, data []byte) {
		by := frameSet{"last-apply-name": {Name: "last-apply-name", Data: []byte(name)}, "last-apply": {Name: "last-apply", Data: data}}
		la := by.lastApply()
		if la == nil {
			return
		}
		for _, s := range []string{la.Plan, la.Checksum, la.Outcome, la.Receipt} {
			if strings.ContainsAny(s, "\x1b\r\n\x00") {
				t.Errorf("a control character reached the baseline: %q", s)
			}
		}
	})
}

// The players a soak judges: /status's players_established and the
// forwarded count are read into the sample, checked; a relay that does not
// report established players (an older relayd) gives none, not 0.
func TestStatusEstablishedPlayers(t *testing.T) {
	for _, tt := range []struct {
		body      string
		est       int // -1: none
		forwarded uint64
		err       string
	}{
		{`{"version":"1.9.0","players":40,"players_established":32,"counters":{"forwarded":1234}}`, 32, 1234, ""},
		{`{"version":"1.8.0","players":40,"counters":{"forwarded":99}}`, -1, 99, ""},
		{`{"version":"1.9.0","players":40,"players_established":41}`, 0, 0, "status has 41 established players of 40"},
		{`{"version":"1.9.0","players":40,"players_established":-1}`, 0, 0, "status has negative numbers"},
	} {
		st := parseStatus(Frame{Name: "relay-status", Data: []byte(tt.body)})
		switch {
		case tt.err != "":
			if st.Read || st.Error != tt.err {
				t.Errorf("%s: read %v, error %q; want %q", tt.body, st.Read, st.Error, tt.err)
			}
		case !st.Read || st.Forwarded != tt.forwarded:
			t.Errorf("%s: %+v", tt.body, st)
		case tt.est < 0 && st.PlayersEstablished != nil, tt.est >= 0 && (st.PlayersEstablished == nil || *st.PlayersEstablished != tt.est):
			t.Errorf("%s: established %v, want %d", tt.body, st.PlayersEstablished, tt.est)
		}
	}
}
