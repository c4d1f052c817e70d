package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/relayctl/relayctl/relay/config"
	"github.com/relayctl/relayctl/relay/fdstore"
	"github.com/relayctl/relayctl/relay/lobby"
	"github.com/relayctl/relayctl/tune"
)

// These tests run the fd store's logic in one process, with fakeStore in
// place of systemd. The lab tests (internal/lab, fdstore_test.go) run it
// under a real systemd 252.

// fakeStore is systemd's side of the fd store: a unixgram socket that keeps
// the descriptors sent with FDSTORE=1 under their FDNAME (an open file it
// holds already is not added twice), handles a message's FDSTORE=1 before
// its FDSTOREREMOVE=1 as systemd 252 does, and closes a BARRIER=1 pipe once
// it has handled the messages before it.
type fakeStore struct {
	t     *testing.T
	path  string
	delay time.Duration // before it handles each message, as a busy PID 1 would
	mu    sync.Mutex
	fds   []fdstore.File
	texts []string
}

func newFakeStore(t *testing.T) *fakeStore {
	t.Helper()
	return newSlowFakeStore(t, 0)
}

// newSlowFakeStore waits delay before it handles each message.
func newSlowFakeStore(t *testing.T, delay time.Duration) *fakeStore {
	t.Helper()
	f := &fakeStore{t: t, path: filepath.Join(t.TempDir(), "notify"), delay: delay}
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: f.path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf, oob := make([]byte, 4096), make([]byte, unix.CmsgSpace(4*16))
		for {
			n, oobn, _, _, err := c.ReadMsgUnix(buf, oob)
			if err != nil {
				return
			}
			var fds []int
			cmsgs, _ := unix.ParseSocketControlMessage(oob[:oobn])
			for _, cm := range cmsgs {
				got, _ := unix.ParseUnixRights(&cm)
				fds = append(fds, got...)
			}
			time.Sleep(f.delay)
			f.handle(string(buf[:n]), fds)
		}
	}()
	t.Cleanup(func() {
		c.Close()
		<-done
		for _, fd := range f.fds {
			unix.Close(fd.FD)
		}
	})
	return f
}

func (f *fakeStore) handle(text string, fds []int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.texts = append(f.texts, text)
	lines := strings.Split(text, "\n")
	name := "stored"
	for _, l := range lines {
		if v, ok := strings.CutPrefix(l, "FDNAME="); ok {
			name = v
		}
	}
	switch {
	case slices.Contains(lines, "BARRIER=1"):
		for _, fd := range fds {
			unix.Close(fd)
		}
		return
	case slices.Contains(lines, "FDSTORE=1"):
		for _, fd := range fds {
			if f.holds(fd) {
				unix.Close(fd)
				continue
			}
			f.fds = append([]fdstore.File{{Name: name, FD: fd}}, f.fds...) // systemd passes the newest first
		}
	default:
		for _, fd := range fds {
			unix.Close(fd)
		}
	}
	if slices.Contains(lines, "FDSTOREREMOVE=1") {
		f.fds = slices.DeleteFunc(f.fds, func(s fdstore.File) bool {
			if s.Name == name {
				unix.Close(s.FD)
				return true
			}
			return false
		})
	}
}

func (f *fakeStore) holds(fd int) bool {
	var a unix.Stat_t
	unix.Fstat(fd, &a)
	for _, s := range f.fds {
		var b unix.Stat_t
		if unix.Fstat(s.FD, &b) == nil && a.Dev == b.Dev && a.Ino == b.Ino {
			return true
		}
	}
	return false
}

func (f *fakeStore) store() *fdstore.Store {
	f.t.Helper()
	st, err := fdstore.FromEnviron([]string{"NOTIFY_SOCKET=" + f.path, "FDSTORE=4"})
	if err != nil {
		f.t.Fatal(err)
	}
	return st
}

// pass is what systemd passes the next process: a copy of every stored
// descriptor, named.
func (f *fakeStore) pass() []fdstore.File {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []fdstore.File
	for _, s := range f.fds {
		fd, err := unix.FcntlInt(uintptr(s.FD), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			f.t.Fatal(err)
		}
		out = append(out, fdstore.File{Name: s.Name, FD: fd})
	}
	return out
}

