package lobby

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestNoNewLobbies(t *testing.T) {
	tb := newTable(t, 4)
	if err := tb.Join(1, 1, addr(1), t0); err != nil {
		t.Fatal(err)
	}
	tb.SetNoNewLobbies(true)
	if !tb.NoNewLobbies() {
		t.Fatal("NoNewLobbies: got false after SetNoNewLobbies(true)")
	}
	if err := tb.Join(2, 1, addr(2), t0); !errors.Is(err, ErrNoNewLobbies) {
		t.Errorf("new lobby while draining: got %v, want ErrNoNewLobbies", err)
	}
	if tb.Lobbies() != 1 || tb.Players() != 1 {
		t.Errorf("refused lobby changed the table: %d lobbies, %d players", tb.Lobbies(), tb.Players())
	}
	// The lobby in progress goes on, and takes a new member.
	err := tb.Join(1, 2, addr(3), t0)
	got, _ := tb.Forward(1, 2, addr(3), t0, nil)
	if err != nil || !slices.Equal(got, []netip.AddrPort{addr(1)}) {
		t.Errorf("join an existing lobby while draining: got %v, %v; want [%v]", got, err, addr(1))
	}
	// Once it has played out, its id is a new lobby like any other.
	tb.Expire(t0.Add(time.Minute))
	if err := tb.Join(1, 1, addr(1), t0.Add(time.Minute)); !errors.Is(err, ErrNoNewLobbies) {
		t.Errorf("expired lobby while draining: got %v, want ErrNoNewLobbies", err)
	}
	tb.SetNoNewLobbies(false)
	if err := tb.Join(2, 1, addr(2), t0); err != nil {
		t.Errorf("new lobby after the drain ended: %v", err)
	}
}

// sample is a table with three lobbies, members in a join order that is not
// their id order, and different idle times.
func sample(t *testing.T) (*Table, time.Time) {
	t.Helper()
	tb := newTable(t, 4)
	steps := []struct {
		lobby, player uint32
		from          int
		at            time.Duration
	}{
		{7, 3, 1, 0}, {7, 1, 2, time.Second}, {2, 9, 3, 2 * time.Second},
		{7, 2, 4, 3 * time.Second}, {11, 1, 5, 4 * time.Second}, {7, 3, 1, 5 * time.Second},
	}
	for _, s := range steps {
		if err := tb.Join(s.lobby, s.player, addr(s.from), t0.Add(s.at)); err != nil {
			t.Fatal(err)
		}
	}
	return tb, t0.Add(6 * time.Second)
}

func TestSnapshotRestore(t *testing.T) {
	tb, now := sample(t)
	s := tb.Snapshot(now)
	want := Snapshot{
		{ID: 2, Members: []MemberSnapshot{{9, addr(3), 4 * time.Second}}},
		{ID: 7, Members: []MemberSnapshot{{3, addr(1), time.Second}, {1, addr(2), 5 * time.Second}, {2, addr(4), 3 * time.Second}}},
		{ID: 11, Members: []MemberSnapshot{{1, addr(5), 2 * time.Second}}},
	}
	if !reflect.DeepEqual(s, want) {
		t.Fatalf("snapshot:\n got %+v\nwant %+v", s, want)
	}

	// Restored an hour later in another process: same lobbies, same fan-out
	// order, same players; each expires when it would have in the first.
	later := now.Add(time.Hour)
	tb2 := newTable(t, 4)
	if err := tb2.Restore(s, later); err != nil {
		t.Fatal(err)
	}
	if tb2.Lobbies() != 3 || tb2.Players() != 5 {
		t.Errorf("restored: %d lobbies, %d players; want 3 and 5", tb2.Lobbies(), tb2.Players())
	}
	if got := tb2.Members(7); !slices.Equal(got, []uint32{3, 1, 2}) {
		t.Errorf("lobby 7 members: got %v, want [3 1 2]", got)
	}
	got, err := tb2.Forward(7, 1, addr(2), later, nil)
	if err != nil || !slices.Equal(got, []netip.AddrPort{addr(1), addr(4)}) {
		t.Errorf("fan-out after restore: got %v, %v", got, err)
	}
	// Timeout 10 s: 6 s after the restore, lobby 2's player (idle 4 s at the
	// snapshot) is 10 s idle and goes; the others are 6 to 9 s idle.
	if n := tb2.Expire(later.Add(6 * time.Second)); n != 1 {
		t.Errorf("expired 6 s after restore: %d players, want 1 (lobby 2's, idle 4 s before)", n)
	}
	if tb2.Members(2) != nil {
		t.Errorf("lobby 2 still there: %v", tb2.Members(2))
	}
	if err := tb2.Restore(s, later); err == nil {
		t.Error("restore into a table that holds lobbies: got nil error")
	}
}

