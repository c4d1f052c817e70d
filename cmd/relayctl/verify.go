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
observation of the same socket (PLAN.readings.json, which plan --out
writes beside the plan). A host dropping more than the promise
(rollout.soak.max_drop_rate, default 1 drop/s; docs/soak.md) differs;
counters that disagree are shown.

A host that cannot be read is listed as such, with why, and the others are
reported all the same; so is a host the plan holds as unreachable (nothing
was planned for it).

With --json, stdout is one document (format_version 3, docs/json.md):
per host every check with what, want, got and ok, its drops (or why it
could not be read: unreachable), and a summary.

Exit status: 0 every host matches, 3 some host differs or drops more than
the promise allows (a table says what), 5 none differs but some could not
be read, 1 error.

Examples:
   relayctl verify ashburn.plan
   relayctl verify ashburn.plan --json | jq '.hosts[] | select(.ok | not)'
   relayctl verify plans/examples/ashburn-rcvbuf.yaml`,
		Flags: append([]cli.Flag{
			&cli.BoolFlag{Name: "json", Usage: "print every check of every host as JSON on stdout (docs/json.md) instead of the table"},
			allowProgramFlag(),
		}, sshFlags()...),
		Action: func(c *cli.Context) error { return runVerify(c, e) },
	}
}

func runVerify(c *cli.Context, e *env) error {
	if c.NArg() != 1 {
		return withHint(errors.New("verify needs exactly one PLAN or SPEC"), "relayctl verify ashburn.plan")
	}
	arg := c.Args().First()
	p, facts, down, readings, err := verifyInput(c, e, arg)
	if err != nil {
		return err
	}
	rep := verifyReport{FormatVersion: VerifyFormatVersion, Source: arg, Plan: p.Name, Checksum: p.Checksum, Hosts: []verifyHost{}}
	fromPlan := p.Checksum != "" // a plan made now from a spec observed nothing earlier
	// The hosts that differ, by what makes progress: for the hints.
	var why differing
	for _, h := range p.Hosts {
		f := facts[h.Host]
		if f == nil || h.Action == plans.ActionUnreachable {
			rep.Hosts = append(rep.Hosts, verifyHost{Host: h.Host, Checks: []rollout.Check{}, Unreachable: unreadText(h, down[h.Host], fromPlan)})
			rep.Summary.Unreachable++
			continue
		}
		vh := verifyHost{Host: h.Host, Address: h.Address, OK: true, Checks: append([]rollout.Check{}, rollout.PlannedChecks(p, h, nil, f)...),
			Unfinished: plans.Visible(rollout.JournalNote(f.Journal)), Release: f.Release.Current}
		if f.Socket.Found {
			vh.RB = f.Socket.Rcvbuf
		}
		for _, ch := range vh.Checks {
			vh.OK = vh.OK && ch.OK
		}
		d := dropsOf(p, f, readings.Host(h.Host))
		vh.Drops = &d
		if !d.OK {
			vh.OK = false
			rep.Summary.OverPromise++
		}
		if vh.OK {
			rep.Summary.Match++
		} else {
			rep.Summary.Differ++
			why.add(h.Host, f, vh)
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
	return verifyExit(rep, arg, verifyHints(why, arg, p, fromPlan))
}

// verifyInput is the plan to verify (a spec's is made now), the facts of
// each host that could be read, by name, with why the others could not,
// and a saved plan's readings (nil for a spec). A host a saved plan holds
// as unreachable is not read: there is nothing planned to compare it with.
func verifyInput(c *cli.Context, e *env, arg string) (*plans.Plan, map[string]*plans.Facts, map[string]string, *plans.Readings, error) {
	var p *plans.Plan
	var read []*plans.Facts
	var down map[string]string
	var readings *plans.Readings
	if strings.HasSuffix(arg, ".yaml") || strings.HasSuffix(arg, ".yml") {
		var err error
		if p, read, down, err = planFromSpec(c, e, arg); err != nil {
			return nil, nil, nil, nil, err
		}
	} else {
		var err error
		if p, _, err = inspectPlan(arg); err != nil {
			return nil, nil, nil, nil, err
		}
		if readings, err = loadReadings(arg, p); err != nil {
			return nil, nil, nil, nil, err
		}
		if p.Inventory != nil && p.Inventory.Program != nil {
			fmt.Fprintf(e.stderr, "relayctl: %s: its hosts are read as the plan records them, from %s, which verify does not run again (apply and stage do)\n", arg, plans.Visible(p.Inventory.Source()))
		}
		var hosts []string
		for _, h := range p.Hosts {
			if h.Action != plans.ActionUnreachable {
				hosts = append(hosts, h.Host)
			}
		}
		q := rollout.QueryForPlan(p)
		q.LastApply = true
		d, err := sshHosts(c, targets(p))
		if err != nil {
			return nil, nil, nil, nil, err
		}
		facts, errs := rollout.ObserveAll(c.Context, d, hosts, q, c.Int("parallel"))
		read, down = splitObserved(e, facts, errs)
	}
	by := make(map[string]*plans.Facts, len(read))
	for _, f := range read {
		by[f.Host] = f
	}
	return p, by, down, readings, nil
}

// unreadText says why verify could not look at a host.
func unreadText(h *plans.HostPlan, why string, fromPlan bool) string {
	switch {
	case h.Action == plans.ActionUnreachable && fromPlan:
		return "not planned: it could not be read when the plan was made (" + h.Unreachable + "); relayctl plan SPEC reads it again"
	case h.Action == plans.ActionUnreachable:
		return h.Unreachable
	}
	return why
}

// verifyExit is verify's exit status: 3 when a host differs (whatever
// else), with hints what to run, 5 when none differs but some could not be
// looked at, else 0.
func verifyExit(rep verifyReport, arg string, hints []string) error {
	s := rep.Summary
	switch {
	case s.Differ > 0:
		err := fmt.Errorf("%d of %d hosts differ from the plan", s.Differ, s.Hosts)
		if s.OverPromise > 0 {
			err = fmt.Errorf("%d of %d hosts differ from the plan (%d drop more than the promise allows)", s.Differ, s.Hosts, s.OverPromise)
		}
		if s.Unreachable > 0 {
			err = fmt.Errorf("%w; %d could not be read", err, s.Unreachable)
		}
		if len(hints) > 0 {
			err = withHint(err, strings.Join(hints, "\nrelayctl: hint: "))
		}
		return &exitCode{code: exitDiffers, err: err}
	case s.Unreachable > 0:
		return &exitCode{code: exitCouldNotLook, err: withHint(fmt.Errorf("%d of %d hosts could not be read (the %d others match the plan)", s.Unreachable, s.Hosts, s.Match),
			fmt.Sprintf("relayctl verify %s again when they are back; the list above says why each could not be read", arg))}
	}
	return nil
}

// VerifyFormatVersion is the layout version of verify --json: 2 added
// each host's drops and made ok (and the exit status) depend on them; 3
// lists the hosts that could not be read (unreachable, and no drops),
// counted in summary.unreachable.
const VerifyFormatVersion = 3

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
		Unreachable int `json:"unreachable"`  // hosts that could not be read: neither match nor differ
	} `json:"summary"`
}

type verifyHost struct {
	Host    string          `json:"host"`
	Address string          `json:"address,omitempty"`
	OK      bool            `json:"ok"` // every check as planned, and drops within the promise
	Checks  []rollout.Check `json:"checks"`
	// Release and RB are the release the host runs and its relay socket's
	// rb, as read: absent when there is none (a plan of kind none, no
	// socket found).
	Release string       `json:"release,omitempty"`
	RB      uint64       `json:"rb,omitempty"`
	Drops   *verifyDrops `json:"drops,omitempty"`
	// Unreachable is why the host could not be read (now, or when the
	// plan was made); it then has no checks and no drops.
	Unreachable string `json:"unreachable,omitempty"`
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
	var unread []verifyHost
	for _, h := range rep.Hosts {
		if h.Unreachable != "" {
			unread = append(unread, h)
			continue
		}
		checksOK := true
		for _, ch := range h.Checks {
			if !ch.OK {
				checksOK = false
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t\n", plans.Visible(h.Host), plans.Visible(ch.What), plans.Visible(ch.Want), plans.Visible(ch.Got))
			}
		}
		if checksOK {
			fmt.Fprintf(tw, "%s\tall %d checks\tas planned\tas planned%s\t\n", plans.Visible(h.Host), len(h.Checks), plans.Visible(readText(h)))
		}
	}
	tw.Flush()
	fmt.Fprintln(e.stdout)
	tw = tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "HOST\tSS D\tUDPRCVBUFERRORS\tRX_DROPS\tSINCE\tDROPS/S\tPROMISE\t")
	var notes []string
	for _, h := range rep.Hosts {
		if h.Drops == nil {
			continue
		}
		d := *h.Drops
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
	if len(unread) > 0 {
		fmt.Fprintf(e.stdout, "\nCOULD NOT BE READ (%d host(s): neither match nor differ)\n", len(unread))
		for _, h := range unread {
			fmt.Fprintf(e.stdout, "%s: %s\n", plans.Visible(h.Host), plans.Visible(h.Unreachable))
		}
	}
}

// readText is what a host as planned was read running: ": release 1.8.0,
// rb 8388608", or less where it has no release or socket.
func readText(h verifyHost) string {
	var parts []string
	if h.Release != "" {
		parts = append(parts, "release "+h.Release)
	}
	if h.RB != 0 {
		parts = append(parts, fmt.Sprintf("rb %d", h.RB))
	}
	if len(parts) == 0 {
		return ""
	}
	return ": " + strings.Join(parts, ", ")
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
// observed it (at: its readings beside the plan file, nil for a plan
// made now from a spec, which observed nothing earlier).
func dropsOf(p *plans.Plan, f *plans.Facts, at *plans.HostReading) verifyDrops {
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
	if d.Span == nil && at != nil && at.Drops != nil {
		if s, err := rollout.Span(*at.Drops, d.Now); err == nil {
			b := *at.Drops
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
func planFromSpec(c *cli.Context, e *env, file string) (*plans.Plan, []*plans.Facts, map[string]string, error) {
	ls, err := loadSpec(e, file, inventoryAllow(c))
	if err != nil {
		return nil, nil, nil, err
	}
	facts, down, err := gather(c, e, ls.spec, true)
	if err != nil {
		return nil, nil, nil, err
	}
	p, err := plans.Make(plans.Input{Spec: ls.spec, Facts: facts, Unreachable: down, Artifact: ls.artifact, Templates: ls.templates, AllowDowngrade: true, Steps: rollout.Steps})
	return p, facts, down, err
}
