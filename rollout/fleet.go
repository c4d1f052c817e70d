package rollout

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/relayctl/relayctl/plans"
)

// fleet is one apply's walk over its hosts, in waves: within a wave, hosts
// run parallel at a time; a wave starts when the one before has ended
// within its budgets. Whatever stops the rollout (a budget, a wave where
// nothing worked, ctx, a ledger that cannot be saved) stops new hosts
// only: hosts in flight finish, inside their window or not.
type fleet struct {
	ctx     context.Context
	d       HostDialer
	p       *plans.Plan
	o       ApplyOptions
	rep     *Report
	results []*HostResult // in the plan's order
	sel     []int         // the hosts of o.Only (every host without it), in the plan's order
	todo    []int         // the hosts this run works on
	done    []int         // the hosts the ledger shows done, to confirm
	rules   fleetRules
	book    *ledgerBook
	pr      *progress
	start   time.Time // on o.Now's clock
	clock   time.Time // a real clock for wave times: o.Now may be a test's fixed one

	keys []string // the sysctls every receipt shows (the plan's ReadKeys)
	strs interner // texts every host repeats, kept once

	mu       sync.Mutex
	stopped  string
	rejected bool          // the plan's release was rejected (rejects): the hosts left are not to be resumed
	sem      chan struct{} // the wave's parallel slots
}

func runFleet(ctx context.Context, d HostDialer, p *plans.Plan, o ApplyOptions) (*Report, error) {
	f, err := newFleet(ctx, d, p, o)
	if err != nil {
		return nil, err
	}
	f.confirm()
	if f.rules, err = rulesFor(p, o, f.todo); err != nil {
		return nil, err
	}
	f.book.flush()
	f.pr = newProgress(o, len(f.todo), len(f.rules.waves))
	defer f.pr.finish()
	defer context.AfterFunc(ctx, f.pr.interrupted)() // says at once what an interrupt does
	for wi, w := range f.rules.waves {
		if f.why() != "" {
			break
		}
		f.wave(wi+1, w)
	}
	return f.finish()
}

// newFleet lays out the run: every host of o.Only not started, then,
// with o.Resume, the ledger's hosts done in earlier runs left as they
// were. Hosts outside o.Only keep the lines o.Resume or o.Outside give
// them, untouched.
func newFleet(ctx context.Context, d HostDialer, p *plans.Plan, o ApplyOptions) (*fleet, error) {
	f := &fleet{ctx: ctx, d: d, p: p, o: o, start: o.Now(), clock: time.Now(), keys: p.ReadKeys()}
	f.rep = &Report{Plan: p.Name, Checksum: p.Checksum, Release: p.ReleaseName(), Started: f.start.UTC().Format(time.RFC3339), Run: 1, Approval: o.Approval, RunInfo: o.RunInfo}
	if o.Only != nil {
		f.rep.Only = o.Only.String()
	}
	for i, h := range p.Hosts {
		f.results = append(f.results, &HostResult{HostAccount: HostAccount{Host: h.Host, Address: h.Address, Labels: h.Labels, Outcome: NotStarted, State: StateAsWas,
			ReleasePlanned: h.Release.Planned, ExpectedRB: h.Readback.Expected, Steps: []StepRecord{}}})
		if o.Only.Matches(h.Labels) {
			f.sel = append(f.sel, i)
		}
	}
	f.rep.Outside = len(p.Hosts) - len(f.sel)
	led := NewLedger(p)
	base := o.Resume
	if base == nil && o.Only != nil {
		base = o.Outside
	}
	if base != nil {
		if base.Checksum != p.Checksum || len(base.Hosts) != len(p.Hosts) {
			return nil, fmt.Errorf("%w: written for checksum %s, the plan's is %s", ErrLedgerOtherPlan, plans.Visible(clip(base.Checksum)), p.Checksum)
		}
		led = &Ledger{FormatVersion: LedgerFormatVersion, Plan: p.Name, Checksum: p.Checksum, Run: base.Run + 1, Hosts: append([]LedgerHost(nil), base.Hosts...)}
		f.rep.Run = led.Run
	}
	led.Only = o.Only.Items()
	for _, i := range f.sel {
		switch {
		case p.Hosts[i].Action == plans.ActionUnreachable:
			f.notPlanned(i, led)
		case o.Resume != nil && o.Resume.Done(i):
			f.done = append(f.done, i)
		case o.Resume == nil && base != nil:
			led.Hosts[i] = LedgerHost{Host: p.Hosts[i].Host, Outcome: string(NotStarted), State: StateAsWas}
			f.todo = append(f.todo, i)
		default:
			f.todo = append(f.todo, i)
		}
	}
	f.book = &ledgerBook{l: led, save: o.SaveLedger, patch: o.PatchLedger, now: o.Now}
	return f, nil
}

