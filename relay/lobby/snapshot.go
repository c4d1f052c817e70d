package lobby

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"time"
)

// Snapshot is a table's lobbies at one moment, in ascending lobby id, for
// handing the table to another relayd process (see EncodeTable).
type Snapshot []LobbySnapshot

// LobbySnapshot is one lobby and its members in join order, which is the
// order of its fan-out.
type LobbySnapshot struct {
	ID      uint32
	Members []MemberSnapshot
}

// MemberSnapshot is one player. Idle is how long before the snapshot the
// player last sent: a duration rather than a time, so the receiving process
// does not depend on the sender's clock.
type MemberSnapshot struct {
	Player uint32
	Addr   netip.AddrPort
	Idle   time.Duration
}

// Players counts the members of every lobby.
func (s Snapshot) Players() int {
	n := 0
	for _, l := range s {
		n += len(l.Members)
	}
	return n
}

// Snapshot copies the table as of now.
func (t *Table) Snapshot(now time.Time) Snapshot {
	s := make(Snapshot, 0, len(t.lobbies))
	for id, l := range t.lobbies {
		ls := LobbySnapshot{ID: id, Members: make([]MemberSnapshot, len(l.members))}
		for i, m := range l.members {
			ls.Members[i] = MemberSnapshot{Player: m.player, Addr: m.addrPort(), Idle: time.Duration(max(t.since(now)-m.seen, 0))}
		}
		s = append(s, ls)
	}
	slices.SortFunc(s, func(a, b LobbySnapshot) int { return cmp.Compare(a.ID, b.ID) })
	return s
}

// Restore fills an empty table from s as of now: each player keeps its
// idle time, so it expires when it would have in the process that took
// the snapshot. Its members were proven by the process that took it, and
// are kept even where they exceed this table's per-source limits (which
// then refuse new joins from those sources until they drop below). It refuses, changing nothing, a snapshot that does not fit
// this table's Config (a lobby id at or above MaxLobbies, more members than
// Size) or that the table could not have produced (a lobby id twice, a
// player id 0 or twice in a lobby, an address that is not IPv4).
func (t *Table) Restore(s Snapshot, now time.Time) error {
	if len(t.lobbies) != 0 {
		return fmt.Errorf("restore lobby table: the table already holds %d lobbies", len(t.lobbies))
	}
	if err := t.check(s); err != nil {
		return fmt.Errorf("restore lobby table: %w", err)
	}
	for _, ls := range s {
		l := &lobby{members: make([]member, len(ls.Members))}
		for i, m := range ls.Members {
			a := m.Addr.Addr().As4()
			l.members[i] = member{seen: t.since(now) - int64(m.Idle), player: m.Player, addr: a, port: m.Addr.Port()}
			t.count(a, 1)
		}
		t.lobbies[ls.ID] = l
	}
	return nil
}

func (t *Table) check(s Snapshot) error {
	seen := make(map[uint32]bool, len(s))
	for _, ls := range s {
		switch {
		case seen[ls.ID]:
			return fmt.Errorf("lobby %d twice", ls.ID)
		case ls.ID >= uint32(t.cfg.MaxLobbies):
			return fmt.Errorf("lobby %d: at or above this relay's max lobbies %d", ls.ID, t.cfg.MaxLobbies)
		case len(ls.Members) == 0:
			return fmt.Errorf("lobby %d: no members", ls.ID)
		case len(ls.Members) > t.cfg.Size:
			return fmt.Errorf("lobby %d: %d members, more than this relay's lobby size %d", ls.ID, len(ls.Members), t.cfg.Size)
		}
		seen[ls.ID] = true
		if err := checkMembers(ls); err != nil {
			return err
		}
	}
	return nil
}

func checkMembers(ls LobbySnapshot) error {
	for i, m := range ls.Members {
		switch {
		case m.Player == 0:
			return fmt.Errorf("lobby %d: player id 0", ls.ID)
		case !m.Addr.Addr().Is4():
			return fmt.Errorf("lobby %d player %d: address %s is not IPv4", ls.ID, m.Player, m.Addr)
		case m.Idle < 0:
			return fmt.Errorf("lobby %d player %d: negative idle time %v", ls.ID, m.Player, m.Idle)
		}
		for _, o := range ls.Members[:i] {
			if o.Player == m.Player {
				return fmt.Errorf("lobby %d: player %d twice", ls.ID, m.Player)
			}
		}
	}
	return nil
}
