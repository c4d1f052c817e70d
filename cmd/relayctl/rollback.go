package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/relayctl/relayctl/plans"
	"github.com/relayctl/relayctl/rollout"
)

func rollbackCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:      "rollback",
		Usage:     "make the plan that puts each host back as an applied plan's window found it, from its receipt",
		ArgsUsage: "RECEIPT|PLAN",
		Description: `Reads a receipt (PLAN.receipt.json), or the plan beside it, and makes a
plan back to what that plan's window found on each host it applied, as the
host's own receipt of that run records it (under /var/lib/relayctl/receipts):
the release it replaced, as the host keeps it (no artifact is shipped; its
sha256 is checked on the host against the receipt's before the window),
the sysctls as they were, and the files as they were, put back from the
backups the host kept beside that receipt, each checked by its sha256
there, so their content never leaves the host. A downgrade is named as
such, not blocked.

The plan is a plan like any other: written with --out (and PLAN.md, its
review), shown, approved and applied by relayctl apply, with the same
switch (a restart through systemd's store, a handoff, or a restart),
waves, soak and read-back. A host that changed since that run (a sysctl,
the release link or a file neither as the run left it nor as it found it)
is blocked with what changed, as is one that no longer keeps the release
or the backups; one already back at what the run found has nothing to
undo, and one partly back goes back the rest of the way; one that cannot
be read is unreachable, within --max-unreachable. apply reads each host's
receipt again and refuses a host where it is not the one the plan was
made from.

Exit status: as plan's: 0 a plan was made, 1 an error (including blocked
hosts, or more unreachable ones than the budget allows; the plan is still
written). With --detailed-exitcode: 0 nothing to undo, 2 changes planned.

Examples:
   relayctl rollback ashburn.plan.receipt.json --out back.plan
   relayctl rollback ashburn.plan --out back.plan        # its receipt, ashburn.plan.receipt.json
   relayctl approve back.plan && relayctl apply back.plan`,
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "out", Aliases: []string{"o"}, Usage: "write the rollback plan to `PLAN` and its review to PLAN.md"},
			&cli.BoolFlag{Name: "json", Usage: "print the plan's JSON on stdout instead of its summary or review"},
			&cli.BoolFlag{Name: "detailed-exitcode", Usage: "exit 2 when the plan changes something, 0 when it changes nothing"},
			maxUnreachableFlag(),
			allowProgramFlag(),
		}, sshFlags()...),
		Action: func(c *cli.Context) error { return runRollback(c, e) },
	}
}

func runRollback(c *cli.Context, e *env) error {
	if c.NArg() != 1 {
		return withHint(errors.New("rollback needs exactly one RECEIPT or PLAN"), "relayctl rollback ashburn.plan.receipt.json --out back.plan")
	}
	planFile, receiptFile, err := rollbackFiles(c.Args().First())
	if err != nil {
		return err
	}
	checked, _, err := readCheckedPlan(planFile, inventoryAllow(c))
	if err != nil {
		return err
	}
	from := checked.Plan()
	rec, undos, err := readRollbackReceipt(receiptFile, from)
	if err != nil {
		return err
	}
	budget, err := unreachableBudget(c, from.Rollout)
	if err != nil {
		return err
	}
	hosts := make([]string, len(from.Hosts))
	for i, h := range from.Hosts {
		hosts[i] = h.Host
	}
	q := rollout.QueryForPlan(from)
	q.UndoOf = from.Checksum // each host's own receipt of that run, and its backups
	fmt.Fprintf(e.stderr, "relayctl: reading each host's receipt of plan %s (%d host(s))\n", from.Name, len(hosts))
	d, err := sshHosts(c, targets(from))
	if err != nil {
		return err
	}
	facts, errs := rollout.ObserveAll(c.Context, d, hosts, q, c.Int("parallel"))
	read, down := splitObserved(e, facts, errs)
	p, err := plans.MakeRollback(plans.RollbackInput{From: from, Receipt: rec, Undos: undos, Facts: read, Unreachable: down, Steps: rollout.Steps, UnreachableAllowed: budget})
	if err != nil {
		return err
	}
	if err := writePlan(e, p, read, c.String("out"), c.Bool("json")); err != nil {
		return err
	}
	return planExit(e, p, c.Bool("detailed-exitcode"), budget)
}