// notPlanned is a host the plan holds as unreachable: left alone, in the
// ledger too, whatever an earlier run's says.
func (f *fleet) notPlanned(i int, led *Ledger) {
	h := f.p.Hosts[i]
	r := f.results[i]
	r.Outcome, r.Next = NotPlanned, NextNewPlan
	r.Reason = "unreachable when the plan was made (" + h.Unreachable + "): nothing was planned for it; the next plan reads it again"
	led.Hosts[i] = LedgerHost{Host: h.Host, Outcome: string(NotPlanned), State: StateAsWas, Reason: r.Reason, Next: NextNewPlan}
}

// confirm checks, in one observe each, that every host the ledger shows
// applied or unchanged is as planned: the ledger is a file, and an edited
// one must not make a run skip a host. A host as planned keeps its earlier
// outcome, confirmed; one that is not joins this run's hosts; one that
// cannot be reached is unreachable, unconfirmed.
func (f *fleet) confirm() {
	o := f.o
	o.confirmOnly = true
	sem := make(chan struct{}, max(1, f.o.Parallel))
	var wg sync.WaitGroup
	var mu sync.Mutex
	for _, i := range f.done {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			r := applyHost(f.ctx, f.d, f.p, f.p.Hosts[i], o, silent(), nil)
			e := f.o.Resume.Hosts[i]
			mu.Lock()
			defer mu.Unlock()
			switch {
			case r.Outcome == Unchanged:
				f.fromLedger(i, e)
			case r.Outcome == NotStarted && r.Reason == errNotConfirmed:
				f.todo = append(f.todo, i)
			default:
				r.Reason = fmt.Sprintf("the ledger says %s in run %d, which could not be confirmed: %s", e.Outcome, e.Run, r.Reason)
				r.seal(f.keys, &f.strs)
				f.results[i] = r
			}
		}()
	}
	wg.Wait()
	slices.Sort(f.todo) // the plan's order
}

// fromLedger is a host an earlier run applied, confirmed as planned now.
func (f *fleet) fromLedger(i int, e LedgerHost) {
	r := f.results[i]
	r.Outcome, r.State, r.Wave, r.BytesUploaded = Outcome(e.Outcome), e.State, e.Wave, e.BytesUploaded
	r.FromLedger = fmt.Sprintf("%s in run %d", e.Outcome, e.Run)
	r.Reason = r.FromLedger + ", confirmed as planned now (the ledger)"
}

func (f *fleet) since() int64 { return time.Since(f.clock).Milliseconds() }

// stop stops the rollout for why, the first reason given.
func (f *fleet) stop(why string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopped == "" {
		f.stopped = why
	}
}

// why says why the rollout stopped, "" while it goes on.
func (f *fleet) why() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopped == "" && f.ctx.Err() != nil {
		f.stopped = "interrupted"
	}
	if f.stopped == "" {
		if err := f.book.failed(); err != nil {
			f.stopped = err.Error()
		}
	}
	return f.stopped
}

