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

With --json, stdout is one document (format_version 1, docs/json.md):
per host every check with what, want, got and ok, and a summary.

Exit status: 0 every host matches, 3 some host differs (a table says what),
1 error.

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
		facts, errs = rollout.ObserveAll(c.Context, sshHosts(c, targets(p)), hosts, rollout.QueryForPlan(p), c.Int("parallel"))
		err = errors.Join(errs...)
	}
	if err != nil {
		return err
	}
	rep := verifyReport{FormatVersion: VerifyFormatVersion, Source: arg, Plan: p.Name, Checksum: p.Checksum, Hosts: []verifyHost{}}
	for i, h := range p.Hosts {
		vh := verifyHost{Host: h.Host, Address: h.Address, OK: true, Checks: append([]rollout.Check{}, rollout.PlannedChecks(p, h, nil, facts[i])...)}
		for _, ch := range vh.Checks {
			vh.OK = vh.OK && ch.OK
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
		return &exitCode{code: 3, err: fmt.Errorf("%d of %d hosts differ from the plan", rep.Summary.Differ, rep.Summary.Hosts)}
	}
	return nil
}

// VerifyFormatVersion is the layout version of verify --json.
const VerifyFormatVersion = 1

// verifyReport is verify --json: what each host reads back against what
// the plan (or a plan made now from the spec) promises.
type verifyReport struct {
	FormatVersion int          `json:"format_version"`
	Source        string       `json:"source"`        // the PLAN or SPEC file verified
	Plan          string       `json:"plan"`          // the plan's name
	Checksum      string       `json:"plan_checksum"` // empty when verifying a spec
	Hosts         []verifyHost `json:"hosts"`
	Summary       struct {
		Hosts  int `json:"hosts"`
		Match  int `json:"match"`
		Differ int `json:"differ"`
	} `json:"summary"`
}

type verifyHost struct {
	Host    string          `json:"host"`
	Address string          `json:"address"`
	OK      bool            `json:"ok"`
	Checks  []rollout.Check `json:"checks"`
}

// printVerifyTable prints the checks that differ, one row each, and one
// row for a host where all match.
func printVerifyTable(e *env, rep verifyReport) {
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "HOST\tCHECK\tWANT\tGOT\t")
	for _, h := range rep.Hosts {
		if h.OK {
			fmt.Fprintf(tw, "%s\tall %d checks\tas planned\tas planned\t\n", plans.Visible(h.Host), len(h.Checks))
			continue
		}
		for _, ch := range h.Checks {
			if !ch.OK {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t\n", plans.Visible(h.Host), plans.Visible(ch.What), plans.Visible(ch.Want), plans.Visible(ch.Got))
			}
		}
	}
	tw.Flush()
}

// planFromSpec makes a plan in memory from a spec and live facts.
func planFromSpec(c *cli.Context, e *env, file string) (*plans.Plan, []*plans.Facts, error) {
	ls, err := loadSpec(e, file)
	if err != nil {
		return nil, nil, err
	}
	facts, err := gather(c, e, ls.spec)
	if err != nil {
		return nil, nil, err
	}
	p, err := plans.Make(plans.Input{Spec: ls.spec, Facts: facts, Artifact: ls.artifact, Templates: ls.templates, AllowDowngrade: true, Steps: rollout.Steps})
	return p, facts, err
}
