package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/relayctl/relayctl/internal/invprogram"
	"github.com/relayctl/relayctl/internal/whoami"
	"github.com/relayctl/relayctl/plans"
	"github.com/relayctl/relayctl/rollout"
)

func applyCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:      "apply",
		Usage:     "apply a reviewed plan: one restart window per host, verified by read-back, rolled back on failure",
		ArgsUsage: "PLAN",
		Description: `Per host: take the host lock, then refuse a stale plan (saying which facts
drifted; read under the lock, so another run's changes are never mistaken
for drift), stage the release, config and sysctl drop-in (no effect on the
running relay), then in one window set the sysctls (read back from
/proc/sys), persist the drop-in, switch the release, put the config in
place and restart the relay once. The result is read back from the kernel:
the relay's new PID and version, ss's rb on its port in its network
namespace, the runtime sysctls, and the relay's own /status, and must hold
with the same relay process for --stable-for (10s by default) before the
host counts as applied: a release whose relay dies within it is rolled back
on its wave's canary, its last words (systemd's journal, or the spec's
relay.service.log) in the reason and the receipt. Any failure in
the window restores the previous state, restarts once more and verifies it.

With a soak (--soak, or the spec's rollout.soak; docs/soak.md), each
wave's canary (or every host) is watched after its read-back: relayctl
samples the relay socket's drop counters (ss d, the namespace's
UdpRcvbufErrors and UdpInErrors, the relay's rx_drops and players) through
the session it holds, compares their rate with a baseline sampled before
the window, and on a regression rolls the host back (or keeps it, as the
soak says) and stops the rollout before the next wave; a soak without
enough traffic to judge is "insufficient traffic", never a pass.

Hosts go in waves (--waves, or the spec's rollout section; by default a
canary, then the rest), --parallel at a time within a wave; a wave starts
only when the one before has ended within its budgets: --max-failures
failed, rolled back or refused hosts and --max-unreachable unreachable ones
(both default 0), exactly at a budget goes on, over it stops; a wave where
no host applied stops whatever the budgets. An interrupt stops new hosts
too (a host inside its window finishes or rolls back). Every run is a
record: its receipt (the run's id, who ran it on which machine, relayctl's
version and commit, the approval, and per host the SSH key it accepted and
how it ended) is kept on each host it reached under the state dir (the
newest 100) and beside the plan in PLAN.receipts/, under a name of its own;
PLAN.receipt.json and PLAN.receipt.md point at the newest (relayctl history
lists them all). PLAN.ledger.json holds every host's outcome so far,
written as each host starts and ends: --resume goes on with the hosts it
does not show applied or unchanged, and refuses a ledger of another plan,
and one whose release was rejected: a soak judged it a regression, or it
(or the spec's values) failed on a host and was rolled back there, a
crash or a read-back that did not hold (--retry-rejected goes on all the
same); a plain apply over a ledger that shows hosts in
progress (its run was killed, or still runs) is refused, naming --resume,
which goes on from it. When hosts did not end as planned, a hint per kind
of cause names the command that goes on. On a terminal, progress is a
live view of the wave and the fleet; otherwise one line per step.

relayctl stage PLAN (or apply --stage-only) does everything before the
window ahead of it; apply then finds the release and files staged, checks
their sha256 on the host and uploads nothing.

The release goes in the smallest form each host decodes: a zstd patch from
the release it keeps in its store, when relayctl shipped that one (its
cache, ~/.cache/relayctl), else zstd- or gzip-compressed; the host checks
the sha256 of what it decoded, and a form it cannot take is followed by the
release compressed, then as it is. The receipt says what was sent
(docs/uploads.md).

Before anything connects, a plan with more unreachable hosts than the
budget it was made with (plan failed on it: "not a plan to apply") is
refused unless --allow-unreachable; the plan is checked against the spec it records
(a value the spec parser refuses is refused here too), and against its
approval: when an allowed_signers file is configured (--require-approval
FILE, else $RELAYCTL_REQUIRE_APPROVAL, else /etc/relayctl/allowed_signers
if it exists), PLAN.sig must be an SSH signature of exactly these plan
bytes (relayctl approve, or ssh-keygen -Y sign -n relayctl-plan) by a key
listed there, for --resume too; only --skip-approval REASON runs it
unsigned, and the receipt records that, the reason and who ran it. With
--checksum, the plan must be the one whose checksum the review showed.
Then apply derives each host's steps again from the recorded spec and what
it observes, and refuses a host where they differ from the plan's.

With --json, stdout is the receipt as JSON (the shape of PLAN.receipt.json,
format_version 2, docs/json.md) instead of the recap; progress and
errors stay on stderr.

Exit status: 0 every host applied or already as planned, 1 otherwise.

Examples:
   relayctl apply ashburn.plan
   relayctl apply ashburn.plan --json > receipt.json
   relayctl apply ashburn.plan --json | jq '.hosts[] | {host, outcome, ssh}'
   relayctl apply ashburn.plan --parallel 5
   relayctl apply fleet.plan --waves 1,5,25%,100% --max-failures 2 --max-unreachable 5%
   relayctl apply fleet.plan --soak 60s            # watch each wave's canary's drops for a minute
   relayctl apply fleet.plan --resume              # after a stop or an interrupt
   relayctl apply ashburn.plan --require-approval ~/.config/relayctl/allowed_signers
   relayctl apply ashburn.plan --skip-approval "outage 4711"   # unsigned although approval is configured: recorded
   relayctl apply ashburn.plan --checksum sha256:4f1c...   # pinned from ashburn.plan.md
   relayctl apply ashburn.plan --ignore-window     # an emergency outside the window`,
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "artifact", Usage: "the release `FILE` (default: the spec's artifact, relative to the spec as recorded in the plan); its sha256 must match the plan"},
			&cli.BoolFlag{Name: "ignore-window", Usage: "apply outside the plan's window"},
			&cli.StringFlag{Name: "recover", Usage: "what to do with a window a dead run left unfinished on a host (its journal says how far it got): `complete` it, or `rollback` (default: the plan's rollout.recover, else complete)"},
			&cli.BoolFlag{Name: "clear-journal", Usage: "archive the journal of an unfinished run that cannot be recovered with this plan (another plan's, or unreadable), after checking the host, and apply"},
			&cli.DurationFlag{Name: "verify-timeout", Value: 15 * time.Second, Usage: "how long to wait for the restarted relay to read back as planned"},
			&cli.DurationFlag{Name: "stable-for", Value: rollout.DefaultStableFor, Usage: "how long the restarted relay must keep reading back as planned, the same process, before the host counts as applied: a release that dies within it is rolled back on its wave's canary (it adds as long to each host's window, after --verify-timeout to read back); 0 is one read-back (1s under systemd, where Restart= can hide a crash), which a relay that dies seconds after it starts passes"},
			&cli.IntFlag{Name: "reconnects", Value: rollout.DefaultReconnects, Usage: "how many times to dial a host again after its connection was lost inside the window (the host finishes the window by itself meanwhile, and its journal says how); 0 dials none"},
			&cli.StringFlag{Name: "waves", Usage: "wave `SIZES`, e.g. 1,5,25%,100%: hosts, or a share of the hosts left; the last repeats (default: the plan's rollout, else 1,100%)"},
			&cli.StringFlag{Name: "max-failures", Usage: "failed, rolled back or refused hosts a wave may have for the rollout to go on: `N` or N% of the wave (default: the plan's rollout, else 0)"},
			&cli.StringFlag{Name: "max-unreachable", Usage: "unreachable hosts a wave may have for the rollout to go on: `N` or N% of the wave (default: the plan's rollout, else 0)"},
			&cli.DurationFlag{Name: "soak", DefaultText: "the plan's rollout.soak, else none", Usage: "after each wave's canary's read-back, watch its drop counters for `DURATION` under real traffic and stop the rollout when they rise (docs/soak.md); 0 turns the soak off"},
			&cli.StringFlag{Name: "soak-hosts", DefaultText: "the plan's rollout.soak, else canary", Usage: "which hosts soak: `canary` (the first of each wave) or all"},
			&cli.BoolFlag{Name: "resume", Usage: "go on from PLAN.ledger.json with the hosts it does not show applied or unchanged (within the --only of the run it resumes)"},
			allowUnreachableFlag("apply"),
			&cli.BoolFlag{Name: "retry-rejected", Usage: "with --resume: go on although this plan's release was rejected: a soak judged it a regression, or it failed on a host and was rolled back there (refused without it: the release would reach the same hosts again)"},
			onlyFlagDef(),
			&cli.BoolFlag{Name: "stage-only", Usage: "stage every host and stop before the window, as relayctl stage"},
			&cli.DurationFlag{Name: "fetch-timeout", Value: rollout.DefaultFetchTimeout, Usage: "how long a host may take to fetch a release from the plan's url"},
			&cli.BoolFlag{Name: "json", Usage: "print the receipt (PLAN.receipt.json, docs/json.md) on stdout instead of the recap; progress stays on stderr"},
			allowProgramFlag(),
		}, append(approvalFlags(), sshFlags()...)...),
		Action: func(c *cli.Context) error { return runApply(c, e) },
	}
}

