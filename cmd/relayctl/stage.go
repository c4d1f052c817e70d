package main

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/relayctl/relayctl/plans"
	"github.com/relayctl/relayctl/rollout"
)

func stageCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:      "stage",
		Usage:     "before the window: put the release, config and sysctl drop-in on every host, checked; nothing in force changes",
		ArgsUsage: "PLAN",
		Description: `Does on every host what apply does before the window, ahead of it: take the
host lock, observe, check the plan as apply does, then place the release
(uploaded, or fetched by the host from the plan's url) with its sha256
checked on the host, and write the relay config and sysctl drop-in beside
their files (PATH.relayctl-new). The running relay, the sysctls in force,
the current link and the files in use do not change, and the window is not
checked. Hosts go --parallel at a time, all of them: a failure on one host
stops nobody else.

Releases are kept on each host by content (RELEASES_DIR/.sha256/SHA256):
bytes a host already has, checked by their sha256, are never sent again, so
a second stage uploads nothing, and apply inside the window finds what was
staged, checks it and uploads nothing: the window is the restart, not the
transfer. The release goes as apply sends it: in the smallest form each
host decodes (a zstd patch from the release it keeps, zstd, gzip),
decoded and checked by its sha256 on the host. A receipt is kept on each host and beside the plan in
PLAN.receipts/, under the run's own name, with the bytes uploaded per host and the form the release went in;
PLAN.stage.json and PLAN.stage.md point at the newest stage.

The plan's approval is checked as apply checks it: when an allowed_signers
file is configured (--require-approval, $RELAYCTL_REQUIRE_APPROVAL or
/etc/relayctl/allowed_signers), stage needs PLAN.sig signed by a key listed
there, or --skip-approval REASON, which the stage receipt records.

Exit status: 0 every host staged (or already as planned), 1 otherwise.

Examples:
   relayctl stage fleet.plan --parallel 20       # the day before
   relayctl apply fleet.plan                     # in the window
   relayctl apply fleet.plan --stage-only        # the same as relayctl stage
   relayctl stage fleet.plan --skip-approval "staging before review"   # recorded in PLAN.stage.json`,
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "artifact", Usage: "the release `FILE` (default: the spec's artifact, relative to the spec as recorded in the plan); its sha256 must match the plan"},
			&cli.BoolFlag{Name: "clear-journal", Usage: "archive the journal of an unfinished run that stopped in its window, after checking the host, and stage"},
			&cli.DurationFlag{Name: "fetch-timeout", Value: rollout.DefaultFetchTimeout, Usage: "how long a host may take to fetch a release from the plan's url"},
			onlyFlagDef(),
			allowProgramFlag(),
		}, append(approvalFlags(), sshFlags()...)...),
		Action: func(c *cli.Context) error { return runStage(c, e) },
	}
}

// runStage is relayctl stage, and apply --stage-only (whose flags are a
// superset of stage's).
func runStage(c *cli.Context, e *env) error {
	if c.NArg() != 1 {
		return withHint(errors.New("stage needs exactly one PLAN"), "relayctl stage fleet.plan")
	}
	// apply --stage-only: apply's flags for the window and the fleet do
	// not apply to staging; say so rather than ignore them.
	for _, f := range []string{"waves", "max-failures", "max-unreachable", "resume", "ignore-window", "verify-timeout", "stable-for", "json", "soak", "soak-hosts", "allow-unreachable"} {
		if c.IsSet(f) {
			return withHint(fmt.Errorf("--%s does not apply to --stage-only: staging runs on every host at once and stops before the window", f), "relayctl stage PLAN, then relayctl apply PLAN --"+f+" …")
		}
	}
	file := c.Args().First()
	p, raw, err := readPlan(file)
	if err != nil {
		return err
	}
	approved, err := decideApproval(c, e, file, p, raw)
	if err != nil {
		return err
	}
	checked, err := checkLoaded(file, p, inventoryAllow(c))
	if err != nil {
		return err
	}
	noteInventory(e, file, checked)
	artifact, err := planArtifact(c.String("artifact"), p)
	if err != nil {
		return err
	}
	only, _, err := onlyFlag(c, p)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
	defer stop()
	live, width := terminal(e.stderr)
	hostsOf, err := sshHosts(c, targets(checked.Plan()))
	if err != nil {
		return err
	}
	rep, err := rollout.Stage(ctx, hostsOf, checked, rollout.ApplyOptions{
		Parallel:     c.Int("parallel"),
		Artifact:     artifact,
		Cache:        shippedCache(e, artifact),
		ClearJournal: c.Bool("clear-journal"),
		Owner:        owner(p),
		Progress:     e.stderr,
		Live:         live,
		LiveWidth:    width,
		FetchTimeout: c.Duration("fetch-timeout"),
		Now:          time.Now,
		Approval:     approved,
		Only:         only,
		RunInfo:      runInfo(rollout.RunStage),
	})
	if err != nil {
		return err
	}
	record, err := writeRun(file, p, rep)
	if err != nil {
		return err
	}
	fmt.Fprint(e.stdout, rollout.Recap(rep))
	var sent int64
	for _, h := range rep.Hosts {
		sent += h.BytesUploaded
		if h.Outcome != rollout.Staged && h.Outcome != rollout.Unchanged && h.Outcome != rollout.NotStarted {
			fmt.Fprintf(e.stdout, "%s: %s (%s): %s\n", plans.Visible(h.Host), h.Outcome, plans.Visible(h.State), plans.Visible(h.Reason))
		}
	}
	fmt.Fprintf(e.stdout, "uploaded: %d bytes in all\n", sent)
	fmt.Fprintf(e.stderr, "relayctl: stage receipt of run %s in %s and .md (%s.stage.json points at it)\n", rep.RunInfo.ID, record, file)
	if !rep.Succeeded() {
		return &exitCode{code: 1, err: errors.New("not every host staged; see the recap and the stage receipt")}
	}
	return nil
}
