// Package lobby is relayd's table of lobbies and their players. It is pure:
// no sockets and no clock (callers pass the time), so the rules are easy to
// test. It is not safe for concurrent use; the relay guards it with a mutex.
//
// Only a player whose address has been proven (the join handshake, package
// cookie) may Join; Forward then relays a datagram only from a member's own
// address and only to members. A lobby exists while it has members, and
// memory grows with the players: nothing is allocated for a lobby id that
// no proven player holds.
package lobby

import (
	"errors"
	"fmt"
	"math"
	"net/netip"
	"slices"
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
	ErrPlayerID     = errors.New("player id 0 is reserved")
	ErrPlayerTaken  = errors.New("player id held by another address in this lobby")
	ErrLobbyFull    = errors.New("lobby full")
	ErrNoNewLobbies = errors.New("no new lobbies: the relay is draining")
	ErrSourceLimit  = errors.New("the address or its /24 holds as many players as the relay allows")
	ErrNotMember    = errors.New("not a member of this lobby from this address")
)

// Config sizes a Table.
type Config struct {
	Size        int           // players per lobby
	MaxLobbies  int           // valid lobby ids are 0 <= id < MaxLobbies
	IdleTimeout time.Duration // a player silent this long is removed

	// Per-source limits on the players one IPv4 address, and one /24, may
	// hold across all lobbies; 0 is no limit. Exempt sources (a bench host
	// the operator names) are held to neither. Besides, one address never
	// holds more than Size-1 players of a lobby, so no single source can
	// fill one: that rule holds for exempt sources too, since an exempt
	// address is only as trusted as every process that can send from it.
	MaxPerAddr int
	MaxPerNet  int
	Exempt     []netip.Prefix
}

// EstablishedAfter is how long a member must have played, from the first
// of its datagrams the relay forwarded to its latest datagram, to count as
// established: a player, not an address that joined and went silent
// (Established). A handoff or the fd store does not carry it over: a
// restored member establishes itself again.
const EstablishedAfter = 5 * time.Second

// member is one player: 24 bytes, allocated as the lobby grows.
type member struct {
	seen   int64 // when it last sent, nanoseconds since the table's base
	player uint32
	addr   [4]byte
	port   uint16
	// played is 0 until the relay forwards one of the member's datagrams,
	// then the second it did (since the table's base, rounded up, plus
	// playedBias); once the member has played EstablishedAfter, it is
	// isEstablished.
	played uint32
}

// isEstablished is member.played once the member is established;
// playedBias keeps the seconds of member.played above 0 on either side of
// the table's base (tests pass times before it).
const (
	isEstablished = math.MaxUint32
	playedBias    = 1 << 31
)

func (m *member) addrPort() netip.AddrPort {
	return netip.AddrPortFrom(netip.AddrFrom4(m.addr), m.port)
}

func (m *member) is(a netip.AddrPort) bool {
	return m.port == a.Port() && m.addr == a.Addr().As4()
}

type lobby struct {
	members []member // grows as players join; never more than Size
}

// Table holds the lobbies that have at least one player.
type Table struct {
	cfg     Config
	base    time.Time // seen times count from here, on the monotonic clock
	lobbies map[uint32]*lobby
	players int
	// established counts the members that have played EstablishedAfter.
	established int
	// Players held per source, exempt sources not counted; an entry goes
	// when its count reaches 0.
	perAddr map[[4]byte]int32
	perNet  map[[3]byte]int32 // by /24
	// noNew refuses joins for lobbies that do not exist yet, so the
	// existing ones play out before a restart (the drain gate).
	noNew bool
}

