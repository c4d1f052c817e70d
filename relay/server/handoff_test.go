package server

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/relayctl/relayctl/relay/config"
	"github.com/relayctl/relayctl/relay/handoff"
	"github.com/relayctl/relayctl/relay/wire"
	"github.com/relayctl/relayctl/tune"
)

// These tests hand a relay over between two Servers of one process: the
// real Unix socket, SCM_RIGHTS and UDP socket, without the binary (the lab
// tests in internal/lab do it between processes, under load).

// startRun runs s until the test ends and returns a channel with Run's
// result. The test's cleanup waits for Run to return, so the relay never
// logs into a finished test.
func startRun(t *testing.T, s *Server) <-chan error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	finished := make(chan struct{})
	go func() {
		done <- s.Run(ctx)
		close(finished)
	}()
	t.Cleanup(func() {
		cancel()
		<-finished
	})
	return done
}

func newServer(t *testing.T, cfg config.Config) (*Server, error) {
	t.Helper()
	return New(cfg, "test-1.0", slog.New(slog.NewTextHandler(testLog{t}, nil)))
}

// lobbyOf3 joins three players to lobby 5 and checks they reach each
// other: 6 handshake datagrams, 3 forwarded.
func lobbyOf3(t *testing.T, s *Server) []*player {
	t.Helper()
	ps := []*player{newPlayer(t, s, 5, 1), newPlayer(t, s, 5, 2), newPlayer(t, s, 5, 3)}
	for _, p := range ps {
		p.join()
	}
	round(t, ps, 0)
	return ps
}

// joinRefused has p prove its address and join, and checks the relay
// refuses it for reason r.
func joinRefused(t *testing.T, p *player, r wire.Reason) {
	t.Helper()
	p.joinWith(wire.Cookie{})
	p.joinWith(p.reply().Cookie)
	if h := p.reply(); h.Kind != wire.KindRefused || h.Reason != r {
		t.Errorf("player %d of lobby %d: got %+v, want refused: %s", p.id, p.lobby, h, r)
	}
}

// round has every player send seq and checks every other one gets it.
func round(t *testing.T, ps []*player, seq uint32) {
	t.Helper()
	for _, p := range ps {
		p.send(seq)
	}
	for _, p := range ps {
		for _, from := range ps {
			if from != p {
				p.expect(from.id, seq)
			}
		}
	}
}

func TestHandoffInProcess(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "run", "handoff.sock")
	old, err := newServer(t, testConfig(func(c *config.Config) { c.HandoffSocket = sock; c.SORcvbuf = 1 << 18 }))
	if err != nil {
		t.Fatal(err)
	}
	oldDone := startRun(t, old)
	ps := lobbyOf3(t, old)
	round(t, ps, 1)
	// A newcomer halfway through its handshake when the relay is handed
	// over: the old process's cookie is no good to the new one, whose
	// secret is its own.
	late := newPlayer(t, old, 5, 4)
	late.joinWith(wire.Cookie{})
	oldCookie := late.reply().Cookie
	before := status(t, old)
	if before.Handoff != handoff.Protocol || before.HandoffSocket != sock || before.SocketInode == 0 || before.HandoffFromPID != 0 {
		t.Fatalf("old relay status: handoff %q socket %q inode %d from %d", before.Handoff, before.HandoffSocket, before.SocketInode, before.HandoffFromPID)
	}
	if fi, err := os.Stat(filepath.Dir(sock)); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("handoff socket folder: %v, mode %v; want it made with 0700", err, fi.Mode())
	}
	if fi, err := os.Stat(sock); err != nil || fi.Mode().Perm() != 0o600 || fi.Mode().Type() != os.ModeSocket {
		t.Errorf("handoff socket: %v, mode %v; want a socket with 0600", err, fi.Mode())
	}

	// The new release asks for twice the buffer, with the same listen
	// address (port 0 in its config: the inherited socket's port).
	nw, err := newServer(t, testConfig(func(c *config.Config) { c.HandoffSocket = sock; c.SORcvbuf = 1 << 19 }))
	if err != nil {
		t.Fatalf("take over: %v", err)
	}
	if err := <-oldDone; err != nil {
		t.Errorf("old relay's Run: %v", err)
	}
	if old.HandedTo() != os.Getpid() {
		t.Errorf("old relay handed to pid %d, want %d", old.HandedTo(), os.Getpid())
	}
	startRun(t, nw)
	if nw.ListenAddr() != old.ListenAddr() {
		t.Fatalf("new relay listens on %s, old on %s", nw.ListenAddr(), old.ListenAddr())
	}
	// The players carry on without joining again: the lobby was handed over.
	round(t, ps, 2)
	// The newcomer proves its address again, one more round trip.
	late.joinWith(oldCookie)
	ch := late.reply()
	if ch.Kind != wire.KindChallenge || ch.Reason != wire.ReasonCookieRejected {
		t.Fatalf("the old process's cookie at the new one: got %+v, want a challenge: cookie rejected", ch)
	}
	late.joinWith(ch.Cookie)
	if h := late.reply(); h.Kind != wire.KindWelcome {
		t.Fatalf("the new process's cookie: got %+v, want a welcome", h)
	}
	round(t, append(ps, late), 3)
	// The relay counts a batch after sending it: wait for the count.
	var after Status
	waitFor(t, func() (bool, string) {
		after = status(t, nw)
		return after.Counters.Forwarded >= 13, fmt.Sprintf("forwarded %d, want 13", after.Counters.Forwarded)
	})
	want := tune.ExpectRcvbuf(1<<19, false, after.RmemMaxAtStart, 0).Effective
	checks := []struct {
		name      string
		got, want any
	}{
		{"socket inode (the same socket)", after.SocketInode, before.SocketInode},
		{"so_rcvbuf_effective (the new release's request)", after.SORcvbufEffective, want},
		{"handoff_from_pid", after.HandoffFromPID, os.Getpid()},
		{"handoff_lobbies", after.HandoffLobbies, 1},
		{"handoff_players", after.HandoffPlayers, 3},
		{"lobbies", after.Lobbies, 1},
		{"players", after.Players, 4},
		{"handoff", after.Handoff, handoff.Protocol},
		{"control (the inherited listener)", after.Control, before.Control},
		// Counters carry on: 6 handshake datagrams, 3 rounds of 3, the
		// newcomer's 3 joins and a round of 4: none lost.
		{"rx_packets", after.Counters.RxPackets, uint64(6 + 9 + 3 + 4)},
		{"forwarded", after.Counters.Forwarded, uint64(9 + 4)},
		{"joins_rx", after.Counters.JoinsRx, uint64(6 + 3)},
		{"cookie_rejected", after.Counters.CookieRejected, uint64(1)},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s: got %v, want %v", c.name, c.got, c.want)
		}
	}
	if after.HandoffGapUS == nil || *after.HandoffGapUS <= 0 || after.HandoffPauseUS == nil || *after.HandoffPauseUS < 0 {
		t.Errorf("handoff gap %v pause %v: want both measured", after.HandoffGapUS, after.HandoffPauseUS)
	}
	if fi, err := os.Stat(sock); err != nil || fi.Mode().Type() != os.ModeSocket {
		t.Errorf("after the handoff the new relay must listen on %s: %v", sock, err)
	}
}

