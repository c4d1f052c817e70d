package rollout

import (
	"context"
	"errors"
	"strings"

	"github.com/relayctl/relayctl/plans"
)

// lockPhase takes the host lock, and reads the host in the same round
// trip (observePhase keeps the reading). The lock comes first: while
// another apply runs, the host's journal and the drift it causes are that
// run's business, not evidence of a dead run.
type lockPhase struct{}

func (lockPhase) title() string      { return "lock" }
func (lockPhase) runs(*hostRun) bool { return true }

func (lockPhase) run(ctx context.Context, hr *hostRun) *ending {
	var before *plans.Facts
	lock := lockOp(hr.o.Owner)
	if hr.o.Resume != nil {
		// A run killed inside a window leaves the host ending it alone,
		// holding the lock through its read-back (--stable-for): --resume
		// waits for it as a run back after a lost connection does.
		lock = lockOp(hr.o.Owner, hr.windowAwait()+hr.o.VerifyTimeout+hr.o.StableFor)
	}
	err := hr.host.Run(ctx, []Op{lock, observeOp(hr.q)}, func(i int, r Result) error {
		if i == 0 {
			hr.locked, hr.cut = true, r.At
			if r.Value != "" {
				// flock is released when its holder dies: a free lock with an
				// owner file is a dead run's, and nobody else's apply.
				hr.res.DeadRun = r.Value
				hr.pr.say(hr.h.Host, "a dead run's lock was left (%s): the lock was free, so that run is gone; taken", plans.Visible(r.Value))
			}
			hr.pr.say(hr.h.Host, "observe")
			return nil
		}
		before = r.Facts
		return nil
	})
	switch {
	case !hr.locked && isConnLost(err):
		return end(Unreachable, StateAsWas, err.Error())
	case !hr.locked && errors.Is(err, ErrLocked):
		return end(Refused, StateAsWas, err.Error()).because(NextWait)
	case !hr.locked:
		return end(Refused, StateAsWas, err.Error())
	case err != nil:
		hr.observeErr = err
	default:
		before.Host = hr.h.Host
		hr.res.Before = before
	}
	return nil
}

// observePhase is the lock's reading of the host: what every later phase
// compares with.
type observePhase struct{}

func (observePhase) title() string      { return "observe" }
func (observePhase) runs(*hostRun) bool { return true }

func (observePhase) run(ctx context.Context, hr *hostRun) *ending {
	if hr.observeErr != nil {
		return end(Failed, StateAsWas, "observe: "+strings.TrimPrefix(hr.observeErr.Error(), "observe: "))
	}
	return nil
}
