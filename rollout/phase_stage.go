package rollout

import (
	"context"
	"errors"
	"strings"

	"github.com/relayctl/relayctl/plans"
)

// stagePhase runs everything before the window: it begins the journal,
// then runs every step's preparation (a window step's backups) and the
// stage steps themselves. Nothing in force changes, so a failure leaves
// the host as it was: refused when nothing was written (a folder others
// can write, a release that is not root's alone or not the reviewed bytes,
// a fetch that failed), failed otherwise.
type stagePhase struct{}

func (stagePhase) title() string         { return "stage" }
func (stagePhase) runs(hr *hostRun) bool { return hr.rec == nil }

func (stagePhase) run(ctx context.Context, hr *hostRun) *ending {
	b := newStepBatch(plans.PhaseStage, hr.st, func(s step) []Op {
		ops := s.prepare()
		if s.describe().Phase == plans.PhaseStage {
			ops = append(ops, s.do()...)
		}
		return ops
	}, []Op{op("begin", hr.p.Name, hr.p.Checksum)})
	_, err := hr.runSteps(ctx, plans.PhaseStage, b, nil, nil)
	var oe *OpError
	switch {
	case err != nil && errors.As(err, &oe) && oe.Op.refuses:
		return end(Refused, StateAsWas, nothingWritten(err.Error()))
	case err != nil:
		return end(Failed, StateAsWas, err.Error()+" (nothing in force changed)")
	case ctx.Err() != nil && !hr.o.StageOnly:
		return end(NotStarted, StateAsWas, "interrupted after staging, before its window (nothing in force changed)")
	}
	hr.gate = hr.res.Before
	return nil
}

// nothingWritten says so, once.
func nothingWritten(msg string) string {
	if strings.HasSuffix(msg, "(nothing was written)") {
		return msg
	}
	return msg + " (nothing was written)"
}
