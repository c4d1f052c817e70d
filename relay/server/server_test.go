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
	"net/netip"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/relayctl/relayctl/relay/client"
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

// newPlayer opens player id's socket on 127.0.0.1 (odd ids) or 127.0.0.2
// (even ids): a lobby mixes two addresses, since relayd lets no address
// hold every seat of one.
func newPlayer(t testing.TB, s *Server, lobby, id uint32) *player {
	t.Helper()
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, byte(2-id%2))})
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

// join makes p a member with the handshake, two datagrams each way.
func (p *player) join() {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	if err := client.Join(ctx, p.conn, p.relay.AddrPort(), p.lobby, p.id); err != nil {
		p.t.Fatalf("player %d: %v", p.id, err)
	}
	p.nbytes += 2 * wire.HandshakeLen
}

// joinWith sends a join carrying cookie c (none: the first join).
func (p *player) joinWith(c wire.Cookie) {
	p.t.Helper()
	p.sendRaw(wire.EncodeHandshake(make([]byte, wire.HandshakeLen), wire.Handshake{Kind: wire.KindJoin, Lobby: p.lobby, Player: p.id, Cookie: c}))
}

// reply reads the next datagram, which must be a handshake answer.
func (p *player) reply() wire.Handshake {
	p.t.Helper()
	p.conn.SetReadDeadline(time.Now().Add(hangGuard))
	n, _, err := p.conn.ReadFromUDP(p.buf)
	if err != nil {
		p.t.Fatalf("player %d: read: %v", p.id, err)
	}
	h, err := wire.DecodeHandshake(p.buf[:n])
	if err != nil {
		p.t.Fatalf("player %d: got %d bytes that are not a handshake answer (%v): % x", p.id, n, err, p.buf[:n])
	}
	return h
}

// nothing checks that no datagram is waiting for p. Call it after a
// datagram that was read by the relay later than anything p could get.
func (p *player) nothing() {
	p.t.Helper()
	p.conn.SetReadDeadline(time.Now())
	if n, _, err := p.conn.ReadFromUDP(p.buf); err == nil {
		p.t.Fatalf("player %d: got %d unexpected bytes: % x", p.id, n, p.buf[:n])
	}
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

// settle makes sure the relay has counted everything before it: a probe's
// first join (one datagram in, one challenge out) is read in a later batch
// than anything the players already received, so once it is counted, the
// earlier counts are final. The relay counts a batch after it sent its
// answers, so the challenge can come back before the count.
func settle(t *testing.T, s *Server, wantRx uint64) Status {
	t.Helper()
	probes[s]++
	p := newPlayer(t, s, uint32(s.cfg.MaxLobbies-probes[s]), 1)
	p.joinWith(wire.Cookie{})
	if h := p.reply(); h.Kind != wire.KindChallenge {
		t.Fatalf("probe: got %+v, want a challenge", h)
	}
	var st Status
	waitFor(t, func() (bool, string) {
		st = status(t, s)
		return st.Counters.RxPackets >= wantRx+1, fmt.Sprintf("rx_packets %d, want %d", st.Counters.RxPackets, wantRx+1)
	})
	if st.Counters.RxPackets != wantRx+1 {
		t.Fatalf("rx_packets %d, want %d (%d and the probe)", st.Counters.RxPackets, wantRx+1, wantRx)
	}
	return st
}

// checkInvariant: every datagram read is counted once by what became of it.
func checkInvariant(t *testing.T, c Counters) {
	t.Helper()
	sum := c.Forwarded + c.NotJoined + c.OtherVersion + c.Malformed + c.JoinChallenged + c.Joined + c.LobbyFull + c.RefusedDraining + c.SourceLimit
	if c.RxPackets != sum {
		t.Errorf("rx_packets %d, but the outcomes add up to %d: %+v", c.RxPackets, sum, c)
	}
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
				p := newPlayer(t, s, lobbyID, uint32(100+i))
				p.join() // a join is never forwarded
				players = append(players, p)
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
			st := settle(t, s, 2*n+n*rounds)
			var sentBytes uint64
			for _, p := range players {
				sentBytes += uint64(p.nbytes)
			}
			wantTx := n * (n - 1) * rounds
			c := st.Counters
			checks := []struct {
				name      string
				got, want uint64
			}{
				{"rx_packets", c.RxPackets, 2*n + n*rounds + 1},
				{"joins_rx", c.JoinsRx, 2*n + 1},
				{"join_challenged", c.JoinChallenged, n + 1},
				{"joined", c.Joined, n},
				{"forwarded", c.Forwarded, n * rounds},
				{"tx_packets", c.TxPackets, wantTx},
				{"replies", c.Replies, 2*n + 1},
				{"reply_bytes", c.ReplyBytes, 40 * (2*n + 1)},
				{"rx_bytes", c.RxBytes, sentBytes + 40},
				{"tx_bytes", c.TxBytes, wantTx * 144},
				{"malformed", c.Malformed, 0},
				{"lobby_full", c.LobbyFull, 0},
				{"not_joined", c.NotJoined, 0},
				{"rx_drops", c.RxDrops, 0},
				{"tx_errors", c.TxErrors, 0},
				{"players", uint64(st.Players), n},
				{"lobbies", uint64(st.Lobbies), 1},
			}
			for _, ck := range checks {
				if ck.got != ck.want {
					t.Errorf("%s: got %d, want %d", ck.name, ck.got, ck.want)
				}
			}
			checkInvariant(t, c)
		})
	}
}

