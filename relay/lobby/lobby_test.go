package lobby

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"
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
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := New(tt.cfg); err == nil {
				t.Errorf("got nil error for %+v, want one", tt.cfg)
			}
		})
	}
}

func TestRoute(t *testing.T) {
	type step struct {
		lobby, player uint32
		from          int
		want          []int // addr numbers of the fan-out targets
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
				{lobby: 1, player: 10, from: 1, want: nil},
				{lobby: 1, player: 11, from: 2, want: []int{1}},
				{lobby: 1, player: 12, from: 3, want: []int{1, 2}},
				{lobby: 1, player: 10, from: 1, want: []int{2, 3}},
			},
		},
		{
			name: "lobbies are separate",
			size: 8,
			steps: []step{
				{lobby: 1, player: 1, from: 1},
				{lobby: 2, player: 1, from: 2},
				{lobby: 2, player: 2, from: 3, want: []int{2}},
				{lobby: 1, player: 2, from: 4, want: []int{1}},
			},
		},
		{
			name: "player id claimed from another address",
			size: 8,
			steps: []step{
				{lobby: 3, player: 7, from: 1},
				{lobby: 3, player: 8, from: 2, want: []int{1}},
				{lobby: 3, player: 7, from: 9, wantErr: ErrPlayerTaken},
				{lobby: 3, player: 8, from: 2, want: []int{1}},
			},
		},
		{
			name: "full lobby refuses a newcomer but not its members",
			size: 2,
			steps: []step{
				{lobby: 0, player: 1, from: 1},
				{lobby: 0, player: 2, from: 2, want: []int{1}},
				{lobby: 0, player: 3, from: 3, wantErr: ErrLobbyFull},
				{lobby: 0, player: 1, from: 1, want: []int{2}},
			},
		},
		{
			name: "lobby id out of range",
			size: 8,
			steps: []step{
				{lobby: 16, player: 1, from: 1, wantErr: ErrLobbyRange},
				{lobby: 1<<32 - 1, player: 1, from: 1, wantErr: ErrLobbyRange},
				{lobby: 15, player: 1, from: 1},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tb := newTable(t, tt.size)
			for i, s := range tt.steps {
				got, err := tb.Route(s.lobby, s.player, addr(s.from), t0, nil)
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

func TestRouteCounts(t *testing.T) {
	tb := newTable(t, 4)
	for p := 1; p <= 5; p++ { // the fifth finds the lobby full
		tb.Route(0, uint32(p), addr(p), t0, nil)
	}
	tb.Route(15, 1, addr(9), t0, nil)
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

func TestExpire(t *testing.T) {
	tb := newTable(t, 8)
	tb.Route(1, 1, addr(1), t0, nil)
	tb.Route(1, 2, addr(2), t0.Add(5*time.Second), nil)
	tb.Route(2, 1, addr(3), t0, nil)

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
	tb.Route(0, 1, addr(1), t0, nil)
	tb.Route(0, 2, addr(2), t0, nil)
	tb.Route(0, 1, addr(1), t0.Add(8*time.Second), nil)
	if got := tb.Expire(t0.Add(12 * time.Second)); got != 1 {
		t.Fatalf("got %d removed, want 1 (player 2 only)", got)
	}
	got, err := tb.Route(0, 2, addr(7), t0.Add(12*time.Second), nil)
	if err != nil {
		t.Fatalf("rejoin: %v", err)
	}
	if want := []netip.AddrPort{addr(1)}; !slices.Equal(got, want) {
		t.Errorf("got targets %v, want %v", got, want)
	}
}

func TestRouteNoAlloc(t *testing.T) {
	tb := newTable(t, 8)
	for p := 1; p <= 8; p++ {
		tb.Route(5, uint32(p), addr(p), t0, nil)
	}
	dst := make([]netip.AddrPort, 0, 7)
	var n int
	allocs := testing.AllocsPerRun(1000, func() {
		got, err := tb.Route(5, 3, addr(3), t0, dst[:0])
		if err != nil {
			t.Fatal(err)
		}
		n = len(got)
	})
	if allocs != 0 {
		t.Errorf("got %v allocations per Route, want 0", allocs)
	}
	if n != 7 {
		t.Errorf("got %d targets, want 7", n)
	}
}
