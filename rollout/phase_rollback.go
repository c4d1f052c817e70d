package rollout

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/relayctl/relayctl/plans"
)

// rollbackPhase undoes the window when one of its steps or its read-back
// failed, and proves the old state by reading it back. The rollback runs
// on the host by itself as the window did (window.go): the window's
// process, told to undo, runs it; or, the window over, a process of its
// own. A window the host rolled back already is only read back.
type rollbackPhase struct{}

func (rollbackPhase) title() string         { return "rollback" }
func (rollbackPhase) runs(hr *hostRun) bool { return hr.failure != nil }

func (rollbackPhase) run(ctx context.Context, hr *hostRun) *ending {
	ctx = context.WithoutCancel(ctx)
	if isConnLost(hr.failure) {
		return lost(hr.stateLost("inside the window"), "window: "+hr.failure.Error())
	}
	if hr.rec != nil && hr.rec.rolledBack {
		return hr.readBackRolledBack(ctx)
	}
	if hr.filedInBatch {
		if err := hr.reopen(ctx); err != nil {
			return end(Failed, "as planned by the host's own read-back, which relayctl's does not confirm", "window: "+hr.failure.Error()+"; reopen: "+err.Error())
		}
	}
	hr.undoing = true
	hr.lastWords(ctx)
	hr.pr.say(hr.h.Host, "window failed: %v; rolling back", hr.failure)
	ran, before := hr.st[:hr.started], hr.before()
	if hr.rec != nil && hr.rec.policy == plans.RecoverRollback {
		ran = hr.rec.ran // after a crash: the steps the journal shows begun
	}
	state, err := hr.rollback(ctx, ran, hr.inWindow, before)
	switch {
	case isConnLost(err) || errors.Is(err, errWindowEnded):
		return lost(hr.stateLost("during rollback"), "window: "+hr.failure.Error()+"; rollback: "+err.Error())
	case err != nil:
		return end(Failed, state, "window: "+hr.failure.Error()+"; rollback: "+err.Error())
	}
	hr.outcome = RolledBack
	return nil
}

// before is the host before the window, for the checks of a rollback: the
// lock's reading, or after a crash the host as the plan found it (this
// run's reading is the host in between).
func (hr *hostRun) before() *plans.Facts {
	if hr.rec != nil && !hr.rec.sameRun {
		return plannedBefore(hr.stored)
	}
	return hr.res.Before
}

// readBackRolledBack proves the old state of a window the host rolled back
// (by itself, or on this run's word before the connection was lost).
func (hr *hostRun) readBackRolledBack(ctx context.Context) *ending {
	hr.pr.say(hr.h.Host, "%v; reading the old state back", hr.failure)
	var undone []step
	for i := len(hr.rec.ran) - 1; i >= 0; i-- {
		undone = append(undone, hr.rec.ran[i])
	}
	state, err := hr.readBackRestored(ctx, undone, &checkCtx{p: hr.p, h: hr.h, before: hr.before()})
	if err != nil {
		return end(Failed, state, hr.failure.Error()+"; "+err.Error())
	}
	hr.outcome = RolledBack
	return nil
}

// errWindowEnded is a verdict the host refused: its window had ended by
// itself first (its journal says how).
var errWindowEnded = errors.New("the window on the host ended by itself first")

// rollbackOps are the primitives that undo the window steps that started
// (ran), last first, with the relay switched back once after everything
// else (its undo last), each marked undoing; undone are those steps, last
// first. lastFailed says the last step's do failed (undoOf).
func rollbackOps(ran []step, lastFailed bool) (ops []Op, undone []step) {
	var last []Op
	for i := len(ran) - 1; i >= 0; i-- {
		s := ran[i]
		if s.describe().Phase != plans.PhaseWindow {
			continue
		}
		undone = append(undone, s)
		undo := undoOf(s, lastFailed && i == len(ran)-1)
		if s.traits().switches {
			last = undo
			continue
		}
		ops = append(ops, undo...)
	}
	ops = append(append([]Op{op("step", "start rollback")}, ops...), last...)
	for i := range ops {
		ops[i].undoing = true
	}
	return ops, undone
}