// sync waits until the fake has handled every message sent so far.
func (f *fakeStore) sync() {
	f.t.Helper()
	if err := f.store().Sync(); err != nil {
		f.t.Fatal(err)
	}
}

// names lists what the store holds, in order.
func (f *fakeStore) names() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var n []string
	for _, s := range f.fds {
		n = append(n, s.Name)
	}
	return n
}

// put stores fd under name, as an earlier relayd would have.
func (f *fakeStore) put(name string, fd int) {
	f.t.Helper()
	if err := f.store().Put(name, fd); err != nil {
		f.t.Fatal(err)
	}
	if err := f.store().Sync(); err != nil {
		f.t.Fatal(err)
	}
}

// saved decodes the state stored under name.
func (f *fakeStore) saved(name string) (fdstore.Saved, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, s := range f.fds {
		if s.Name == name {
			b, err := fdstore.ReadMemfd(s.FD)
			if err != nil {
				f.t.Fatalf("%s: %v", name, err)
			}
			saved, err := fdstore.DecodeSaved(b)
			if err != nil {
				f.t.Fatalf("%s: %v", name, err)
			}
			return saved, true
		}
	}
	return fdstore.Saved{}, false
}

func newStoreServer(t *testing.T, cfg config.Config, files []fdstore.File, st *fdstore.Store) (*Server, error) {
	t.Helper()
	return New(cfg, "test-1.0", slog.New(slog.NewTextHandler(testLog{t}, nil)), WithSystemd(files, st, nil))
}

// runUntilStopped runs s and returns a func that stops it (a SIGTERM) and
// waits for Run to return.
func runUntilStopped(t *testing.T, s *Server) func() {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// TestFDStoreRestart is systemctl restart: the old relayd stores its socket
// at start and its final state as it stops; the next one takes both, asks
// for its own buffer on the same socket, and serves the same lobby, whose
// players carry on without joining again, with the counters carried on.
func TestFDStoreRestart(t *testing.T) {
	fs := newFakeStore(t)
	old, err := newStoreServer(t, testConfig(func(c *config.Config) { c.SORcvbuf = 1 << 18 }), nil, fs.store())
	if err != nil {
		t.Fatal(err)
	}
	stopOld := runUntilStopped(t, old)
	before := status(t, old)
	if before.FDStore != fdstore.Protocol || before.SocketFrom != SocketBound || before.FDStoreMax != 4 {
		t.Fatalf("old relay: fdstore %q socket_from %q max %d", before.FDStore, before.SocketFrom, before.FDStoreMax)
	}
	ps := lobbyOf3(t, old)
	round(t, ps, 1)
	stopOld()
	if got := fs.names(); !slices.Contains(got, fdstore.NameUDP) || len(got) != 2 {
		t.Fatalf("the store holds %q after the stop, want the socket and one state", got)
	}
	rx := old.c.rxPackets.Load()

	cfg := testConfig(func(c *config.Config) { c.Listen = old.ListenAddr().String(); c.SORcvbuf = 1 << 19 })
	nw, err := newStoreServer(t, cfg, fs.pass(), fs.store())
	if err != nil {
		t.Fatal(err)
	}
	runUntilStopped(t, nw)
	after := status(t, nw)
	checks := []struct {
		name      string
		got, want any
	}{
		{"socket inode (the same socket)", after.SocketInode, before.SocketInode},
		{"socket_from", after.SocketFrom, SocketFDStore},
		{"so_rcvbuf_effective (the new release's request)", after.SORcvbufEffective, tune.ExpectRcvbuf(1<<19, false, after.RmemMaxAtStart, 0).Effective},
		{"lobbies", after.Lobbies, 1},
		{"players", after.Players, 3},
		{"handoff_from_pid", after.HandoffFromPID, before.PID},
		{"handoff_players", after.HandoffPlayers, 3},
		{"fdstore_state", after.FDStoreState, StateFinal},
		{"rx_packets (carried on)", after.Counters.RxPackets, rx},
		{"fdstore_error", after.FDStoreError, ""},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s: got %v, want %v", c.name, c.got, c.want)
		}
	}
	round(t, ps, 2)
	fs.sync()
	if got := fs.names(); len(got) != 2 {
		t.Errorf("the store holds %q, want the socket and one state", got)
	}
}

