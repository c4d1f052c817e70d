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
	only    *plans.Selector // --only, or the resumed run's; nil: every host
	outside *rollout.Ledger // --only without --resume: the ledger whose other hosts are kept
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
	only, onlySet, err := onlyFlag(c, p)
	if err != nil {
		return nil, err
	}
	if c.Bool("resume") {
		if run.resume, err = loadFleetLedger(e, file, p, true); err != nil {
			return nil, err
		}
		if err := resumeRejected(run.resume, file, p, c.Bool("retry-rejected")); err != nil {
			return nil, err
		}
	}
	if run.resume != nil {
		return run, resumeRun(e, file, p, run, only, onlySet, from)
	}
	if !c.Bool("resume") {
		if err := unfinishedRun(e, file, p); err != nil {
			return nil, err
		}
	}
	return run, freshRun(e, file, p, run, only, from)
}

// holdPlan takes a lock on the plan file for the run (flock, which the
// kernel lets go when the holder dies), so that a second apply of the plan
// on this machine, or --resume while the run still goes on, is refused
// naming it, not taken for a killed run: its ledger shows hosts in
// progress either way. A run from another machine meets the host lock.
func holdPlan(file string) (func(), error) {
	f, err := os.OpenFile(file, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, withHint(fmt.Errorf("%s: another relayctl on this machine is applying this plan now; its ledger %s has its account", file, ledgerFile(file)),
				fmt.Sprintf("wait for it to end (relayctl verify %s then says where each host is); after a kill, relayctl apply %s --resume", file, file))
		}
		return nil, fmt.Errorf("%s: lock for the run: %w", file, err)
	}
	return func() { f.Close() }, nil
}

// unfinishedRun refuses a new run of a plan whose ledger shows hosts in
// progress: the run that wrote it was killed there (or still runs), and a
// new run would start a new ledger, lose its account, and meet the hosts
// it applied as if they were someone else's change. --resume is the one
// command that goes on from it. A ledger that cannot be read as this
// plan's is replaced, as before.
func unfinishedRun(e *env, file string, p *plans.Plan) error {
	l, err := loadFleetLedger(e, file, p, false)
	if err != nil || l == nil {
		return nil
	}
	var busy []string
	for _, h := range l.Hosts {
		if h.Outcome == rollout.InProgress {
			busy = append(busy, h.Host)
		}
	}
	if len(busy) == 0 {
		return nil
	}
	return withHint(fmt.Errorf("%s: run %d of this plan, last written %s, has %d host(s) in progress (%s): it was killed there, or it still runs; a new run would start a new ledger over its account",
		ledgerFile(file), l.Run, plans.Visible(l.Updated), len(busy), plans.Visible(strings.Join(abbreviate(busy, 5), " "))),
		fmt.Sprintf("relayctl apply %s --resume goes on from it: a host left inside its window is finished from its journal, one it applied is checked, not applied again", file))
}

// resumeRejected refuses to resume a rollout whose release was rejected:
// a soak judged it a regression, or it (or the spec's values) failed on a
// host and was rolled back there (a crash, a read-back that did not hold,
// a value the kernel refused). --resume would deploy it onto the same
// hosts again, and their players would pay for it a second time. retry
// says the operator knows.
func resumeRejected(l *rollout.Ledger, file string, p *plans.Plan, retry bool) error {
	if l == nil {
		return nil
	}
	var rej rejection
	var why string
	var applied []string
	for _, h := range l.Hosts {
		if h.Outcome == string(rollout.Applied) {
			applied = append(applied, h.Host)
		}
		switch {
		case h.Next == rollout.NextRejected && h.Outcome != string(rollout.NotStarted):
			rej.soak = true // only a soak's verdict rejects on a host that ran
		case h.Next == rollout.NextSpec:
			rej.failed = append(rej.failed, h.Host)
		case h.Next == rollout.NextRejected:
			rej.left = true // stopped before it started, by a rejection elsewhere
		default:
			continue
		}
		if why == "" && h.Outcome != string(rollout.NotStarted) {
			why = h.Host + ": " + h.Reason
		}
	}
	if !rej.rejected() || retry {
		return nil
	}
	err := fmt.Errorf("%s: %s: resuming would deploy it onto the same hosts again", ledgerFile(file), rej.cause("this plan's release"))
	if why != "" {
		err = fmt.Errorf("%s: %s (%s): resuming would deploy it onto the same hosts again", ledgerFile(file), rej.cause("this plan's release"), plans.Visible(why))
	}
	return withHint(err, rejectedHint("the rollout", file, p, applied, rej)+"; --resume --retry-rejected goes on all the same")
}

