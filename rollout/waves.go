package rollout

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/relayctl/relayctl/plans"
)

// WaveResult is one wave of a fleet apply as it ran: its hosts, its
// budgets in hosts, how they ended, and when (ms since the run started).
type WaveResult struct {
	Wave           int      `json:"wave"`
	Hosts          []string `json:"hosts"`
	MaxFailures    int      `json:"max_failures"`    // failed, rolled back or refused hosts allowed
	MaxUnreachable int      `json:"max_unreachable"` // unreachable hosts allowed
	Applied        int      `json:"applied"`
	Unchanged      int      `json:"unchanged"`
	Staged         int      `json:"staged,omitempty"`
	Failures       int      `json:"failures"`          // failed, rolled back, refused
	Skipped        int      `json:"skipped,omitempty"` // left for a later run at the drain gate's deadline
	Unreachable    int      `json:"unreachable"`
	NotStarted     int      `json:"not_started"`
	StartMillis    int64    `json:"start_ms"`
	EndMillis      int64    `json:"end_ms"`
	Stopped        string   `json:"stopped,omitempty"` // why the rollout stopped in or after this wave

	budgets fleetRules
}

// fleetRules are how one run walks its hosts (plans.Rollout has the rules
// in words).
type fleetRules struct {
	sizes          []int // wave sizes over the hosts to do, in order
	maxFailures    plans.Amount
	maxUnreachable plans.Amount
	wholeWaveStops bool // a wave with no host applied or unchanged stops the rollout
}

// rulesFor are the waves and budgets of a run over n hosts: apply's
// (o.Rollout, else the plan's), or for relayctl stage one wave of every
// host that nothing stops, since staging changes nothing in force.
func rulesFor(p *plans.Plan, o ApplyOptions, n int) (fleetRules, error) {
	if o.StageOnly {
		return fleetRules{sizes: plans.SplitWaves([]plans.Amount{{N: 100, Percent: true}}, n),
			maxFailures: plans.Amount{N: 100, Percent: true}, maxUnreachable: plans.Amount{N: 100, Percent: true}}, nil
	}
	r := o.Rollout
	if r == nil {
		res, err := p.Rollout.Resolve()
		if err != nil {
			return fleetRules{}, err
		}
		r = &res
	}
	return fleetRules{sizes: plans.SplitWaves(r.Waves, n), maxFailures: r.MaxFailures, maxUnreachable: r.MaxUnreachable, wholeWaveStops: true}, nil
}

// count tallies one host's outcome in its wave.
func (w *WaveResult) count(o Outcome) {
	switch o {
	case Applied:
		w.Applied++
	case Unchanged:
		w.Unchanged++
	case Staged:
		w.Staged++
	case Failed, RolledBack, Refused:
		w.Failures++
	case Skipped:
		w.Skipped++
	case Unreachable:
		w.Unreachable++
	case NotStarted:
		w.NotStarted++
	}
}

// overBudget says why the wave went over a budget, "" while it has not:
// exactly at a budget is within it.
func (w *WaveResult) overBudget() string {
	size := len(w.Hosts)
	if !w.budgets.maxFailures.Allows(w.Failures, size) {
		return fmt.Sprintf("wave %d: %d of its %d hosts failed, rolled back or were refused, over its budget of %d (max failures %s)",
			w.Wave, w.Failures, size, w.MaxFailures, w.budgets.maxFailures)
	}
	if !w.budgets.maxUnreachable.Allows(w.Unreachable, size) {
		return fmt.Sprintf("wave %d: %d of its %d hosts were unreachable, over its budget of %d (max unreachable %s)",
			w.Wave, w.Unreachable, size, w.MaxUnreachable, w.budgets.maxUnreachable)
	}
	return ""
}

// nothingWorked is a wave whose every host failed, rolled back, was
// refused or unreachable: it stops the rollout whatever the budgets allow.
// (A host skipped at the drain gate is left for later, not a failure.)
func (w *WaveResult) nothingWorked() string {
	if !w.budgets.wholeWaveStops || len(w.Hosts) == 0 || w.Failures+w.Unreachable < len(w.Hosts) {
		return ""
	}
	return fmt.Sprintf("wave %d: none of its %d hosts applied (%d failed, rolled back or refused; %d unreachable)", w.Wave, len(w.Hosts), w.Failures, w.Unreachable)
}