func TestRestoreRefuses(t *testing.T) {
	m := func(p uint32, a netip.AddrPort) MemberSnapshot { return MemberSnapshot{Player: p, Addr: a} }
	v6 := netip.MustParseAddrPort("[::1]:5000")
	tests := []struct {
		name string
		s    Snapshot
		want string
	}{
		{"id out of range", Snapshot{{ID: 16, Members: []MemberSnapshot{m(1, addr(1))}}}, "at or above this relay's max lobbies 16"},
		{"too many members", Snapshot{{ID: 1, Members: []MemberSnapshot{m(1, addr(1)), m(2, addr(2)), m(3, addr(3))}}}, "3 members, more than this relay's lobby size 2"},
		{"empty lobby", Snapshot{{ID: 1}}, "no members"},
		{"lobby twice", Snapshot{{ID: 1, Members: []MemberSnapshot{m(1, addr(1))}}, {ID: 1, Members: []MemberSnapshot{m(2, addr(2))}}}, "lobby 1 twice"},
		{"player 0", Snapshot{{ID: 1, Members: []MemberSnapshot{m(0, addr(1))}}}, "player id 0"},
		{"player twice", Snapshot{{ID: 1, Members: []MemberSnapshot{m(4, addr(1)), m(4, addr(2))}}}, "player 4 twice"},
		{"ipv6", Snapshot{{ID: 1, Members: []MemberSnapshot{m(1, v6)}}}, "not IPv4"},
		{"negative idle", Snapshot{{ID: 1, Members: []MemberSnapshot{{Player: 1, Addr: addr(1), Idle: -1}}}}, "negative idle"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tb := newTable(t, 2)
			err := tb.Restore(tt.s, t0)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want an error containing %q", err, tt.want)
			}
			if tb.Lobbies() != 0 || tb.Players() != 0 {
				t.Errorf("a refused restore left %d lobbies, %d players", tb.Lobbies(), tb.Players())
			}
		})
	}
}

// golden is the encoding of a table with lobby 7 (player 3 at 10.0.0.1:40001
// idle 1 s) and lobby 9 (players 1 and 2), lobby size 8, byte by byte as
// docs/relayd.md describes it.
const golden = "524c5954" + "0001" + "0008" + "00000002" + "00000003" +
	"00000007" + "0001" +
	"00000003" + "0a000001" + "9c41" + "000000003b9aca00" +
	"00000009" + "0002" +
	"00000001" + "0a000002" + "9c42" + "0000000000000000" +
	"00000002" + "0a000003" + "9c43" + "0000000000000001"

func goldenSnapshot() Snapshot {
	return Snapshot{
		{ID: 7, Members: []MemberSnapshot{{3, addr(1), time.Second}}},
		{ID: 9, Members: []MemberSnapshot{{1, addr(2), 0}, {2, addr(3), 1}}},
	}
}

func TestEncodeTableGolden(t *testing.T) {
	b, err := EncodeTable(nil, goldenSnapshot(), 8)
	if err != nil {
		t.Fatal(err)
	}
	if got := hex.EncodeToString(b); got != golden {
		t.Errorf("encoding:\n got %s\nwant %s", got, golden)
	}
	s, size, err := DecodeTable(b)
	if err != nil || size != 8 || !reflect.DeepEqual(s, goldenSnapshot()) {
		t.Errorf("decode: got %+v, size %d, %v", s, size, err)
	}
	empty, err := EncodeTable(nil, nil, 8)
	if err != nil {
		t.Fatal(err)
	}
	if s, _, err := DecodeTable(empty); err != nil || len(s) != 0 {
		t.Errorf("decode empty table: got %v, %v", s, err)
	}
}

func TestTableRoundTrip(t *testing.T) {
	tb, now := sample(t)
	s := tb.Snapshot(now)
	b, err := EncodeTable(nil, s, 4)
	if err != nil {
		t.Fatal(err)
	}
	got, size, err := DecodeTable(b)
	if err != nil || size != 4 || !reflect.DeepEqual(got, s) {
		t.Fatalf("round trip: got %+v (size %d, %v), want %+v", got, size, err, s)
	}
}

