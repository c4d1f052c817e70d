package server

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/relayctl/relayctl/relay/config"
	"github.com/relayctl/relayctl/relay/wire"
)

// testLog sends the relay's log to the test's output.
type testLog struct{ t testing.TB }

func (w testLog) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(b)))
	return len(b), nil
}

func testConfig(change func(c *config.Config)) config.Config {
	c := config.Default()
	c.Listen, c.Control = "127.0.0.1:0", "127.0.0.1:0"
	// Ask for a buffer so that other tests changing rmem_default cannot
	// starve this relay; rmem_max is at least 212992 wherever tests run.
	c.SORcvbuf = 1 << 20
	if change != nil {
		change(&c)
	}
	return c
}

// start runs a relay in-process until the test ends.
func start(t testing.TB, cfg config.Config) *Server {
	t.Helper()
	s, err := New(cfg, "test-1.0", slog.New(slog.NewTextHandler(testLog{t}, nil)))
	if err != nil {
		t.Fatalf("start relay: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("relay stopped with %v, want nil", err)
		}
	})
	return s
}

// status reads /status over the control plane, as relayctl does.
func status(t testing.TB, s *Server) Status {
	t.Helper()
	resp, err := http.Get("http://" + s.ControlAddr().String() + "/status")
	if err != nil {
		t.Fatalf("get status: %v", err)
	}
	defer resp.Body.Close()
	var st Status
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatalf("decode status: %v", err)
	}
	return st
}