// TestFDStoreKeepsStateUpToDate: while it runs, relayd saves its state
// when players join, so that a process that dies without stopping (a
// crash, SIGKILL) leaves the lobbies in the store for the next one.
func TestFDStoreKeepsStateUpToDate(t *testing.T) {
	fs := newFakeStore(t)
	s, err := newStoreServer(t, testConfig(nil), nil, fs.store())
	if err != nil {
		t.Fatal(err)
	}
	runUntilStopped(t, s)
	lobbyOf3(t, s)
	var saved fdstore.Saved
	waitFor(t, func() (bool, string) {
		for _, name := range []string{fdstore.NameStateA, fdstore.NameStateB} {
			if got, ok := fs.saved(name); ok && got.Seq > saved.Seq {
				saved = got
			}
		}
		return saved.Seq > 0 && playersIn(t, saved) == 3, "no periodic state with the 3 players in the store: " + strings.Join(fs.names(), " ")
	})
	if saved.Final {
		t.Errorf("a save while running says final")
	}
	fs.sync()
	if n := len(fs.names()); n != 2 {
		t.Errorf("the store holds %q, want the socket and one state: each save replaces the last", fs.names())
	}

	// The crash: what the store holds now goes to the next process.
	nw, err := newStoreServer(t, testConfig(func(c *config.Config) { c.Listen = s.ListenAddr().String() }), fs.pass(), fs.store())
	if err != nil {
		t.Fatal(err)
	}
	st := nw.Status()
	if st.FDStoreState != StatePeriodic || st.Players != 3 || st.SocketInode != s.inode {
		t.Errorf("after the crash: state %q, %d players, inode %d; want periodic, 3, %d", st.FDStoreState, st.Players, st.SocketInode, s.inode)
	}
	nw.Close()
}

func playersIn(t *testing.T, s fdstore.Saved) int {
	t.Helper()
	snap, _, err := lobby.DecodeTable(s.State.Table)
	if err != nil {
		t.Fatal(err)
	}
	return snap.Players()
}

// TestFDStoreRemovesWhatItDoesNotUse: a stored socket bound elsewhere than
// RELAYD_LISTEN says (the listen address changed) is removed and a new one
// bound and stored; so is a descriptor of a name relayd does not know; of
// two states the newer that decodes is taken, the other removed.
func TestFDStoreRemovesWhatItDoesNotUse(t *testing.T) {
	fs := newFakeStore(t)
	oldSock, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	oldAddr := oldSock.LocalAddr().String()
	f, err := oldSock.File()
	if err != nil {
		t.Fatal(err)
	}
	fs.put(fdstore.NameUDP, int(f.Fd()))
	f.Close()
	oldSock.Close() // only the store holds it now
	junk, err := fdstore.WriteMemfd([]byte("from a release long gone"))
	if err != nil {
		t.Fatal(err)
	}
	fs.put("relayd-something-old", junk)
	unix.Close(junk)
	good := savedState(t, 5, false)
	bad := savedState(t, 6, true)
	fs.put(fdstore.NameStateA, good)
	fs.put(fdstore.NameStateB, bad)

	// Another address than the stored socket's (port 0 would match any port).
	s, err := newStoreServer(t, testConfig(func(c *config.Config) { c.Listen = "127.0.0.2:0" }), fs.pass(), fs.store())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	st := s.Status()
	if st.SocketFrom != SocketBound || st.Listen == oldAddr {
		t.Errorf("socket_from %q listen %s, want a new socket, not %s", st.SocketFrom, st.Listen, oldAddr)
	}
	if st.FDStoreState != StatePeriodic || st.HandoffPlayers != 8 {
		t.Errorf("restored state %q with %d players, want the periodic one of sequence 5 with 8", st.FDStoreState, st.HandoffPlayers)
	}
	// Its counters counted on another socket: this one starts from 0.
	if st.Counters.RxPackets != 0 {
		t.Errorf("rx_packets %d on a new socket, want 0 (the state's 99 were another socket's)", st.Counters.RxPackets)
	}
	want := []string{fdstore.NameUDP, fdstore.NameStateA} // newest first
	fs.sync()
	if got := fs.names(); !slices.Equal(got, want) {
		t.Errorf("the store holds %q, want %q", got, want)
	}
	// The old socket is closed everywhere: its port can be bound again.
	again, err := net.ListenPacket("udp4", oldAddr)
	if err != nil {
		t.Errorf("bind %s after relayd removed it from the store: %v", oldAddr, err)
	} else {
		again.Close()
	}
	// The next save goes to the name the store does not hold.
	if name, _, err := s.sd.keeper.Save(fdstore.Saved{}); err != nil || name != fdstore.NameStateB {
		t.Errorf("next save: %q, %v; want %s", name, err, fdstore.NameStateB)
	}
}

