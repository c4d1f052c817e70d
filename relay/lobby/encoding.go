package lobby

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"time"
)

// The lobby table's encoding, version 1 (docs/relayd.md, "Lobby table
// encoding"). All integers are big-endian.
//
//	header, 16 bytes
//	0   4  magic "RLYT"
//	4   2  version, 1
//	6   2  lobby size of the sender: no lobby has more members (2 to 256)
//	8   4  lobbies L (at most 1048576)
//	12  4  players P, the members of all lobbies (at most L × lobby size)
//	then L lobby records in strictly ascending lobby id:
//	0   4  lobby id
//	4   2  members m (1 to the lobby size)
//	6   …  m member records in join order, 18 bytes each:
//	       0   4  player id (not 0, unique in the lobby)
//	       4   4  IPv4 address
//	       8   2  UDP port
//	       10  8  idle: nanoseconds since the player last sent (0 to 48 h)
//
// The length is exactly 16 + 6 L + 18 P bytes, which the decoder checks
// before it allocates anything, so a message cannot make it allocate more
// than a small multiple of its own size.
const (
	TableMagic   = "RLYT"
	TableVersion = 1

	tableHeaderLen = 16
	lobbyRecordLen = 6
	memberLen      = 18

	// MaxIdle bounds a member's idle time: relayd's idle timeout is at most
	// 24 h, and a player is expired within a second of it.
	MaxIdle = 48 * time.Hour
	// MaxTableBytes bounds an encoded table, about 3.7 million players.
	MaxTableBytes = 64 << 20
)

// ErrTableVersion is a table of a version this relayd cannot read.
var ErrTableVersion = errors.New("unsupported lobby table version")

// EncodeTable appends the encoding of s to dst. lobbySize is the table's
// Config.Size. It fails on a snapshot the decoder would refuse.
func EncodeTable(dst []byte, s Snapshot, lobbySize int) ([]byte, error) {
	if lobbySize < MinSize || lobbySize > MaxSize {
		return dst, fmt.Errorf("encode lobby table: lobby size %d: want %d to %d", lobbySize, MinSize, MaxSize)
	}
	if len(s) > MaxMaxLobbies {
		return dst, fmt.Errorf("encode lobby table: %d lobbies, at most %d", len(s), MaxMaxLobbies)
	}
	players := s.Players()
	if n := tableLen(uint64(len(s)), uint64(players)); n > MaxTableBytes {
		return dst, fmt.Errorf("encode lobby table: %d bytes, at most %d", n, MaxTableBytes)
	}
	dst = append(dst, TableMagic...)
	dst = binary.BigEndian.AppendUint16(dst, TableVersion)
	dst = binary.BigEndian.AppendUint16(dst, uint16(lobbySize))
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(s)))
	dst = binary.BigEndian.AppendUint32(dst, uint32(players))
	for i, l := range s {
		if i > 0 && l.ID <= s[i-1].ID {
			return dst, fmt.Errorf("encode lobby table: lobby %d after lobby %d: want ascending ids", l.ID, s[i-1].ID)
		}
		if len(l.Members) == 0 || len(l.Members) > lobbySize {
			return dst, fmt.Errorf("encode lobby table: lobby %d: %d members, want 1 to %d", l.ID, len(l.Members), lobbySize)
		}
		if err := checkMembers(l); err != nil {
			return dst, fmt.Errorf("encode lobby table: %w", err)
		}
		dst = binary.BigEndian.AppendUint32(dst, l.ID)
		dst = binary.BigEndian.AppendUint16(dst, uint16(len(l.Members)))
		for _, m := range l.Members {
			if m.Idle > MaxIdle {
				return dst, fmt.Errorf("encode lobby table: lobby %d player %d: idle %v, at most %v", l.ID, m.Player, m.Idle, MaxIdle)
			}
			a := m.Addr.Addr().As4()
			dst = binary.BigEndian.AppendUint32(dst, m.Player)
			dst = append(dst, a[:]...)
			dst = binary.BigEndian.AppendUint16(dst, m.Addr.Port())
			dst = binary.BigEndian.AppendUint64(dst, uint64(m.Idle))
		}
	}
	return dst, nil
}

