package main

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"os/user"
	"path/filepath"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/relayctl/relayctl/plans"
	"github.com/relayctl/relayctl/rollout"
)

func applyCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:      "apply",
		Usage:     "apply a reviewed plan: one restart window per host, verified by read-back, rolled back on failure",
		ArgsUsage: "PLAN",
		Description: `Per host: refuse a stale plan (saying which facts drifted), take the host
lock, stage the release, config and sysctl drop-in (no effect on the
running relay), then in one window set the sysctls (read back from
/proc/sys), persist the drop-in, switch the release, put the config in
place and restart the relay once. The result is read back from the kernel:
the relay's new PID and version, ss's rb on its port in its network
namespace, the runtime sysctls, and the relay's own /status. Any failure in
the window restores the previous state, restarts once more and verifies it.

The first host is a canary: the rest start only when it verifies, then
--parallel at a time; the first failure or an interrupt stops new hosts
(a host inside its window finishes or rolls back). A receipt is kept on
each host under the state dir and written beside the plan as
PLAN.receipt.json and PLAN.receipt.md.

Exit status: 0 every host applied or already as planned, 1 otherwise.

Examples:
   relayctl apply ashburn.plan
   relayctl apply ashburn.plan --parallel 5
   relayctl apply ashburn.plan --ignore-window     # an emergency outside the window`,
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "artifact", Usage: "the release `FILE` (default: the spec's artifact, relative to the spec as recorded in the plan); its sha256 must match the plan"},
			&cli.BoolFlag{Name: "ignore-window", Usage: "apply outside the plan's window"},
			&cli.BoolFlag{Name: "break-lock", Usage: "take a host lock that a dead run left behind (after checking the host)"},
			&cli.BoolFlag{Name: "clear-journal", Usage: "archive the journal (and lock) of a run that stopped in its window, after checking the host, and apply"},
			&cli.DurationFlag{Name: "verify-timeout", Value: 15 * time.Second, Usage: "how long to wait for the restarted relay to read back as planned"},
		}, sshFlags()...),
		Action: func(c *cli.Context) error { return runApply(c, e) },
	}
}

func runApply(c *cli.Context, e *env) error {
	if c.NArg() != 1 {
		return withHint(errors.New("apply needs exactly one PLAN"), "relayctl apply ashburn.plan")
	}
	file := c.Args().First()
	p, err := loadPlan(file)
	if err != nil {
		return err
	}
	artifact, err := planArtifact(c.String("artifact"), p)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := rollout.Apply(ctx, sshDialer{sshOptions(c)}, p, rollout.ApplyOptions{
		Parallel:      c.Int("parallel"),
		Artifact:      artifact,
		IgnoreWindow:  c.Bool("ignore-window"),
		BreakLock:     c.Bool("break-lock") || c.Bool("clear-journal"),
		ClearJournal:  c.Bool("clear-journal"),
		Owner:         owner(p),
		Progress:      e.stderr,
		VerifyTimeout: c.Duration("verify-timeout"),
	})
	if err != nil {
		return err
	}
	body, err := rollout.ReceiptJSON(p, rep)
	if err != nil {
		return err
	}
	if err := writeFileAtomic(file+".receipt.json", body); err != nil {
		return err
	}
	if err := writeFileAtomic(file+".receipt.md", rollout.ReceiptMarkdown(p, rep)); err != nil {
		return err
	}
	fmt.Fprint(e.stdout, rollout.Recap(rep))
	for _, h := range rep.Hosts {
		if h.Outcome != rollout.Applied && h.Outcome != rollout.Unchanged && h.Outcome != rollout.NotStarted {
			fmt.Fprintf(e.stdout, "%s: %s (%s): %s\n", h.Host, h.Outcome, h.State, h.Reason)
		}
	}
	fmt.Fprintf(e.stderr, "relayctl: receipt in %s.receipt.json and %s.receipt.md\n", file, file)
	if !rep.Succeeded() {
		return &exitCode{code: 1, err: errors.New("not every host applied; see the recap and the receipt")}
	}
	return nil
}

func loadPlan(file string) (*plans.Plan, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("read plan: %w", err)
	}
	return plans.Load(file, data)
}

// planArtifact reads the release file and checks it is the one reviewed.
func planArtifact(override string, p *plans.Plan) ([]byte, error) {
	path := override
	if path == "" {
		path = p.Relay.Artifact
		if !filepath.IsAbs(path) {
			path = filepath.Join(filepath.Dir(p.SpecFile), path)
		}
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, withHint(fmt.Errorf("read release artifact: %w", err), "give its path with --artifact FILE")
	}
	sum := sha256.Sum256(data)
	if got := hex.EncodeToString(sum[:]); got != p.Relay.SHA256 {
		return nil, fmt.Errorf("release artifact %s has sha256 %s, the plan was reviewed with %s: it changed since; make a new plan", path, got, p.Relay.SHA256)
	}
	return data, nil
}

func owner(p *plans.Plan) string {
	host, _ := os.Hostname()
	who := "unknown"
	if u, err := user.Current(); err == nil {
		who = u.Username
	}
	return fmt.Sprintf("relayctl %s (pid %d on %s, user %s) since %s, plan %s", version(), os.Getpid(), host, who, time.Now().UTC().Format(time.RFC3339), p.Name)
}
