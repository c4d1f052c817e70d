package lobby

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"
	"unsafe"
)

var t0 = time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)

func addr(n int) netip.AddrPort {
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, 0, byte(n)}), uint16(40000+n))
}

func newTable(t *testing.T, size int) *Table {
	t.Helper()
	tb, err := New(Config{Size: size, MaxLobbies: 16, IdleTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return tb
}

func TestNewRejectsBadConfig(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
	}{
		{"size 1", Config{Size: 1, MaxLobbies: 1, IdleTimeout: time.Second}},
		{"size too big", Config{Size: MaxSize + 1, MaxLobbies: 1, IdleTimeout: time.Second}},
		{"no lobbies", Config{Size: 8, MaxLobbies: 0, IdleTimeout: time.Second}},
		{"too many lobbies", Config{Size: 8, MaxLobbies: MaxMaxLobbies + 1, IdleTimeout: time.Second}},
		{"zero idle", Config{Size: 8, MaxLobbies: 1}},
		{"negative limit", Config{Size: 8, MaxLobbies: 1, IdleTimeout: time.Second, MaxPerAddr: -1}},
		{"IPv6 exempt", Config{Size: 8, MaxLobbies: 1, IdleTimeout: time.Second, Exempt: []netip.Prefix{netip.MustParsePrefix("::1/128")}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := New(tt.cfg); err == nil {
				t.Errorf("got nil error for %+v, want one", tt.cfg)
			}
		})
	}
}

func TestJoinForward(t *testing.T) {
	type step struct {
		join          bool // Join, else Forward
		lobby, player uint32
		from          int
		want          []int // Forward: addr numbers of the fan-out targets
		wantErr       error
	}
	tests := []struct {
		name  string
		size  int
		steps []step
	}{
		{
			name: "join grows fan-out in join order",
			size: 8,
			steps: []step{
				{join: true, lobby: 1, player: 10, from: 1},
				{lobby: 1, player: 10, from: 1, want: nil},
				{join: true, lobby: 1, player: 11, from: 2},
				{join: true, lobby: 1, player: 12, from: 3},
				{lobby: 1, player: 12, from: 3, want: []int{1, 2}},
				{lobby: 1, player: 10, from: 1, want: []int{2, 3}},
			},
		},
		{
			name: "only a member is forwarded, and only from its own address",
			size: 8,
			steps: []step{
				{lobby: 1, player: 1, from: 1, wantErr: ErrNotMember}, // no lobby
				{join: true, lobby: 1, player: 1, from: 1},
				{lobby: 1, player: 2, from: 2, wantErr: ErrNotMember}, // not a member
				{lobby: 1, player: 1, from: 9, wantErr: ErrNotMember}, // a member's id from another address
				{lobby: 2, player: 1, from: 1, wantErr: ErrNotMember}, // a member of another lobby
				{join: true, lobby: 1, player: 2, from: 2},
				{lobby: 1, player: 2, from: 2, want: []int{1}},
			},
		},
		{
			name: "lobbies are separate",
			size: 8,
			steps: []step{
				{join: true, lobby: 1, player: 1, from: 1},
				{join: true, lobby: 2, player: 1, from: 2},
				{join: true, lobby: 2, player: 2, from: 3},
				{join: true, lobby: 1, player: 2, from: 4},
				{lobby: 2, player: 2, from: 3, want: []int{2}},
				{lobby: 1, player: 2, from: 4, want: []int{1}},
			},
		},
		{
			name: "player id claimed from another address",
			size: 8,
			steps: []step{
				{join: true, lobby: 3, player: 7, from: 1},
				{join: true, lobby: 3, player: 8, from: 2},
				{join: true, lobby: 3, player: 7, from: 9, wantErr: ErrPlayerTaken},
				{join: true, lobby: 3, player: 7, from: 1}, // its owner joins again: a refresh
				{lobby: 3, player: 8, from: 2, want: []int{1}},
			},
		},
		{
			name: "full lobby refuses a newcomer but not its members",
			size: 2,
			steps: []step{
				{join: true, lobby: 0, player: 1, from: 1},
				{join: true, lobby: 0, player: 2, from: 2},
				{join: true, lobby: 0, player: 3, from: 3, wantErr: ErrLobbyFull},
				{join: true, lobby: 0, player: 1, from: 1},
				{lobby: 0, player: 1, from: 1, want: []int{2}},
			},
		},
		{
			name: "lobby id out of range, player id 0",
			size: 8,
			steps: []step{
				{join: true, lobby: 16, player: 1, from: 1, wantErr: ErrLobbyRange},
				{join: true, lobby: 1<<32 - 1, player: 1, from: 1, wantErr: ErrLobbyRange},
				{lobby: 16, player: 1, from: 1, wantErr: ErrLobbyRange},
				{join: true, lobby: 15, player: 0, from: 1, wantErr: ErrPlayerID},
				{join: true, lobby: 15, player: 1, from: 1},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tb := newTable(t, tt.size)
			for i, s := range tt.steps {
				if s.join {
					if err := tb.Join(s.lobby, s.player, addr(s.from), t0); !errors.Is(err, s.wantErr) {
						t.Fatalf("step %d: join: got error %v, want %v", i, err, s.wantErr)
					}
					continue
				}
				got, err := tb.Forward(s.lobby, s.player, addr(s.from), t0, nil)
				if !errors.Is(err, s.wantErr) {
					t.Fatalf("step %d: got error %v, want %v", i, err, s.wantErr)
				}
				var want []netip.AddrPort
				for _, n := range s.want {
					want = append(want, addr(n))
				}
				if !slices.Equal(got, want) {
					t.Fatalf("step %d: got targets %v, want %v", i, got, want)
				}
			}
		})
	}
}

func TestJoinCounts(t *testing.T) {
	tb := newTable(t, 4)
	for p := 1; p <= 5; p++ { // the fifth finds the lobby full
		tb.Join(0, uint32(p), addr(p), t0)
	}
	tb.Join(15, 1, addr(9), t0)
	if got, want := tb.Lobbies(), 2; got != want {
		t.Errorf("got %d lobbies, want %d", got, want)
	}
	if got, want := tb.Players(), 5; got != want {
		t.Errorf("got %d players, want %d", got, want)
	}
	if got, want := tb.Members(0), []uint32{1, 2, 3, 4}; !slices.Equal(got, want) {
		t.Errorf("got members %v, want %v", got, want)
	}
}

// ip is player n of a source: address a.b.c.d, port 40000+n.
func ip(s string, n int) netip.AddrPort {
	return netip.AddrPortFrom(netip.MustParseAddr(s), uint16(40000+n))
}

// TestSourceLimits: one address holds at most MaxPerAddr players, one /24
// at most MaxPerNet, across all lobbies; one address never fills a lobby
// alone, exempt or not; an exempt source is held to no count across
// lobbies; the counts go with the players.
func TestSourceLimits(t *testing.T) {
	tb, err := New(Config{Size: 4, MaxLobbies: 64, IdleTimeout: 10 * time.Second, MaxPerAddr: 5, MaxPerNet: 8,
		Exempt: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}})
	if err != nil {
		t.Fatal(err)
	}
	// One address: 3 of lobby 0 (Size-1), the 4th refused though there is room.
	for n := 1; n <= 3; n++ {
		if err := tb.Join(0, uint32(n), ip("192.0.2.1", n), t0); err != nil {
			t.Fatalf("player %d: %v", n, err)
		}
	}
	if err := tb.Join(0, 4, ip("192.0.2.1", 4), t0); !errors.Is(err, ErrSourceLimit) {
		t.Fatalf("an address's 4th player of a lobby of 4: got %v, want ErrSourceLimit", err)
	}
	// Another address may take the last seat, and then the lobby is full.
	if err := tb.Join(0, 4, ip("192.0.2.2", 1), t0); err != nil {
		t.Fatal(err)
	}
	if err := tb.Join(0, 5, ip("198.51.100.1", 1), t0); !errors.Is(err, ErrLobbyFull) {
		t.Fatalf("a full lobby: got %v, want ErrLobbyFull", err)
	}
	// The first address's 4th and 5th players elsewhere, the 6th refused.
	tb.Join(1, 1, ip("192.0.2.1", 4), t0)
	tb.Join(2, 1, ip("192.0.2.1", 5), t0)
	if err := tb.Join(3, 1, ip("192.0.2.1", 6), t0); !errors.Is(err, ErrSourceLimit) {
		t.Fatalf("an address's 6th player: got %v, want ErrSourceLimit", err)
	}
	// The /24 holds 6; two more from a third address, then the /24 is full.
	tb.Join(4, 1, ip("192.0.2.3", 1), t0)
	tb.Join(4, 2, ip("192.0.2.3", 2), t0)
	if err := tb.Join(5, 1, ip("192.0.2.4", 1), t0); !errors.Is(err, ErrSourceLimit) {
		t.Fatalf("the /24's 9th player: got %v, want ErrSourceLimit", err)
	}
	if err := tb.Join(5, 1, ip("192.0.3.4", 1), t0); err != nil {
		t.Fatalf("the next /24: %v", err)
	}
	// Loopback is exempt here: it holds any number across lobbies, but
	// never every seat of one (3 of lobby 6's 4; the 4th refused).
	for n := 1; n <= 3; n++ {
		if err := tb.Join(6, uint32(n), ip("127.0.0.1", n), t0); err != nil {
			t.Fatalf("exempt player %d: %v", n, err)
		}
	}
	if err := tb.Join(6, 4, ip("127.0.0.1", 4), t0); !errors.Is(err, ErrSourceLimit) {
		t.Fatalf("an exempt address's 4th player of a lobby of 4: got %v, want ErrSourceLimit", err)
	}
	for l := uint32(7); l < 10; l++ {
		if err := tb.Join(l, 1, ip("127.0.0.1", int(l)), t0); err != nil {
			t.Fatalf("exempt player in lobby %d: %v", l, err)
		}
	}
	if a, n := tb.Sources(); a != 4 || n != 2 {
		t.Errorf("sources counted: %d addresses, %d /24s; want 4 and 2 (loopback not counted)", a, n)
	}
	// A refresh of a member is never a new player, even at the limit.
	if err := tb.Join(2, 1, ip("192.0.2.1", 5), t0.Add(time.Second)); err != nil {
		t.Errorf("refresh at the limit: %v", err)
	}
	// Expiry gives the places back.
	tb.Expire(t0.Add(10 * time.Second))
	if tb.Players() != 1 {
		t.Errorf("after expiry: %d players left, want 1 (the one refreshed)", tb.Players())
	}
	if a, n := tb.Sources(); a != 1 || n != 1 {
		t.Errorf("after expiry: %d addresses, %d /24s counted; want 1 and 1", a, n)
	}
	tb.Expire(t0.Add(time.Minute))
	if a, n := tb.Sources(); a != 0 || n != 0 || tb.Players() != 0 || tb.Lobbies() != 0 {
		t.Errorf("all expired: %d addresses, %d /24s, %d players, %d lobbies; want none", a, n, tb.Players(), tb.Lobbies())
	}
	if err := tb.Join(3, 1, ip("192.0.2.1", 6), t0.Add(time.Minute)); err != nil {
		t.Errorf("join after the address's players expired: %v", err)
	}
}

