package main

import (
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"regexp"
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
		hosts := by[next]
		switch {
		case len(hosts) == 0:
		case next == rollout.NextOtherPlan:
			out = append(out, r.otherPlanHints(rep.Hosts)...)
		default:
			out = append(out, r.hintFor(next, plans.Visible(strings.Join(abbreviate(hosts, 5), " ")), len(hosts)))
		}
	}
	return out
}

// otherPlanHints are the hints of the hosts where a run of another plan
// stopped inside its window, one per such plan: its name and checksum,
// the journal on the host, and its plan file when one beside this plan
// (or in the current folder) has its checksum.
func (r hintRun) otherPlanHints(hosts []*rollout.HostResult) []string {
	var order []rollout.PlanRef
	by := map[rollout.PlanRef][]string{}
	for _, h := range hosts {
		if h.Next != rollout.NextOtherPlan {
			continue
		}
		ref := rollout.PlanRef{Plan: "(unnamed)"}
		if h.OtherPlan != nil {
			ref = *h.OtherPlan
		}
		if by[ref] == nil {
			order = append(order, ref)
		}
		by[ref] = append(by[ref], h.Host)
	}
	journal := path.Join(r.p.Paths.StateDir, "journal")
	var out []string
	for _, ref := range order {
		names := plans.Visible(strings.Join(abbreviate(by[ref], 5), " "))
		what := fmt.Sprintf("%s: a run of plan %s (checksum %s) stopped inside its window there (%s on the host says where)", names, plans.Visible(ref.Plan), plans.Visible(ref.Checksum), journal)
		if f := findPlanFile(ref.Checksum, filepath.Dir(r.file), "."); f != "" {
			out = append(out, fmt.Sprintf("%s: relayctl apply %s --resume finishes or undoes it; then relayctl apply %s --resume goes on here", what, f, r.file))
			continue
		}
		out = append(out, fmt.Sprintf("%s: no plan file in %s has that checksum; relayctl apply THAT_PLAN --resume with the plan file that run applied finishes or undoes it; without it, check the host (relayctl verify %s), then relayctl apply %s --resume --clear-journal archives that journal and goes on",
			what, filepath.Dir(r.file), r.file, r.file))
	}
	return out
}

// planHead is the start of a plan file relayctl wrote: its format and
// checksum come first.
var planHead = regexp.MustCompile(`^\{\s*"format_version":\s*\d+,\s*"checksum":\s*"(sha256:[0-9a-f]{64})"`)

// findPlanFile is the first plan file in dirs with checksum, "" when none
// has it: each regular file's first bytes are read, at most maxScan files.
func findPlanFile(checksum string, dirs ...string) string {
	const maxScan = 10000
	seen := map[string]bool{}
	for _, dir := range dirs {
		abs, err := filepath.Abs(dir)
		if err != nil || seen[abs] {
			continue
		}
		seen[abs] = true
		ents, _ := os.ReadDir(dir)
		for i, e := range ents {
			if i == maxScan {
				break
			}
			if !e.Type().IsRegular() {
				continue
			}
			f := filepath.Join(dir, e.Name())
			if m := planHead.FindSubmatch(readHead(f, 256)); m != nil && string(m[1]) == checksum {
				return f
			}
		}
	}
	return ""
}

// readHead is a file's first n bytes, nil when it cannot be read.
func readHead(name string, n int) []byte {
	f, err := os.Open(name)
	if err != nil {
		return nil
	}
	defer f.Close()
	b := make([]byte, n)
	k, _ := io.ReadFull(f, b)
	return b[:k]
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

// differing sorts the hosts verify found different from the plan by what
// makes progress: a relay that is not running (it died, or was stopped),
// a host not as planned, or one whose relay drops more than the promise.
type differing struct{ stopped, notPlanned, dropping []string }

func (d *differing) add(host string, f *plans.Facts, vh verifyHost) {
	checksOK := true
	for _, c := range vh.Checks {
		checksOK = checksOK && c.OK
	}
	switch {
	case !f.Service.Running:
		d.stopped = append(d.stopped, host)
	case !checksOK:
		d.notPlanned = append(d.notPlanned, host)
	default:
		d.dropping = append(d.dropping, host)
	}
}

// verifyHints say what to run when verify finds hosts that differ, one
// line per kind (differing): for a plan this relayctl applied (its
// receipts beside it), its rollback or a new plan; for one not applied
// yet, its apply; for a spec, a plan of it.
func verifyHints(d differing, arg string, p *plans.Plan, fromPlan bool) []string {
	applied := false
	if fromPlan {
		rec, _ := newestApplied(arg)
		applied = rec != ""
	}
	spec := p.SpecFile
	if !fromPlan {
		spec = arg
	}
	again := fmt.Sprintf("relayctl plan %s --out PLAN, review it, then relayctl apply PLAN", spec)
	var out []string
	if len(d.stopped) > 0 {
		h := fmt.Sprintf("%s: the relay is not running (%s)", names(d.stopped), lastWordsWhere(p.Relay.Service))
		switch {
		case applied:
			h += fmt.Sprintf("; if this plan's release stops it, relayctl rollback %s --out back.plan, review it, then relayctl apply back.plan puts back what its apply changed (relayctl history %s lists the runs); a fixed release goes in a new plan: %s", arg, arg, again)
		default:
			h += fmt.Sprintf("; start it with the service's own start, then relayctl verify %s again", arg)
		}
		out = append(out, h)
	}
	if len(d.notPlanned) > 0 {
		h := fmt.Sprintf("%s: not as planned (the table says what): ", names(d.notPlanned))
		switch {
		case !fromPlan:
			h += again
		case applied:
			h += fmt.Sprintf("they changed since this plan was applied, or its apply did not end there (relayctl history %s): a new plan puts them back: %s", arg, again)
		default:
			h += fmt.Sprintf("relayctl apply %s makes them so (it refuses a host that drifted since the plan was made: then a new plan, %s)", arg, again)
		}
		out = append(out, h)
	}
	if len(d.dropping) > 0 {
		out = append(out, fmt.Sprintf("%s: as planned, but dropping more than the promise allows (the drops table): a larger buffer in a new plan (relay.so_rcvbuf, net.core.rmem_max: docs/sizing.md), %s", names(d.dropping), again))
	}
	return out
}

// lastWordsWhere says where a relay that is not running left its last
// words: the unit's journal, the spec's log, or the service's own.
func lastWordsWhere(s plans.PlanService) string {
	switch {
	case s.Manager == "systemd":
		return "its last words: journalctl -u " + s.Name + " on the host"
	case s.Log != "":
		return "its last words: the end of " + s.Log + " on the host"
	}
	return "its last words are in the service's own log; relay.service.log in the spec names it for apply's receipts"
}

func names(hosts []string) string {
	return plans.Visible(strings.Join(abbreviate(hosts, 5), " "))
}