// TestHandoffRefusedKeepsServing: a new relay that fails after it got the
// socket gives it back, before it was ready (its control port is taken)
// and after the old one had stopped reading (its lobby size cannot hold a
// lobby in the table). The old relay serves on, and takes the next handoff.
func TestHandoffRefusedKeepsServing(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "handoff.sock")
	old, err := newServer(t, testConfig(func(c *config.Config) { c.HandoffSocket = sock; c.LobbySize = 4 }))
	if err != nil {
		t.Fatal(err)
	}
	oldDone := startRun(t, old)
	ps := lobbyOf3(t, old)
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()

	tests := []struct {
		name   string
		change func(c *config.Config)
		want   string
	}{
		{"control port taken", func(c *config.Config) { c.Control = taken.Addr().String() }, "address already in use"},
		{"lobby too small", func(c *config.Config) { c.LobbySize = 2 }, "3 members, more than this relay's lobby size 2"},
		{"other listen address", func(c *config.Config) { c.Listen = "127.0.0.2:0" }, "does not match RELAYD_LISTEN"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig(func(c *config.Config) { c.HandoffSocket = sock; c.LobbySize = 4 })
			tt.change(&cfg)
			s, err := newServer(t, cfg)
			if err == nil {
				s.Close()
				t.Fatal("take over: got nil error")
			}
			if !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "keeps serving") {
				t.Errorf("got %v, want an error containing %q and keeps serving", err, tt.want)
			}
			round(t, ps, uint32(10+i))
			if st := status(t, old); st.PID != os.Getpid() || st.Lobbies != 1 || st.Players != 3 {
				t.Errorf("old relay after the refused handoff: %+v", st)
			}
		})
	}
	select {
	case err := <-oldDone:
		t.Fatalf("old relay stopped: %v", err)
	default:
	}
	// It still hands over to a release that fits.
	nw, err := newServer(t, testConfig(func(c *config.Config) { c.HandoffSocket = sock; c.LobbySize = 4 }))
	if err != nil {
		t.Fatalf("take over after the refusals: %v", err)
	}
	startRun(t, nw)
	<-oldDone
	round(t, ps, 20)
}

func TestHandoffNobodyListening(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "handoff.sock")
	// A socket file that nobody accepts on, as a relayd killed with
	// SIGKILL leaves behind.
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	ln.Close()
	s, err := newServer(t, testConfig(func(c *config.Config) { c.HandoffSocket = sock }))
	if err != nil {
		t.Fatalf("start with a stale handoff socket: %v", err)
	}
	startRun(t, s)
	st := status(t, s)
	if st.HandoffFromPID != 0 || st.Handoff != handoff.Protocol {
		t.Errorf("got handoff_from_pid %d handoff %q, want a fresh socket and the handoff socket listening", st.HandoffFromPID, st.Handoff)
	}
}