func TestEncodeTableRefuses(t *testing.T) {
	one := []MemberSnapshot{{1, addr(1), 0}}
	tests := []struct {
		name string
		s    Snapshot
		size int
		want string
	}{
		{"bad size", nil, 1, "lobby size 1"},
		{"descending ids", Snapshot{{ID: 2, Members: one}, {ID: 1, Members: one}}, 8, "want ascending ids"},
		{"too many members", Snapshot{{ID: 1, Members: []MemberSnapshot{{1, addr(1), 0}, {2, addr(2), 0}, {3, addr(3), 0}}}}, 2, "3 members, want 1 to 2"},
		{"idle too long", Snapshot{{ID: 1, Members: []MemberSnapshot{{1, addr(1), MaxIdle + 1}}}}, 8, "at most"},
		{"ipv6", Snapshot{{ID: 1, Members: []MemberSnapshot{{1, netip.MustParseAddrPort("[::1]:1"), 0}}}}, 8, "not IPv4"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := EncodeTable(nil, tt.s, tt.size); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

func TestDecodeTableRefuses(t *testing.T) {
	good, _ := hex.DecodeString(golden)
	edit := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(good)) }
	tests := []struct {
		name string
		b    []byte
		want string
	}{
		{"short", good[:10], "shorter than the 16-byte header"},
		{"magic", edit(func(b []byte) []byte { b[0] = 'X'; return b }), "magic"},
		{"version 2", edit(func(b []byte) []byte { b[5] = 2; return b }), "version 2"},
		{"lobby size 1", edit(func(b []byte) []byte { b[7] = 1; return b }), "lobby size 1"},
		{"huge lobby count", edit(func(b []byte) []byte { binary.BigEndian.PutUint32(b[8:], 1<<31); return b }), "lobbies, at most"},
		{"players above lobbies x size", edit(func(b []byte) []byte { binary.BigEndian.PutUint32(b[12:], 17); return b }), "17 players in 2 lobbies"},
		{"length", append(bytes.Clone(good), 0), "want 82"},
		{"cut", good[:len(good)-1], "want 82"},
		{"descending", edit(func(b []byte) []byte { binary.BigEndian.PutUint32(b[40:], 7); return b }), "strictly ascending"},
		{"zero members", edit(func(b []byte) []byte { b[21] = 0; return b }), "0 members"},
		{"player 0", edit(func(b []byte) []byte { binary.BigEndian.PutUint32(b[22:], 0); return b }), "player id 0"},
		{"player twice", edit(func(b []byte) []byte { binary.BigEndian.PutUint32(b[64:], 1); return b }), "player 1 twice"},
		{"idle beyond 48h", edit(func(b []byte) []byte { binary.BigEndian.PutUint64(b[32:], 1<<62); return b }), "idle"},
		{"members beyond the header's players", edit(func(b []byte) []byte { b[45] = 3; return b }), "more than the header's players"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, _, err := DecodeTable(tt.b)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %+v, %v; want an error containing %q", s, err, tt.want)
			}
		})
	}
	if _, _, err := DecodeTable(edit(func(b []byte) []byte { b[5] = 2; return b })); !errors.Is(err, ErrTableVersion) {
		t.Errorf("version 2: got %v, want ErrTableVersion", err)
	}
}

// FuzzDecodeTable: whatever the bytes, the decoder returns an error or a
// snapshot that encodes back to exactly those bytes, and never allocates
// beyond a bound set by the input's length (a header that promises a
// million lobbies in 16 bytes is refused before any allocation).
func FuzzDecodeTable(f *testing.F) {
	good, _ := hex.DecodeString(golden)
	f.Add(good)
	empty, _ := EncodeTable(nil, nil, 8)
	f.Add(empty)
	f.Add(good[:tableHeaderLen])
	f.Add([]byte("RLYT\x00\x01\x00\x08\x00\x10\x00\x00\x00\x80\x00\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, size, err := DecodeTable(b)
		if err != nil {
			return
		}
		again, err := EncodeTable(nil, s, size)
		if err != nil {
			t.Fatalf("decoded %x into a snapshot that does not encode: %v", b, err)
		}
		if !bytes.Equal(again, b) {
			t.Fatalf("decode then encode changed the bytes:\n in %x\nout %x", b, again)
		}
	})
}
