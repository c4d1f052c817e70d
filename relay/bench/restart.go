package bench

import (
	"fmt"
	"strings"
	"sync"
	"time"
)

// Identity is which relay process answered /status: relayd's pid and
// started_at, and what it says about a handoff it started from. A relay
// that serves neither pid nor started_at has an unknown identity, and its
// restarts show only as counters going backwards.
type Identity struct {
	PID            int       `json:"pid"`
	StartedAt      time.Time `json:"started_at"`
	HandoffFromPID int       `json:"handoff_from_pid"`
	HandoffLobbies int       `json:"handoff_lobbies"`
	HandoffPlayers int       `json:"handoff_players"`
	Lobbies        int       `json:"lobbies"`
	Players        int       `json:"players"`
}

// Known reports whether the relay says which process it is.
func (i Identity) Known() bool { return i.PID != 0 || !i.StartedAt.IsZero() }

// Same reports whether both readings came from one process.
func (i Identity) Same(o Identity) bool { return i.PID == o.PID && i.StartedAt.Equal(o.StartedAt) }

// Reading is one answer of the relay's control plane.
type Reading struct {
	Counters
	Identity
}

// Restart is a change of relay process seen during a step.
type Restart struct {
	FromPID int `json:"from_pid"`
	ToPID   int `json:"to_pid"`
	// Between is when it happened, in seconds into the step: after the
	// last reading of the old process, before the first of the new one.
	After  float64 `json:"after_s"`
	Before float64 `json:"before_s"`
	// Handoff: the new process took the old one's socket and lobby table
	// (its handoff_from_pid is the old pid), and carried on from its
	// counters, so the relay's counters stay exact across it.
	Handoff bool `json:"handoff"`
	// What the relay forgot: every lobby and player of the old process's
	// last reading for a restart; for a handoff, those less what the new
	// process says it restored.
	LobbiesCut int `json:"lobbies_cut"`
	PlayersCut int `json:"players_cut"`
}

func (r Restart) String() string {
	kind := "restarted"
	if r.Handoff {
		kind = "was handed over"
	}
	return fmt.Sprintf("the relay %s between %.2fs and %.2fs into the step (pid %d → %d): %d lobbies and %d players cut",
		kind, r.After, r.Before, r.FromPID, r.ToPID, r.LobbiesCut, r.PlayersCut)
}

// Impact is what a step saw of the relay restarting, from the players'
// side: the restarts, the bench's own count of every datagram (so the loss
// has a direction even when the relay's counters restarted from zero) and
// the ICMP errors the player sockets got while no socket was bound.
type Impact struct {
	Restarts []Restart `json:"restarts,omitempty"`
	// Census: the bench counted, for every datagram of the step, how many
	// members received it. LostIn: sent, and no member received it (lost
	// on the way in or inside the relay); LostOut: copies missing of
	// datagrams that some member received; Duplicates: copies received
	// more than once (a relay that read a datagram twice).
	Census     bool   `json:"census"`
	LostIn     uint64 `json:"bench_lost_in"`
	LostOut    uint64 `json:"bench_lost_out"`
	Duplicates uint64 `json:"duplicates"`
	// SendRefused: sends the player's own kernel refused with
	// ECONNREFUSED, reporting an ICMP error from before (never sent).
	SendRefused uint64 `json:"send_refused"`
	// ICMPErrors: ICMP errors (port unreachable while no socket was bound)
	// queued on the player sockets (IP_RECVERR); ICMPPlayers: players that
	// got at least one, which a game client may take for a disconnect.
	ICMPErrors  uint64 `json:"icmp_errors"`
	ICMPPlayers int    `json:"icmp_players"`
	// Rejoined: challenges of the relay's join handshake the players
	// answered during the step: a relay that forgot its players (a restart
	// that kept no lobby table) challenges each when it next sends, and
	// the player proves its address and joins again.
	Rejoined uint64 `json:"rejoined"`
}

