package rollout

import (
	"context"
	"fmt"
	"strings"

	"github.com/relayctl/relayctl/plans"
	"github.com/relayctl/relayctl/tune"
)

// derivePhase works out again what runs on the host, from the plan's
// recorded spec and the host as it is now, by the code that made the plan:
// the plan file only has to agree with it. A host already as planned is
// unchanged; a host whose facts drifted is refused as stale, unless every
// drifted fact moved toward the plan (a planned sysctl already at its
// planned value, the release staged ahead: staged.go).
type derivePhase struct{}

func (derivePhase) title() string         { return "derive" }
func (derivePhase) runs(hr *hostRun) bool { return hr.rec == nil }

func (derivePhase) run(ctx context.Context, hr *hostRun) *ending {
	p, stored, before := hr.p, hr.stored, hr.res.Before
	if hr.o.confirmOnly && before.Journal != "" {
		return nil // an unfinished run there: not done, whatever the ledger says
	}
	derived, err := plans.Replan(p, stored.ID(), before, Steps)
	if err != nil {
		return end(Refused, StateAsWas, err.Error())
	}
	if p.Rollback != nil && !plans.SameUndo(stored.Undo, derived.Undo) {
		// The host's own receipt is the record a rollback goes back by.
		return end(Refused, StateAsWas, fmt.Sprintf("the host's receipt of plan %s does not record the window this rollback plan was made from (%s): make the rollback plan again", plans.Visible(p.Rollback.Plan), undoName(derived.Undo))).because(NextNewPlan)
	}
	if derived.Fingerprint == stored.Fingerprint {
		if d := plans.ActionDiff(stored, derived); len(d) > 0 {
			return end(Refused, StateAsWas, "the plan's actions for this host are not what its spec and the host give (it was edited, or made by another relayctl): "+strings.Join(d, "; ")+"; make and review the plan again").because(NextNewPlan)
		}
	} else if e := hr.drifted(derived); e != nil {
		return e
	}
	hr.h = derived
	if derived.Action == plans.ActionNone {
		hr.res.After = before
		return end(Unchanged, StateAsPlanned, "nothing to change")
	}
	for _, fc := range derived.Files {
		if was := stored.FileAt(fc.Path); fc.Change && (was == nil || !sameReviewed(*was, fc)) {
			return end(Refused, StateAsWas, "the "+fc.Role+" derived now does not hash to the reviewed one; make a new plan").because(NextNewPlan)
		}
	}
	hr.st = steps(p, derived, stepInput{artifact: hr.o.Artifact, wire: hr.o.wire, facts: before, fetchTimeout: hr.o.FetchTimeout, releaseSum: func(v string) { hr.releaseSum = v }}, false)
	if hr.o.StageOnly {
		hr.st = stageSteps(hr.st)
	}
	return nil
}

// drifted decides a host whose facts are not the plan's: unchanged when it
// is as planned already, stale unless every drifted fact moved toward the
// plan (then the rest of the plan stands, without those steps).
func (hr *hostRun) drifted(derived *plans.HostPlan) *ending {
	if derived.Action == plans.ActionNone {
		hr.res.After = hr.res.Before
		return end(Unchanged, StateAsPlanned, "already as planned")
	}
	drift := plans.Diff(hr.stored.Facts, derived.Facts)
	if !towardPlan(hr.p, hr.stored, drift) || !subsequence(derived.Steps, hr.stored.Steps) {
		hr.res.Drift = drift
		if hr.o.confirmOnly {
			// The drift from the plan's facts is mostly the run's own work:
			// what is left to do names what moved since.
			return end(Refused, StateAsWas, "it is no longer as planned: "+stillToDo(derived)+"; make a new plan").because(NextNewPlan)
		}
		return end(Refused, StateAsWas, fmt.Sprintf("the plan is stale: %d fact(s) changed since it was made (%s); make a new plan", len(drift), driftNames(drift))).because(NextNewPlan)
	}
	hr.res.TowardPlan = drift
	hr.pr.say(hr.h.Host, "%s", towardText(hr.p, drift))
	return nil
}

// stillToDo says what the plan would still do on a host, by its window
// steps' titles.
func stillToDo(h *plans.HostPlan) string {
	var todo []string
	for _, st := range h.Steps {
		if st.Phase == "window" {
			todo = append(todo, st.Title)
		}
	}
	if len(todo) == 0 {
		return "its read-back does not hold"
	}
	return "the plan would still " + plans.Visible(strings.Join(todo, "; "))
}

func undoName(u *plans.Undo) string {
	if u == nil {
		return "the host keeps none now"
	}
	return "the host's is " + plans.Visible(u.Receipt)
}

// subsequence reports whether every step of a is in b, in order.
func subsequence(a, b []plans.Step) bool {
	j := 0
	for _, s := range a {
		for j < len(b) && !sameStep(s, b[j]) {
			j++
		}
		if j == len(b) {
			return false
		}
		j++
	}
	return true
}

// towardPlan reports whether every drifted fact is a sysctl that now
// holds the value the host's plan sets it to, or the planned release
// staged ahead. The host plan's value, not the spec's: a rollback plan
// sets each sysctl back to what the window it undoes found.
func towardPlan(p *plans.Plan, h *plans.HostPlan, drift []plans.Drift) bool {
	if len(drift) == 0 {
		return false
	}
	for _, d := range drift {
		if stagedRelease(p, d) {
			continue
		}
		key, ok := strings.CutPrefix(d.Name, "sysctl ")
		if !ok {
			return false
		}
		planned := ""
		for _, s := range h.Sysctls {
			if s.Key == key {
				planned = s.Planned
			}
		}
		if planned == "" || !tune.Equal(d.Observed, planned) {
			return false
		}
	}
	return true
}

// driftNames names what drifted, briefly: the values are in the
// receipt's drift and the recap's lines under the host, one a line (six
// facts with their values made a 700-character reason).
func driftNames(d []plans.Drift) string {
	var names []string
	for i, x := range d {
		if i == 4 {
			names = append(names, fmt.Sprintf("and %d more", len(d)-i))
			break
		}
		names = append(names, x.Name)
	}
	return plans.Visible(strings.Join(names, ", "))
}

// sameReviewed reports whether a file derived now is the one reviewed.
func sameReviewed(reviewed, derived plans.FileChange) bool {
	a, b := reviewed.Reviewed(derived)
	return a == b
}
