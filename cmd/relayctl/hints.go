package main

import (
	"fmt"
	"strings"

	"github.com/relayctl/relayctl/plans"
	"github.com/relayctl/relayctl/rollout"
)

// nextHints say what to run next, one line per kind of next step the hosts
// that did not end as planned have (rollout.Nexts), so no hint contradicts
// another and each names a command that makes progress, or says what must
// change before one can: a host that drifted needs a new plan, not
// --resume; a value the kernel refused needs the spec fixed; a release a
// soak rejected, or one that failed on a host, is never resumed onto the
// same hosts.
func nextHints(rep *rollout.Report, file string, p *plans.Plan) []string {
	by := map[string][]string{}
	r := hintRun{file: file, p: p}
	for _, h := range rep.Hosts {
		if h.Next != "" {
			by[h.Next] = append(by[h.Next], h.Host)
		}
		if h.Outcome == rollout.Applied {
			r.applied = append(r.applied, h.Host)
		}
		if s := h.Soak; s != nil && s.Verdict == rollout.SoakRegression {
			r.rej.soak = true
		}
		if s := h.Soak; s != nil && s.Verdict == rollout.SoakInsufficient && s.Settings.NoTraffic != plans.SoakContinue {
			r.idle = append(r.idle, h.Host)
		}
	}
	r.rej.failed = by[rollout.NextSpec]
	var out []string
	for _, next := range rollout.Nexts {
		if hosts := by[next]; len(hosts) > 0 {
			out = append(out, r.hintFor(next, plans.Visible(strings.Join(abbreviate(hosts, 5), " ")), len(hosts)))
		}
	}
	return out
}

// hintRun is what the hints of one run know besides each kind's hosts.
type hintRun struct {
	file    string // the plan file, as given
	p       *plans.Plan
	applied []string  // the hosts it applied
	rej     rejection // why the rollout of its release is over, if it is
	idle    []string  // the hosts whose soak stopped the rollout for want of traffic
}

// idleWay is what a hint that offers --resume adds when a soak without
// traffic stopped the rollout: --resume alone soaks the next host, which
// stops again while the relays carry nobody.
func (r hintRun) idleWay() string {
	if len(r.idle) == 0 {
		return ""
	}
	return fmt.Sprintf("; but the soak of %s had no traffic, and --resume soaks again and stops the same way until players are back: relayctl apply %s --resume --soak 0 goes on without the soak's evidence, or for a fleet whose canaries are idle set no_traffic: continue in the rollout.soak of %s and make a new plan (docs/soak.md)",
		plans.Visible(strings.Join(abbreviate(r.idle, 5), " ")), r.file, r.p.SpecFile)
}

// rejection is why the rollout of a plan's release is over (rollout's
// NextRejected): a soak judged it a regression, or it (or the spec's
// values) failed on hosts and was rolled back there.
type rejection struct {
	soak   bool
	failed []string // the hosts where it failed (next: fix spec)
	left   bool     // hosts a rejection stopped before they started, its cause not among the hosts
}

func (r rejection) rejected() bool { return r.soak || len(r.failed) > 0 || r.left }

// cause says it in words, for a plan shipping release.
func (r rejection) cause(release string) string {
	switch {
	case r.soak:
		return "a soak judged " + release + " a regression"
	case len(r.failed) > 0:
		return fmt.Sprintf("%s (or the spec's values) failed on %s and was rolled back there", release, plans.Visible(strings.Join(abbreviate(r.failed, 5), " ")))
	}
	return "a run of this plan rejected " + release
}

// hintFor is the hint of one kind of next step, for hosts (n of them).
func (r hintRun) hintFor(next, hosts string, n int) string {
	file, p := r.file, r.p
	spec := p.SpecFile
	again := fmt.Sprintf("relayctl plan %s --out PLAN, review it, then relayctl apply PLAN", spec)
	if rb := p.Rollback; rb != nil {
		again = fmt.Sprintf("relayctl rollback %s --out PLAN, the rollback plan made again, review it, then relayctl apply PLAN", rb.Receipt)
	}
	switch next {
	case rollout.NextNewPlan:
		return fmt.Sprintf("%s: the plan has nothing valid for them now (they drifted, or were not read when it was made): make a new plan: %s", hosts, again)
	case rollout.NextUnblock:
		return fmt.Sprintf("%s: blocked in the plan (the reasons name the blockers): fix them, then make a new plan: %s", hosts, again)
	case rollout.NextSpec:
		return fmt.Sprintf("%s: the spec's values or release failed there and were rolled back (the reasons say which: a value the kernel refused, a release that did not start or read back); --resume would do the same again: fix the spec (or build a fixed release), relayctl validate %s, then relayctl plan %s --out PLAN, review it, and relayctl apply PLAN", hosts, spec, spec)
	case rollout.NextRejected:
		return rejectedHint(hosts, file, p, r.applied, r.rej)
	case rollout.NextOtherPlan:
		return fmt.Sprintf("%s: a run of another plan stopped inside its window there; relayctl apply THAT_PLAN --resume finishes or undoes it (the host's journal names the plan)", hosts)
	case rollout.NextFix:
		return fmt.Sprintf("%s: fix on the host what each reason names (a folder's owner, a host key, a full disk), then relayctl apply %s --resume", hosts, file)
	case rollout.NextWait:
		return fmt.Sprintf("%s: held by another apply, outside the plan's window, or without traffic for its soak; relayctl apply %s --resume later, or relayctl apply %s --resume --ignore-window for an emergency outside the window%s", hosts, file, file, r.idleWay())
	case rollout.NextPlayers:
		return fmt.Sprintf("%s still had players at the drain deadline: relayctl apply %s --resume when they have gone, or give drain.deadline more time", hosts, file)
	case rollout.NextJournal:
		return fmt.Sprintf("%s: an earlier run left a journal that cannot be read; check the host (relayctl verify %s), then relayctl apply %s --resume --clear-journal", hosts, file, file)
	case rollout.NextUndo:
		return fmt.Sprintf("%s: the rollback failed and the host is in between (the reasons say where); fix what they name, then relayctl apply %s --resume --recover rollback undoes the rest from the host's journal", hosts, file)
	}
	return fmt.Sprintf("relayctl apply %s --resume goes on with %d host(s) as they are (%s): applied hosts are checked, not applied again%s", file, n, hosts, r.idleWay())
}

// rejectedHint: the rollout of a release a soak rejected, or one that
// failed on a host, is over. The ways on are a fixed release (or spec),
// or relayctl rollback of the hosts it changed; --resume is refused.
func rejectedHint(hosts, file string, p *plans.Plan, applied []string, rej rejection) string {
	release := "its release"
	if p.Relay.Version != "" {
		release = "release " + p.Relay.Version
	}
	undo := "no host keeps it"
	if len(applied) > 0 {
		undo = fmt.Sprintf("%d host(s) keep it (%s): relayctl rollback %s --out back.plan undoes them", len(applied), plans.Visible(strings.Join(abbreviate(applied, 5), " ")), file)
	}
	fix := "ship a fixed release: a new relay.release in " + p.SpecFile
	if !rej.soak && len(rej.failed) > 0 {
		fix = "fix the spec or ship a fixed release (a new relay.release in " + p.SpecFile + ")"
	}
	return fmt.Sprintf("%s: %s, so the rollout of it is over and --resume is refused (it would deploy it onto the same hosts again); %s; then %s, relayctl plan %s --out PLAN, review it, and relayctl apply PLAN",
		hosts, rej.cause(release), undo, fix, p.SpecFile)
}
