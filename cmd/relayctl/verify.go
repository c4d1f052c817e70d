package main

import (
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/relayctl/relayctl/plans"
	"github.com/relayctl/relayctl/rollout"
)

func verifyCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:      "verify",
		Usage:     "read back each host and compare it with what a plan (or a spec) promises",
		ArgsUsage: "PLAN|SPEC",
		Description: `Read-back only: the runtime sysctls from /proc/sys, the relay socket's rb
from ss in the relay's network namespace, the relay's own /status, its
release, config and the sysctl drop-in, against what the plan promised (for
a SPEC: what a plan made now would promise). Nothing changes and nothing the
plan names runs: the plan is checked against its recorded spec first, as
apply does, and the relay is found through systemd or its pid file.

It also reads each host's drop counters (ss d, /proc/net/udp drops, the
namespace's UdpRcvbufErrors and UdpInErrors, the relay's rx_drops) and
their rate since the last apply: from the counters the host's newest
receipt (under /var/lib/relayctl/receipts) read after that apply's window,
or, when that socket is gone or no receipt has them, the plan's own
observation of the same socket. A host dropping more than the promise
(rollout.soak.max_drop_rate, default 1 drop/s; docs/soak.md) differs;
counters that disagree are shown.

With --json, stdout is one document (format_version 2, docs/json.md):
per host every check with what, want, got and ok, its drops, and a
summary.

Exit status: 0 every host matches, 3 some host differs or drops more than
the promise allows (a table says what), 1 error.

Examples:
   relayctl verify ashburn.plan
   relayctl verify ashburn.plan --json | jq '.hosts[] | select(.ok | not)'
   relayctl verify plans/examples/ashburn-rcvbuf.yaml`,
		Flags: append([]cli.Flag{
			&cli.BoolFlag{Name: "json", Usage: "print every check of every host as JSON on stdout (docs/json.md) instead of the table"},
		}, sshFlags()...),
		Action: func(c *cli.Context) error { return runVerify(c, e) },
	}
}

func runVerify(c *cli.Context, e *env) error {
	if c.NArg() != 1 {
		return withHint(errors.New("verify needs exactly one PLAN or SPEC"), "relayctl verify ashburn.plan")
	}
	arg := c.Args().First()
	var p *plans.Plan
	var facts []*plans.Facts
	var err error
	if strings.HasSuffix(arg, ".yaml") || strings.HasSuffix(arg, ".yml") {
		p, facts, err = planFromSpec(c, e, arg)
	} else if checked, _, lerr := loadPlan(arg); lerr != nil {
		err = lerr
	} else {
		p = checked.Plan()
		hosts := make([]string, len(p.Hosts))
		for i, h := range p.Hosts {
			hosts[i] = h.Host
		}
		var errs []error
		q := rollout.QueryForPlan(p)
		q.LastApply = true
		facts, errs = rollout.ObserveAll(c.Context, sshHosts(c, targets(p)), hosts, q, c.Int("parallel"))
		err = errors.Join(errs...)
	}
	if err != nil {
		return err
	}
	rep := verifyReport{FormatVersion: VerifyFormatVersion, Source: arg, Plan: p.Name, Checksum: p.Checksum, Hosts: []verifyHost{}}
	fromPlan := p.Checksum != "" // a plan made now from a spec observed nothing earlier
	for i, h := range p.Hosts {
		vh := verifyHost{Host: h.Host, Address: h.Address, OK: true, Checks: append([]rollout.Check{}, rollout.PlannedChecks(p, h, nil, facts[i])...),
			Unfinished: plans.Visible(rollout.JournalNote(facts[i].Journal))}
		for _, ch := range vh.Checks {
			vh.OK = vh.OK && ch.OK
		}
		vh.Drops = dropsOf(p, h, facts[i], fromPlan)
		if !vh.Drops.OK {
			vh.OK = false
			rep.Summary.OverPromise++
		}
		if vh.OK {
			rep.Summary.Match++
		} else {
			rep.Summary.Differ++
		}
		rep.Hosts = append(rep.Hosts, vh)
	}
	rep.Summary.Hosts = len(rep.Hosts)
	if c.Bool("json") {
		if err := writeJSON(e.stdout, rep); err != nil {
			return err
		}
	} else {
		printVerifyTable(e, rep)
	}
	if rep.Summary.Differ > 0 {
		err := fmt.Errorf("%d of %d hosts differ from the plan", rep.Summary.Differ, rep.Summary.Hosts)
		if rep.Summary.OverPromise > 0 {
			err = fmt.Errorf("%d of %d hosts differ from the plan (%d drop more than the promise allows)", rep.Summary.Differ, rep.Summary.Hosts, rep.Summary.OverPromise)
		}
		return &exitCode{code: 3, err: err}
	}
	return nil
}

// VerifyFormatVersion is the layout version of verify --json: 2 added
// each host's drops and made ok (and the exit status) depend on them.
const VerifyFormatVersion = 2

// verifyReport is verify --json: what each host reads back against what
// the plan (or a plan made now from the spec) promises.
type verifyReport struct {
	FormatVersion int          `json:"format_version"`
	Source        string       `json:"source"`        // the PLAN or SPEC file verified
	Plan          string       `json:"plan"`          // the plan's name
	Checksum      string       `json:"plan_checksum"` // empty when verifying a spec
	Hosts         []verifyHost `json:"hosts"`
	Summary       struct {
		Hosts       int `json:"hosts"`
		Match       int `json:"match"`
		Differ      int `json:"differ"`
		OverPromise int `json:"over_promise"` // of the hosts that differ, those dropping more than the promise allows
	} `json:"summary"`
}

