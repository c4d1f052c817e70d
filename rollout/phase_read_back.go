package rollout

import (
	"context"
	"fmt"
	"strings"

	"github.com/relayctl/relayctl/plans"
)

// readBackPhase reads the host back until it matches the plan, and has for
// StableFor with the same relay process, or time runs out: the proof, from
// the kernel, that the window did what the plan said.
type readBackPhase struct{}

func (readBackPhase) title() string         { return "read-back" }
func (readBackPhase) runs(hr *hostRun) bool { return hr.failure == nil }

func (readBackPhase) run(ctx context.Context, hr *hostRun) *ending {
	before := hr.res.Before
	if hr.rec != nil && hr.rec.switched {
		before = nil // the switch was a dead run's: its before is unknown
	}
	var after *plans.Facts
	var err error
	if hr.hostRB != nil {
		after, err = hr.confirm(before)
	} else {
		after, err = hr.verify(context.WithoutCancel(ctx), before, hr.first)
	}
	if after != nil && hr.stopped > 0 && after.ClockNanos > hr.stopped {
		hr.res.WindowMillis = (after.ClockNanos - hr.stopped) / 1e6
	}
	hr.res.After = after
	hr.playerImpact(after)
	hr.failure = err
	return nil
}

// verify reads the host back until it matches the plan, and has for
// StableFor with the same relay process, or time runs out (ReadBack, the
// judge the host agent runs too): VerifyTimeout to read back as planned,
// and StableFor more to hold. It returns the first reading that
// matched: the window ends there.
func (hr *hostRun) verify(ctx context.Context, before, reading *plans.Facts) (*plans.Facts, error) {
	rb := ReadBack{Plan: hr.p, Host: hr.h, Before: before, StableFor: hr.o.StableFor, Timeout: hr.o.VerifyTimeout}
	if e := hr.keptByHost(); e != nil {
		rb.hostHeld = e.PID // held there for StableFor already
	}
	res, err := rb.Judge(reading, func() (*plans.Facts, error) { return hr.observe(ctx) })
	if err != nil {
		return nil, err // a connection lost is resync's, else the read-back failed
	}
	hr.judged(res)
	return res.After, res.Err()
}

// keptByHost is the end of this run's own window that the host kept by
// itself after the connection was lost, nil for any other. Only this
// run's: the host held it for this run's StableFor; a dead run's window
// was held for that run's, which a --resume need not share.
func (hr *hostRun) keptByHost() *WindowEnd {
	if hr.rec == nil || hr.rec.journal == nil || !hr.rec.sameRun {
		return nil
	}
	if e := hr.rec.journal.End; e != nil && e.By == ByHost && e.Verdict == EndKept {
		return e
	}
	return nil
}

// confirm is relayctl's own check of the reading a host judged its window
// on (in the window's batch): its verdict stands only if relayctl's checks
// of that reading agree; where they do not, the window is rolled back (a
// host that kept it, and filed its receipt, has it reopened first).
func (hr *hostRun) confirm(before *plans.Facts) (*plans.Facts, error) {
	host := *hr.hostRB
	res := ReadBackResult{After: hr.first, Held: host.Held, Why: host.Why}
	if hr.first != nil {
		res.Checks = hr.readBack(before).Checks(hr.first)
	}
	switch ok := hr.first != nil && allOK(res.Checks); {
	case host.Held && !ok:
		res.Held = false
		res.Why = "the host held its window by its own read-back, but relayctl's check of the same reading does not: " + failed(res.Checks)
		if hr.first == nil {
			res.Why = "the host held its window by its own read-back, but sent no reading relayctl could check"
		}
	case !host.Held && host.Why == "":
		res.Why = "the host's read-back did not hold"
	}
	hr.judged(res)
	return res.After, res.Err()
}

// judged records a read-back's verdict: its checks, and its step.
func (hr *hostRun) judged(res ReadBackResult) {
	d := plans.Step{Phase: plans.PhaseVerify, Kind: KindReadBack, Title: "read back"}
	hr.res.Verify = res.Checks
	if res.Held {
		hr.record(plans.PhaseVerify, d, "done", "")
		return
	}
	hr.record(plans.PhaseVerify, d, "failed", res.Why)
}

// sameProcess reports whether two readings show the same relay process.
func sameProcess(a, b *plans.Facts) bool {
	return a.Service.PID == b.Service.PID && a.Service.InvocationID == b.Service.InvocationID && a.Service.Restarts == b.Service.Restarts
}

func allOK(c []Check) bool { return failed(c) == "" }

func failed(c []Check) string {
	var bad []string
	for _, x := range c {
		if !x.OK {
			bad = append(bad, fmt.Sprintf("%s: got %s, want %s", x.What, x.Got, x.Want))
		}
	}
	return plans.Visible(strings.Join(bad, "; "))
}

// unitFailing says why a systemd unit read back is failing, "" when it is
// not: systemd gave up on it, is about to restart it, or restarted it on
// its own since the window (systemctl restart set NRestarts to 0).
func unitFailing(p *plans.Plan, f *plans.Facts) string {
	s := f.Service
	switch {
	case p.Relay.Service.Manager != "systemd":
		return ""
	case s.ActiveState == "failed":
		return fmt.Sprintf("systemd gave up on %s (%s/%s)", p.Relay.Service.Name, s.ActiveState, s.SubState)
	case s.SubState == "auto-restart":
		return fmt.Sprintf("%s exited and systemd is about to restart it (%s/%s, %d restarts on its own)", p.Relay.Service.Name, s.ActiveState, s.SubState, s.Restarts)
	case s.Restarts > 0:
		return fmt.Sprintf("systemd restarted %s %d times on its own since the window", p.Relay.Service.Name, s.Restarts)
	}
	return ""
}
