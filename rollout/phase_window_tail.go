package rollout

import (
	"errors"
	"fmt"

	"github.com/relayctl/relayctl/plans"
)

// What follows a window's steps in its batch. Where the host may end the
// run by itself (no soak follows the window, no dead run's window is being
// recovered), it reads itself back inside the window by the plan's own
// checks (ReadBack, the read-back op), and the session's keep, prune,
// receipt and unlock follow in the same batch: they run only if it held,
// so a window that holds costs no round trip of its own. relayctl then
// checks the reading the host judged by itself (readBackPhase). Elsewhere
// the window ends on observe, the read-back's first reading, and the
// read-back and commit phases follow as their own round trips.

// hostJudges says the host reads itself back and commits in the window's
// batch.
func (hr *hostRun) hostJudges() bool {
	return hr.rec == nil && !hr.o.StageOnly && (hr.o.Rollout == nil || hr.o.Rollout.Soak == nil)
}

// windowTail is what follows the window's steps in its batch.
func (hr *hostRun) windowTail() []Op {
	if !hr.hostJudges() {
		return []Op{observeOp(hr.q)}
	}
	tail := []Op{readBackOp(hr.readBack(hr.res.Before), hr.q), verdictOp(VerdictKeep)}
	if o, ok := hr.pruneOp(); ok {
		tail = append(tail, o)
	}
	if o, ok := hr.receiptOp("commit", Applied); ok {
		o.Args = append(o.Args, "read-back")
		tail = append(tail, o, unlockOp())
		hr.tailReceipt = o.Args[0]
	}
	return tail
}

// filedByHost is the ending of a host read again after a lost connection
// (resync) whose journal is gone though its window's batch carried the
// receipt: the host held its own read-back, kept its window and filed the
// run before the connection went (or with nobody to hear it). It stands
// if relayctl's checks of the host as it reads now hold; else nil.
func (hr *hostRun) filedByHost(now *plans.Facts) *ending {
	if hr.tailReceipt == "" || hr.undoing {
		return nil
	}
	checks := hr.readBack(hr.res.Before).Checks(now)
	if !allOK(checks) {
		return nil
	}
	hr.res.After = now
	hr.judged(ReadBackResult{After: now, Checks: checks, Held: true})
	hr.filedInBatch, hr.filing, hr.awaiting = true, true, false // the lock, taken again, is let go as any run lets it go
	hr.res.Undo = hr.undoRecord(hr.tailReceipt)
	hr.res.Recovery = RecoveryCompletedByHost
	hr.res.Outcome, hr.res.Ended = Applied, stamp(hr.o.Now())
	hr.committed = end(Applied, StateAsPlanned, "")
	return hr.committed
}

// readBack is how this host's window is judged: by this plan's checks of
// it alone, held for StableFor, within VerifyTimeout.
func (hr *hostRun) readBack(before *plans.Facts) ReadBack {
	one := *hr.p
	one.Hosts = []*plans.HostPlan{hr.h}
	return ReadBack{Plan: &one, Host: hr.h, Before: before, StableFor: hr.o.StableFor, Timeout: hr.o.VerifyTimeout}
}

// tailAnswer takes the answer of a tail's op o.
func (hr *hostRun) tailAnswer(o Op, r Result) error {
	switch o.Kind {
	case "observe", "read-back":
		if r.Facts != nil {
			r.Facts.Host = hr.h.Host
			hr.first = r.Facts
		}
		hr.hostRB = r.ReadBack
	case "verdict":
		hr.awaiting = false // the host kept its window
	case "prune":
		hr.res.Pruned = hr.pruned
	case "commit":
		hr.filedInBatch = true
		hr.res.Undo = hr.undoRecord(o.Args[0]) // the window's backups are kept beside it
	case "unlock":
		hr.locked = false
	}
	return nil
}

// tailFailed takes a failure of the tail's op te.at: a read-back that
// could not run fails the window; a keep the host refused (its read-back
// did not hold, or the window stopped) leaves the verdict to the read-back
// phase; a prune, receipt or unlock that failed is done again by commit.
func (hr *hostRun) tailFailed(tail []Op, te *tailError) error {
	var oe *OpError
	switch o := tail[te.at]; {
	case o.Kind == "read-back":
		return fmt.Errorf("read-back: %w", te.err)
	case o.Kind == "observe":
		return nil // the read-back phase reads the host itself
	case o.Kind == "verdict" && errors.As(te.err, &oe):
		hr.pr.say(hr.h.Host, "the host did not keep its window: %s", plans.Visible(oe.Msg))
	case o.Kind == "prune":
		hr.res.PruneError = plans.Visible(te.err.Error())
	}
	return nil
}
