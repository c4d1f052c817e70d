package rollout

import (
	"context"
	"errors"
	"fmt"

	"github.com/relayctl/relayctl/plans"
)

// windowPhase runs the window's steps in order, the one moment players
// notice, with the read-back's first reading right behind them in the same
// batch, as a window the host runs by itself (window.go): from here on the
// host finishes or rolls back whatever happens to ctx, to relayctl or to
// the connection; an interrupt stops other hosts, not this one.
type windowPhase struct{}

func (windowPhase) title() string { return "window" }
func (windowPhase) runs(hr *hostRun) bool {
	return hr.rec == nil || hr.rec.policy == plans.RecoverComplete && !hr.rec.rolledBack
}

func (windowPhase) run(ctx context.Context, hr *hostRun) *ending {
	if st := hr.gate.RelayStatus; st != nil && st.Read {
		hr.res.PlayersAtWindow = &plans.Players{Players: st.Players, Lobbies: st.Lobbies}
	}
	b := newStepBatch(plans.PhaseWindow, hr.st, func(s step) []Op {
		switch {
		case s.describe().Phase != plans.PhaseWindow:
			return nil
		case hr.rec != nil: // what a dead run left of it
			return hr.rec.recoveredOps(s)
		}
		return s.do()
	}, []Op{{Kind: "detach"}, op("step", "start window")})
	if len(b.spans) == 0 && hr.rec != nil {
		return nil // nothing is left of the recovered window: the read-back follows
	}
	tail := hr.windowTail()
	b.ops[0] = detachOp(hr.windowProgram(b))
	started, err := hr.runSteps(context.WithoutCancel(ctx), plans.PhaseWindow, b, tail, func(k int, r Result) error { return hr.tailAnswer(tail[k], r) })
	hr.started = max(hr.started, started) // a recovered window began before this run
	var done []step
	for _, sp := range b.spans[:b.done] {
		done = append(done, hr.st[sp.index])
	}
	hr.countSwitch(done)
	var te *tailError
	if errors.As(err, &te) && !isConnLost(err) {
		err = hr.tailFailed(tail, te)
	}
	if err != nil {
		hr.failure, hr.inWindow = err, true
		hr.playerImpact(nil)
	}
	return nil
}

// countSwitch counts the relay switch among steps done, once a run.
func (hr *hostRun) countSwitch(done []step) {
	for _, s := range done {
		switch t := s.traits(); {
		case hr.switchCounted:
		case t.handsOver:
			hr.res.Handoffs++
			hr.switchCounted = true
		case t.switches:
			hr.res.Restarts++
			hr.switchCounted = true
		}
	}
}

// windowProgram is what the host needs to end window b (its ops after the
// detach, then the read-back) by itself: its own read-back, the checks it makes of
// it, and for a stop at any op, or checks that do not hold, the rollback
// this run would send (rollbackOps).
func (hr *hostRun) windowProgram(b *stepBatch) *Window {
	w := &Window{ID: windowID(), Await: hr.windowAwait(), Judge: hr.o.VerifyTimeout + hr.o.StableFor, Stable: hr.o.StableFor, Observe: &hr.q}
	c := &checkCtx{p: hr.p, h: hr.h, before: hr.res.Before}
	if hr.rec != nil && !hr.rec.sameRun {
		c.before = nil // a dead run's switch: its before is unknown
	}
	last := hr.started
	for _, s := range hr.st {
		if d := s.describe().Phase; d == plans.PhaseWindow || d == plans.PhaseVerify {
			w.Checks = append(w.Checks, s.hostChecks(c)...)
		}
	}
	variant := func(ran []step, lastFailed bool) int {
		ops, _ := rollbackOps(ran, lastFailed)
		if len(ops) == 1 { // its journal line alone: nothing to undo
			return 0
		}
		w.Undo = append(w.Undo, ops)
		return len(w.Undo)
	}
	n := len(b.ops) // the window's ops: b.ops after the detach, and tail
	w.UndoAt = make([]int, n+1)
	before := variant(hr.st[:hr.started], false) // a stop before any step began: what a dead run began
	for i := range w.UndoAt {
		w.UndoAt[i] = before
	}
	for _, sp := range b.spans {
		v := variant(hr.st[:sp.index+1], true)
		for i := sp.first; i < sp.end; i++ {
			w.UndoAt[i-1] = v
		}
		last = max(last, sp.index+1)
	}
	w.UndoAt[n-1] = variant(hr.st[:last], false) // the read-back, and then its checks
	w.UndoAt[n] = w.UndoAt[n-1]
	return w
}

// unitLog keeps systemd's own account of a failed start in the receipt.
func (hr *hostRun) unitLog(ctx context.Context, since int64) {
	svc := hr.p.Relay.Service
	if svc.Manager != "systemd" {
		return
	}
	if since == 0 {
		since = hr.res.started.UnixNano()
	}
	hr.host.Run(ctx, []Op{op("unit-log", unitLogArgs(hr.p, hr.res.After, since)...)}, func(_ int, r Result) error {
		hr.res.UnitLog = r.Value
		return nil
	})
}

// unitLogArgs are unit-log's words: with the invocation id of a run the
// read-back saw failing, so the host waits for that run's last words. The
// id is the host's own answer: only systemd's form (32 hex digits) is
// passed on.
func unitLogArgs(p *plans.Plan, after *plans.Facts, since int64) []string {
	args := []string{p.Relay.Service.Name, fmt.Sprint(since)}
	if after != nil && invocationID(after.Service.InvocationID) && unitFailing(p, after) != "" {
		args = append(args, after.Service.InvocationID)
	}
	return args
}

func invocationID(s string) bool {
	if len(s) != 32 {
		return false
	}
	for _, c := range s {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}
