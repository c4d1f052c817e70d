package main

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/relayctl/relayctl/internal/invprogram"
	"github.com/relayctl/relayctl/plans"
	"github.com/relayctl/relayctl/relay/capability"
	"github.com/relayctl/relayctl/rollout"
)

func planCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:      "plan",
		Usage:     "read each host's live state and write a one-window plan with its review",
		ArgsUsage: "SPEC",
		Description: `Reads the spec, observes every host over SSH (one connection each, in
parallel), and computes what one window will change: sysctls in force and
persisted, the relay release, its config, how the relay is switched
(restarted, handed over, reloaded, or not at all), and the SO_RCVBUF the
kernel will report on the relay socket afterwards, and how the release
will cross the uplink to each host (a zstd patch from the release it
keeps, compressed, or as it is) and its size. With --out it writes
the plan (JSON) and PLAN.md, the review, and PLAN.readings.json, what was
read that is not the plan (drop counters, clocks, players); without it,
prints the review. With --json it prints the plan's JSON on stdout
instead (what show --json prints of a saved plan). The same spec against
unchanged hosts gives the same plan, byte for byte.

A host that cannot be read (down, refused, a host key that changed) is in
the plan as unreachable, listed first in the review with why: apply leaves
it alone and the next plan reads it again. Whether that is a plan to apply
is --max-unreachable's call (the spec's rollout.max_unreachable, else 0):
over the budget, plan fails.

Exit status: 0 a plan was made (with or without changes), 1 an error
(including a plan with blocked hosts, or more unreachable hosts than the
budget allows, which is still written so it can be read). With
--detailed-exitcode: 0 nothing to change, 2 changes planned.

Examples:
   relayctl plan plans/examples/ashburn-rcvbuf.yaml --out ashburn.plan
   relayctl plan plans/examples/ashburn-rcvbuf.yaml --out ashburn.plan --detailed-exitcode   # 2: changes
   relayctl plan plans/examples/ashburn-rcvbuf.yaml --facts plans/examples/ashburn-facts.json --json | jq .hosts[].action
   relayctl facts --spec plans/examples/ashburn-rcvbuf.yaml --json > facts.json
   relayctl plan plans/examples/ashburn-rcvbuf.yaml --facts facts.json --out ashburn.plan`,
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "out", Aliases: []string{"o"}, Usage: "write the plan to `PLAN`, the review to PLAN.md and the readings that are not the plan to PLAN.readings.json"},
			&cli.StringSliceFlag{Name: "facts", Usage: "plan offline from the `FILE` that relayctl facts --json wrote (repeatable) instead of SSH"},
			&cli.BoolFlag{Name: "allow-downgrade", Usage: "allow a release older than the one running"},
			&cli.BoolFlag{Name: "json", Usage: "print the plan's JSON on stdout instead of its summary or review"},
			&cli.BoolFlag{Name: "detailed-exitcode", Usage: "exit 2 when the plan changes something, 0 when it changes nothing"},
			maxUnreachableFlag(),
			allowProgramFlag(),
		}, sshFlags()...),
		Action: func(c *cli.Context) error { return runPlan(c, e) },
	}
}

func runPlan(c *cli.Context, e *env) error {
	if c.NArg() != 1 {
		return withHint(errors.New("plan needs exactly one SPEC"), "relayctl plan plans/examples/ashburn-rcvbuf.yaml --out ashburn.plan")
	}
	// Every problem of the spec, the artifact's included, before anything connects.
	ls, err := loadSpec(e, c.Args().First(), inventoryAllow(c))
	if err != nil {
		return err
	}
	spec := ls.spec
	budget, err := unreachableBudget(c, spec.Rollout)
	if err != nil {
		return err
	}
	facts, down, err := gather(c, e, spec, false)
	if err != nil {
		return err
	}
	p, err := plans.Make(plans.Input{Spec: spec, Facts: facts, Unreachable: down, Artifact: ls.artifact, Templates: ls.templates, AllowDowngrade: c.Bool("allow-downgrade"), Steps: rollout.Steps,
		Uploads: planUploads(e, ls), UnreachableAllowed: budget})
	if err != nil {
		return err
	}
	if err := writePlan(e, p, facts, c.String("out"), c.Bool("json")); err != nil {
		return err
	}
	return planExit(e, p, c.Bool("detailed-exitcode"), budget)
}