// LobbiesCut and PlayersCut add up the step's restarts.
func (m Impact) LobbiesCut() (lobbies, players int) {
	for _, r := range m.Restarts {
		lobbies += r.LobbiesCut
		players += r.PlayersCut
	}
	return lobbies, players
}

// notes are the report lines of an impact.
func (m Impact) notes() []string {
	var n []string
	for _, r := range m.Restarts {
		n = append(n, r.String())
	}
	if len(m.Restarts) > 0 && m.Census {
		n = append(n, fmt.Sprintf("bench's own count: %d datagrams reached no member (player→relay), %d copies missing (relay→players), %d duplicates, %d sends refused by the players' kernel",
			m.LostIn, m.LostOut, m.Duplicates, m.SendRefused))
	}
	if m.Rejoined > 0 {
		n = append(n, fmt.Sprintf("the relay challenged the players %d times during the step: it had forgotten them, and they joined again", m.Rejoined))
	}
	if m.ICMPErrors > 0 {
		n = append(n, fmt.Sprintf("%d ICMP errors on %d player sockets (port unreachable: no socket bound on the relay); a game client may take one for a disconnect", m.ICMPErrors, m.ICMPPlayers))
	}
	return n
}

// restartWatch follows the relay's identity through a step's readings.
type restartWatch struct {
	mu       sync.Mutex
	start    time.Time
	last     Reading
	lastAt   time.Time
	restarts []Restart
	gone     []Identity // processes replaced during the step
	reset    bool       // some restart reset the counters
	unknown  bool       // the relay does not say which process it is
}

func newRestartWatch(before Reading, start time.Time) *restartWatch {
	return &restartWatch{start: start, last: before, lastAt: start, unknown: !before.Known()}
}

// observe takes a reading made at time at.
func (w *restartWatch) observe(rd Reading, at time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.unknown || !rd.Known() {
		w.unknown = true
		return
	}
	if rd.Same(w.last.Identity) {
		w.last, w.lastAt = rd, at
		return
	}
	for _, g := range w.gone {
		if rd.Same(g) {
			// A late answer of a replaced process: during a handoff both
			// accept on the control listener for a moment.
			return
		}
	}
	old := w.last
	r := Restart{
		FromPID: old.PID, ToPID: rd.PID,
		After:  max(w.lastAt.Sub(w.start).Seconds(), 0),
		Before: max(at.Sub(w.start).Seconds(), 0),
		// A handoff carries the counters on; check it rather than trust
		// the pid alone.
		Handoff: rd.HandoffFromPID == old.PID && old.PID != 0 && !rd.Counters.restarted(old.Counters),
	}
	if r.Handoff {
		r.LobbiesCut = max(old.Lobbies-rd.HandoffLobbies, 0)
		r.PlayersCut = max(old.Players-rd.HandoffPlayers, 0)
	} else {
		r.LobbiesCut, r.PlayersCut = old.Lobbies, old.Players
		w.reset = true
	}
	w.restarts = append(w.restarts, r)
	w.gone = append(w.gone, old.Identity)
	w.last, w.lastAt = rd, at
}

// relayDelta is the relay's counters over the step, or why they are not
// known: a restart that reset them loses what the old process read after
// its last reading.
func (w *restartWatch) relayDelta(before, after Reading) (Counters, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case w.reset:
		return Counters{}, fmt.Errorf("the relay restarted (%s) and its counters started again from zero, so they miss what the old process read after its last reading; the direction of the loss is the bench's own count", pids(w.restarts))
	case after.Counters.restarted(before.Counters):
		return Counters{}, fmt.Errorf("the relay's counters went backwards: it restarted during the step")
	}
	return after.Counters.Sub(before.Counters), nil
}

func pids(rs []Restart) string {
	var s []string
	for _, r := range rs {
		s = append(s, fmt.Sprintf("pid %d → %d", r.FromPID, r.ToPID))
	}
	return strings.Join(s, ", ")
}

func (w *restartWatch) seen() []Restart {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]Restart(nil), w.restarts...)
}