// runFleet applies the plan's hosts in waves. Within a wave, hosts run
// parallel at a time; a wave starts when the one before has ended within
// its budgets. Whatever stops the rollout (a budget, a wave where nothing
// worked, ctx, a ledger that cannot be saved) stops new hosts only: hosts
// in flight finish, inside their window or not.
func runFleet(ctx context.Context, d HostDialer, p *plans.Plan, o ApplyOptions) (*Report, error) {
	start := o.Now()
	clock := time.Now() // a real clock for wave times: Now may be a test's fixed one
	since := func() int64 { return time.Since(clock).Milliseconds() }
	rep := &Report{Plan: p.Name, Checksum: p.Checksum, Started: start.UTC().Format(time.RFC3339), Run: 1, Approval: o.Approval}
	results := make([]*HostResult, len(p.Hosts))
	for i, h := range p.Hosts {
		results[i] = &HostResult{Host: h.Host, Address: h.Address, Outcome: NotStarted, State: StateAsWas, ExpectedRB: h.Readback.Expected, Steps: []StepRecord{}}
	}
	rep.Hosts = results

	led := NewLedger(p)
	if o.Resume != nil {
		if o.Resume.Checksum != p.Checksum || len(o.Resume.Hosts) != len(p.Hosts) {
			return nil, fmt.Errorf("%w: written for checksum %s, the plan's is %s", ErrLedgerOtherPlan, plans.Visible(clip(o.Resume.Checksum)), p.Checksum)
		}
		led = &Ledger{FormatVersion: LedgerFormatVersion, Plan: p.Name, Checksum: p.Checksum, Run: o.Resume.Run + 1,
			Hosts: append([]LedgerHost(nil), o.Resume.Hosts...)}
		rep.Run = led.Run
	}
	var todo []int
	for i := range p.Hosts {
		if o.Resume != nil && o.Resume.Done(i) {
			e := o.Resume.Hosts[i]
			r := results[i]
			r.Outcome, r.State, r.Wave, r.BytesUploaded = Outcome(e.Outcome), e.State, e.Wave, e.BytesUploaded
			r.FromLedger = fmt.Sprintf("%s in run %d", e.Outcome, e.Run)
			r.Reason = "not touched: " + r.FromLedger + " (the ledger)"
			continue
		}
		todo = append(todo, i)
	}
	rules, err := rulesFor(p, o, len(todo))
	if err != nil {
		return nil, err
	}
	book := &ledgerBook{l: led, save: o.SaveLedger, now: o.Now}
	book.flush()

	pr := newProgress(o, len(todo), len(rules.sizes))
	defer pr.finish()

	var (
		mu      sync.Mutex
		stopped string
		sem     chan struct{} // the wave's parallel slots
	)
	// yield gives a host's parallel slot to another host of its wave while
	// it waits at its drain gate, and returns how to take one back:
	// draining hosts do not hold up ready ones.
	yield := func() func() {
		<-sem
		return func() { sem <- struct{}{} }
	}
	stop := func(why string) {
		mu.Lock()
		defer mu.Unlock()
		if stopped == "" {
			stopped = why
		}
	}
	why := func() string {
		mu.Lock()
		defer mu.Unlock()
		if stopped == "" && ctx.Err() != nil {
			stopped = "interrupted"
		}
		if stopped == "" {
			if err := book.failed(); err != nil {
				stopped = err.Error()
			}
		}
		return stopped
	}

	at := 0
	for wi, size := range rules.sizes {
		idx := todo[at : at+size]
		at += size
		if why() != "" {
			break
		}
		w := &WaveResult{Wave: wi + 1, StartMillis: since(), budgets: rules,
			MaxFailures: rules.maxFailures.Hosts(size), MaxUnreachable: rules.maxUnreachable.Hosts(size)}
		for _, i := range idx {
			w.Hosts = append(w.Hosts, p.Hosts[i].Host)
			results[i].Wave = w.Wave
		}
		rep.Waves = append(rep.Waves, w)
		pr.waveStart(w)

		sem = make(chan struct{}, o.Parallel)
		var wg sync.WaitGroup
		for _, i := range idx {
			if why() != "" {
				break
			}
			sem <- struct{}{}
			if why() != "" {
				<-sem
				break
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				book.started(i, w.Wave)
				pr.hostStart(p.Hosts[i].Host)
				r := applyHost(ctx, d, p, p.Hosts[i], o, pr, yield)
				r.Wave = w.Wave
				results[i] = r
				book.ended(i, r)
				pr.hostEnd(r)
				mu.Lock()
				w.count(r.Outcome)
				over := w.overBudget()
				mu.Unlock()
				if over != "" {
					stop(over)
				}
			}()
		}
		wg.Wait()
		for _, i := range idx {
			if results[i].Outcome == NotStarted && results[i].Reason == "" {
				w.NotStarted++
			}
		}
		if s := w.nothingWorked(); s != "" {
			stop(s)
		}
		w.EndMillis = since()
		if s := why(); s != "" {
			w.Stopped = s
		}
		pr.waveEnd(w)
	}
	rep.Stopped = why()
	for _, r := range results {
		if r.Outcome == NotStarted && r.Reason == "" {
			if ctx.Err() != nil {
				r.Reason = "interrupted before this host started"
			} else {
				r.Reason = "the rollout stopped before this host started: " + rep.Stopped
			}
		}
	}
	book.notStarted(results)
	rep.Millis = o.Now().Sub(start).Milliseconds()
	if err := book.failed(); err != nil {
		return rep, err
	}
	return rep, nil
}