// New returns an empty table.
func New(c Config) (*Table, error) {
	switch {
	case c.Size < MinSize || c.Size > MaxSize:
		return nil, fmt.Errorf("lobby size %d: want %d to %d", c.Size, MinSize, MaxSize)
	case c.MaxLobbies < 1 || c.MaxLobbies > MaxMaxLobbies:
		return nil, fmt.Errorf("max lobbies %d: want 1 to %d", c.MaxLobbies, MaxMaxLobbies)
	case c.IdleTimeout <= 0:
		return nil, fmt.Errorf("idle timeout %v: want more than 0", c.IdleTimeout)
	case c.MaxPerAddr < 0 || c.MaxPerNet < 0:
		return nil, fmt.Errorf("per-source limits %d and %d: want 0 (none) or more", c.MaxPerAddr, c.MaxPerNet)
	}
	for _, p := range c.Exempt {
		if !p.Addr().Is4() {
			return nil, fmt.Errorf("exempt source %s: want an IPv4 prefix", p)
		}
	}
	return &Table{cfg: c, base: time.Now(), lobbies: make(map[uint32]*lobby),
		perAddr: make(map[[4]byte]int32), perNet: make(map[[3]byte]int32)}, nil
}

func (t *Table) since(now time.Time) int64 { return int64(now.Sub(t.base)) }

// Forward records that player, sending from addr at now, is alive in lobby
// id, and appends the addresses of the lobby's other members to dst. Only
// a member sending from its own address is forwarded (ErrNotMember
// otherwise). With cap(dst)-len(dst) >= Size-1 it does not allocate. On
// error nothing changes and dst is returned as it was.
func (t *Table) Forward(id, player uint32, addr netip.AddrPort, now time.Time, dst []netip.AddrPort) ([]netip.AddrPort, error) {
	if id >= uint32(t.cfg.MaxLobbies) {
		return dst, ErrLobbyRange
	}
	l := t.lobbies[id]
	if l == nil {
		return dst, ErrNotMember
	}
	self := l.find(player)
	if self < 0 || !l.members[self].is(addr) {
		return dst, ErrNotMember
	}
	t.touch(&l.members[self], t.since(now), true)
	for i := range l.members {
		if i != self {
			dst = append(dst, l.members[i].addrPort())
		}
	}
	return dst, nil
}

func (l *lobby) find(player uint32) int {
	for i := range l.members {
		if l.members[i].player == player {
			return i
		}
	}
	return -1
}

// touch records that member m sent at now (since the table's base), a
// datagram the relay forwarded or not, and counts it established once it
// has played EstablishedAfter.
func (t *Table) touch(m *member, now int64, forwarded bool) {
	m.seen = now
	switch {
	case m.played == isEstablished:
	case m.played == 0 && forwarded:
		// The second rounded up: "EstablishedAfter since it" is never less.
		sec := now / int64(time.Second)
		if now%int64(time.Second) > 0 {
			sec++
		}
		m.played = uint32(min(max(sec+playedBias, 1), isEstablished-1))
	case m.played != 0 && now-(int64(m.played)-playedBias)*int64(time.Second) >= int64(EstablishedAfter):
		m.played = isEstablished
		t.established++
	}
}

// Join makes player, whose address addr the caller has proven, a member of
// lobby id at now, or refreshes it if it is one already. On error nothing
// changes.
func (t *Table) Join(id, player uint32, addr netip.AddrPort, now time.Time) error {
	switch {
	case id >= uint32(t.cfg.MaxLobbies):
		return ErrLobbyRange
	case player == 0:
		return ErrPlayerID
	case !addr.Addr().Is4():
		return fmt.Errorf("join from %s: want an IPv4 address", addr)
	}
	l := t.lobbies[id]
	if l == nil && t.noNew {
		return ErrNoNewLobbies
	}
	if l != nil {
		if self := l.find(player); self >= 0 {
			if !l.members[self].is(addr) {
				return ErrPlayerTaken
			}
			t.touch(&l.members[self], t.since(now), false)
			return nil
		}
		if len(l.members) >= t.cfg.Size {
			return ErrLobbyFull
		}
	}
	if err := t.checkSource(l, addr.Addr()); err != nil {
		return err
	}
	if l == nil {
		l = &lobby{}
		t.lobbies[id] = l
	}
	a := addr.Addr().As4()
	l.members = append(l.members, member{seen: t.since(now), player: player, addr: a, port: addr.Port()})
	t.count(a, 1)
	return nil
}