// rollbackFiles are the plan and the receipt a rollback is made from: a
// receipt names its plan (the file beside it), and a plan its receipt
// (receiptFor).
func rollbackFiles(arg string) (plan, receipt string, err error) {
	if p, ok := planFor(arg); ok {
		return p, arg, nil
	}
	receipt, err = receiptFor(arg)
	return arg, receipt, err
}

// receiptSuffix is the link apply keeps beside a plan to its newest
// receipt: PLAN.receipt.json.
const receiptSuffix = ".receipt.json"

// receiptFor is the receipt a rollback of a plan goes back from: its
// newest run that applied a host (a later run that was refused or could
// not connect changed nothing to go back from). The one place that says
// where that is.
func receiptFor(plan string) (string, error) {
	r, err := newestApplied(plan)
	if err != nil {
		return "", err
	}
	if r == "" {
		return "", withHint(fmt.Errorf("%s has no run that applied a host (none in %s)", plan, runsDir(plan)),
			fmt.Sprintf("a rollback goes back from the receipt of a run that applied (relayctl history %s lists the runs); give that receipt itself if it is elsewhere", plan))
	}
	return r, nil
}

// planFor is the plan a receipt is of, when the receipt is where apply
// files it: PLAN.receipts/RUN.json, or the link PLAN.receipt.json.
func planFor(receipt string) (string, bool) {
	if p, ok := strings.CutSuffix(receipt, receiptSuffix); ok && p != "" {
		return p, true
	}
	dir := filepath.Dir(receipt)
	if p, ok := strings.CutSuffix(dir, ".receipts"); ok && p != "" && strings.HasSuffix(receipt, ".json") {
		return p, true
	}
	return "", false
}

// readRollbackReceipt reads a fleet receipt of from, and what it records
// of each applied host's window. The record of the rollback plan holds
// the receipt's file and sha256.
func readRollbackReceipt(file string, from *plans.Plan) (plans.RollbackRecord, map[string]*plans.Undo, error) {
	data, err := readRegular(file, plans.MaxPlanSize)
	if err != nil {
		return plans.RollbackRecord{}, nil, fmt.Errorf("read receipt: %w", err)
	}
	var r struct {
		FormatVersion int    `json:"format_version"`
		Plan          string `json:"plan"`
		Checksum      string `json:"plan_checksum"`
		Hosts         []struct {
			Host    string          `json:"host"`
			Outcome rollout.Outcome `json:"outcome"`
			Undo    *plans.Undo     `json:"undo"`
		} `json:"hosts"`
	}
	if err := json.NewDecoder(bytes.NewReader(data)).Decode(&r); err != nil || r.FormatVersion == 0 {
		return plans.RollbackRecord{}, nil, withHint(fmt.Errorf("%s: not a receipt of relayctl apply: %v", file, err), "give the PLAN.receipt.json apply wrote, or the plan beside it")
	}
	if r.Checksum != from.Checksum {
		return plans.RollbackRecord{}, nil, withHint(fmt.Errorf("%s is a receipt of plan %s (checksum %s), not of %s (checksum %s)", file, plans.Visible(clipText(r.Plan, 80)), plans.Visible(clipText(r.Checksum, 80)), from.Name, from.Checksum),
			"give the receipt and the plan of one apply")
	}
	undos := map[string]*plans.Undo{}
	for _, h := range r.Hosts {
		if h.Outcome == rollout.Applied && h.Undo != nil {
			undos[h.Host] = h.Undo
		}
	}
	sum := sha256.Sum256(data)
	return plans.RollbackRecord{Plan: from.Name, Checksum: from.Checksum, Receipt: file, ReceiptSHA256: hex.EncodeToString(sum[:])}, undos, nil
}

// clipText is a text from a file, cut to n bytes for a message.
func clipText(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