// waitFor polls cond until it holds. It has no deadline of its own: the
// test binary's -timeout ends a relay that never gets there, and cond's
// message says where it stopped.
func waitFor(t testing.TB, cond func() (bool, string)) {
	t.Helper()
	for {
		ok, msg := cond()
		if ok {
			return
		}
		if d, has := t.(*testing.T); has {
			if dl, set := d.Deadline(); set && time.Until(dl) < 5*time.Second {
				t.Fatalf("gave up waiting: %s", msg)
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
}

const hangGuard = 20 * time.Second

type player struct {
	t      testing.TB
	id     uint32
	lobby  uint32
	conn   *net.UDPConn
	relay  *net.UDPAddr
	buf    []byte
	nbytes int // bytes sent
}

func newPlayer(t testing.TB, s *Server, lobby, id uint32) *player {
	t.Helper()
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &player{t: t, id: id, lobby: lobby, conn: c, relay: net.UDPAddrFromAddrPort(s.ListenAddr()), buf: make([]byte, 4096)}
}

// payload is 120 bytes that depend on the sender and the sequence, so a
// mangled or misrouted copy shows.
func payload(player, seq uint32) []byte {
	b := make([]byte, 120)
	for i := range b {
		b[i] = byte(int(player)*31 + int(seq)*7 + i)
	}
	return b
}

func (p *player) send(seq uint32) {
	p.t.Helper()
	b := wire.AppendHeader(nil, wire.Header{Lobby: p.lobby, Player: p.id, Seq: seq, SentUnix: int64(seq)})
	p.sendRaw(append(b, payload(p.id, seq)...))
}

func (p *player) sendRaw(b []byte) {
	p.t.Helper()
	if _, err := p.conn.WriteToUDP(b, p.relay); err != nil {
		p.t.Fatalf("player %d: send: %v", p.id, err)
	}
	p.nbytes += len(b)
}

// expect reads the next datagram and checks it is the one from sent with seq.
func (p *player) expect(from, seq uint32) {
	p.t.Helper()
	// A hang guard, not a timing check: on loopback a datagram that has
	// not come in this long was lost or never sent.
	p.conn.SetReadDeadline(time.Now().Add(hangGuard))
	n, _, err := p.conn.ReadFromUDP(p.buf)
	if err != nil {
		p.t.Fatalf("player %d: read: %v", p.id, err)
	}
	h, err := wire.Decode(p.buf[:n])
	if err != nil {
		p.t.Fatalf("player %d: got a datagram that does not decode: %v", p.id, err)
	}
	if h.Player != from || h.Seq != seq || h.Lobby != p.lobby {
		p.t.Fatalf("player %d: got lobby %d player %d seq %d, want lobby %d player %d seq %d", p.id, h.Lobby, h.Player, h.Seq, p.lobby, from, seq)
	}
	if got, want := p.buf[wire.HeaderLen:n], payload(from, seq); !bytes.Equal(got, want) {
		p.t.Fatalf("player %d: payload of player %d seq %d: got % x, want % x", p.id, from, seq, got, want)
	}
}

// probes counts settle's probes per relay (the tests do not run in parallel).
var probes = map[*Server]int{}

// settle makes sure the relay has counted everything before it: a lone
// player's datagram is read in a later batch than anything the players
// already received, so once rx_packets shows it, the earlier counts are
// final.
func settle(t *testing.T, s *Server, wantRx uint64) Status {
	t.Helper()
	// Each probe is alone in a lobby of its own, from the top of the range.
	probes[s]++
	newPlayer(t, s, uint32(s.cfg.MaxLobbies-probes[s]), 1).send(0)
	var st Status
	waitFor(t, func() (bool, string) {
		st = status(t, s)
		return st.Counters.RxPackets >= wantRx+1, fmt.Sprintf("rx_packets %d, want %d", st.Counters.RxPackets, wantRx+1)
	})
	return st
}

func TestFanOut(t *testing.T) {
	tests := []struct {
		size, batch int
	}{
		{size: 8, batch: 64},
		{size: 8, batch: 1},
		{size: 4, batch: 64},
		{size: 2, batch: 3},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("size=%d/batch=%d", tt.size, tt.batch), func(t *testing.T) {
			s := start(t, testConfig(func(c *config.Config) { c.LobbySize, c.Batch = tt.size, tt.batch }))
			const lobbyID, rounds = 5, 20
			var players []*player
			for i := 1; i <= tt.size; i++ {
				players = append(players, newPlayer(t, s, lobbyID, uint32(100+i)))
			}
			// Joining in order: each join reaches the players already in.
			for _, p := range players {
				p.send(0)
			}
			for i, p := range players {
				for _, from := range players[i+1:] {
					p.expect(from.id, 0)
				}
			}
			// Each round every player sends once; every other player
			// gets exactly that copy, in send order, intact.
			for seq := uint32(1); seq <= rounds; seq++ {
				for _, p := range players {
					p.send(seq)
				}
				for _, p := range players {
					for _, from := range players {
						if from != p {
							p.expect(from.id, seq)
						}
					}
				}
			}

			n := uint64(tt.size)
			rx := n * (rounds + 1)
			st := settle(t, s, rx)
			var sentBytes uint64
			for _, p := range players {
				sentBytes += uint64(p.nbytes)
			}
			fanout := n - 1
			wantTx := n*(n-1)/2 + n*fanout*rounds
			c := st.Counters
			checks := []struct {
				name      string
				got, want uint64
			}{
				{"rx_packets", c.RxPackets, rx + 1},
				{"forwarded", c.Forwarded, rx + 1},
				{"tx_packets", c.TxPackets, wantTx},
				{"tx_packets of the rounds", c.TxPackets - n*(n-1)/2, fanout * (c.Forwarded - n - 1)},
				{"rx_bytes", c.RxBytes, sentBytes + 144},
				{"tx_bytes", c.TxBytes, wantTx * 144},
				{"malformed", c.Malformed, 0},
				{"lobby_full", c.LobbyFull, 0},
				{"rx_drops", c.RxDrops, 0},
				{"tx_errors", c.TxErrors, 0},
				{"players", uint64(st.Players), n + 1},
				{"lobbies", uint64(st.Lobbies), 2},
			}
			for _, ck := range checks {
				if ck.got != ck.want {
					t.Errorf("%s: got %d, want %d", ck.name, ck.got, ck.want)
				}
			}
		})
	}
}

func TestMalformedAndFull(t *testing.T) {
	s := start(t, testConfig(func(c *config.Config) { c.LobbySize, c.MaxLobbies = 3, 16 }))
	a, b := newPlayer(t, s, 1, 1), newPlayer(t, s, 1, 2)
	c, d := newPlayer(t, s, 2, 1), newPlayer(t, s, 2, 2)
	a.send(0)
	b.send(0)
	a.expect(2, 0)
	c.send(0)
	d.send(0)
	c.expect(2, 0)

	good := wire.AppendHeader(nil, wire.Header{Lobby: 1, Player: 1})
	badMagic := bytes.Clone(good)
	badMagic[0] = 'X'
	zeroPlayer := wire.AppendHeader(nil, wire.Header{Lobby: 1, Player: 0})
	outOfRange := wire.AppendHeader(nil, wire.Header{Lobby: 16, Player: 1})
	tooLong := append(bytes.Clone(good), make([]byte, 3000)...)
	a.sendRaw(good[:wire.HeaderLen-1])
	a.sendRaw(badMagic)
	a.sendRaw(zeroPlayer)
	a.sendRaw(outOfRange)
	a.sendRaw(tooLong)
	// Player 2 of lobby 1 is b; c claiming it from its own address is refused.
	c.sendRaw(wire.AppendHeader(nil, wire.Header{Lobby: 1, Player: 2}))
	// Lobby 2 fills up to 3; a fourth player is refused.
	e := newPlayer(t, s, 2, 3)
	e.send(0)
	newPlayer(t, s, 2, 4).send(0)

	// None of that reached anyone: the next datagram each player reads
	// is the next good one.
	a.send(9)
	b.expect(1, 9)
	c.expect(3, 0)
	d.expect(3, 0)
	d.send(9)
	c.expect(2, 9)
	e.expect(2, 9)

	st := settle(t, s, 14)
	if got, want := st.Counters.Malformed, uint64(6); got != want {
		t.Errorf("malformed: got %d, want %d", got, want)
	}
	if got, want := st.Counters.LobbyFull, uint64(1); got != want {
		t.Errorf("lobby_full: got %d, want %d", got, want)
	}
	if got, want := st.Counters.Forwarded, uint64(8); got != want {
		t.Errorf("forwarded: got %d, want %d", got, want)
	}
	if got, want := st.Counters.RxPackets, st.Counters.Forwarded+st.Counters.Malformed+st.Counters.LobbyFull; got != want {
		t.Errorf("rx_packets: got %d, want forwarded+malformed+lobby_full = %d", got, want)
	}

	resp, err := http.Get("http://" + s.ControlAddr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	text, _ := io.ReadAll(resp.Body)
	for _, want := range []string{
		`relayd_malformed_total{reason="short"} 1`,
		`relayd_malformed_total{reason="magic"} 1`,
		`relayd_malformed_total{reason="player_id"} 1`,
		`relayd_malformed_total{reason="lobby_range"} 1`,
		`relayd_malformed_total{reason="player_taken"} 1`,
		`relayd_malformed_total{reason="too_long"} 1`,
		`relayd_lobby_full_total 1`,
		`relayd_forwarded_total 8`,
		`relayd_build_info{version="test-1.0"} 1`,
		`relayd_players 6`,
	} {
		if !strings.Contains(string(text), want+"\n") {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

func TestExpiry(t *testing.T) {
	s := start(t, testConfig(func(c *config.Config) { c.IdleTimeout = 50 * time.Millisecond }))
	a, b := newPlayer(t, s, 3, 1), newPlayer(t, s, 3, 2)
	a.send(0)
	b.send(0)
	a.expect(2, 0)
	waitFor(t, func() (bool, string) {
		st := status(t, s)
		return st.Players == 0 && st.Lobbies == 0 && st.Counters.ExpiredPlayers == 2,
			fmt.Sprintf("players %d, lobbies %d, expired %d; want 0, 0, 2", st.Players, st.Lobbies, st.Counters.ExpiredPlayers)
	})
	// The lobby was freed: b may now take player id 1 from its address.
	b2 := &player{t: t, id: 1, lobby: 3, conn: b.conn, relay: b.relay, buf: b.buf}
	b2.send(1)
	a2 := &player{t: t, id: 2, lobby: 3, conn: a.conn, relay: a.relay, buf: a.buf}
	a2.send(1)
	b2.expect(2, 1)
}

func TestStatusFields(t *testing.T) {
	s := start(t, testConfig(func(c *config.Config) { c.SORcvbuf = 4096 }))
	st := status(t, s)
	if st.Version != "test-1.0" || st.Listen != s.ListenAddr().String() || st.Control != s.ControlAddr().String() {
		t.Errorf("got version %q listen %q control %q, want test-1.0 %s %s", st.Version, st.Listen, st.Control, s.ListenAddr(), s.ControlAddr())
	}
	// 4096 is far below any rmem_max, so the kernel doubles it exactly.
	if st.SORcvbufRequested != 4096 || st.SORcvbufEffective != 8192 {
		t.Errorf("got requested %d effective %d, want 4096 8192", st.SORcvbufRequested, st.SORcvbufEffective)
	}
	if st.RmemMaxAtStart <= 0 || st.PID <= 0 || st.StartedAt.IsZero() {
		t.Errorf("got rmem_max_at_start %d pid %d started_at %v, want all set", st.RmemMaxAtStart, st.PID, st.StartedAt)
	}
	// The JSON keys relayctl decodes.
	resp, err := http.Get("http://" + s.ControlAddr().String() + "/status")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var raw map[string]json.RawMessage
	if err := json.NewDecoder(resp.Body).Decode(&raw); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"version", "pid", "listen", "control", "so_rcvbuf_requested", "so_rcvbuf_force",
		"so_rcvbuf_effective", "rmem_max_at_start", "lobbies", "players", "counters", "started_at"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("/status lacks key %q", k)
		}
	}
}

func TestCappedWarning(t *testing.T) {
	tests := []struct {
		name                          string
		requested, effective, rmemMax int
		force                         bool
		want                          string
	}{
		{name: "not asked", requested: 0, effective: 212992, rmemMax: 212992},
		{name: "granted", requested: 4194304, effective: 8388608, rmemMax: 8388608},
		{name: "kernel minimum is more", requested: 1000, effective: 2304, rmemMax: 212992},
		{name: "capped", requested: 4194304, effective: 425984, rmemMax: 212992,
			want: "SO_RCVBUF capped by the kernel: requested 4194304, effective 425984 (want 8388608); raise net.core.rmem_max (now 212992) or use --so-rcvbuf-force"},
		{name: "capped with force", requested: 4194304, effective: 4194304, force: true, rmemMax: 212992,
			want: "SO_RCVBUFFORCE capped by the kernel: requested 4194304, effective 4194304 (want 8388608)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := cappedWarning(tt.requested, tt.force, tt.effective, tt.rmemMax); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

// TestRelayBatchNoAlloc checks the forwarding path (read a batch, route,
// send seven copies, count) allocates nothing per datagram.
func TestRelayBatchNoAlloc(t *testing.T) {
	for _, batch := range []int{64, 1} {
		t.Run(fmt.Sprintf("batch=%d", batch), func(t *testing.T) {
			s, err := New(testConfig(func(c *config.Config) { c.Batch = batch }), "test", slog.New(slog.NewTextHandler(io.Discard, nil)))
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			var players []*player
			for i := 1; i <= 8; i++ {
				p := newPlayer(t, s, 1, uint32(i))
				players = append(players, p)
				p.send(0)
				if _, err := s.io.recv(); err != nil {
					t.Fatal(err)
				}
				if err := s.relayBatch(1); err != nil {
					t.Fatal(err)
				}
			}
			// Sending with a raw sendto keeps the sender's own cost out of
			// the count.
			raw, err := players[0].conn.SyscallConn()
			if err != nil {
				t.Fatal(err)
			}
			msg := append(wire.AppendHeader(nil, wire.Header{Lobby: 1, Player: 1}), make([]byte, 96)...)
			to := &unix.SockaddrInet4{Port: int(s.ListenAddr().Port()), Addr: s.ListenAddr().Addr().As4()}
			before := s.c.txPackets.Load()
			allocs := testing.AllocsPerRun(200, func() {
				raw.Write(func(fd uintptr) bool {
					if err := unix.Sendto(int(fd), msg, 0, to); err != nil {
						t.Fatal(err)
					}
					return true
				})
				n, err := s.io.recv()
				if err != nil || n != 1 {
					t.Fatalf("recv: got %d, %v; want 1 datagram", n, err)
				}
				if err := s.relayBatch(n); err != nil {
					t.Fatal(err)
				}
			})
			if allocs != 0 {
				t.Errorf("got %v allocations per datagram forwarded, want 0", allocs)
			}
			if got, want := s.c.txPackets.Load()-before, uint64(7*201); got != want {
				t.Errorf("tx_packets: got %d, want %d (7 copies each)", got, want)
			}
		})
	}
}

func TestDropsParse(t *testing.T) {
	b := newBatchIO(nil, 2, 1)
	// A control message as the kernel writes it: SOL_SOCKET/SO_RXQ_OVFL, 4 bytes.
	oob := b.rxOOB[oobSize : 2*oobSize]
	putLen := func(n int) {
		if unix.SizeofPtr == 8 {
			binary.NativeEndian.PutUint64(oob, uint64(n))
		} else {
			binary.NativeEndian.PutUint32(oob, uint32(n))
		}
	}
	putLen(cmsgHdrLen + 4)
	binary.NativeEndian.PutUint32(oob[unix.SizeofPtr:], unix.SOL_SOCKET)
	binary.NativeEndian.PutUint32(oob[unix.SizeofPtr+4:], unix.SO_RXQ_OVFL)
	binary.NativeEndian.PutUint32(oob[cmsgHdrLen:], 26498)
	b.rxHdrs[1].hdr.SetControllen(unix.CmsgSpace(4))
	if d, ok := b.drops(1); !ok || d != 26498 {
		t.Errorf("got %d, %v; want 26498, true", d, ok)
	}
	b.rxHdrs[0].hdr.SetControllen(0)
	if d, ok := b.drops(0); ok {
		t.Errorf("no control message: got %d, true; want false", d)
	}
	putLen(1000) // a length past the buffer
	if _, ok := b.drops(1); ok {
		t.Errorf("corrupt length: got true, want false")
	}
}
