package rollout

import "context"

// confirmPhase ends the check apply --resume makes of a host its ledger
// shows applied or unchanged (fleet.confirm): derive found the host as
// planned (it ended unchanged there) or it did not, and then the host is
// not done, whatever the ledger says, and is applied in this run. A ledger
// is a file anyone who can write it can edit: it decides what is
// reported, never what is skipped.
type confirmPhase struct{}

func (confirmPhase) title() string      { return "confirm" }
func (confirmPhase) runs(*hostRun) bool { return true }

func (confirmPhase) run(ctx context.Context, hr *hostRun) *ending {
	return end(NotStarted, StateAsWas, errNotConfirmed)
}

// errNotConfirmed is the reason of a host the ledger called done that is not.
const errNotConfirmed = "the ledger says it was done, but the host is not as planned"