// overBudget refuses a plan with more hosts not read than the budget it
// was made with allows (plan said it is "not a plan to apply"), unless
// allow: then it says so. cmd is approve or apply. The hint is the new
// plan, or the flag.
func overBudget(e *env, file, cmd string, p *plans.Plan, allow bool) error {
	over, text := p.OverBudget()
	act, done := "apply it", "applied"
	if cmd == "approve" {
		act, done = "sign it", "signed"
	}
	switch {
	case !over:
		return nil
	case allow:
		fmt.Fprintf(e.stderr, "relayctl: warning: %s: %s: %s all the same (--allow-unreachable)\n", file, text, done)
		return nil
	}
	return withHint(fmt.Errorf("%s: %s: not a plan to apply", file, text),
		fmt.Sprintf("plan again when they are back (relayctl plan %s --out %s), or relayctl %s %s --allow-unreachable to %s without them all the same", p.SpecFile, file, cmd, file, act))
}

// allowUnreachableFlag is approve's and apply's word to go on with a plan
// made over its budget of unreachable hosts.
func allowUnreachableFlag(what string) cli.Flag {
	return &cli.BoolFlag{Name: "allow-unreachable", Usage: what + " a plan with more unreachable hosts than the budget it was made with allows (plan failed on it: \"not a plan to apply\"); refused without it"}
}

// maxUnreachableFlag is plan's (and rollback's) budget of hosts that may
// be unreachable for the plan to stand.
func maxUnreachableFlag() cli.Flag {
	return &cli.StringFlag{Name: "max-unreachable", Usage: "hosts that may be unreachable for the plan to stand, `N` or N% of its hosts: they are planned as unreachable and left alone (default: the spec's rollout.max_unreachable, else 0)"}
}

// unreachableBudget is --max-unreachable, else the spec's
// rollout.max_unreachable, else 0.
func unreachableBudget(c *cli.Context, r *plans.Rollout) (plans.Amount, error) {
	if v := c.String("max-unreachable"); v != "" {
		a, err := plans.ParseAmount(v, 0)
		if err != nil {
			return a, withHint(fmt.Errorf("--max-unreachable: %w", err), "--max-unreachable 2, or --max-unreachable 5%")
		}
		return a, nil
	}
	res, err := r.Resolve()
	return res.MaxUnreachable, err
}

// writePlan writes the plan to out, its review and the readings that are
// not the plan beside it (all 0600: a plan holds each host's facts), and
// prints a summary, the review when there is no out, or with asJSON the
// plan's JSON, on stdout.
func writePlan(e *env, p *plans.Plan, facts []*plans.Facts, out string, asJSON bool) error {
	if out != "" {
		if err := writeFileAtomicWith(out, 0o600, p.WriteJSON); err != nil {
			return err
		}
		if err := writeFileAtomic(out+".md", p.Markdown(filepath.Base(out)), 0o600); err != nil {
			return err
		}
		rd, err := plans.ReadingsOf(p, facts).JSON()
		if err != nil {
			return err
		}
		if err := writeFileAtomic(readingsFile(out), rd, 0o600); err != nil {
			return err
		}
		fmt.Fprintf(e.stderr, "relayctl: wrote %s, %s and %s\n", out, out+".md", readingsFile(out))
	}
	switch {
	case asJSON:
		return p.WriteJSON(e.stdout)
	case out != "":
		printPlanSummary(e.stdout, p)
	default:
		if _, err := p.JSON(); err != nil { // the checksum the review shows
			return err
		}
		e.stdout.Write(p.Markdown("(not saved: use --out PLAN)"))
	}
	return nil
}

