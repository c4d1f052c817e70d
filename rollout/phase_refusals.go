package rollout

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/relayctl/relayctl/plans"
)

// refusalsPhase refuses a host before anything is derived or written:
// blockers in the plan, and a time outside the plan's window. (A window a
// dead run left is recovery's: recoverPhase.)
type refusalsPhase struct{}

func (refusalsPhase) title() string         { return "refusals" }
func (refusalsPhase) runs(hr *hostRun) bool { return hr.rec == nil }

func (refusalsPhase) run(ctx context.Context, hr *hostRun) *ending {
	if b := hr.stored.Blockers; len(b) > 0 {
		return end(Refused, StateAsWas, "blocked in the plan: "+strings.Join(b, "; ")).because(NextUnblock)
	}
	w := hr.p.Window
	if w == nil || hr.o.IgnoreWindow || hr.o.StageOnly {
		return nil
	}
	nb, _ := plans.ParseWindowTime(w.NotBefore) // checked by plans.Validate
	na, _ := plans.ParseWindowTime(w.NotAfter)
	if now := hr.o.Now(); now.Before(nb) || now.After(na) {
		return end(Refused, StateAsWas, fmt.Sprintf("outside the plan's window %s to %s (now %s); wait for it or use --ignore-window", w.NotBefore, w.NotAfter, now.UTC().Format(time.RFC3339))).because(NextWait)
	}
	return nil
}

// lastLine is the last line of a text from a host (a journal).
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
