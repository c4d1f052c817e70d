package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"

	"github.com/relayctl/relayctl/plans"
	"github.com/relayctl/relayctl/rollout"
)

// fleetRun is how apply walks the fleet this time: the waves and budgets,
// and the ledger it resumes from.
type fleetRun struct {
	rollout *plans.Resolved
	resume  *rollout.Ledger
}

// ledgerFile is where apply keeps the fleet's ledger: beside the plan.
func ledgerFile(plan string) string { return plan + ".ledger.json" }

// fleetOptions reads --waves, --max-failures, --max-unreachable (over the
// plan's own rollout) and --resume, and says what the run will do. It
// returns nil and no error when there is nothing left to resume.
func fleetOptions(c *cli.Context, e *env, file string, p *plans.Plan) (*fleetRun, error) {
	r, err := p.Rollout.Resolve()
	if err != nil {
		return nil, err
	}
	from := "the plan's rollout"
	if p.Rollout == nil || len(p.Rollout.Waves) == 0 {
		from = "the default"
	}
	if v := c.String("waves"); v != "" {
		if r.Waves, err = plans.ParseWaves(strings.Split(v, ",")); err != nil {
			return nil, withHint(fmt.Errorf("--waves: %w", err), "--waves 1,5,25%,100%")
		}
		from = "--waves"
	}
	for _, b := range []struct {
		flag string
		dst  *plans.Amount
	}{{"max-failures", &r.MaxFailures}, {"max-unreachable", &r.MaxUnreachable}} {
		if v := c.String(b.flag); v != "" {
			if *b.dst, err = plans.ParseAmount(v, 0); err != nil {
				return nil, withHint(fmt.Errorf("--%s: %w", b.flag, err), "--"+b.flag+" 2, or --"+b.flag+" 10%")
			}
		}
	}
	if v := c.String("recover"); v != "" {
		if err := plans.ValidRecover(v); err != nil {
			return nil, withHint(fmt.Errorf("--recover: %w", err), "--recover complete (finish a window a dead run left), or --recover rollback (undo it)")
		}
		r.Recover = v
	}
	if err := soakFlags(c, &r); err != nil {
		return nil, err
	}
	if r.Soak != nil {
		fmt.Fprintf(e.stderr, "relayctl: soak: %s\n", r.Soak.Text())
	}
	run := &fleetRun{rollout: &r}
	hosts := len(p.Hosts)
	if c.Bool("resume") {
		resumed, err := resumeFrom(e, file, p, run)
		if err != nil || resumed {
			if resumed {
				fmt.Fprintf(e.stderr, "relayctl: waves %s (%s); per wave at most %s failed, rolled back or refused and %s unreachable\n",
					plans.WavesText(r.Waves), from, r.MaxFailures, r.MaxUnreachable)
			}
			return run, err
		}
	}
	sizes := plans.SplitWaves(r.Waves, hosts)
	counts := make([]string, len(sizes))
	for i, n := range sizes {
		counts[i] = fmt.Sprint(n)
	}
	fmt.Fprintf(e.stderr, "relayctl: %d host(s) in %d wave(s) of %s (waves %s, %s); per wave at most %s failed, rolled back or refused and %s unreachable\n",
		hosts, len(sizes), strings.Join(counts, " + "), plans.WavesText(r.Waves), from, r.MaxFailures, r.MaxUnreachable)
	return run, nil
}

// resumeFrom loads the plan's ledger into run for --resume, and says what
// the run will do. A run killed before it wrote its ledger left nothing to
// go on from: then every host is worked on, as in a first run (one already
// as planned ends unchanged), so --resume is still the one command after
// any stop; resumed is false then.
func resumeFrom(e *env, file string, p *plans.Plan, run *fleetRun) (resumed bool, err error) {
	name := ledgerFile(file)
	data, err := readRegular(name, rollout.MaxLedgerSize)
	switch {
	case errors.Is(err, os.ErrNotExist):
		fmt.Fprintf(e.stderr, "relayctl: no ledger %s: no run to go on from, so every host is applied (one already as planned is unchanged)\n", name)
		return false, nil
	case err != nil:
		return false, fmt.Errorf("read ledger: %w", err)
	}
	if run.resume, err = rollout.LoadLedger(name, data, p); err != nil {
		if errors.Is(err, rollout.ErrLedgerOtherPlan) {
			return false, withHint(err, "a ledger goes with the plan whose apply wrote it; apply this plan without --resume, or resume the plan that ledger belongs to")
		}
		return false, err
	}
	todo := len(run.resume.Todo())
	fmt.Fprintf(e.stderr, "relayctl: resuming %s (run %d): %d of %d host(s) not applied or unchanged; the %d others are checked to be as planned first (an edited ledger skips nothing): one that is not joins the waves\n",
		name, run.resume.Run+1, todo, len(p.Hosts), len(p.Hosts)-todo)
	return true, nil
}

// terminal reports whether w is a terminal (not a pipe, a file or
// /dev/null) and its width: the fleet view is live only there.
func terminal(w io.Writer) (bool, int) {
	f, ok := w.(*os.File)
	if !ok || os.Getenv("TERM") == "dumb" {
		return false, 0
	}
	if _, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS); err != nil {
		return false, 0
	}
	width := 80
	if ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ); err == nil && ws.Col > 0 {
		width = int(ws.Col)
	}
	return true, width
}

// soakFlags applies --soak and --soak-hosts over the plan's soak: --soak
// DURATION soaks (with the plan's other settings, or the defaults), and
// --soak 0 soaks nothing.
func soakFlags(c *cli.Context, r *plans.Resolved) error {
	if c.IsSet("soak") {
		d := c.Duration("soak")
		switch {
		case d == 0:
			r.Soak = nil
		case d < time.Second || d > plans.MaxSoakDuration:
			return withHint(fmt.Errorf("--soak %v: want a duration from 1s to %v, or 0 for no soak", d, plans.MaxSoakDuration), "--soak 60s")
		default:
			s := plans.DefaultSoak
			if r.Soak != nil {
				s = *r.Soak
			} else {
				s.Baseline = d // the same span before the window
			}
			s.Duration = d
			s.Interval = min(s.Interval, max(d/4, plans.MinSoakInterval))
			r.Soak = &s
		}
	}
	if v := c.String("soak-hosts"); v != "" {
		if v != plans.SoakCanary && v != plans.SoakAll {
			return withHint(fmt.Errorf("--soak-hosts %q: want canary or all", v), "--soak-hosts all")
		}
		if r.Soak == nil {
			s := plans.DefaultSoak
			r.Soak = &s
		}
		s := *r.Soak
		s.Hosts = v
		r.Soak = &s
	}
	return nil
}
