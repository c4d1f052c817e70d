package plans

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// A host plan could not read is in the plan all the same, as
// unreachable: the review lists it first with the error, apply leaves it
// alone (its outcome "not planned"), and the next plan reads it again. On
// a fleet some hosts are always down; one of them must not blind the plan
// of the others. Whether so many unreachable hosts make a failed plan is
// the plan's budget's call (UnreachableBudget), not the planner's.

// ActionUnreachable is a host that could not be read when the plan was
// made: it has no facts, no fingerprint and no steps.
const ActionUnreachable = "unreachable"

// maxUnreachableText bounds the error a plan keeps for an unreachable host.
const maxUnreachableText = 1000

// unreachableHost is the host plan of a host that could not be read, why.
func unreachableHost(id HostID, why string) *HostPlan {
	why = Visible(strings.Join(strings.Fields(strings.ToValidUTF8(why, "?")), " "))
	if len(why) > maxUnreachableText {
		why = why[:maxUnreachableText]
		for !utf8.ValidString(why) {
			why = why[:len(why)-1]
		}
		why += "…"
	}
	if why == "" {
		why = "could not be read"
	}
	return &HostPlan{Host: id.Name, Target: id.Target, Labels: id.Labels, Action: ActionUnreachable, Unreachable: why,
		Facts: []FactEntry{}, Blockers: []string{}, Warnings: []string{}, Sysctls: []SysctlChange{}, Files: []FileChange{}, Steps: []Step{}}
}

// Unreached lists the hosts that could not be read when the plan was made.
func (p *Plan) Unreached() []*HostPlan {
	var out []*HostPlan
	for _, h := range p.Hosts {
		if h.Action == ActionUnreachable {
			out = append(out, h)
		}
	}
	return out
}

// reached is the plan with only the hosts it could read: what apply lays
// out in waves.
func (p *Plan) reached() *Plan {
	q := *p
	q.Hosts = nil
	for _, h := range p.Hosts {
		if h.Action != ActionUnreachable {
			q.Hosts = append(q.Hosts, h)
		}
	}
	return &q
}

// validateUnreachable checks the host plan of a host that was not read:
// an error to show, and nothing else.
func validateUnreachable(h *HostPlan) error {
	switch {
	case h.Unreachable == "" || len(h.Unreachable) > maxUnreachableText+len("…") || !utf8.ValidString(h.Unreachable) || hostText(h.Unreachable) != nil:
		return fmt.Errorf("unreachable without an error that is one line of text")
	case len(h.Facts)+len(h.Blockers)+len(h.Warnings)+len(h.Sysctls)+len(h.Files)+len(h.Steps) > 0 || h.Fingerprint != "" || h.Restart || h.Release.Action != "" || h.Switch != "":
		return fmt.Errorf("an unreachable host holds facts or decisions")
	}
	return nil
}

// UnreachableBudget says whether the plan's unreachable hosts are within
// budget (at most that many, or that share of the plan's hosts: exactly
// at the budget is within, as for apply's waves), and says so in words.
func (p *Plan) UnreachableBudget(budget Amount) (within bool, text string) {
	n, all := len(p.Unreached()), len(p.Hosts)
	within = budget.Allows(n, all)
	word := "within"
	if !within {
		word = "over"
	}
	of := budget.String()
	if budget.Percent {
		of += " of the plan's hosts"
	}
	return within, fmt.Sprintf("%d of %d host(s) could not be read (%s), %s the budget of %s", n, all, FewNames(hostNames(p.Unreached()), 5), word, of)
}

func hostNames(hs []*HostPlan) []string {
	out := make([]string, len(hs))
	for i, h := range hs {
		out[i] = h.Host
	}
	return out
}

// recordBudget keeps the budget a plan with hosts not read was made with.
func (p *Plan) recordBudget(budget Amount) {
	if len(p.Unreached()) > 0 {
		p.UnreachableAllowed = budget.String()
	}
}

// MadeWith is the budget of unreachable hosts the plan was made with: the
// one it records, or for a plan that records none (made before it did)
// its spec's rollout.max_unreachable, plan's own default.
func (p *Plan) MadeWith() Amount {
	if a, err := ParseAmount(p.UnreachableAllowed, 0); p.UnreachableAllowed != "" && err == nil {
		return a
	}
	r, _ := p.Rollout.Resolve() // Validate resolved it
	return r.MaxUnreachable
}

// OverBudget says whether more of the plan's hosts could not be read than
// the budget it was made with allows, in words when it does: plan failed
// on it ("not a plan to apply"), and approve and apply refuse it unless
// told to go on all the same.
func (p *Plan) OverBudget() (bool, string) {
	if len(p.Unreached()) == 0 {
		return false, ""
	}
	within, text := p.UnreachableBudget(p.MadeWith())
	if within {
		return false, ""
	}
	return true, text + " it was made with"
}

// validBudget checks a recorded budget: one a plan with hosts not read
// would record.
func validBudget(p *Plan) error {
	if p.UnreachableAllowed == "" {
		return nil
	}
	if len(p.Unreached()) == 0 {
		return fmt.Errorf("unreachable_allowed %q, but every host was read", Visible(p.UnreachableAllowed))
	}
	if _, err := ParseAmount(p.UnreachableAllowed, 0); err != nil {
		return fmt.Errorf("unreachable_allowed %q: %v", Visible(p.UnreachableAllowed), err)
	}
	return nil
}