// planExit is plan's exit status: 1 with blocked hosts or more
// unreachable hosts than the budget allows, else 0, or with detailed 2
// when the plan changes something (terraform plan's -detailed-exitcode).
// The plan is written either way, so its review says why.
func planExit(e *env, p *plans.Plan, detailed bool, budget plans.Amount) error {
	if len(p.Unreached()) > 0 {
		within, text := p.UnreachableBudget(budget)
		if !within {
			return &exitCode{code: 1, err: withHint(fmt.Errorf("%s: not a plan to apply", text),
				"the review lists them first, with why; plan again when they are back, or give --max-unreachable N (or the spec's rollout.max_unreachable) to plan without them")}
		}
		fmt.Fprintf(e.stderr, "relayctl: warning: %s: planned as unreachable, which apply leaves alone and the next plan reads again\n", text)
	}
	if b := p.Blocked(); len(b) > 0 {
		names := make([]string, len(b))
		for i, h := range b {
			names[i] = h.Host
		}
		return &exitCode{code: 1, err: withHint(fmt.Errorf("%d of %d hosts are blocked (%s): apply would refuse them", len(b), len(p.Hosts), strings.Join(names, ", ")), "read the BLOCKED lines of the review, fix the cause, and plan again")}
	}
	if detailed && p.Changes() {
		return &exitCode{code: 2}
	}
	return nil
}

// printPlanSummary is a line per host and its blockers and warnings;
// beyond maxSummaryHosts hosts, a line per kind of change, with how many
// hosts and which, and each blocker and warning once.
func printPlanSummary(w io.Writer, p *plans.Plan) {
	if len(p.Hosts) > maxSummaryHosts {
		printPlanGroups(w, p)
		return
	}
	for _, h := range p.Hosts {
		fmt.Fprintf(w, "%-20s %-9s %s\n", plans.Visible(h.Host), actionWord(h.Action), plans.Visible(summaryLine(h)))
		for _, b := range h.Blockers {
			fmt.Fprintf(w, "%-20s   blocked: %s\n", "", plans.Visible(b))
		}
		for _, m := range h.Warnings {
			fmt.Fprintf(w, "%-20s   warning: %s\n", "", plans.Visible(m))
		}
	}
}

// summaryLine is what a plan changes on a host, in a few words.
func summaryLine(h *plans.HostPlan) string {
	if h.Action == plans.ActionUnreachable {
		return h.Unreachable
	}
	var parts []string
	for _, s := range h.Sysctls {
		if s.Change {
			parts = append(parts, fmt.Sprintf("%s %s → %s", s.Key, strings.Join(strings.Fields(s.Current), " "), s.Planned))
		}
	}
	if h.Release.Action != "keep" {
		cur := h.Release.Current
		if cur == "" {
			cur = "none"
		}
		parts = append(parts, fmt.Sprintf("release %s → %s", cur, h.Release.Planned))
	}
	for _, fc := range h.Files {
		if fc.Change && fc.Role != plans.RoleSysctlDropIn { // the sysctls above say it
			parts = append(parts, fc.Role)
		}
	}
	if h.Readback.CurrentFound {
		parts = append(parts, fmt.Sprintf("rb %d → %d", h.Readback.Current, h.Readback.Expected))
	} else {
		parts = append(parts, fmt.Sprintf("rb → %d", h.Readback.Expected))
	}
	if h.Switch != "" {
		parts = append(parts, h.Switch)
	}
	return strings.Join(parts, "; ")
}

// maxSummaryHosts is the most hosts plan lists one line each.
const maxSummaryHosts = 50