// TestMemoryGrowsWithPlayers: a lobby's members take room as they join,
// not the lobby size up front.
func TestMemoryGrowsWithPlayers(t *testing.T) {
	tb, err := New(Config{Size: MaxSize, MaxLobbies: 1024, IdleTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	for id := range uint32(1024) {
		if err := tb.Join(id, 1, addr(int(id%200)+1), t0); err != nil {
			t.Fatal(err)
		}
	}
	for id, l := range tb.lobbies {
		if cap(l.members) > 1 {
			t.Fatalf("lobby %d of one player: room for %d members, want 1", id, cap(l.members))
		}
	}
	if unsafe.Sizeof(member{}) > 24 {
		t.Errorf("a member takes %d bytes, want at most 24", unsafe.Sizeof(member{}))
	}
}

func TestExpire(t *testing.T) {
	tb := newTable(t, 8)
	tb.Join(1, 1, addr(1), t0)
	tb.Join(1, 2, addr(2), t0.Add(5*time.Second))
	tb.Join(2, 1, addr(3), t0)

	tests := []struct {
		at                       time.Duration
		wantRemoved              int
		wantLobbies, wantPlayers int
		wantMembersOf1           []uint32
	}{
		{at: 9 * time.Second, wantRemoved: 0, wantLobbies: 2, wantPlayers: 3, wantMembersOf1: []uint32{1, 2}},
		// Exactly IdleTimeout of silence expires a player.
		{at: 10 * time.Second, wantRemoved: 2, wantLobbies: 1, wantPlayers: 1, wantMembersOf1: []uint32{2}},
		{at: 15 * time.Second, wantRemoved: 1, wantLobbies: 0, wantPlayers: 0, wantMembersOf1: nil},
		{at: 60 * time.Second, wantRemoved: 0, wantLobbies: 0, wantPlayers: 0, wantMembersOf1: nil},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.at), func(t *testing.T) {
			if got := tb.Expire(t0.Add(tt.at)); got != tt.wantRemoved {
				t.Errorf("got %d removed, want %d", got, tt.wantRemoved)
			}
			if got := tb.Lobbies(); got != tt.wantLobbies {
				t.Errorf("got %d lobbies, want %d", got, tt.wantLobbies)
			}
			if got := tb.Players(); got != tt.wantPlayers {
				t.Errorf("got %d players, want %d", got, tt.wantPlayers)
			}
			if got := tb.Members(1); !slices.Equal(got, tt.wantMembersOf1) {
				t.Errorf("got lobby 1 members %v, want %v", got, tt.wantMembersOf1)
			}
		})
	}
}

