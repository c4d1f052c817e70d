package rollout

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/relayctl/relayctl/plans"
)

// commitPhase files the host's receipt and its journal on the host and
// releases the lock, in one round trip: applied, rolled back (the window
// failed and the old state is back and verified), or staged.
type commitPhase struct{}

func (commitPhase) title() string      { return "commit" }
func (commitPhase) runs(*hostRun) bool { return true }

func (commitPhase) run(ctx context.Context, hr *hostRun) *ending {
	ctx = context.WithoutCancel(ctx)
	switch {
	case hr.o.StageOnly:
		hr.commit(ctx, Staged)
		return end(Staged, StateAsWas, "staged for the window: nothing in force changed")
	case hr.outcome == RolledBack:
		if hr.rec != nil {
			hr.res.Recovery = RecoveryRolledBack
		}
		hr.commit(ctx, RolledBack)
		return end(RolledBack, StateAsWas, hr.failure.Error()).because(hr.rolledBackNext())
	}
	if hr.rec != nil {
		hr.res.Recovery = RecoveryCompleted
	}
	hr.prune(ctx)
	hr.commit(ctx, Applied)
	e := end(Applied, StateAsPlanned, "")
	if s := hr.res.Soak; s != nil && s.Verdict == SoakRegression {
		e.next = NextRejected // kept (on_regression: keep), running a release its soak rejected
	}
	return e
}

// rolledBackNext is what to do after the window was rolled back: after a
// crash, --resume (the policy undid a dead run's window, nothing of the
// plan is wrong); else by the failure's cause (failureNext). A failure of
// the switch, or of the read-back after it, is the planned release and
// config not working there.
func (hr *hostRun) rolledBackNext() string {
	if hr.rec != nil {
		return NextResume
	}
	switched := !hr.inWindow
	if hr.inWindow && hr.started > 0 {
		switched = hr.st[hr.started-1].traits().switches
	}
	return failureNext(hr.failure, switched)
}

// prune removes the old releases and store entries the plan lists, once
// the window has succeeded (never after one that failed). It changes
// nothing the host's state depends on, so a failure is a line in the
// receipt, not a rollback: the next plan lists what is left.
func (hr *hostRun) prune(ctx context.Context) {
	rel := hr.h.Release
	if len(rel.Prune)+len(rel.PruneStore) == 0 {
		return
	}
	o := op("prune", hr.p.Paths.Releases, hr.p.Paths.Current, strconv.Itoa(len(rel.Prune)+len(rel.PruneStore)))
	var names []string
	for _, v := range rel.Prune {
		o.Argv = append(o.Argv, "v:"+v)
		names = append(names, v)
	}
	for _, sha := range rel.PruneStore {
		o.Argv = append(o.Argv, "s:"+sha)
		names = append(names, "store "+short12(sha))
	}
	if err := hr.host.Run(ctx, []Op{o}, nil); err != nil {
		hr.res.PruneError = plans.Visible(err.Error())
		hr.pr.say(hr.h.Host, "could not remove every old release: %v", err)
		return
	}
	hr.res.Pruned = names
}

// commit files the receipt and the journal on the host, and unlocks.
func (hr *hostRun) commit(ctx context.Context, out Outcome) {
	hr.res.Outcome = out
	hr.res.Soak.settle(out)
	hr.file(ctx, "commit")
}

// file files the host's receipt under the run's name, keeping the newest
// HostReceiptsKept, and unlocks, in one round trip: "commit" files the
// run's journal beside it (the run is over), "record" the receipt alone,
// for a run that ends before its window without a commit (unchanged,
// refused under the lock), whose journal, if any, is not this run's. An
// applied window's commit keeps its backups beside the receipt, for a
// later rollback.
func (hr *hostRun) file(ctx context.Context, kind string) {
	hr.filing = true
	hr.res.Ended = stamp(hr.o.Now())
	hr.res.RoundTrips = hr.host.RoundTrips() + 1 // with the filing's own
	name := HostReceiptName(hr.p, hr.o.RunInfo.ID)
	if kind == "commit" && hr.res.Outcome == Applied {
		hr.res.Undo = hr.undoRecord(name) // the host keeps the window's backups beside this receipt
	}
	body, err := hostReceiptJSON(hr.p, hr.res, hr.o)
	if err != nil {
		hr.pr.say(hr.h.Host, "receipt: %v", err)
		return
	}
	o := op(kind, name, strings.ReplaceAll(string(hr.res.Outcome), " ", "-"), strconv.Itoa(HostReceiptsKept))
	o.Data = body
	// The unlock goes in the same batch; if the filing fails the host
	// skips it, and the run's end unlocks.
	if err := hr.host.Run(ctx, []Op{o, unlockOp()}, nil); err != nil {
		hr.pr.say(hr.h.Host, "could not file the receipt on the host: %v", err)
		return
	}
	hr.locked = false
}

// stamp is a time as receipts give it: UTC, RFC 3339 to the millisecond.
func stamp(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z07:00") }