// printPlanGroups is the summary of a big plan: hosts with the same
// action and line share one.
func printPlanGroups(w io.Writer, p *plans.Plan) {
	type group struct {
		action, line string
		hosts        []string
	}
	var order []*group
	by := map[string]*group{}
	notes := map[string][]string{}
	var noteOrder []string
	for _, h := range p.Hosts {
		line := summaryLine(h)
		k := h.Action + "\x00" + line
		if by[k] == nil {
			by[k] = &group{action: h.Action, line: line}
			order = append(order, by[k])
		}
		by[k].hosts = append(by[k].hosts, h.Host)
		for _, b := range h.Blockers {
			n := "blocked: " + b
			if notes[n] == nil {
				noteOrder = append(noteOrder, n)
			}
			notes[n] = append(notes[n], h.Host)
		}
		for _, m := range h.Warnings {
			n := "warning: " + m
			if notes[n] == nil {
				noteOrder = append(noteOrder, n)
			}
			notes[n] = append(notes[n], h.Host)
		}
	}
	for _, g := range order {
		fmt.Fprintf(w, "%-20s %-9s %s\n", fmt.Sprintf("%d host(s)", len(g.hosts)), actionWord(g.action), plans.Visible(g.line))
		fmt.Fprintf(w, "%-20s   %s\n", "", plans.Visible(plans.FewNames(g.hosts, 3)))
	}
	for _, n := range noteOrder {
		fmt.Fprintf(w, "%-20s %s (%d host(s): %s)\n", "", plans.Visible(n), len(notes[n]), plans.Visible(plans.FewNames(notes[n], 3)))
	}
}

func actionWord(a string) string {
	if a == plans.ActionNone {
		return "no-change"
	}
	return a
}

// readSpec reads a spec and, when it names an inventory, selects its
// hosts (running its program where allow lets it); no artifact is read
// (facts --spec needs none).
func readSpec(file string, allow invprogram.Allow) (*plans.Spec, error) {
	data, err := readSpecFile(file)
	if err != nil {
		return nil, err
	}
	s, err := plans.ParseSpec(file, data)
	if err != nil {
		return nil, err
	}
	sc := &specFindings{spec: s}
	sc.selectHosts(allow)
	if len(sc.errs) > 0 {
		plans.SortSpecErrors(sc.errs)
		return nil, sc.errs
	}
	return s, nil
}

// checkArtifactVersion reads the version the release's program was built
// as, from its bytes (capability.BuildVersion: relayd's version marker,
// else the -X main.Version its Go build information records), and refuses
// one that is not the spec's relay.release.version: a release that is not
// the version the spec says fails only at the read-back, after a restart
// and a rollback. A program that records neither is a warning.
func checkArtifactVersion(s *plans.Spec, path string, program []byte) (string, *plans.SpecError, error) {
	rel := s.Relay.Release
	diag := func(msg string) *plans.SpecError {
		return &plans.SpecError{File: s.File, Line: rel.Line, Field: "relay.release.artifact", Msg: msg}
	}
	st, err := capability.BuildVersion(program)
	if err != nil {
		return "", nil, diag(err.Error())
	}
	switch {
	case st.From == capability.FromNone:
		return st.From, diag(fmt.Sprintf("the version of %s cannot be checked: %s; a release that is not %s shows only at the read-back, after the restart: build it with make build RELAY_VERSION=%s, which stamps the marker",
			path, st.Why, rel.Version, rel.Version)), nil
	case st.Version != rel.Version:
		where := map[string]string{capability.FromMarker: "its version marker", capability.FromBuildInfo: "the -X main.Version its Go build information records"}[st.From]
		return "", nil, diag(fmt.Sprintf("%s is relayd %s (%s), but relay.release.version says %s: build the release as %s (make build RELAY_VERSION=%s), or write version: %s",
			path, st.Version, where, rel.Version, rel.Version, rel.Version, st.Version))
	}
	return st.From, nil, nil
}