// savedState is a sealed memfd with a state of one full lobby of 8.
func savedState(t *testing.T, seq uint64, corrupt bool) int {
	t.Helper()
	s, err := New(testConfig(nil), "x", slog.New(slog.NewTextHandler(testLog{t}, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := range 8 {
		p := newPlayer(t, s, 9, uint32(i+1))
		s.table.Route(9, uint32(i+1), p.conn.LocalAddr().(*net.UDPAddr).AddrPort(), s.started, nil)
	}
	s.c.rxPackets.Store(99)
	st, err := s.stateNow()
	if err != nil {
		t.Fatal(err)
	}
	b, err := fdstore.EncodeSaved(fdstore.Saved{Seq: seq, PID: 77, Release: "0.9", Inode: s.inode, State: st})
	if err != nil {
		t.Fatal(err)
	}
	if corrupt {
		b = b[:len(b)-1]
	}
	fd, err := fdstore.WriteMemfd(b)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

// TestFDStoreOff: without FDSTORE (systemd 252 without the unit's
// Environment=FDSTORE=) relayd stores nothing and /status says why.
func TestFDStoreOff(t *testing.T) {
	fs := newFakeStore(t)
	_, why := fdstore.FromEnviron([]string{"NOTIFY_SOCKET=" + fs.path})
	s, err := New(testConfig(nil), "x", slog.New(slog.NewTextHandler(testLog{t}, nil)), WithSystemd(nil, nil, why))
	if err != nil {
		t.Fatal(err)
	}
	stop := runUntilStopped(t, s)
	lobbyOf3(t, s)
	st := status(t, s)
	stop()
	if st.FDStore != "" || !strings.Contains(st.FDStoreOff, "FDSTORE is not set") || st.SocketFrom != SocketBound {
		t.Errorf("fdstore %q off %q socket_from %q", st.FDStore, st.FDStoreOff, st.SocketFrom)
	}
	if n := len(fs.names()); n != 0 {
		t.Errorf("relayd stored %q without a store", fs.names())
	}
	if !errors.Is(why, fdstore.ErrNoStoreMax) {
		t.Errorf("why: %v", why)
	}
}

// TestFDStoreStopWaitsForSystemd: relayd does not exit before systemd has
// handled its last save (BARRIER=1), however slowly systemd works: else the
// next process gets the state before the last one, or none.
func TestFDStoreStopWaitsForSystemd(t *testing.T) {
	fs := newSlowFakeStore(t, 50*time.Millisecond)
	s, err := newStoreServer(t, testConfig(nil), nil, fs.store())
	if err != nil {
		t.Fatal(err)
	}
	stop := runUntilStopped(t, s)
	lobbyOf3(t, s)
	stop()
	var final fdstore.Saved
	for _, name := range []string{fdstore.NameStateA, fdstore.NameStateB} {
		if got, ok := fs.saved(name); ok && got.Seq > final.Seq {
			final = got
		}
	}
	if !final.Final || playersIn(t, final) != 3 || len(fs.names()) != 2 {
		t.Errorf("right after the stop the store holds %q, newest state final %v with %d players; want the socket and the final state of 3 players",
			fs.names(), final.Final, playersIn(t, final))
	}
}

// TestFDStoreRefusesOtherSockets: a stored socket whose address matches
// RELAYD_LISTEN (once unmapped, for ::ffff:127.0.0.1) but which is not an
// IPv4 UDP socket is not relayd's: it is removed and a socket of its own
// bound. Go would take either for a UDP socket.
func TestFDStoreRefusesOtherSockets(t *testing.T) {
	tests := []struct {
		name          string
		domain, proto int
		addr          unix.Sockaddr
	}{
		{"IPv6", unix.AF_INET6, 0, &unix.SockaddrInet6{Addr: [16]byte{10: 0xff, 11: 0xff, 12: 127, 15: 1}}},
		{"UDP-Lite", unix.AF_INET, unix.IPPROTO_UDPLITE, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := newFakeStore(t)
			fd, err := unix.Socket(tt.domain, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, tt.proto)
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Close(fd)
			if err := unix.Bind(fd, tt.addr); err != nil {
				t.Fatal(err)
			}
			fs.put(fdstore.NameUDP, fd)
			s, err := newStoreServer(t, testConfig(nil), fs.pass(), fs.store())
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if st := s.Status(); st.SocketFrom != SocketBound {
				t.Errorf("socket_from %q with that socket in the store, want bound", st.SocketFrom)
			}
			fs.sync()
			if got := fs.names(); !slices.Equal(got, []string{fdstore.NameUDP}) || fs.holds(fd) {
				t.Errorf("the store holds %q (the refused socket: %v), want only relayd's own socket", got, fs.holds(fd))
			}
		})
	}
}

// TestFDStoreAgesTheTable: a state saved 40 s ago whose player had just
// sent is, restored under a 30 s idle timeout, a player to expire: each
// player keeps the idle time it really has.
func TestFDStoreAgesTheTable(t *testing.T) {
	fs := newFakeStore(t)
	fd := savedState(t, 1, false)
	b, err := fdstore.ReadMemfd(fd)
	if err != nil {
		t.Fatal(err)
	}
	saved, err := fdstore.DecodeSaved(b)
	if err != nil {
		t.Fatal(err)
	}
	saved.State.Paused = time.Now().Add(-40 * time.Second).UnixNano()
	b, err = fdstore.EncodeSaved(saved)
	if err != nil {
		t.Fatal(err)
	}
	old, err := fdstore.WriteMemfd(b)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(old)
	fs.put(fdstore.NameStateA, old)
	s, err := newStoreServer(t, testConfig(func(c *config.Config) { c.IdleTimeout = 30 * time.Second }), fs.pass(), fs.store())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if st := s.Status(); st.Players != 8 || *st.FDStoreStateAgeUS < 40e6 {
		t.Fatalf("restored %d players, state age %d µs; want 8, at least 40 s", st.Players, *st.FDStoreStateAgeUS)
	}
	s.mu.Lock()
	expired := s.table.Expire(time.Now())
	s.mu.Unlock()
	if expired != 8 {
		t.Errorf("expired %d of 8 players idle for 40 s under a 30 s timeout", expired)
	}
}

// BenchmarkStateNow is what a periodic save costs the relay loop: the
// snapshot holds the table's lock (the loop waits for it), then the table
// is encoded without it. Compare with fdstore's BenchmarkSave for the rest.
func BenchmarkStateNow(b *testing.B) {
	for _, players := range []int{64, 4096, 32768} {
		b.Run(fmt.Sprintf("players=%d", players), func(b *testing.B) {
			s, err := New(testConfig(nil), "x", slog.New(slog.DiscardHandler))
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			for i := range players {
				from := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}), 40000)
				if _, err := s.table.Route(uint32(i/8), uint32(i%8+1), from, s.started, nil); err != nil {
					b.Fatal(err)
				}
			}
			var locked time.Duration
			b.ResetTimer()
			for range b.N {
				t0 := time.Now()
				s.mu.Lock()
				s.table.Snapshot(t0)
				s.mu.Unlock()
				locked += time.Since(t0)
				if _, err := s.stateNow(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(locked.Nanoseconds())/float64(b.N), "ns-locked/op")
		})
	}
}
