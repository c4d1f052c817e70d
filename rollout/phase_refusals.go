package rollout

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/relayctl/relayctl/plans"
)

// refusalsPhase refuses a host before anything is derived or written: an
// unfinished run's journal that shows a window (unless the user cleared it
// after checking the host), blockers in the plan, and a time outside the
// plan's window. A journal of a run that stopped before its window is
// archived: nothing in force changed.
type refusalsPhase struct{}

func (refusalsPhase) title() string      { return "refusals" }
func (refusalsPhase) runs(*hostRun) bool { return true }

func (refusalsPhase) run(ctx context.Context, hr *hostRun) *ending {
	if e := hr.unfinishedJournal(ctx); e != nil {
		return e
	}
	if b := hr.stored.Blockers; len(b) > 0 {
		return end(Refused, StateAsWas, "blocked in the plan: "+strings.Join(b, "; "))
	}
	w := hr.p.Window
	if w == nil || hr.o.IgnoreWindow || hr.o.StageOnly {
		return nil
	}
	nb, _ := plans.ParseWindowTime(w.NotBefore) // checked by plans.Validate
	na, _ := plans.ParseWindowTime(w.NotAfter)
	if now := hr.o.Now(); now.Before(nb) || now.After(na) {
		return end(Refused, StateAsWas, fmt.Sprintf("outside the plan's window %s to %s (now %s); wait for it or use --ignore-window", w.NotBefore, w.NotAfter, now.UTC().Format(time.RFC3339)))
	}
	return nil
}

// unfinishedJournal handles the journal an earlier run left on the host.
func (hr *hostRun) unfinishedJournal(ctx context.Context) *ending {
	j := hr.res.Before.Journal
	if j == "" {
		return nil
	}
	if windowStarted(j) && !hr.o.ClearJournal {
		hr.res.Journal = j
		return end(Refused, "unknown: an earlier apply stopped inside its window",
			"an earlier apply did not finish; its journal on the host ("+hr.p.Paths.StateDir+"/journal) ends with: "+plans.Visible(lastLine(j))+
				"; check the host (relayctl verify PLAN), then apply with --clear-journal")
	}
	if !windowStarted(j) {
		hr.pr.say(hr.h.Host, "an earlier apply stopped before its window (nothing in force changed); its journal is archived")
	}
	if err := hr.host.Run(ctx, []Op{op("clear")}, nil); err != nil {
		return end(Failed, StateAsWas, "archive the earlier journal: "+err.Error())
	}
	return nil
}

// windowStarted reports whether an unfinished run's journal shows it began
// its window (or a rollback): then something in force may have changed.
func windowStarted(journal string) bool {
	for _, l := range strings.Split(journal, "\n") {
		if f := strings.Fields(l); len(f) >= 3 && f[1] == "start" && (f[2] == plans.PhaseWindow || f[2] == "rollback") {
			return true
		}
	}
	return false
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
