package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"strings"

	"github.com/urfave/cli/v2"

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
kernel will report on the relay socket afterwards. With --out it writes
the plan (JSON) and PLAN.md, the review, and PLAN.readings.json, what was
read that is not the plan (drop counters, clocks, players); without it,
prints the review. With --json it prints the plan's JSON on stdout
instead (what show --json prints of a saved plan). The same spec against
unchanged hosts gives the same plan, byte for byte.

Exit status: 0 a plan was made (with or without changes), 1 an error
(including a plan with blocked hosts, which is still written so it can be
read). With --detailed-exitcode: 0 nothing to change, 2 changes planned.

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
		}, sshFlags()...),
		Action: func(c *cli.Context) error { return runPlan(c, e) },
	}
}

func runPlan(c *cli.Context, e *env) error {
	if c.NArg() != 1 {
		return withHint(errors.New("plan needs exactly one SPEC"), "relayctl plan plans/examples/ashburn-rcvbuf.yaml --out ashburn.plan")
	}
	// Every problem of the spec, the artifact's included, before anything connects.
	ls, err := loadSpec(e, c.Args().First())
	if err != nil {
		return err
	}
	spec := ls.spec
	facts, err := gather(c, e, spec, false)
	if err != nil {
		return err
	}
	p, err := plans.Make(plans.Input{Spec: spec, Facts: facts, Artifact: ls.artifact, Templates: ls.templates, AllowDowngrade: c.Bool("allow-downgrade"), Steps: rollout.Steps})
	if err != nil {
		return err
	}
	if err := writePlan(e, p, facts, c.String("out"), c.Bool("json")); err != nil {
		return err
	}
	return planExit(p, c.Bool("detailed-exitcode"))
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

// planExit is plan's exit status: 1 with blocked hosts, else 0, or with
// detailed 2 when the plan changes something (terraform plan's
// -detailed-exitcode).
func planExit(p *plans.Plan, detailed bool) error {
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
// hosts; no artifact is read (facts --spec needs none).
func readSpec(file string) (*plans.Spec, error) {
	data, err := readSpecFile(file)
	if err != nil {
		return nil, err
	}
	s, err := plans.ParseSpec(file, data)
	if err != nil {
		return nil, err
	}
	sc := &specFindings{spec: s}
	sc.selectHosts()
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

// gather returns one Facts per spec host, from --facts files or over SSH.
func gather(c *cli.Context, e *env, s *plans.Spec, lastApply bool) ([]*plans.Facts, error) {
	if files := c.StringSlice("facts"); len(files) > 0 {
		return readFacts(files, s.Hosts)
	}
	q := rollout.QueryFor(s)
	q.LastApply = lastApply // verify: the newest receipt's drop counters
	fmt.Fprintf(e.stderr, "relayctl: observing %d host(s)\n", len(s.Hosts))
	facts, errs := rollout.ObserveAll(c.Context, sshHosts(c, s.Targets), s.Hosts, q, c.Int("parallel"))
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return facts, nil
}

func readFacts(files []string, hosts []string) ([]*plans.Facts, error) {
	by := map[string]*plans.Facts{}
	for _, file := range files {
		data, err := readRegular(file, plans.MaxFactsSize)
		if err != nil {
			return nil, fmt.Errorf("read facts: %w", err)
		}
		var ff plans.FactsFile
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&ff); err != nil {
			return nil, fmt.Errorf("%s: not a facts file from relayctl facts --json: %w", file, err)
		}
		if ff.FormatVersion != plans.FactsFormatVersion {
			return nil, fmt.Errorf("%s: facts format_version %d, this relayctl reads %d", file, ff.FormatVersion, plans.FactsFormatVersion)
		}
		for _, f := range ff.Hosts {
			if f == nil || f.Host == "" {
				return nil, fmt.Errorf("%s: a host entry has no host name", file)
			}
			if f.Sysctls == nil {
				f.Sysctls = map[string]plans.SysctlFact{}
			}
			if err := plans.ValidateFacts(f); err != nil {
				return nil, fmt.Errorf("%s: %w", file, err)
			}
			by[f.Host] = f
		}
	}
	var out []*plans.Facts
	for _, h := range hosts {
		f, ok := by[h]
		if !ok {
			return nil, withHint(fmt.Errorf("no facts recorded for host %s", h), "record them with relayctl facts --spec SPEC --json > facts.json")
		}
		out = append(out, f)
	}
	return out, nil
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