func tableLen(lobbies, players uint64) uint64 {
	return tableHeaderLen + lobbyRecordLen*lobbies + memberLen*players
}

// DecodeTable reads an encoded table and returns it with the sender's lobby
// size. It checks every rule of the encoding, so a snapshot it returns is
// one EncodeTable could have written; whether it fits a given table is
// Restore's check.
func DecodeTable(b []byte) (Snapshot, int, error) {
	if len(b) < tableHeaderLen {
		return nil, 0, fmt.Errorf("decode lobby table: %d bytes, shorter than the %d-byte header", len(b), tableHeaderLen)
	}
	if string(b[0:4]) != TableMagic {
		return nil, 0, fmt.Errorf("decode lobby table: magic %q, want %q", b[0:4], TableMagic)
	}
	if v := binary.BigEndian.Uint16(b[4:6]); v != TableVersion {
		return nil, 0, fmt.Errorf("decode lobby table: version %d: %w (this relayd reads version %d)", v, ErrTableVersion, TableVersion)
	}
	size := int(binary.BigEndian.Uint16(b[6:8]))
	lobbies := binary.BigEndian.Uint32(b[8:12])
	players := binary.BigEndian.Uint32(b[12:16])
	switch {
	case size < MinSize || size > MaxSize:
		return nil, 0, fmt.Errorf("decode lobby table: lobby size %d: want %d to %d", size, MinSize, MaxSize)
	case lobbies > MaxMaxLobbies:
		return nil, 0, fmt.Errorf("decode lobby table: %d lobbies, at most %d", lobbies, MaxMaxLobbies)
	case uint64(players) > uint64(lobbies)*uint64(size):
		return nil, 0, fmt.Errorf("decode lobby table: %d players in %d lobbies of at most %d", players, lobbies, size)
	}
	if want := tableLen(uint64(lobbies), uint64(players)); uint64(len(b)) != want || want > MaxTableBytes {
		return nil, 0, fmt.Errorf("decode lobby table: %d bytes, want %d for %d lobbies and %d players (at most %d)", len(b), want, lobbies, players, MaxTableBytes)
	}
	s := make(Snapshot, lobbies)
	all := make([]MemberSnapshot, players) // one allocation for every member
	b = b[tableHeaderLen:]
	left := int(players)
	for i := range s {
		if len(b) < lobbyRecordLen {
			return nil, 0, fmt.Errorf("decode lobby table: lobby record %d cut short", i)
		}
		id := binary.BigEndian.Uint32(b[0:4])
		m := int(binary.BigEndian.Uint16(b[4:6]))
		b = b[lobbyRecordLen:]
		switch {
		case i > 0 && id <= s[i-1].ID:
			return nil, 0, fmt.Errorf("decode lobby table: lobby %d after lobby %d: want strictly ascending ids", id, s[i-1].ID)
		case m < 1 || m > size:
			return nil, 0, fmt.Errorf("decode lobby table: lobby %d: %d members, want 1 to %d", id, m, size)
		case m > left || len(b) < m*memberLen:
			return nil, 0, fmt.Errorf("decode lobby table: lobby %d: %d members, more than the header's players left (%d)", id, m, left)
		}
		s[i] = LobbySnapshot{ID: id, Members: all[:m:m]}
		all, left = all[m:], left-m
		for j := range s[i].Members {
			idle := binary.BigEndian.Uint64(b[10:18])
			if idle > uint64(MaxIdle) {
				return nil, 0, fmt.Errorf("decode lobby table: lobby %d member %d: idle %d ns, at most %d", id, j+1, idle, uint64(MaxIdle))
			}
			s[i].Members[j] = MemberSnapshot{
				Player: binary.BigEndian.Uint32(b[0:4]),
				Addr:   netip.AddrPortFrom(netip.AddrFrom4([4]byte(b[4:8])), binary.BigEndian.Uint16(b[8:10])),
				Idle:   time.Duration(idle),
			}
			b = b[memberLen:]
		}
		if err := checkMembers(s[i]); err != nil {
			return nil, 0, fmt.Errorf("decode lobby table: %w", err)
		}
	}
	if left != 0 || len(b) != 0 {
		return nil, 0, fmt.Errorf("decode lobby table: the header says %d players, the records hold %d", players, int(players)-left)
	}
	return s, size, nil
}