func runApply(c *cli.Context, e *env) error {
	if c.NArg() != 1 {
		return withHint(errors.New("apply needs exactly one PLAN"), "relayctl apply ashburn.plan")
	}
	if c.Bool("stage-only") {
		return runStage(c, e)
	}
	file := c.Args().First()
	p, raw, err := readPlan(file)
	if err != nil {
		return err
	}
	if err := overBudget(e, file, "apply", p, c.Bool("allow-unreachable")); err != nil {
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
	unhold, err := holdPlan(file)
	if err != nil {
		return err
	}
	defer unhold()
	fleet, err := fleetOptions(c, e, file, p)
	if err != nil || fleet == nil {
		return err
	}
	stable, err := stableFor(c)
	if err != nil {
		return err
	}
	if stable == 0 && c.IsSet("stable-for") && fleet.rollout.Soak == nil {
		fmt.Fprintf(e.stderr, "relayctl: warning: --stable-for 0 and no soak: each wave's canary counts as applied at its first read-back, so a release whose relay dies seconds after it starts passes it and reaches the next wave; --stable-for %s (the default) holds each host until its relay has stayed up that long, --soak 60s watches the canary under traffic\n", rollout.DefaultStableFor)
	}
	artifact, err := planArtifact(c.String("artifact"), p)
	if err != nil {
		return err
	}
	ctx, stop := interruptible(c.Context, e)
	defer stop()
	live, width := terminal(e.stderr)
	led := &ledgerWriter{path: ledgerFile(file)}
	defer led.close()
	kind := rollout.RunApply
	if fleet.resume != nil {
		kind = rollout.RunResume
	}
	hostsOf, err := sshHosts(c, targets(p))
	if err != nil {
		return err
	}
	rep, err := rollout.Apply(ctx, hostsOf, checked, rollout.ApplyOptions{
		Parallel:      c.Int("parallel"),
		Artifact:      artifact,
		Cache:         shippedCache(e, artifact),
		IgnoreWindow:  c.Bool("ignore-window"),
		ClearJournal:  c.Bool("clear-journal"),
		Owner:         owner(p),
		Progress:      e.stderr,
		VerifyTimeout: c.Duration("verify-timeout"),
		StableFor:     stable,
		Reconnects:    reconnects(c.Int("reconnects")),
		Rollout:       fleet.rollout,
		Resume:        fleet.resume,
		Only:          fleet.only,
		Outside:       fleet.outside,
		SaveLedger:    timedSave(led.save),
		PatchLedger:   timedPatch(led.patch),
		Live:          live,
		LiveWidth:     width,
		FetchTimeout:  c.Duration("fetch-timeout"),
		Approval:      approved,
		RunInfo:       runInfo(kind),
	})
	if rep == nil {
		return err
	}
	if testApplied != nil {
		testApplied(rep)
	}
	ledgerErr := err
	record, err := writeRun(file, p, rep)
	if err != nil {
		return err
	}
	if c.Bool("json") {
		if err := copyFile(e.stdout, record); err != nil {
			return err
		}
	} else {
		printRecap(e.stdout, rep)
	}
	fmt.Fprintf(e.stderr, "relayctl: receipt of run %s in %s and .md (%s.receipt.json points at it), every host's outcome in %s\n", rep.RunInfo.ID, record, file, ledgerFile(file))
	if ledgerErr != nil {
		return ledgerErr
	}
	hints := nextHints(rep, file, p)
	if !rep.Succeeded() {
		err := errors.New("not every host applied; see the recap and the receipt")
		if len(hints) > 0 {
			return &exitCode{code: 1, err: withHint(err, strings.Join(hints, "\nrelayctl: hint: "))}
		}
		return &exitCode{code: 1, err: err}
	}
	for _, h := range hints { // hosts the plan left out: the next plan picks them up
		fmt.Fprintf(e.stderr, "relayctl: hint: %s\n", h)
	}
	return nil
}

// printRecap is the recap for people: a line per outcome, the hosts that
// did not end as planned with why, the ones recovered after a crash, and
// why the rollout stopped.
func printRecap(w io.Writer, rep *rollout.Report) {
	fmt.Fprint(w, rollout.Recap(rep))
	for _, h := range rep.Hosts {
		if h.Outcome != rollout.Applied && h.Outcome != rollout.Unchanged && h.Outcome != rollout.NotStarted {
			fmt.Fprintf(w, "%s: %s (%s): %s\n", plans.Visible(h.Host), h.Outcome, plans.Visible(h.State), plans.Visible(h.Reason))
		}
		for _, d := range h.Drift {
			fmt.Fprintf(w, "  drifted: %s: planned %s, now %s\n", plans.Visible(d.Name), clipValue(d.Planned), clipValue(d.Observed))
		}
		if s := h.Soak; s != nil && h.Outcome == rollout.Applied && s.Verdict != rollout.SoakPass {
			fmt.Fprintf(w, "%s: applied, soak: %s: %s (%s)\n", plans.Visible(h.Host), s.Verdict, plans.Visible(s.Why), s.Action)
		}
		if h.Recovery != "" && h.Outcome == rollout.Applied {
			fmt.Fprintf(w, "%s: applied, %s%s\n", plans.Visible(h.Host), h.Recovery, deadRun(h.DeadRun))
		}
	}
	if rep.Stopped != "" {
		fmt.Fprintf(w, "stopped: %s\n", plans.Visible(rep.Stopped))
	}
}

// clipValue is a drifted fact's value, short enough for its line.
func clipValue(v string) string {
	v = plans.Visible(v)
	if len(v) > 60 {
		return v[:60] + "…"
	}
	return v
}

// abbreviate lists at most n names, then how many more.
func abbreviate(names []string, n int) []string {
	if len(names) <= n {
		return names
	}
	return append(append([]string{}, names[:n]...), fmt.Sprintf("and %d more", len(names)-n))
}

// interruptible is ctx cancelled by the first SIGINT or SIGTERM; the fleet
// view then says what that does (rollout's progress.interrupted). A second
// one cuts no window short: it says so, and the run goes on to its end.
func interruptible(parent context.Context, e *env) (context.Context, func()) {
	ctx, cancel := context.WithCancel(parent)
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		first := true
		for range sigs {
			if first {
				first = false
				cancel()
				continue
			}
			fmt.Fprintln(e.stderr, "relayctl: interrupt again: still finishing the windows in flight, which end applied or rolled back; killing relayctl (kill -9) would leave a host in its window, its journal saying where: relayctl apply PLAN --resume then completes it")
		}
	}()
	return ctx, func() {
		signal.Stop(sigs)
		close(sigs)
		cancel()
	}
}

