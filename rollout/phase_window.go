package rollout

import (
	"context"
	"fmt"

	"github.com/relayctl/relayctl/plans"
)

// windowPhase runs the window's steps in order, the one moment players
// notice, with the read-back's first reading right behind them in the same
// batch. From here on the host finishes or rolls back whatever happens to
// ctx: an interrupt stops other hosts, not this one.
type windowPhase struct{}

func (windowPhase) title() string { return "window" }
func (windowPhase) runs(hr *hostRun) bool {
	return hr.rec == nil || hr.rec.policy == plans.RecoverComplete
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
	}, []Op{op("step", "start window")})
	tail := observeOp(hr.q)
	started, err := hr.runSteps(context.WithoutCancel(ctx), plans.PhaseWindow, b, &tail, func(r Result) {
		if r.Facts != nil {
			r.Facts.Host = hr.h.Host
			hr.first = r.Facts
		}
	})
	hr.started = max(hr.started, started) // a recovered window began before this run
	for _, sp := range b.spans[:b.done] {
		switch t := hr.st[sp.index].traits(); {
		case t.handsOver:
			hr.res.Handoffs++
		case t.switches:
			hr.res.Restarts++
		}
	}
	if err != nil {
		hr.failure, hr.inWindow = err, true
		hr.playerImpact(nil)
	}
	return nil
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