// TestMalformed: what does not decode is counted by reason, forwarded to
// no one and answered to no one.
func TestMalformed(t *testing.T) {
	s := start(t, testConfig(func(c *config.Config) { c.LobbySize, c.MaxLobbies = 3, 16 }))
	a, b := newPlayer(t, s, 1, 1), newPlayer(t, s, 1, 2)
	a.join()
	b.join()

	good := append(wire.AppendHeader(nil, wire.Header{Lobby: 1, Player: 1}), make([]byte, 40)...)
	badMagic := bytes.Clone(good)
	badMagic[0] = 'X'
	zeroPlayer := append(wire.AppendHeader(nil, wire.Header{Lobby: 1, Player: 0}), make([]byte, 40)...)
	outOfRange := append(wire.AppendHeader(nil, wire.Header{Lobby: 16, Player: 1}), make([]byte, 40)...)
	tooLong := append(bytes.Clone(good), make([]byte, 3000)...)
	join := wire.EncodeHandshake(make([]byte, wire.HandshakeLen), wire.Handshake{Kind: wire.KindJoin, Lobby: 1, Player: 1})
	withReason := bytes.Clone(join)
	withReason[7] = 3
	challenge := wire.EncodeHandshake(make([]byte, wire.HandshakeLen), wire.Handshake{Kind: wire.KindChallenge, Lobby: 1, Player: 1})
	for _, d := range [][]byte{good[:wire.HeaderLen-1], []byte("RL"), badMagic, zeroPlayer, outOfRange, tooLong,
		join[:wire.HandshakeLen-1], append(bytes.Clone(join), 0), withReason, challenge} {
		a.sendRaw(d)
	}
	// None of that reached anyone, nor came back: the next datagram each
	// player reads is the next good one.
	a.send(9)
	b.expect(1, 9)
	b.send(9)
	a.expect(2, 9)
	a.nothing()

	st := settle(t, s, 4+10+2)
	if got, want := st.Counters.Malformed, uint64(10); got != want {
		t.Errorf("malformed: got %d, want %d", got, want)
	}
	if st.Counters.Replies != 5 { // 4 of the joins, 1 of the probe
		t.Errorf("replies: got %d, want 5", st.Counters.Replies)
	}
	checkInvariant(t, st.Counters)
	resp, err := http.Get("http://" + s.ControlAddr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	text, _ := io.ReadAll(resp.Body)
	for _, want := range []string{
		`relayd_malformed_total{reason="short"} 2`,
		`relayd_malformed_total{reason="magic"} 2`,
		`relayd_malformed_total{reason="player_id"} 1`,
		`relayd_malformed_total{reason="lobby_range"} 1`,
		`relayd_malformed_total{reason="too_long"} 1`,
		`relayd_malformed_total{reason="join"} 3`,
		`relayd_forwarded_total 2`,
		`relayd_joined_total 2`,
		`relayd_replies_total 5`,
		`relayd_build_info{version="test-1.0"} 1`,
		`relayd_players 2`,
	} {
		if !strings.Contains(string(text), want+"\n") {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

// TestJoinAnswers: what the relay answers to each kind of join and to
// data from a stranger, each answer exactly as long as a join, and no
// copy of anything to an address that has not joined.
func TestJoinAnswers(t *testing.T) {
	s := start(t, testConfig(func(c *config.Config) { c.LobbySize, c.MaxLobbies = 3, 16 }))
	a, b, c := newPlayer(t, s, 1, 1), newPlayer(t, s, 1, 2), newPlayer(t, s, 1, 3)
	a.join()
	b.join()
	c.join()

	// A stranger claims a's player id: challenged, then refused.
	x := newPlayer(t, s, 1, 1)
	x.joinWith(wire.Cookie{})
	ch := x.reply()
	if ch.Kind != wire.KindChallenge || ch.Reason != wire.ReasonNone || ch.Lobby != 1 || ch.Player != 1 {
		t.Fatalf("first join: got %+v, want a challenge for lobby 1 player 1", ch)
	}
	x.joinWith(ch.Cookie)
	if h := x.reply(); h.Kind != wire.KindRefused || h.Reason != wire.ReasonPlayerTaken {
		t.Errorf("a taken player id: got %+v, want refused: player id taken", h)
	}
	// Lobby 1 has its 3; a fourth is refused as full.
	x.id = 4
	x.joinWith(ch.Cookie) // the cookie is x's address's, for any lobby
	if h := x.reply(); h.Kind != wire.KindRefused || h.Reason != wire.ReasonLobbyFull {
		t.Errorf("a full lobby: got %+v, want refused: lobby full", h)
	}
	// Another socket's cookie, a tampered one: challenged again.
	y := newPlayer(t, s, 2, 1)
	y.joinWith(ch.Cookie)
	if h := y.reply(); h.Kind != wire.KindChallenge || h.Reason != wire.ReasonCookieRejected {
		t.Errorf("x's cookie from y: got %+v, want a challenge: cookie rejected", h)
	}
	bad := ch.Cookie
	bad[20] ^= 1
	x.joinWith(bad)
	if h := x.reply(); h.Kind != wire.KindChallenge || h.Reason != wire.ReasonCookieRejected {
		t.Errorf("a tampered cookie: got %+v, want a challenge: cookie rejected", h)
	}
	// Data from a stranger, as a member's id: challenged, not forwarded.
	x.id = 2
	x.send(5)
	if h := x.reply(); h.Kind != wire.KindChallenge || h.Reason != wire.ReasonNotJoined || h.Lobby != 1 || h.Player != 2 {
		t.Errorf("data from a non-member: got %+v, want a challenge: not joined", h)
	}
	// Wire version 1, long enough to answer and too short.
	v1 := wire.AppendHeader(nil, wire.Header{Lobby: 1, Player: 7})
	binary.BigEndian.PutUint32(v1, wire.MagicV1)
	x.sendRaw(append(bytes.Clone(v1), make([]byte, 96)...))
	if h := x.reply(); h.Kind != wire.KindRefused || h.Reason != wire.ReasonVersion || h.Lobby != 1 || h.Player != 7 {
		t.Errorf("wire version 1: got %+v, want refused: version", h)
	}
	x.sendRaw(v1)
	// A join of version 3.
	v3 := wire.EncodeHandshake(make([]byte, wire.HandshakeLen), wire.Handshake{Kind: wire.KindJoin, Lobby: 1, Player: 9})
	v3[5] = 3
	x.sendRaw(v3)
	if h := x.reply(); h.Kind != wire.KindRefused || h.Reason != wire.ReasonVersion || h.Player != 9 {
		t.Errorf("wire version 3: got %+v, want refused: version, for player 9 (none for the short version 1)", h)
	}

	// The members saw none of it.
	a.send(1)
	b.expect(1, 1)
	c.expect(1, 1)
	for _, p := range []*player{a, b, c, x, y} {
		p.nothing()
	}
	st := settle(t, s, 6+10)
	ct := st.Counters
	checks := []struct {
		name      string
		got, want uint64
	}{
		{"lobby_full", ct.LobbyFull, 1},
		{"player_taken (malformed)", ct.Malformed, 1},
		{"cookie_rejected", ct.CookieRejected, 2},
		{"join_challenged", ct.JoinChallenged, 3 + 1 + 2 + 1}, // and the probe
		{"not_joined", ct.NotJoined, 1},
		{"other_version", ct.OtherVersion, 3},
		{"replies", ct.Replies, 6 + 8 + 1},
		{"forwarded", ct.Forwarded, 1},
	}
	for _, ck := range checks {
		if ck.got != ck.want {
			t.Errorf("%s: got %d, want %d", ck.name, ck.got, ck.want)
		}
	}
	if ct.ReplyBytes != 40*ct.Replies {
		t.Errorf("reply_bytes %d for %d replies: want 40 each", ct.ReplyBytes, ct.Replies)
	}
	checkInvariant(t, ct)
}

// TestReplyNeverLarger: the last guard against amplification, under every
// reply: an answer longer than the datagram it answers is not sent.
func TestReplyNeverLarger(t *testing.T) {
	b := newBatchIO(nil, 2, 1)
	b.rxHdrs[0].n = 39
	if b.queueReply(0, wire.HandshakeLen, netip.MustParseAddrPort("127.0.0.9:1")) {
		t.Errorf("queueReply of 40 bytes to a 39-byte datagram: queued")
	}
	b.rxHdrs[1].n = 40
	if !b.queueReply(1, wire.HandshakeLen, netip.MustParseAddrPort("127.0.0.9:1")) || b.nTx != 1 {
		t.Errorf("queueReply of 40 bytes to a 40-byte datagram: not queued")
	}
}

func TestExpiry(t *testing.T) {
	s := start(t, testConfig(func(c *config.Config) { c.IdleTimeout = 50 * time.Millisecond }))
	a, b := newPlayer(t, s, 3, 1), newPlayer(t, s, 3, 2)
	a.join()
	b.join()
	waitFor(t, func() (bool, string) {
		st := status(t, s)
		return st.Players == 0 && st.Lobbies == 0 && st.Counters.ExpiredPlayers == 2,
			fmt.Sprintf("players %d, lobbies %d, expired %d; want 0, 0, 2", st.Players, st.Lobbies, st.Counters.ExpiredPlayers)
	})
	// An expired player's data is a stranger's: challenged, so it knows to
	// join again.
	a.send(1)
	if h := a.reply(); h.Kind != wire.KindChallenge || h.Reason != wire.ReasonNotJoined {
		t.Fatalf("data after expiry: got %+v, want a challenge: not joined", h)
	}
	// The lobby was freed: b may now take player id 1 from its address.
	b2 := &player{t: t, id: 1, lobby: 3, conn: b.conn, relay: b.relay, buf: b.buf}
	b2.join()
	a2 := &player{t: t, id: 2, lobby: 3, conn: a.conn, relay: a.relay, buf: a.buf}
	a2.join()
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

// relayOne has the relay (not running: the test drives it) read and
// handle one datagram.
func relayOne(t *testing.T, s *Server) {
	t.Helper()
	n, err := s.io.recv()
	if err != nil || n != 1 {
		t.Fatalf("recv: got %d, %v; want 1 datagram", n, err)
	}
	if err := s.relayBatch(n); err != nil {
		t.Fatal(err)
	}
}

// joinDriven joins p to a relay the test drives with relayOne.
func joinDriven(t *testing.T, s *Server, p *player) {
	t.Helper()
	p.joinWith(wire.Cookie{})
	relayOne(t, s)
	p.joinWith(p.reply().Cookie)
	relayOne(t, s)
	if h := p.reply(); h.Kind != wire.KindWelcome {
		t.Fatalf("player %d: got %+v, want a welcome", p.id, h)
	}
}

// rawSender sends msg to the relay with a raw sendto, which keeps the
// sender's own cost out of an allocation count.
func rawSender(t *testing.T, s *Server, p *player, msg []byte) func() {
	raw, err := p.conn.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	to := &unix.SockaddrInet4{Port: int(s.ListenAddr().Port()), Addr: s.ListenAddr().Addr().As4()}
	return func() {
		raw.Write(func(fd uintptr) bool {
			if err := unix.Sendto(int(fd), msg, 0, to); err != nil {
				t.Fatal(err)
			}
			return true
		})
	}
}

// TestRelayBatchNoAlloc checks the forwarding path (read a batch, route,
// send seven copies, count) allocates nothing per datagram, nor does
// answering a join with a challenge: a flood of joins costs no memory.
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
				joinDriven(t, s, p)
			}
			send := rawSender(t, s, players[0], append(wire.AppendHeader(nil, wire.Header{Lobby: 1, Player: 1}), make([]byte, 96)...))
			before := s.c.txPackets.Load()
			allocs := testing.AllocsPerRun(200, func() {
				send()
				relayOne(t, s)
			})
			if allocs != 0 {
				t.Errorf("got %v allocations per datagram forwarded, want 0", allocs)
			}
			if got, want := s.c.txPackets.Load()-before, uint64(7*201); got != want {
				t.Errorf("tx_packets: got %d, want %d (7 copies each)", got, want)
			}

			stranger := newPlayer(t, s, 2, 1)
			send = rawSender(t, s, stranger, wire.EncodeHandshake(make([]byte, wire.HandshakeLen), wire.Handshake{Kind: wire.KindJoin, Lobby: 2, Player: 1}))
			before = s.c.replies.Load()
			allocs = testing.AllocsPerRun(200, func() {
				send()
				relayOne(t, s)
			})
			if allocs != 0 {
				t.Errorf("got %v allocations per join challenged, want 0", allocs)
			}
			if got := s.c.replies.Load() - before; got != 201 {
				t.Errorf("replies: got %d, want 201 challenges", got)
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

func TestIsLoopbackHost(t *testing.T) {
	for host, want := range map[string]bool{
		"":                   true, // HTTP/1.0 without Host: relayctl's host agent
		"localhost":          true,
		"LocalHost:7789":     true,
		"localhost:":         true,
		"127.0.0.1":          true,
		"127.0.0.1:7789":     true,
		"127.255.0.9:1":      true,
		"[::1]":              true,
		"[::1]:7789":         true,
		"evil.example":       false,
		"evil.example:7789":  false,
		"localhost.evil.com": false,
		"localhost.":         false,
		"127.0.0.1.nip.io":   false,
		"127.1":              false,
		"0x7f.0.0.1":         false,
		"2130706433":         false,
		"10.0.0.1:7789":      false,
		"0.0.0.0:7789":       false,
		"[::ffff:127.0.0.1]": false,
		"[::1%lo]":           false,
		"[::2]:7789":         false,
		"::1":                false,
		"localhost:77a9":     false,
		"localhost:123456":   false,
		"[::1]x":             false,
	} {
		if got := isLoopbackHost(host); got != want {
			t.Errorf("isLoopbackHost(%q): got %v, want %v", host, got, want)
		}
	}
}