// readCheckedPlan reads a plan file and checks it against the spec it
// records before anything connects (rollout.CheckPlan), once for the run,
// running its inventory program where allow lets it. It returns the
// plan's bytes too, which an approval signs.
func readCheckedPlan(file string, allow invprogram.Allow) (rollout.Checked, []byte, error) {
	p, data, err := readPlan(file)
	if err != nil {
		return rollout.Checked{}, nil, err
	}
	c, err := checkLoaded(file, p, allow)
	return c, data, err
}

// noteInventory says when the plan's inventory changed since it was made
// but selects the same hosts: the plan stands, and the operator sees why
// the inventory's sha256 is not the plan's.
func noteInventory(e *env, file string, c rollout.Checked) {
	if n := c.InventoryNote(); n != "" {
		fmt.Fprintf(e.stderr, "relayctl: warning: %s: %s\n", file, plans.Visible(n))
	}
}

// readPlan reads a plan file, checking nothing it names yet.
func readPlan(file string) (*plans.Plan, []byte, error) {
	data, err := readPlanFile(file)
	if err != nil {
		return nil, nil, err
	}
	p, err := plans.Load(file, data)
	if errors.Is(err, plans.ErrNotAPlan) {
		return nil, nil, withHint(err, notAPlanHint(file))
	}
	if errors.Is(err, plans.ErrPlanFormat) {
		return nil, nil, withHint(err, fmt.Sprintf("plan again with this relayctl (relayctl plan SPEC --out %s), and review the new plan", file))
	}
	if err != nil {
		return nil, nil, withHint(err, "a plan is made by relayctl plan and reviewed as it is; make it again from the spec")
	}
	return p, data, nil
}