type verifyHost struct {
	Host    string          `json:"host"`
	Address string          `json:"address"`
	OK      bool            `json:"ok"` // every check as planned, and drops within the promise
	Checks  []rollout.Check `json:"checks"`
	Drops   verifyDrops     `json:"drops"`
	// Unfinished is what a run's journal left on the host says (a window
	// the host ended by itself after its run's connection was lost, say).
	Unfinished string `json:"unfinished,omitempty"`
}

// printVerifyTable prints the checks that differ, one row each, and one
// row for a host where all match; then each host's drops, and where the
// counters disagree.
func printVerifyTable(e *env, rep verifyReport) {
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "HOST\tCHECK\tWANT\tGOT\t")
	for _, h := range rep.Hosts {
		checksOK := true
		for _, ch := range h.Checks {
			if !ch.OK {
				checksOK = false
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t\n", plans.Visible(h.Host), plans.Visible(ch.What), plans.Visible(ch.Want), plans.Visible(ch.Got))
			}
		}
		if checksOK {
			fmt.Fprintf(tw, "%s\tall %d checks\tas planned\tas planned\t\n", plans.Visible(h.Host), len(h.Checks))
		}
	}
	tw.Flush()
	fmt.Fprintln(e.stdout)
	tw = tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "HOST\tSS D\tUDPRCVBUFERRORS\tRX_DROPS\tSINCE\tDROPS/S\tPROMISE\t")
	var notes []string
	for _, h := range rep.Hosts {
		d := h.Drops
		rx := "-"
		if d.Now.RelayRxDrops != nil {
			rx = fmt.Sprint(*d.Now.RelayRxDrops)
		}
		since, rate, verdict := "-", "-", "unknown:"
		if s := d.Span; s != nil {
			since = fmt.Sprintf("%s, %.0f s (%s)", d.Since, s.Seconds, s.Counts())
			rate, verdict = fmt.Sprintf("%.1f", s.DropRate), "within"
			if !d.OK {
				verdict = "OVER" // the promise is at most Allowed drops/s
			}
			for _, x := range s.Disagreement {
				notes = append(notes, plans.Visible(h.Host)+": the counters disagree: "+plans.Visible(x))
			}
		} else if d.NoSpan != "" {
			notes = append(notes, plans.Visible(h.Host)+": no drop rate: "+plans.Visible(d.NoSpan))
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\t%s %g/s\t\n", plans.Visible(h.Host), d.Now.SSDrops, d.Now.RcvbufErrors, rx, plans.Visible(since), rate, verdict, d.Allowed)
	}
	tw.Flush()
	for _, h := range rep.Hosts {
		if h.Unfinished != "" {
			notes = append(notes, plans.Visible(h.Host)+": "+h.Unfinished)
		}
	}
	for _, n := range notes {
		fmt.Fprintln(e.stdout, n)
	}
}

// verifyDrops is a host's drop counters now, and their rate since the
// last apply (the receipt's counters after its window) or since the plan
// observed the host, when that was the same socket.
type verifyDrops struct {
	Now      rollout.Counters  `json:"now"`
	Since    string            `json:"since,omitempty"`   // "last apply" or "plan"; "" when no baseline serves
	Receipt  string            `json:"receipt,omitempty"` // the host's receipt the baseline is from
	Baseline *rollout.Counters `json:"baseline,omitempty"`
	Span     *rollout.DropSpan `json:"span,omitempty"`    // baseline → now: each counter's rise, the rates, disagreements
	NoSpan   string            `json:"no_span,omitempty"` // why there is no rate
	Allowed  float64           `json:"allowed_drops_per_s"`
	OK       bool              `json:"ok"` // no rate over Allowed (true when the rate is unknown)
}

// dropsOf measures a host's drops since its last apply, or since the plan
// observed it (fromPlan: the plan is a file made earlier).
func dropsOf(p *plans.Plan, h *plans.HostPlan, f *plans.Facts, fromPlan bool) verifyDrops {
	d := verifyDrops{Now: rollout.CountersOf(f), Allowed: plans.DefaultSoak.MaxDropRate, OK: true}
	if r, err := p.Rollout.Resolve(); err == nil && r.Soak != nil {
		d.Allowed = r.Soak.MaxDropRate
	}
	var why []string
	if la := f.LastApply; la != nil {
		if s, err := rollout.Span(la.Drops, d.Now); err == nil {
			b := la.Drops
			d.Since, d.Receipt, d.Baseline, d.Span = "last apply", la.Receipt, &b, s
		} else {
			why = append(why, "since the last apply ("+la.Receipt+"): "+err.Error())
		}
	} else {
		why = append(why, "no receipt on the host read the relay back after a window")
	}
	if d.Span == nil && fromPlan && h.DropsAtPlan != nil {
		if s, err := rollout.Span(*h.DropsAtPlan, d.Now); err == nil {
			b := *h.DropsAtPlan
			d.Since, d.Baseline, d.Span = "plan", &b, s
		} else {
			why = append(why, "since the plan: "+err.Error())
		}
	}
	if d.Span == nil {
		d.NoSpan = strings.Join(why, "; ")
		return d
	}
	d.OK = d.Span.DropRate <= d.Allowed
	return d
}

// planFromSpec makes a plan in memory from a spec and live facts.
func planFromSpec(c *cli.Context, e *env, file string) (*plans.Plan, []*plans.Facts, error) {
	ls, err := loadSpec(e, file)
	if err != nil {
		return nil, nil, err
	}
	facts, err := gather(c, e, ls.spec, true)
	if err != nil {
		return nil, nil, err
	}
	p, err := plans.Make(plans.Input{Spec: ls.spec, Facts: facts, Artifact: ls.artifact, Templates: ls.templates, AllowDowngrade: true, Steps: rollout.Steps})
	return p, facts, err
}