// resumeRun says what a resumed run will do, within the selection of the
// run it resumes unless --only says otherwise.
func resumeRun(e *env, file string, p *plans.Plan, run *fleetRun, only *plans.Selector, onlySet bool, from string) error {
	if !onlySet && len(run.resume.Only) > 0 {
		// The run it resumes had a selection: go on with that, no further.
		var err error
		if only, err = plans.ParseSelector(run.resume.Only); err != nil || only.Check(p) != nil {
			return fmt.Errorf("%s: its only %q: not a selection of this plan's hosts", ledgerFile(file), plans.Visible(strings.Join(run.resume.Only, " ")))
		}
	}
	run.only = only
	todo, done := 0, 0
	for i, h := range p.Hosts {
		switch {
		case !only.Matches(h.Labels):
		case run.resume.Done(i):
			done++
		default:
			todo++
		}
	}
	scope := ""
	if only != nil {
		scope = fmt.Sprintf(" --only %s (the %d others are not touched)", only, len(p.Hosts)-todo-done)
	}
	r := run.rollout
	fmt.Fprintf(e.stderr, "relayctl: resuming %s (run %d)%s: %d of %d host(s) not applied or unchanged; the %d others are checked to be as planned first (an edited ledger skips nothing): one that is not joins the waves\n",
		ledgerFile(file), run.resume.Run+1, scope, todo, todo+done, done)
	fmt.Fprintf(e.stderr, "relayctl: waves %s (%s%s); per wave at most %s failed, rolled back or refused and %s unreachable\n",
		plans.WavesText(r.Waves), from, byText(*r), r.MaxFailures, r.MaxUnreachable)
	return nil
}

// freshRun says what a run that resumes nothing will do: its hosts (with
// --only, the ledger whose other hosts it keeps) and its waves.
func freshRun(e *env, file string, p *plans.Plan, run *fleetRun, only *plans.Selector, from string) error {
	run.only = only
	var sel []int
	for i, h := range p.Hosts {
		if only.Matches(h.Labels) {
			sel = append(sel, i)
		}
	}
	if only != nil {
		// The other hosts keep what this plan's ledger says of them.
		var err error
		if run.outside, err = loadFleetLedger(e, file, p, false); err != nil {
			return err
		}
		fmt.Fprintf(e.stderr, "relayctl: --only %s: %d of the plan's %d host(s); the others are not touched (%s)\n", only, len(sel), len(p.Hosts), outsideText(run.outside, file))
	}
	r := run.rollout
	runs, left := wavesRun(p, sel)
	waves := r.Layout(p.Hosts, runs)
	sizes := make([]int, len(waves))
	for i, w := range waves {
		sizes[i] = len(w.Hosts)
	}
	fmt.Fprintf(e.stderr, "relayctl: %d host(s) in %d wave(s) of %s (waves %s, %s%s);%s per wave at most %s failed, rolled back or refused and %s unreachable\n",
		len(runs), len(sizes), plans.WaveCounts(sizes), plans.WavesText(r.Waves), from, byText(*r), left, r.MaxFailures, r.MaxUnreachable)
	return nil
}

// wavesRun are the hosts of sel that apply lays out in waves, and in
// words those it leaves alone: the hosts the plan could not read (not
// planned, in no wave).
func wavesRun(p *plans.Plan, sel []int) ([]int, string) {
	var runs []int
	var left []string
	for _, i := range sel {
		if p.Hosts[i].Action == plans.ActionUnreachable {
			left = append(left, p.Hosts[i].Host)
			continue
		}
		runs = append(runs, i)
	}
	if len(left) == 0 {
		return runs, ""
	}
	return runs, fmt.Sprintf(" %d not planned (%s);", len(left), plans.Visible(plans.FewNames(left, 5)))
}