// checkLoaded is loadPlan's check of a plan read by readPlan. A plan
// whose hosts came from an inventory has them selected again from it as
// it is now, which for a program means running it where allow lets it:
// apply and stage call this only once the plan's approval is decided.
func checkLoaded(file string, p *plans.Plan, allow invprogram.Allow) (rollout.Checked, error) {
	var c rollout.Checked
	var err error
	if p.Inventory != nil {
		in, ierr := planInventory(p, allow)
		if ierr != nil {
			return rollout.Checked{}, fmt.Errorf("%s: %w", file, ierr)
		}
		c, err = rollout.CheckPlanFrom(p, in)
	} else {
		c, err = rollout.CheckPlan(p)
	}
	return c, planError(file, err)
}

// planError gives a plan's check failure its hint.
func planError(file string, err error) error {
	switch {
	case errors.Is(err, plans.ErrFleetChanged):
		return withHint(fmt.Errorf("%s: %w", file, err), "the plan was reviewed for the hosts its inventory selected then; plan again from the spec and review the new plan")
	case err != nil:
		return withHint(fmt.Errorf("%s: %w", file, err), "a plan is made by relayctl plan and reviewed as it is; make it again from the spec")
	}
	return nil
}

// inspectPlan is loadPlan for what reads a plan without applying it (show,
// approve, verify PLAN): a plan whose hosts come from a program's output
// is checked without selecting them again, since that would run the
// program a plan file names, which only apply and stage do, once the
// plan's approval is decided. The output's sha256 in the plan is what apply
// compares the program's output with.
func inspectPlan(file string) (*plans.Plan, []byte, error) {
	p, data, err := readPlan(file)
	if err != nil {
		return nil, nil, err
	}
	if p.Inventory != nil && p.Inventory.Program != nil {
		return p, data, planError(file, rollout.CheckUnselected(p))
	}
	c, err := checkLoaded(file, p, invprogram.Allow{}) // no program: checked above
	return c.Plan(), data, err
}

