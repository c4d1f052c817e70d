package rollout

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/relayctl/relayctl/plans"
)

// drainPhase is the drain gate (drainGate), where the spec has one.
type drainPhase struct{}

func (drainPhase) title() string         { return "drain" }
func (drainPhase) runs(hr *hostRun) bool { return hr.rec == nil }

func (drainPhase) run(ctx context.Context, hr *hostRun) *ending {
	gate, out, why := hr.drainGate(ctx, hr.res.Before)
	if gate == nil {
		e := end(out, StateAsWas, why)
		if out == Refused {
			e.next = NextPlayers // the deadline came with players on it (on_deadline: abort)
		}
		return e
	}
	hr.gate = gate
	return nil
}

// drainGate holds a host before its window until the relay reports at
// most the spec's max_players, polling its /status (through observe), for
// at most the deadline; with no_new_lobbies it asks the relay to refuse new
// lobbies meanwhile (POST /drain) and lifts that if the host does not go
// on. While it waits the host gives its parallel slot to ready hosts. It
// returns the last reading, or nil with the host's outcome and why.
func (hr *hostRun) drainGate(ctx context.Context, before *plans.Facts) (*plans.Facts, Outcome, string) {
	d := hr.p.Drain
	start := time.Now()
	deadline := start.Add(d.Deadline)
	step := plans.Step{Phase: plans.PhaseStage, Kind: "drain", Title: fmt.Sprintf("drain gate: at most %d players, up to %v", d.MaxPlayers, d.Deadline)}
	closed := false
	reopen := func() {
		if closed {
			hr.relayDrain(context.WithoutCancel(ctx), before, false)
		}
	}
	if d.NoNewLobbies && before.Service.Running {
		if err := hr.relayDrain(ctx, before, true); err != nil {
			hr.pr.say(hr.h.Host, "drain: could not ask the relay to refuse new lobbies: %v; waiting anyway", err)
		} else {
			closed = true
		}
	}
	var resume func()
	defer func() {
		if resume != nil {
			resume()
		}
	}()
	cur := before
	for {
		players, lobbies, known := playersOf(cur)
		if known && players <= d.MaxPlayers {
			hr.res.DrainWaitMillis = time.Since(start).Milliseconds()
			hr.record(plans.PhaseStage, step, "done", fmt.Sprintf("%d players in %d lobbies after %v", players, lobbies, time.Since(start).Round(time.Second)))
			return cur, "", ""
		}
		now := "its /status could not be read"
		if known {
			now = fmt.Sprintf("%d players in %d lobbies", players, lobbies)
		}
		if time.Now().After(deadline) {
			hr.res.DrainWaitMillis = time.Since(start).Milliseconds()
			msg := fmt.Sprintf("drain: %s after %v", now, d.Deadline)
			switch d.OnDeadline {
			case plans.DrainForce:
				hr.record(plans.PhaseStage, step, "done", msg+": forced (on_deadline: force)")
				hr.pr.say(hr.h.Host, "%s: going on anyway (on_deadline: force)", msg)
				return cur, "", ""
			case plans.DrainSkip:
				reopen()
				hr.record(plans.PhaseStage, step, "failed", msg)
				return nil, Skipped, msg + " (on_deadline: skip): left for a later run, nothing in force changed; apply the plan again when its players have gone"
			default:
				reopen()
				hr.record(plans.PhaseStage, step, "failed", msg)
				return nil, Refused, msg + " (on_deadline: abort): nothing in force changed"
			}
		}
		hr.pr.say(hr.h.Host, "%s, waiting, %v left", now, time.Until(deadline).Round(time.Second))
		if resume == nil && hr.yield != nil {
			resume = hr.yield()
		}
		select {
		case <-ctx.Done():
			reopen()
			hr.record(plans.PhaseStage, step, "failed", "interrupted")
			return nil, NotStarted, "interrupted while waiting for its players to leave (nothing in force changed)"
		case <-time.After(min(d.Poll, time.Until(deadline)+time.Millisecond)):
		}
		next, err := hr.observe(ctx)
		if err != nil {
			reopen()
			return nil, Failed, "drain: observe: " + err.Error() + " (nothing in force changed)"
		}
		cur = next
	}
}

func playersOf(f *plans.Facts) (players, lobbies int, known bool) {
	if !f.Service.Running {
		return 0, 0, true // no relay, no players
	}
	if st := f.RelayStatus; st != nil && st.Read {
		return st.Players, st.Lobbies, true
	}
	return 0, 0, false
}

// relayDrain turns the relay's no-new-lobbies mode on or off through its
// control plane, in its network namespace.
func (hr *hostRun) relayDrain(ctx context.Context, f *plans.Facts, on bool) error {
	if hr.p.Relay.Control == "" || !f.Service.Running {
		return fmt.Errorf("the relay has no control plane to ask")
	}
	verb := "DELETE"
	if on {
		verb = "POST"
	}
	return hr.host.Run(ctx, []Op{op("relay-drain", strconv.Itoa(f.Service.PID), hr.p.Relay.Control, verb)}, nil)
}

// playerImpact records what the switch did to the relay's players: a
// restart cut every player the relay held at the window; a handoff kept
// its lobbies (the new relay names the one it took over from).
func (hr *hostRun) playerImpact(after *plans.Facts) {
	at := hr.res.PlayersAtWindow
	if at == nil {
		return
	}
	cut := at.Players
	before := hr.res.Before
	switch {
	case after == nil || before == nil:
	case hr.h.Switch == plans.SwitchReload:
		// The same process on the same sockets: nobody was cut.
		if after.Service.PID == before.Service.PID && after.Socket.Inode == before.Socket.Inode {
			cut = 0
		}
	case hr.h.Switch == plans.SwitchHandoff || hr.h.Switch == plans.SwitchFDStore:
		st := after.RelayStatus
		kept := st != nil && st.Read && st.HandoffFromPID == before.Service.PID && after.Socket.Inode == before.Socket.Inode
		if kept && (hr.h.Switch == plans.SwitchHandoff || st.SocketFrom == "fdstore" && st.FDStoreState == "final") {
			cut = 0
			hr.res.HandoffGapUS = st.HandoffGapUS
		}
	}
	if hr.res.Restarts+hr.res.Handoffs > 0 {
		hr.res.PlayersCut = &cut
	}
}
