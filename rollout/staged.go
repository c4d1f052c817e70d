package rollout

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/relayctl/relayctl/plans"
)

// Staging ahead (relayctl stage, apply --stage-only) runs every host's
// stage steps and stops before the window. Of what it leaves on a host,
// only the release folder is a fact the plan's fingerprint covers
// ("releases installed"); the config and drop-in wait beside their files
// (PATH.relayctl-new), and the release store's folder is hidden (store.go).
// So an apply after staging finds one fact moved, toward the plan: the
// planned version is now installed. That drift is allowed, like a planned
// sysctl already at its planned value: the host's plan derived now checks
// the release's sha256 on the host (check-release) where the plan file
// placed or fetched it, and the config and drop-in are kept, not sent.

// stagedRelease reports whether d is the planned release appearing among
// the installed ones, and nothing else changing there.
func stagedRelease(p *plans.Plan, d plans.Drift) bool {
	if d.Name != "releases installed" {
		return false
	}
	list := func(s string) []string {
		if s == "(none)" {
			return nil
		}
		return strings.Fields(s)
	}
	planned, observed := list(d.Planned), list(d.Observed)
	if slices.Contains(planned, p.Relay.Version) {
		return false
	}
	want := append(slices.Clone(planned), p.Relay.Version)
	slices.Sort(want)
	got := slices.Clone(observed)
	slices.Sort(got)
	return slices.Equal(got, want)
}

// sameStep reports whether a step derived now stands for a step of the
// plan file: the same step, or the check of a release staged ahead where
// the plan placed or fetched those bytes.
func sameStep(derived, stored plans.Step) bool {
	if derived == stored {
		return true
	}
	return derived.Kind == KindCheckRelease && (stored.Kind == KindPlaceRelease || stored.Kind == KindFetchRelease) &&
		derived.Value == stored.Value
}

// towardText says in words why drift toward the plan is allowed.
func towardText(p *plans.Plan, drift []plans.Drift) string {
	var parts []string
	for _, d := range drift {
		if stagedRelease(p, d) {
			parts = append(parts, fmt.Sprintf("release %s already in %s (staged ahead; its sha256 is checked on the host before the window)", p.Relay.Version, p.Paths.Releases))
			continue
		}
		parts = append(parts, fmt.Sprintf("%s already at the planned value %s", d.Name, d.Observed))
	}
	return plans.Visible(strings.Join(parts, "; "))
}

// stageSteps keeps the steps of the stage phase: what relayctl stage runs.
// The window steps' preparations (backups for a rollback) are left to the
// apply that opens the window.
func stageSteps(st []step) []step {
	var out []step
	for _, s := range st {
		if s.describe().Phase == plans.PhaseStage {
			out = append(out, s)
		}
	}
	return out
}

// Stage does on every host of a plan what apply does before the window
// (lock, observe, the plan's checks, the stage steps), all hosts parallel
// at a time, and stops there: nothing in force changes. Apply inside the
// window then finds the release and files staged and sends nothing again.
// The window is not checked: staging is what happens before it.
func Stage(ctx context.Context, d HostDialer, c Checked, o ApplyOptions) (*Report, error) {
	o.StageOnly = true
	o.Resume, o.SaveLedger, o.PatchLedger = nil, nil, nil
	return Apply(ctx, d, c, o)
}