func TestHandoffUnsafeFolder(t *testing.T) {
	dir := t.TempDir()
	open := filepath.Join(dir, "open")
	if err := os.Mkdir(open, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(t.TempDir(), link); err != nil {
		t.Fatal(err)
	}
	tests := []struct{ name, path, want string }{
		{"world-writable", filepath.Join(open, "h.sock"), "group- or world-writable (mode 0777): chmod go-w it"},
		{"symlink", filepath.Join(link, "h.sock"), "is a symlink"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := newServer(t, testConfig(func(c *config.Config) { c.HandoffSocket = tt.path }))
			if err == nil {
				s.Close()
				t.Fatal("got nil error")
			}
			if !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "RELAYD_HANDOFF_SOCKET") {
				t.Errorf("got %v, want it to name RELAYD_HANDOFF_SOCKET and %q", err, tt.want)
			}
		})
	}
}

func TestDrain(t *testing.T) {
	s := start(t, testConfig(nil))
	ps := lobbyOf3(t, s)
	call := func(method string, origin string) (int, map[string]any) {
		t.Helper()
		req, _ := http.NewRequest(method, "http://"+s.ControlAddr().String()+"/drain", nil)
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var body map[string]any
		json.NewDecoder(resp.Body).Decode(&body)
		return resp.StatusCode, body
	}
	if code, _ := call("POST", "http://example.com"); code != http.StatusForbidden {
		t.Errorf("POST /drain from a web page: got %d, want 403", code)
	}
	if code, _ := call("GET", ""); code != http.StatusMethodNotAllowed {
		t.Errorf("GET /drain: got %d, want 405", code)
	}
	code, body := call("POST", "")
	if code != http.StatusOK || body["draining"] != true || body["lobbies"] != 1.0 || body["players"] != 3.0 {
		t.Fatalf("POST /drain: %d %v", code, body)
	}
	// A new lobby is refused, the lobby in progress plays on and may take
	// a new player.
	newcomer := newPlayer(t, s, 6, 1)
	other := newPlayer(t, s, 6, 2)
	joinRefused(t, newcomer, wire.ReasonDraining)
	joinRefused(t, other, wire.ReasonDraining)
	late := newPlayer(t, s, 5, 4)
	late.join()
	round(t, append(ps, late), 1)
	st := settle(t, s, 6+3+2+2+2+4)
	if !st.Draining || st.Counters.RefusedDraining != 2 || st.Lobbies != 1 || st.Players != 4 {
		t.Errorf("while draining: draining %v refused %d lobbies %d players %d; want true 2 1 4",
			st.Draining, st.Counters.RefusedDraining, st.Lobbies, st.Players)
	}
	if code, body := call("DELETE", ""); code != http.StatusOK || body["draining"] != false {
		t.Fatalf("DELETE /drain: %d %v", code, body)
	}
	newcomer.join()
	other.join()
	newcomer.send(1)
	other.expect(1, 1)
	if st := status(t, s); st.Draining {
		t.Error("still draining after DELETE /drain")
	}
}

// A release that asks for no buffer gives the inherited socket what a new
// socket gets, rmem_default: a handoff leaves the rb a restart would, and a
// handoff back to such a release (relayctl's rollback) puts it back.
func TestHandoffToNoRequestGivesRmemDefault(t *testing.T) {
	rmemDefault, err := readIntFile(RmemDefaultPath)
	if err != nil {
		t.Fatal(err)
	}
	rmemMax, err := readIntFile(RmemMaxPath)
	if err != nil {
		t.Fatal(err)
	}
	if rmemDefault/2 > rmemMax {
		t.Skipf("rmem_max %d caps a request of rmem_default/2 (%d)", rmemMax, rmemDefault/2)
	}
	sock := filepath.Join(t.TempDir(), "run", "handoff.sock")
	old, err := newServer(t, testConfig(func(c *config.Config) { c.HandoffSocket = sock; c.SORcvbuf = 1 << 16 }))
	if err != nil {
		t.Fatal(err)
	}
	oldDone := startRun(t, old)
	before := status(t, old)
	if before.SORcvbufEffective == rmemDefault {
		t.Fatalf("the old relay's rb is already rmem_default (%d): the test proves nothing", rmemDefault)
	}
	nw, err := newServer(t, testConfig(func(c *config.Config) { c.HandoffSocket = sock; c.SORcvbuf = 0 }))
	if err != nil {
		t.Fatalf("take over: %v", err)
	}
	if err := <-oldDone; err != nil {
		t.Errorf("old relay's Run: %v", err)
	}
	startRun(t, nw)
	after := status(t, nw)
	if after.SocketInode != before.SocketInode || after.SORcvbufEffective != rmemDefault {
		t.Errorf("after the handoff: inode %d (was %d), rb %d; want the same socket with rmem_default %d",
			after.SocketInode, before.SocketInode, after.SORcvbufEffective, rmemDefault)
	}
}
