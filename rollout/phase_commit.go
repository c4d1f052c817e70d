package rollout

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/relayctl/relayctl/plans"
)

// commitPhase files the host's receipt and its journal on the host and
// releases the lock, in one round trip: applied, rolled back (the window
// failed and the old state is back and verified), or staged. A window that
// waits for this run's word is told to keep in the same round trip (with
// the prune, when there is one): the old release it could roll back to is
// pruned only once it no longer can.
type commitPhase struct{}

func (commitPhase) title() string      { return "commit" }
func (commitPhase) runs(*hostRun) bool { return true }

func (commitPhase) run(ctx context.Context, hr *hostRun) *ending {
	ctx = context.WithoutCancel(ctx)
	switch {
	case hr.o.StageOnly:
		done := end(Staged, StateAsWas, "staged for the window: nothing in force changed")
		hr.commit(ctx, Staged, nil, done)
		return done
	case hr.outcome == RolledBack:
		if hr.rec != nil {
			hr.res.Recovery = hr.rec.words(RolledBack)
		}
		done := end(RolledBack, StateAsWas, hr.failure.Error()).because(hr.rolledBackNext())
		if e := hr.commit(ctx, RolledBack, nil, done); e != nil {
			return e
		}
		return done
	}
	if hr.rec != nil {
		hr.res.Recovery = hr.rec.words(Applied)
	}
	if hr.filedInBatch { // the host kept, filed and unlocked in the window's batch
		hr.res.Outcome, hr.res.Ended = Applied, stamp(hr.o.Now())
		hr.res.Soak.settle(Applied)
		hr.committed = end(Applied, StateAsPlanned, "")
		return hr.committed
	}
	var lead []Op
	if hr.awaiting {
		lead = []Op{verdictOp(VerdictKeep)}
	}
	lead, e := hr.prune(ctx, lead)
	if e != nil {
		return e
	}
	done := end(Applied, StateAsPlanned, "")
	if s := hr.res.Soak; s != nil && s.Verdict == SoakRegression {
		done.next = NextRejected // kept (on_regression: keep), running a release its soak rejected
	}
	if e := hr.commit(ctx, Applied, lead, done); e != nil {
		return e
	}
	return done
}

// rolledBackNext is what to do after the window was rolled back: after a
// crash, --resume (the policy undid a dead run's window, or the dead run's
// word did: nothing of the plan is known wrong); else by the failure's
// cause (failureNext), a window the host rolled back by itself included
// (its own read-back, or a step that failed). A failure of the switch, or
// of the read-back after it, is the planned release and config not
// working there.
func (hr *hostRun) rolledBackNext() string {
	if hr.rec != nil && !hr.rec.rolledBackByHost() {
		return NextResume
	}
	switched := !hr.inWindow
	if hr.inWindow && hr.started > 0 {
		switched = hr.st[hr.started-1].traits().switches
	}
	return failureNext(hr.failure, switched)
}

// prune removes the old releases and store entries the plan lists, once
// the window has succeeded (never after one that failed), behind lead
// (the window's keep), and returns what of lead is still to send. It
// changes nothing the host's state depends on, so a failure is a line in
// the receipt, not a rollback: the next plan lists what is left.
func (hr *hostRun) prune(ctx context.Context, lead []Op) ([]Op, *ending) {
	o, ok := hr.pruneOp()
	if !ok {
		return lead, nil
	}
	err := hr.host.Run(ctx, append(lead, o), hr.keepHeard)
	if e := hr.keepLost(err, "during commit"); e != nil {
		return nil, e
	}
	if err != nil {
		hr.res.PruneError = plans.Visible(err.Error())
		hr.pr.say(hr.h.Host, "could not remove every old release: %v", err)
		return nil, nil
	}
	hr.res.Pruned = hr.pruned
	return nil, nil
}

// pruneOp is the prune of the old releases and store entries the plan
// lists (none: false), and hr.pruned their names for the receipt.
func (hr *hostRun) pruneOp() (Op, bool) {
	rel := hr.h.Release
	if len(rel.Prune)+len(rel.PruneStore) == 0 {
		return Op{}, false
	}
	o := op("prune", hr.p.Paths.Releases, hr.p.Paths.Current, strconv.Itoa(len(rel.Prune)+len(rel.PruneStore)))
	hr.pruned = nil
	for _, v := range rel.Prune {
		o.Argv = append(o.Argv, "v:"+v)
		hr.pruned = append(hr.pruned, v)
	}
	for _, sha := range rel.PruneStore {
		o.Argv = append(o.Argv, "s:"+sha)
		hr.pruned = append(hr.pruned, "store "+short12(sha))
	}
	return o, true
}