// checkSource applies the per-source limits to a newcomer from a joining
// lobby l (nil: a new lobby). The seat rule comes first and holds for
// every source: an exempt one is spared only the counts across lobbies.
func (t *Table) checkSource(l *lobby, a netip.Addr) error {
	b := a.As4()
	if l != nil {
		same := 0
		for i := range l.members {
			if l.members[i].addr == b {
				same++
			}
		}
		if same >= t.cfg.Size-1 {
			return ErrSourceLimit
		}
	}
	if t.exempt(a) {
		return nil
	}
	if n := t.cfg.MaxPerAddr; n > 0 && t.perAddr[b] >= int32(n) {
		return ErrSourceLimit
	}
	if n := t.cfg.MaxPerNet; n > 0 && t.perNet[net24(b)] >= int32(n) {
		return ErrSourceLimit
	}
	return nil
}

func (t *Table) exempt(a netip.Addr) bool {
	for _, p := range t.cfg.Exempt {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

func net24(a [4]byte) [3]byte { return [3]byte(a[:3]) }

// count adds d to the players held by address a and its /24.
func (t *Table) count(a [4]byte, d int32) {
	t.players += int(d)
	if t.exempt(netip.AddrFrom4(a)) {
		return
	}
	setOrDelete(t.perAddr, a, t.perAddr[a]+d)
	n := net24(a)
	setOrDelete(t.perNet, n, t.perNet[n]+d)
}

func setOrDelete[K comparable](m map[K]int32, k K, v int32) {
	if v <= 0 {
		delete(m, k)
		return
	}
	m[k] = v
}

// Expire removes every player last seen IdleTimeout or longer before now,
// frees the lobbies left empty, and returns how many players it removed.
func (t *Table) Expire(now time.Time) int {
	removed := 0
	cut := t.since(now) - int64(t.cfg.IdleTimeout)
	for id, l := range t.lobbies {
		kept := l.members[:0]
		for _, m := range l.members {
			if m.seen > cut {
				kept = append(kept, m)
			} else {
				t.count(m.addr, -1)
				if m.played == isEstablished {
					t.established--
				}
				removed++
			}
		}
		switch {
		case len(kept) == 0:
			delete(t.lobbies, id)
		case cap(kept) > 2*len(kept):
			l.members = slices.Clone(kept) // give back what the lobby's peak took
		default:
			l.members = kept
		}
	}
	return removed
}

// SetNoNewLobbies turns the drain gate on or off. While it is on, Join
// refuses a lobby that does not exist (ErrNoNewLobbies); existing lobbies
// go on, and a player may still join one of them (a player of a lobby in
// progress coming back from a new address, say).
func (t *Table) SetNoNewLobbies(on bool) { t.noNew = on }

// NoNewLobbies reports whether the drain gate is on.
func (t *Table) NoNewLobbies() bool { return t.noNew }

// Lobbies returns the number of lobbies with at least one player.
func (t *Table) Lobbies() int { return len(t.lobbies) }

// Players returns the number of players in all lobbies.
func (t *Table) Players() int { return t.players }

// Established returns the number of players that have played at least
// EstablishedAfter: the first of their datagrams the relay forwarded and
// their latest are that far apart. An address that joins and goes silent,
// or sends once, is never established: a stranger cannot make the count
// rise and fall with the handshake alone.
func (t *Table) Established() int { return t.established }

// Sources returns how many addresses and /24s hold players, exempt ones
// not counted: the per-source bookkeeping's size, for tests.
func (t *Table) Sources() (addrs, nets int) { return len(t.perAddr), len(t.perNet) }

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