// deadRun names the run whose window a host's apply recovered, if another.
func deadRun(owner string) string {
	if owner == "" {
		return ""
	}
	return " (the run that died: " + plans.Visible(owner) + ")"
}

// stableFor is --stable-for, checked; stableForDefault when not given.
// Against simulated hosts (the test binary's) a Sim's relay reads back at
// once, so one not given is simStableFor: the same wait, in a test's time.
func stableFor(c *cli.Context) (time.Duration, error) {
	d := c.Duration("stable-for")
	switch {
	case d < 0:
		return 0, withHint(fmt.Errorf("--stable-for %v: want a duration of 0 or more", d), "--stable-for 10s, or --stable-for 0 for one read-back")
	case c.IsSet("stable-for"):
		return d, nil
	case testHosts != nil:
		return simStableFor, nil
	}
	return stableForDefault, nil
}

// stableForDefault is --stable-for when it is not given. The lab's tests
// whose subject is not the read-back's hold lower it (startLab): ten
// seconds for each window of each of their runs would add tens of minutes
// to the suite; the tests of the hold keep the default.
var stableForDefault = rollout.DefaultStableFor

// simStableFor is --stable-for's default against simulated hosts.
const simStableFor = 300 * time.Millisecond

// reconnects is --reconnects as the engine takes it (0 there is its default).
func reconnects(n int) int {
	if n <= 0 {
		return -1
	}
	return n
}

func owner(p *plans.Plan) string {
	host, _ := os.Hostname()
	who := whoami.Current()
	return fmt.Sprintf("relayctl %s (pid %d on %s, user %s) since %s, plan %s", version(), os.Getpid(), host, who, time.Now().UTC().Format(time.RFC3339), p.Name)
}