// gather returns the facts of each spec host it could read, from --facts
// files or over SSH, and why each other host could not be read.
func gather(c *cli.Context, e *env, s *plans.Spec, lastApply bool) ([]*plans.Facts, map[string]string, error) {
	if files := c.StringSlice("facts"); len(files) > 0 {
		return readFacts(files, s.Hosts)
	}
	q := rollout.QueryFor(s)
	q.LastApply = lastApply // verify: the newest receipt's drop counters
	fmt.Fprintf(e.stderr, "relayctl: observing %d host(s)\n", len(s.Hosts))
	d, err := sshHosts(c, s.Targets)
	if err != nil {
		return nil, nil, err
	}
	facts, errs := rollout.ObserveAll(c.Context, d, s.Hosts, q, c.Int("parallel"))
	read, down := splitObserved(e, facts, errs)
	return read, down, nil
}

// splitObserved parts ObserveAll's answer into the facts read and, by
// host, why the others could not be read (each said on stderr too).
func splitObserved(e *env, facts []*plans.Facts, errs []error) ([]*plans.Facts, map[string]string) {
	read := []*plans.Facts{}
	down := map[string]string{}
	for i, err := range errs {
		var he *rollout.HostError
		switch {
		case err == nil:
			read = append(read, facts[i])
		case errors.As(err, &he):
			down[he.Host] = he.Err.Error()
			fmt.Fprintf(e.stderr, "relayctl: %s: could not be read: %s\n", plans.Visible(he.Host), plans.Visible(he.Err.Error()))
		}
	}
	return read, down
}

func readFacts(files []string, hosts []string) ([]*plans.Facts, map[string]string, error) {
	by := map[string]*plans.Facts{}
	down := map[string]string{}
	for _, file := range files {
		data, err := readRegular(file, plans.MaxFactsSize)
		if err != nil {
			return nil, nil, fmt.Errorf("read facts: %w", err)
		}
		var ff plans.FactsFile
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&ff); err != nil {
			return nil, nil, fmt.Errorf("%s: not a facts file from relayctl facts --json: %w", file, err)
		}
		if ff.FormatVersion != plans.FactsFormatVersion {
			return nil, nil, fmt.Errorf("%s: facts format_version %d, this relayctl reads %d", file, ff.FormatVersion, plans.FactsFormatVersion)
		}
		for _, f := range ff.Hosts {
			if f == nil || f.Host == "" {
				return nil, nil, fmt.Errorf("%s: a host entry has no host name", file)
			}
			if f.Sysctls == nil {
				f.Sysctls = map[string]plans.SysctlFact{}
			}
			if err := plans.ValidateFacts(f); err != nil {
				return nil, nil, fmt.Errorf("%s: %w", file, err)
			}
			by[f.Host] = f
		}
		for _, u := range ff.Unreachable {
			if u.Host == "" {
				return nil, nil, fmt.Errorf("%s: an unreachable entry has no host name", file)
			}
			down[u.Host] = cmp.Or(u.Error, "could not be read")
		}
	}
	var out []*plans.Facts
	for _, h := range hosts {
		f, ok := by[h]
		if !ok && down[h] == "" {
			return nil, nil, withHint(fmt.Errorf("no facts recorded for host %s", h), "record them with relayctl facts --spec SPEC --json > facts.json")
		}
		if ok {
			out = append(out, f)
			delete(down, h)
		}
	}
	return out, down, nil
}

// readingsFile is where plan --out PLAN keeps what it read that is not
// the plan (plans.Readings): PLAN.readings.json.
func readingsFile(plan string) string { return plan + ".readings.json" }

// loadReadings reads the readings beside a plan file, nil when there are
// none (a plan copied without them): verify then has no baseline from the
// plan, and says so.
func loadReadings(plan string, p *plans.Plan) (*plans.Readings, error) {
	file := readingsFile(plan)
	data, err := readRegular(file, plans.MaxReadingsSize)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read readings: %w", err)
	}
	r, err := plans.LoadReadings(file, data, p)
	if err != nil {
		return nil, withHint(err, fmt.Sprintf("they are written by relayctl plan beside the plan it writes; plan again, or remove %s to verify without them", file))
	}
	return r, nil
}