// byText says a rollout goes by label: ", by region".
func byText(r plans.Resolved) string {
	if r.By == "" {
		return ""
	}
	return ", by " + r.By
}

// onlyFlag reads --only, checked against the plan's labels; set says it
// was given (--only all gives nil, set).
func onlyFlag(c *cli.Context, p *plans.Plan) (*plans.Selector, bool, error) {
	items := c.StringSlice("only")
	if len(items) == 0 {
		return nil, false, nil
	}
	s, err := plans.ParseSelector(items)
	if err == nil {
		err = s.Check(p)
	}
	if err != nil {
		return nil, true, withHint(fmt.Errorf("--only %w", err), "--only region=ash, --only region=ash,fra --only pool=a, or --only all")
	}
	return s, true, nil
}

// loadFleetLedger reads the plan's ledger: for --resume it must be this
// plan's (none: nothing to go on from, every host); for --only it is the
// record of the other hosts, and none, or another plan's, is a new start.
func loadFleetLedger(e *env, file string, p *plans.Plan, resume bool) (*rollout.Ledger, error) {
	name := ledgerFile(file)
	data, err := readRegular(name, rollout.MaxLedgerSize)
	switch {
	case errors.Is(err, os.ErrNotExist) && resume:
		// A run killed before it wrote its ledger left nothing to go on
		// from: every host is worked on, as in a first run, so --resume
		// is still the one command after any stop.
		fmt.Fprintf(e.stderr, "relayctl: no ledger %s: no run to go on from, so every host is applied (one already as planned is unchanged)\n", name)
		return nil, nil
	case errors.Is(err, os.ErrNotExist):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("read ledger: %w", err)
	}
	l, err := rollout.LoadLedger(name, data, p)
	switch {
	case errors.Is(err, rollout.ErrLedgerOtherPlan) && !resume:
		return nil, nil
	case errors.Is(err, rollout.ErrLedgerOtherPlan):
		return nil, withHint(err, "a ledger goes with the plan whose apply wrote it; apply this plan without --resume, or resume the plan that ledger belongs to")
	}
	return l, err
}

func outsideText(l *rollout.Ledger, file string) string {
	if l == nil {
		return "no ledger of this plan yet: they are not started in the new " + ledgerFile(file)
	}
	return fmt.Sprintf("their lines of %s, run %d, are kept", ledgerFile(file), l.Run)
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

func onlyFlagDef() cli.Flag {
	return &cli.StringSliceFlag{Name: "only", Usage: "work on the hosts whose labels match `LABEL=VALUE[,VALUE…]` only (repeatable: every one must match; all for every host); the ledger keeps the others' lines, and --resume goes on within the same selection"}
}

// ledgerWriter keeps a run's ledger file: in full through a temporary
// file and a rename (when the run starts and ends), and in between one
// host's line at a time, in place, in the file it last wrote (rollout's
// ledgerBook), so that a save costs the same for 10 hosts as for 10,000.
type ledgerWriter struct {
	path string
	f    *os.File // the file last written, open for the in-place saves
}

func (w *ledgerWriter) save(b []byte) error {
	w.close()
	if err := writeFileAtomic(w.path, b, 0o600); err != nil {
		return err
	}
	// Not through a link put there since, and the file just written.
	f, err := os.OpenFile(w.path, os.O_WRONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", w.path, err)
	}
	if st, err := f.Stat(); err != nil || st.Size() != int64(len(b)) {
		f.Close()
		return fmt.Errorf("open %s: it is not the ledger just written", w.path)
	}
	w.f = f
	return nil
}

func (w *ledgerWriter) patch(p []byte, off int64) error {
	if w.f == nil {
		return fmt.Errorf("write %s: not open", w.path)
	}
	if _, err := w.f.WriteAt(p, off); err != nil {
		return fmt.Errorf("write %s: %w", w.path, err)
	}
	return nil
}

func (w *ledgerWriter) close() {
	if w.f != nil {
		w.f.Close()
		w.f = nil
	}
}
