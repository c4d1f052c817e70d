package rollout

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

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
	after, err := hr.verify(context.WithoutCancel(ctx), before, hr.first)
	if after != nil && hr.stopped > 0 && after.ClockNanos > hr.stopped {
		hr.res.WindowMillis = (after.ClockNanos - hr.stopped) / 1e6
	}
	hr.res.After = after
	hr.playerImpact(after)
	hr.failure = err
	return nil
}

// verify reads the host back until it matches the plan, and has for
// StableFor with the same relay process, or time runs out. It returns the
// first reading that matched: the window ends there.
func (hr *hostRun) verify(ctx context.Context, before, reading *plans.Facts) (*plans.Facts, error) {
	deadline := time.Now().Add(hr.o.VerifyTimeout) // a real clock: Now may be a test's fixed one
	d := plans.Step{Phase: plans.PhaseVerify, Kind: KindReadBack, Title: "read back"}
	target := steps(hr.p, hr.h, stepInput{}, true)
	var first *plans.Facts // the first matching reading of the process seen now
	var since time.Time
	for {
		after := reading // a reading made already (in the window's batch)
		reading = nil
		if after == nil {
			var err error
			if after, err = hr.observe(ctx); err != nil {
				return nil, err // a connection lost is resync's, else the read-back failed
			}
		}
		checks := checksOf(target, &checkCtx{p: hr.p, h: hr.h, before: before, after: after})
		// A unit systemd restarts on its own, or has given up on, will not
		// come right by waiting: stop now, with its journal (rollback).
		if why := unitFailing(hr.p, after); why != "" && !allOK(checks) {
			hr.res.Verify = checks
			hr.record(plans.PhaseVerify, d, "failed", why)
			return after, errors.New("read-back: " + why)
		}
		switch {
		case !allOK(checks):
			first = nil
		case first == nil || !sameProcess(first, after):
			first, since = after, time.Now()
		}
		stable := first != nil && time.Since(since) >= hr.o.StableFor
		if stable || time.Now().After(deadline) {
			hr.res.Verify = checks
			if bad := failed(checks); bad != "" {
				hr.record(plans.PhaseVerify, d, "failed", bad)
				return after, errors.New("read-back: " + bad)
			}
			if !stable {
				why := fmt.Sprintf("the relay read back as planned but did not stay up for %s (pid %d)", hr.o.StableFor, after.Service.PID)
				hr.record(plans.PhaseVerify, d, "failed", why)
				return after, errors.New("read-back: " + why)
			}
			hr.record(plans.PhaseVerify, d, "done", "")
			return first, nil
		}
		time.Sleep(200 * time.Millisecond)
	}
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