// keepHeard notes a window's keep answered: the window has ended, kept.
func (hr *hostRun) keepHeard(i int, r Result) error {
	if i == 0 && hr.awaiting {
		hr.awaiting = false
	}
	return nil
}

// keepLost is the ending of a commit round trip whose connection was lost,
// or whose keep the window refused (it had ended by itself first): what
// the host did is learned again from its journal (resync).
func (hr *hostRun) keepLost(err error, where string) *ending {
	var oe *OpError
	switch {
	case isConnLost(err):
		return lost(hr.stateLost(where), "commit: "+err.Error())
	case errors.As(err, &oe) && oe.Op.Kind == "verdict":
		hr.awaiting = false
		return lost(hr.stateLost(where), "commit: "+oe.Msg)
	}
	return nil
}

// commit files the receipt and the journal on the host, behind lead (the
// window's keep), and unlocks. done is the host's ending once it is filed:
// what a run that lost its connection meanwhile finds (the journal gone
// with the receipt). The receipt filed says that ending: the host's copy
// and the local one tell the same state (the run's loop sets it only once
// the phase has returned, after the filing).
func (hr *hostRun) commit(ctx context.Context, out Outcome, lead []Op, done *ending) *ending {
	hr.res.Outcome, hr.res.State, hr.res.Reason, hr.res.Next = out, done.state, done.reason, done.next
	hr.res.Soak.settle(out)
	hr.committed = done
	e := hr.file(ctx, "commit", lead)
	if out == Staged {
		return nil
	}
	return e
}

// file files the host's receipt under the run's name, keeping the newest
// HostReceiptsKept, and unlocks, in one round trip behind lead: "commit"
// files the run's journal beside it (the run is over), "record" the
// receipt alone, for a run that ends before its window without a commit
// (unchanged, refused under the lock), whose journal, if any, is not this
// run's. An applied window's commit keeps its backups beside the receipt,
// for a later rollback. A connection lost meanwhile, or a keep the window
// refused, is the ending it returns (keepLost).
func (hr *hostRun) file(ctx context.Context, kind string, lead []Op) *ending {
	hr.filing = true
	o, ok := hr.receiptOp(kind, hr.res.Outcome)
	if !ok {
		return nil
	}
	if kind == "commit" && hr.res.Outcome == Applied {
		hr.res.Undo = hr.undoRecord(o.Args[0])
	}
	// The unlock goes in the same batch; if the filing fails the host
	// skips it, and the run's end unlocks.
	err := hr.host.Run(ctx, append(lead, o, unlockOp()), hr.keepHeard)
	if e := hr.keepLost(err, "during commit"); e != nil {
		return e
	}
	if err != nil {
		hr.pr.say(hr.h.Host, "could not file the receipt on the host: %v", err)
		return nil
	}
	hr.locked = false
	return nil
}

// receiptOp files the host's receipt of this run, as it ends with out
// (kind commit or record; false when it cannot be made, which is said).
func (hr *hostRun) receiptOp(kind string, out Outcome) (Op, bool) {
	hr.res.Ended = stamp(hr.o.Now())
	hr.res.RoundTrips = hr.trips + hr.host.RoundTrips() + 1 // with the filing's own
	name := HostReceiptName(hr.p, hr.o.RunInfo.ID)
	res := *hr.res
	res.Outcome, res.Undo = out, nil
	if out == Applied {
		res.State = StateAsPlanned
	}
	if kind == "commit" && out == Applied {
		res.Undo = hr.undoRecord(name) // the host keeps the window's backups beside this receipt
	}
	body, err := hostReceiptJSON(hr.p, &res, hr.o)
	if err != nil {
		hr.pr.say(hr.h.Host, "receipt: %v", err)
		return Op{}, false
	}
	o := op(kind, name, strings.ReplaceAll(string(out), " ", "-"), strconv.Itoa(HostReceiptsKept))
	o.Data = body
	return o, true
}

// stamp is a time as receipts give it: UTC, RFC 3339 to the millisecond.
func stamp(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z07:00") }
