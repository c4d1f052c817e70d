// Package lobby is relayd's table of lobbies and their players. It is pure:
// no sockets and no clock (callers pass the time), so the rules are easy to
// test. It is not safe for concurrent use; the relay guards it with a mutex.
package lobby

import (
	"errors"
	"fmt"
	"net/netip"
	"time"
)

// Limits of a Config, checked by New.
const (
	MinSize       = 2
	MaxSize       = 256
	MaxMaxLobbies = 1 << 20
)

var (
	ErrLobbyRange   = errors.New("lobby id out of range")
	ErrPlayerTaken  = errors.New("player id held by another address in this lobby")
	ErrLobbyFull    = errors.New("lobby full")
	ErrNoNewLobbies = errors.New("no new lobbies: the relay is draining")
)

// Config sizes a Table.
type Config struct {
	Size        int           // players per lobby
	MaxLobbies  int           // valid lobby ids are 0 <= id < MaxLobbies
	IdleTimeout time.Duration // a player silent this long is removed
}

type member struct {
	player uint32
	addr   netip.AddrPort
	seen   time.Time
}

type lobby struct {
	members []member // cap is the lobby size, allocated once at creation
}

// Table holds the lobbies that have at least one player.
type Table struct {
	cfg     Config
	lobbies map[uint32]*lobby
	players int
	// noNew refuses datagrams for lobbies that do not exist yet, so the
	// existing ones play out before a restart (the drain gate).
	noNew bool
}

// New returns an empty table.
func New(c Config) (*Table, error) {
	if c.Size < MinSize || c.Size > MaxSize {
		return nil, fmt.Errorf("lobby size %d: want %d to %d", c.Size, MinSize, MaxSize)
	}
	if c.MaxLobbies < 1 || c.MaxLobbies > MaxMaxLobbies {
		return nil, fmt.Errorf("max lobbies %d: want 1 to %d", c.MaxLobbies, MaxMaxLobbies)
	}
	if c.IdleTimeout <= 0 {
		return nil, fmt.Errorf("idle timeout %v: want more than 0", c.IdleTimeout)
	}
	return &Table{cfg: c, lobbies: make(map[uint32]*lobby)}, nil
}

// Route records that player, sending from addr at now, is alive in lobby id
// (joining it if it is not a member yet), and appends the addresses of the
// lobby's other members to dst. With cap(dst)-len(dst) >= Size-1 it does not
// allocate, except when it creates a lobby. On error nothing changes and dst
// is returned as it was.
func (t *Table) Route(id, player uint32, addr netip.AddrPort, now time.Time, dst []netip.AddrPort) ([]netip.AddrPort, error) {
	if id >= uint32(t.cfg.MaxLobbies) {
		return dst, ErrLobbyRange
	}
	l := t.lobbies[id]
	if l == nil && t.noNew {
		return dst, ErrNoNewLobbies
	}
	if l == nil {
		l = &lobby{members: make([]member, 0, t.cfg.Size)}
		t.lobbies[id] = l
	}
	self := -1
	for i := range l.members {
		if l.members[i].player == player {
			self = i
			break
		}
	}
	switch {
	case self >= 0 && l.members[self].addr != addr:
		return dst, ErrPlayerTaken
	case self >= 0:
		l.members[self].seen = now
	case len(l.members) == t.cfg.Size:
		return dst, ErrLobbyFull
	default:
		l.members = append(l.members, member{player: player, addr: addr, seen: now})
		t.players++
		self = len(l.members) - 1
	}
	for i := range l.members {
		if i != self {
			dst = append(dst, l.members[i].addr)
		}
	}
	return dst, nil
}

// Expire removes every player last seen IdleTimeout or longer before now,
// frees the lobbies left empty, and returns how many players it removed.
func (t *Table) Expire(now time.Time) int {
	removed := 0
	for id, l := range t.lobbies {
		kept := l.members[:0]
		for _, m := range l.members {
			if now.Sub(m.seen) < t.cfg.IdleTimeout {
				kept = append(kept, m)
			}
		}
		removed += len(l.members) - len(kept)
		clear(l.members[len(kept):])
		l.members = kept
		if len(kept) == 0 {
			delete(t.lobbies, id)
		}
	}
	t.players -= removed
	return removed
}

// SetNoNewLobbies turns the drain gate on or off. While it is on, Route
// refuses a datagram for a lobby that does not exist (ErrNoNewLobbies);
// existing lobbies go on, and a player may still join one of them (a
// player of a lobby in progress coming back from a new address, say).
func (t *Table) SetNoNewLobbies(on bool) { t.noNew = on }

// NoNewLobbies reports whether the drain gate is on.
func (t *Table) NoNewLobbies() bool { return t.noNew }

// Lobbies returns the number of lobbies with at least one player.
func (t *Table) Lobbies() int { return len(t.lobbies) }

// Players returns the number of players in all lobbies.
func (t *Table) Players() int { return t.players }

// Members returns the player ids of lobby id in join order, for status and
// tests.
func (t *Table) Members(id uint32) []uint32 {
	l := t.lobbies[id]
	if l == nil {
		return nil
	}
	ids := make([]uint32, len(l.members))
	for i, m := range l.members {
		ids[i] = m.player
	}
	return ids
}