// A datagram keeps its sender alive; an expired player may join again, even
// from a new address.
func TestExpireThenRejoin(t *testing.T) {
	tb := newTable(t, 2)
	tb.Join(0, 1, addr(1), t0)
	tb.Join(0, 2, addr(2), t0)
	if _, err := tb.Forward(0, 1, addr(1), t0.Add(8*time.Second), nil); err != nil {
		t.Fatal(err)
	}
	if got := tb.Expire(t0.Add(12 * time.Second)); got != 1 {
		t.Fatalf("got %d removed, want 1 (player 2 only)", got)
	}
	if err := tb.Join(0, 2, addr(7), t0.Add(12*time.Second)); err != nil {
		t.Fatalf("rejoin: %v", err)
	}
	got, err := tb.Forward(0, 2, addr(7), t0.Add(12*time.Second), nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := []netip.AddrPort{addr(1)}; !slices.Equal(got, want) {
		t.Errorf("got targets %v, want %v", got, want)
	}
}

func TestForwardNoAlloc(t *testing.T) {
	tb := newTable(t, 8)
	for p := 1; p <= 8; p++ {
		tb.Join(5, uint32(p), addr(p), t0)
	}
	dst := make([]netip.AddrPort, 0, 7)
	var n int
	allocs := testing.AllocsPerRun(1000, func() {
		got, err := tb.Forward(5, 3, addr(3), t0, dst[:0])
		if err != nil {
			t.Fatal(err)
		}
		n = len(got)
	})
	if allocs != 0 {
		t.Errorf("got %v allocations per Forward, want 0", allocs)
	}
	if n != 7 {
		t.Errorf("got %d targets, want 7", n)
	}
}

// TestEstablished: a player counts as established once the relay has
// forwarded its datagrams over EstablishedAfter; an address that joins and
// goes silent, or sends once, never does, and an established player that
// expires leaves the count. A restored member establishes itself again.
func TestEstablished(t *testing.T) {
	tb, err := New(Config{Size: 8, MaxLobbies: 16, IdleTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	player, silent, once, joins := ip("192.0.2.1", 1), ip("192.0.2.2", 1), ip("192.0.2.3", 1), ip("192.0.2.4", 1)
	for i, a := range []netip.AddrPort{player, silent, once, joins} {
		if err := tb.Join(1, uint32(i+1), a, t0); err != nil {
			t.Fatal(err)
		}
	}
	var dst []netip.AddrPort
	if _, err := tb.Forward(1, 3, once, t0, dst); err != nil {
		t.Fatal(err)
	}
	for ms := 0; ms <= 6000; ms += 500 {
		now := t0.Add(time.Duration(ms) * time.Millisecond)
		if _, err := tb.Forward(1, 1, player, now, dst); err != nil {
			t.Fatal(err)
		}
		tb.Join(1, 4, joins, now) // refreshes without ever playing
		if want := 0; ms < 5000 && tb.Established() != want {
			t.Fatalf("after %d ms of play: %d established, want none yet", ms, tb.Established())
		}
	}
	if tb.Established() != 1 || tb.Players() != 4 {
		t.Fatalf("after 6 s: %d established of %d players, want only the one that played", tb.Established(), tb.Players())
	}
	// The silent ones expire first; the established player after them.
	tb.Expire(t0.Add(10 * time.Second))
	if tb.Players() != 2 || tb.Established() != 1 {
		t.Errorf("after the silent expired: %d players, %d established; want 2 and 1", tb.Players(), tb.Established())
	}
	snap := tb.Snapshot(t0.Add(7 * time.Second))
	tb.Expire(t0.Add(time.Minute))
	if tb.Players() != 0 || tb.Established() != 0 {
		t.Errorf("all expired: %d players, %d established", tb.Players(), tb.Established())
	}
	re, _ := New(Config{Size: 8, MaxLobbies: 16, IdleTimeout: 10 * time.Second})
	if err := re.Restore(snap, t0); err != nil || re.Players() != 2 || re.Established() != 0 {
		t.Errorf("restored: %v, %d players, %d established; want 2 players, none established until they play again", err, re.Players(), re.Established())
	}
}
