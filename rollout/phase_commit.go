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
		hr.commit(ctx, Staged, nil, end(Staged, StateAsWas, "staged for the window: nothing in force changed"))
		return end(Staged, StateAsWas, "staged for the window: nothing in force changed")
	case hr.outcome == RolledBack:
		if hr.rec != nil {
			hr.res.Recovery = hr.rec.words(RolledBack)
		}
		done := end(RolledBack, StateAsWas, hr.failure.Error())
		if e := hr.commit(ctx, RolledBack, nil, done); e != nil {
			return e
		}
		return done
	}
	if hr.rec != nil {
		hr.res.Recovery = hr.rec.words(Applied)
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
	if e := hr.commit(ctx, Applied, lead, done); e != nil {
		return e
	}
	return done
}

// prune removes the old releases and store entries the plan lists, once
// the window has succeeded (never after one that failed), behind lead
// (the window's keep), and returns what of lead is still to send. It
// changes nothing the host's state depends on, so a failure is a line in
// the receipt, not a rollback: the next plan lists what is left.
func (hr *hostRun) prune(ctx context.Context, lead []Op) ([]Op, *ending) {
	rel := hr.h.Release
	if len(rel.Prune)+len(rel.PruneStore) == 0 {
		return lead, nil
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
	err := hr.host.Run(ctx, append(lead, o), hr.keepHeard)
	if e := hr.keepLost(err, "during commit"); e != nil {
		return nil, e
	}
	if err != nil {
		hr.res.PruneError = plans.Visible(err.Error())
		hr.pr.say(hr.h.Host, "could not remove every old release: %v", err)
		return nil, nil
	}
	hr.res.Pruned = names
	return nil, nil
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
// with the receipt).
func (hr *hostRun) commit(ctx context.Context, out Outcome, lead []Op, done *ending) *ending {
	hr.res.Outcome = out
	hr.res.Soak.settle(out)
	hr.res.RoundTrips = hr.trips + hr.host.RoundTrips() + 1 // with the commit's own
	body, err := receiptJSON(hr.p, hr.res)
	if err != nil {
		hr.pr.say(hr.h.Host, "receipt: %v", err)
		return nil
	}
	o := op("commit", receiptName(hr.p, hr.o.Now()), strings.ReplaceAll(string(out), " ", "-"))
	o.Data = body
	hr.committed = done
	// The unlock goes in the same batch; if the commit fails the host
	// skips it, and the run's end unlocks.
	err = hr.host.Run(ctx, append(lead, o, unlockOp()), hr.keepHeard)
	if e := hr.keepLost(err, "during commit"); e != nil && out != Staged {
		return e
	}
	if err != nil {
		hr.pr.say(hr.h.Host, "could not file the receipt on the host: %v", err)
		return nil
	}
	hr.locked = false
	return nil
}

func receiptName(p *plans.Plan, now time.Time) string {
	sum := strings.TrimPrefix(p.Checksum, "sha256:")
	if len(sum) > 12 {
		sum = sum[:12]
	}
	return now.UTC().Format("20060102T150405Z") + "-" + p.Name + "-" + sum
}
