package shellhost

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/relayctl/relayctl/internal/agenttest"

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
