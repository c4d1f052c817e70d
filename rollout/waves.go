package rollout

import (
	"errors"
	"fmt"

	"github.com/relayctl/relayctl/plans"
)

// WaveResult is one wave of a fleet apply as it ran: its hosts, its
// budgets in hosts, how they ended, and when (ms since the run started).
type WaveResult struct {
	Wave           int      `json:"wave"`
	Group          string   `json:"group,omitempty"` // the label value, "region=ash", when the rollout is by label
	Hosts          []string `json:"hosts"`
	MaxFailures    int      `json:"max_failures"`    // failed, rolled back or refused hosts allowed
	MaxUnreachable int      `json:"max_unreachable"` // unreachable hosts allowed
	Applied        int      `json:"applied"`
	Unchanged      int      `json:"unchanged"`
	Staged         int      `json:"staged,omitempty"`
	Failures       int      `json:"failures"`          // failed, rolled back, refused
	Skipped        int      `json:"skipped,omitempty"` // left for a later run at the drain gate's deadline
	Unreachable    int      `json:"unreachable"`
	NotStarted     int      `json:"not_started"`
	StartMillis    int64    `json:"start_ms"`
	EndMillis      int64    `json:"end_ms"`
	Stopped        string   `json:"stopped,omitempty"` // why the rollout stopped in or after this wave

	rule waveRule
}

// waveRule is what stops a wave: its budgets, and whether a wave where
// nothing worked stops the rollout.
type waveRule struct {
	maxFailures    plans.Amount
	maxUnreachable plans.Amount
	wholeWaveStops bool // a wave with no host applied or unchanged stops the rollout
}

// soakRole is why a host soaks, "" when it does not: the first host of a
// wave is its canary; with soak hosts: all, every host soaks.
func (r fleetRules) soakRole(first bool) string {
	switch {
	case r.soak == nil:
		return ""
	case first:
		return SoakRoleCanary
	case r.soak.Hosts == plans.SoakAll:
		return SoakRoleHost
	}
	return ""
}

// fleetRules are how one run walks its hosts (plans.Rollout has the rules
// in words): its waves in order, each with its hosts and budgets.
type fleetRules struct {
	waves          []plans.Wave
	wholeWaveStops bool
	soak           *plans.Soak // nil: no host soaks
}

// rulesFor are the waves and budgets of a run over the hosts todo (plan
// indexes, in plan order): apply's (o.Rollout, else the plan's), by label
// when it says so, or for relayctl stage one wave of every host that
// nothing stops, since staging changes nothing in force.
func rulesFor(p *plans.Plan, o ApplyOptions, todo []int) (fleetRules, error) {
	if o.Rollout == nil {
		return fleetRules{}, errors.New("apply: no rollout")
	}
	if o.StageOnly {
		all := plans.Amount{N: 100, Percent: true}
		return fleetRules{waves: plans.Resolved{Waves: []plans.Amount{all}, MaxFailures: all, MaxUnreachable: all}.Layout(p.Hosts, todo)}, nil
	}
	return fleetRules{waves: o.Rollout.Layout(p.Hosts, todo), wholeWaveStops: true, soak: o.Rollout.Soak}, nil // Apply resolved it
}

// count tallies one host's outcome in its wave.
func (w *WaveResult) count(o Outcome) {
	switch o {
	case Applied:
		w.Applied++
	case Unchanged:
		w.Unchanged++
	case Staged:
		w.Staged++
	case Failed, RolledBack, Refused:
		w.Failures++
	case Skipped:
		w.Skipped++
	case Unreachable:
		w.Unreachable++
	case NotStarted:
		w.NotStarted++
	}
}

// overBudget says why the wave went over a budget, "" while it has not:
// exactly at a budget is within it.
func (w *WaveResult) overBudget() string {
	size := len(w.Hosts)
	if !w.rule.maxFailures.Allows(w.Failures, size) {
		return fmt.Sprintf("wave %d%s: %d of its %d hosts failed, rolled back or were refused, over its budget of %d (max failures %s)",
			w.Wave, w.groupText(), w.Failures, size, w.MaxFailures, w.rule.maxFailures)
	}
	if !w.rule.maxUnreachable.Allows(w.Unreachable, size) {
		return fmt.Sprintf("wave %d%s: %d of its %d hosts were unreachable, over its budget of %d (max unreachable %s)",
			w.Wave, w.groupText(), w.Unreachable, size, w.MaxUnreachable, w.rule.maxUnreachable)
	}
	return ""
}

// nothingWorked is a wave whose every host failed, rolled back, was
// refused or unreachable: it stops the rollout whatever the budgets allow.
// (A host skipped at the drain gate is left for later, not a failure.)
func (w *WaveResult) nothingWorked() string {
	if !w.rule.wholeWaveStops || len(w.Hosts) == 0 || w.Failures+w.Unreachable < len(w.Hosts) {
		return ""
	}
	return fmt.Sprintf("wave %d%s: none of its %d hosts applied (%d failed, rolled back or refused; %d unreachable)", w.Wave, w.groupText(), len(w.Hosts), w.Failures, w.Unreachable)
}

// groupText is " (region=ash)" for a wave of a rollout by label.
func (w *WaveResult) groupText() string {
	if w.Group == "" {
		return ""
	}
	return " (" + w.Group + ")"
}