// rollback undoes the window steps that started, last first, with the
// relay switched back (restarted, handed back, or stopped) once after
// everything else is back, and verifies the old state. lastFailed says the
// last step's do failed, which a handoff undoes differently (undoOf). It
// returns the host's state in words when that is not "as it was".
func (hr *hostRun) rollback(ctx context.Context, ran []step, lastFailed bool, before *plans.Facts) (string, error) {
	ops, undone := rollbackOps(ran, lastFailed)
	d := plans.Step{Phase: "rollback", Kind: "rollback", Title: "roll back the window"}
	c := &checkCtx{p: hr.p, h: hr.h, before: before}
	if err := hr.undo(ctx, ops); err != nil {
		hr.record("rollback", d, "failed", err.Error())
		if isConnLost(err) || errors.Is(err, errWindowEnded) {
			return "", err
		}
		// Read back anyway: say exactly what the host looks like. A
		// rollback whose primitives complained (a journal it could not
		// write) but that put everything back is a rollback.
		after, oerr := hr.observe(ctx)
		if oerr != nil {
			return "unknown: rollback failed and the host could not be read back", err
		}
		hr.res.After, c.after = after, after
		checks := restoredChecks(undone, c)
		if allOK(checks) {
			hr.res.Verify = append(hr.res.Verify, checks...)
			return StateAsWas, nil
		}
		return "in between: " + failed(checks), err
	}
	hr.record("rollback", d, "done", "")
	if slices.ContainsFunc(undone, func(s step) bool { return s.traits().switches }) {
		switch ops[len(ops)-1].Kind { // the relay switched back (a stop is no switch)
		case "restart":
			hr.res.Restarts++
		case "handoff":
			hr.res.Handoffs++
		}
	}
	return hr.readBackRestored(ctx, undone, c)
}

// undo sends a rollback (ops) to run on the host by itself: to the window
// that waits for this run's word, or, with none, as a window of its own.
// A window that ended by itself first is errWindowEnded; a host that
// cannot start a process of its own rolls back in the session.
func (hr *hostRun) undo(ctx context.Context, ops []Op) error {
	lead := detachOp(&Window{ID: windowID(), Rollback: true})
	if hr.awaiting {
		lead = verdictOp(VerdictUndo)
	}
	err := hr.host.Run(ctx, append([]Op{lead}, ops...), func(i int, r Result) error {
		if i == 0 {
			hr.awaiting = false
		}
		return nil
	})
	var oe *OpError
	switch {
	case err == nil || !errors.As(err, &oe) || oe.Op.Kind != lead.Kind:
		return err
	case lead.Kind == "verdict":
		hr.awaiting = false
		return fmt.Errorf("%w: %s", errWindowEnded, oe.Msg)
	}
	hr.pr.say(hr.h.Host, "%v; rolling back in the session", err)
	return hr.host.Run(ctx, ops, nil)
}

// readBackRestored reads the host back until it is as it was, or time runs
// out.
func (hr *hostRun) readBackRestored(ctx context.Context, undone []step, c *checkCtx) (string, error) {
	deadline := time.Now().Add(hr.o.VerifyTimeout) // a real clock: Now may be a test's fixed one
	for {
		after, err := hr.observe(ctx)
		if err != nil {
			return "unknown: the host could not be read back after rollback", err
		}
		c.after = after
		checks := restoredChecks(undone, c)
		if allOK(checks) || time.Now().After(deadline) {
			hr.res.After = after
			hr.res.Verify = append(hr.res.Verify, checks...)
			if bad := failed(checks); bad != "" {
				return "in between: " + bad, errors.New("old state not verified: " + bad)
			}
			return StateAsWas, nil
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// restoredChecks are the rollback's read-back: each undone step's own, and
// the relay socket as it was.
func restoredChecks(undone []step, c *checkCtx) []Check {
	var out []Check
	for _, s := range undone {
		for _, x := range s.restored(c) {
			x.What = "rollback: " + x.What
			out = append(out, x)
		}
	}
	for _, x := range (readBack{port: c.p.Relay.Port}).restored(c) {
		x.What = "rollback: " + x.What
		out = append(out, x)
	}
	return out
}

// lastLines are a journal's last n lines, each without journalctl's
// timestamp and host, joined with " | ".
func lastLines(log string, n int) string {
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(log), "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "-- ") {
			continue
		}
		// "2026-12-01T16:02:03+0000 host unit[pid]: text" → "unit[pid]: text"
		if f := strings.SplitN(l, " ", 3); len(f) == 3 && strings.Contains(f[0], "T") {
			l = f[2]
		}
		out = append(out, l)
	}
	if len(out) > n {
		out = out[len(out)-n:]
	}
	return plans.Visible(strings.Join(out, " | "))
}

// reopen takes back the receipt a host filed in its window's batch, whose
// read-back relayctl's own check does not confirm, so the window can be
// rolled back: a new session takes the lock (the batch's unlock ended the
// last one; the window may still be ending), and the run's journal and the
// window's backups are the run's again.
func (hr *hostRun) reopen(ctx context.Context) error {
	name := HostReceiptName(hr.p, hr.o.RunInfo.ID)
	lock := lockOp(hr.o.Owner, hr.o.VerifyTimeout+time.Minute)
	err := hr.host.Run(ctx, []Op{lock, op("reopen", name)}, func(i int, r Result) error {
		if i == 0 {
			hr.locked = true
		}
		return nil
	})
	if err != nil {
		return err
	}
	hr.filedInBatch, hr.awaiting, hr.committed = false, false, nil
	hr.pr.say(hr.h.Host, "the receipt the host filed on its own read-back is taken back; rolling the window back")
	return nil
}