// yield gives a host's parallel slot to another host of its wave while it
// waits at its drain gate, and returns how to take one back: draining
// hosts do not hold up ready ones.
func (f *fleet) yield() func() {
	<-f.sem
	return func() { f.sem <- struct{}{} }
}

// wave runs one wave's hosts, parallel at a time, until they end or the
// rollout stops.
func (f *fleet) wave(n int, pw plans.Wave) {
	idx := pw.Hosts
	w := &WaveResult{Wave: n, Group: pw.Group, StartMillis: f.since(),
		rule:        waveRule{maxFailures: pw.MaxFailures, maxUnreachable: pw.MaxUnreachable, wholeWaveStops: f.rules.wholeWaveStops},
		MaxFailures: pw.MaxFailures.Hosts(len(idx)), MaxUnreachable: pw.MaxUnreachable.Hosts(len(idx))}
	for _, i := range idx {
		w.Hosts = append(w.Hosts, f.p.Hosts[i].Host)
		f.results[i].Wave = n
	}
	f.rep.Waves = append(f.rep.Waves, w)
	f.pr.waveStart(w)
	f.sem = make(chan struct{}, f.o.Parallel)
	var wg sync.WaitGroup
	for _, i := range idx {
		if f.why() != "" {
			break
		}
		f.sem <- struct{}{}
		if f.why() != "" {
			<-f.sem
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-f.sem }()
			f.host(i, w)
		}()
	}
	wg.Wait()
	for _, i := range idx {
		if f.results[i].Outcome == NotStarted && f.results[i].Reason == "" {
			w.NotStarted++
		}
	}
	if s := w.nothingWorked(); s != "" {
		f.stop(s)
	}
	w.EndMillis = f.since()
	w.Stopped = f.why()
	f.pr.waveEnd(w)
}

// host applies one host of wave w and counts it against the wave's budgets.
func (f *fleet) host(i int, w *WaveResult) {
	f.book.started(i, w.Wave)
	f.pr.hostStart(f.p.Hosts[i].Host)
	o := f.o
	o.soakRole = f.rules.soakRole(f.p.Hosts[i].Host == w.Hosts[0])
	r := applyHost(f.ctx, f.d, f.p, f.p.Hosts[i], o, f.pr, f.yield)
	r.Wave = w.Wave
	r.seal(f.keys, &f.strs)
	f.results[i] = r
	f.book.ended(i, r)
	f.pr.hostEnd(r)
	f.mu.Lock()
	w.count(r.Outcome)
	over := w.overBudget()
	f.mu.Unlock()
	if why := r.Soak.stops(r.Host); why != "" {
		f.stop(why) // a soak that did not pass stops the rollout, whatever the budgets
	}
	if rejects(r.Next) {
		f.mu.Lock()
		f.rejected = true
		f.mu.Unlock()
	}
	if over != "" {
		f.stop(over)
	}
}

// finish says why the hosts never started did not, and files the ledger.
func (f *fleet) finish() (*Report, error) {
	f.rep.Stopped = f.why()
	f.rep.Hosts = make([]*HostResult, len(f.sel))
	for k, i := range f.sel {
		f.rep.Hosts[k] = f.results[i]
	}
	for _, r := range f.rep.Hosts {
		switch {
		case r.Outcome == NotStarted && f.rejected:
			r.Next = NextRejected // the release this plan ships was rejected
		case r.Outcome == NotStarted:
			r.Next = NextResume
		}
		if r.Outcome == NotStarted && r.Reason == "" {
			if f.ctx.Err() != nil {
				r.Reason = "interrupted before this host started"
			} else {
				r.Reason = "the rollout stopped before this host started: " + f.rep.Stopped
			}
		}
	}
	f.book.notStarted(f.results, f.sel)
	end := f.o.Now()
	f.rep.Millis = end.Sub(f.start).Milliseconds()
	f.rep.Ended = end.UTC().Format(time.RFC3339)
	if err := f.book.failed(); err != nil {
		return f.rep, err
	}
	return f.rep, nil
}
