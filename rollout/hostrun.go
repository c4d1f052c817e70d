package rollout

import (
	"context"
	"time"

	"github.com/relayctl/relayctl/plans"
)

// A host's apply is a list of phases, run in order by hostRun.run; each is
// a small type in its own file (phase_*.go) with the title the timeline,
// the progress lines and the receipt use:
//
//	lock        take the host lock (one session for the whole apply)
//	observe     read the host, in the same round trip as the lock
//	recover     a journal a dead run left: archived, or its window recovered
//	refusals    blockers, the window
//	derive      the host's plan again from its spec and what was observed
//	stage       everything before the window; nothing in force changes
//	baseline    sample the relay's drop counters before the window (a host that soaks)
//	drain       wait for the relay's players to leave (with a drain gate)
//	window      the window's steps, the read-back's first reading behind them
//	read-back   read the host back until it holds as planned
//	soak        sample the drop counters under traffic and judge the release (a host that soaks)
//	rollback    undo the window when it or its read-back failed
//	commit      file the receipt and the journal on the host
//
// relayctl stage stops after stage, with its own commit. Once the window
// has begun, a lost connection (or a window the host ended by itself
// first) does not end the host's apply: the run reads the host again,
// redialling it within its budget (resync.go), and goes on from what the
// host's journal says, with resyncPhases.
func hostPhases(p *plans.Plan, o ApplyOptions) []phase {
	if o.confirmOnly {
		return []phase{lockPhase{}, observePhase{}, derivePhase{}, confirmPhase{}}
	}
	ph := []phase{lockPhase{}, observePhase{}, recoverPhase{}, refusalsPhase{}, derivePhase{}, stagePhase{}}
	if o.StageOnly {
		return append(ph, commitPhase{})
	}
	soaks := o.Rollout != nil && o.Rollout.Soak != nil
	if soaks {
		ph = append(ph, baselinePhase{})
	}
	if p.Drain != nil {
		ph = append(ph, drainPhase{})
	}
	ph = append(ph, windowPhase{}, readBackPhase{})
	if soaks {
		ph = append(ph, soakPhase{})
	}
	return append(ph, rollbackPhase{}, commitPhase{})
}

// phase is one phase of a host's apply.
type phase interface {
	// title names the phase in the timeline.
	title() string
	// runs says whether the phase has anything to do now (a rollback only
	// after a failure); a phase that does not run has no span.
	runs(hr *hostRun) bool
	// run does the phase; an ending ends the host's apply there.
	run(ctx context.Context, hr *hostRun) *ending
}

// ending is how a host's apply ended: its outcome, the state the host was
// left in, why, and what to do next (NextResume, ...). lost: the host's
// window went on (or ended) without this run: what became of it is on the
// host, and the run learns it again there before it ends (resync).
type ending struct {
	outcome       Outcome
	state, reason string
	next          string
	lost          bool
}

func end(out Outcome, state, reason string) *ending {
	return &ending{outcome: out, state: state, reason: reason, next: nextFor(out, state)}
}

// because says what the next command is when it is not the outcome's usual.
func (e *ending) because(next string) *ending {
	e.next = next
	return e
}

// hostRun is one host's apply in progress: what the phases share.
type hostRun struct {
	p      *plans.Plan
	stored *plans.HostPlan // the plan file's host plan
	h      *plans.HostPlan // the plan derived from the host as observed: what runs
	o      ApplyOptions
	dial   HostDialer // to reach the host again after a lost connection
	host   Host
	res    *HostResult
	pr     *progress
	q      Query
	yield  func() func() // gives up the parallel slot while draining; returns how to take one back

	locked        bool                 // the session holds the host lock (until unlock)
	filing        bool                 // the receipt was sent to the host (commit, record)
	observeErr    error                // the lock's reading of the host failed
	st            []step               // the steps derived for this host, in order
	gate          *plans.Facts         // the host when the window begins (the drain gate's last reading)
	first         *plans.Facts         // the read-back's first reading, made in the window's batch
	started       int                  // window steps that started
	stopped       int64                // the host clock when the relay stopped (ns)
	failure       error                // the window or its read-back failed
	inWindow      bool                 // failure is a window step's (not the read-back's)
	outcome       Outcome              // Applied or RolledBack, for commit to file
	rec           *recovery            // a window a dead run left unfinished, being recovered
	awaiting      bool                 // the host's window waits for this run's word (a verdict)
	now           *plans.Facts         // the host read again after a lost connection (resync)
	trips         int                  // round trips of the sessions before this one
	undoing       bool                 // this run decided to roll the window back
	committed     *ending              // what commit filed, once it was sent
	switchCounted bool                 // the window's relay switch is counted in the receipt
	soak          *plans.Soak          // the soak this host runs, nil for none
	soakRole      string               // why it soaks: SoakRoleCanary or SoakRoleHost
	baseline      []plans.DropCounters // the drop counters before the window, oldest first
	releaseSum    string               // the host's description of the release the window switches away from (release-sum)
	hostRB        *ReadBackResult      // the host's verdict on its own read-back, in the window's batch
	filedInBatch  bool                 // the host filed the receipt (and unlocked) in the window's batch
	tailReceipt   string               // the receipt the window's batch files when its read-back holds ("": none)
	pruned        []string             // what the prune in the window's batch removes, by name
	// cut is where the running phase's span ends when that is before the
	// phase returns (an answer in the same batch as the next phase's).
	cut time.Time
}

func applyHost(ctx context.Context, d HostDialer, p *plans.Plan, h *plans.HostPlan, o ApplyOptions, pr *progress, yield func() func()) *HostResult {
	res := &HostResult{HostAccount: HostAccount{Host: h.Host, Address: h.Address, Labels: h.Labels, State: StateAsWas, ReleasePlanned: h.Release.Planned, ExpectedRB: h.Readback.Expected, Steps: []StepRecord{}},
		started: o.Now(), clock: time.Now()}
	res.Started = stamp(res.started)
	host, err := d.DialHost(ctx, h.Host)
	res.Timeline = append(res.Timeline, Phase{Name: "connect", Ms: time.Since(res.clock).Milliseconds()})
	if err != nil {
		res.Outcome, res.Reason, res.Next = Unreachable, err.Error(), NextResume
		if IsRefusal(err) {
			res.Outcome, res.Next = Refused, NextFix // a host key, authentication
		}
		res.Ended = stamp(o.Now())
		return res
	}
	res.Address = host.Address()
	if id := host.Identity(); id != (SSHIdentity{}) {
		res.SSH = &id
	}
	hr := &hostRun{p: p, stored: h, h: h, o: o, dial: d, host: host, res: res, pr: pr, q: QueryForPlan(p), yield: yield}
	defer func() { hr.host.Close() }()
	if o.soakRole != "" && o.Rollout != nil && o.Rollout.Soak != nil && !o.StageOnly && !o.confirmOnly {
		hr.soak, hr.soakRole = o.Rollout.Soak, o.soakRole
	}
	r := hr.run(ctx)
	r.Soak.settle(r.Outcome)
	return r
}

// run runs the phases in order, each span on the timeline, until one ends
// the host's apply; the lock is released at the end whatever happened.
func (hr *hostRun) run(ctx context.Context) *HostResult {
	defer hr.unlock()
	start := time.Now()
	phases := hostPhases(hr.p, hr.o)
	for i := 0; i < len(phases); i++ {
		ph := phases[i]
		if !ph.runs(hr) {
			continue
		}
		hr.cut = time.Time{}
		e := ph.run(ctx, hr)
		stop := hr.cut
		if stop.IsZero() {
			stop = time.Now()
		}
		hr.span(ph.title(), start, stop)
		start = stop
		if e != nil && e.lost {
			e = hr.resync(ctx, e)
			start = time.Now()
			hr.span("resync", stop, start)
			if e == nil {
				phases, i = resyncPhases(), -1
				continue
			}
		}
		if e != nil {
			hr.res.Outcome, hr.res.State, hr.res.Reason, hr.res.Next = e.outcome, e.state, e.reason, e.next
			break
		}
	}
	if hr.locked && !hr.filing && !hr.o.confirmOnly {
		// Every run that held the lock leaves its receipt on the host,
		// whatever its outcome (a resume's check of a host done before
		// is not a run of its own there).
		hr.file(context.WithoutCancel(ctx), "record", nil)
	}
	if hr.res.Ended == "" {
		hr.res.Ended = stamp(hr.o.Now())
	}
	hr.res.RoundTrips = hr.trips + hr.host.RoundTrips()
	return hr.res
}

// unlock releases the host lock cleanly when the session still holds it
// (commit releases it in its own batch).
func (hr *hostRun) unlock() {
	if hr.locked {
		hr.host.Run(context.Background(), []Op{unlockOp()}, nil)
		hr.locked = false
	}
}

// observe reads the host in its locked session.
func (hr *hostRun) observe(ctx context.Context) (*plans.Facts, error) {
	f, err := observe(ctx, hr.host, hr.q)
	if err != nil {
		return nil, err
	}
	f.Host = hr.h.Host
	return f, nil
}

func (hr *hostRun) record(phase string, s plans.Step, status, detail string) {
	hr.res.Steps = append(hr.res.Steps, StepRecord{Phase: phase, Kind: s.Kind, Key: s.Key, Title: s.Title, Status: status, Detail: detail,
		Millis: hr.o.Now().Sub(hr.res.started).Milliseconds()})
}

// span adds a phase that ran from start to end to the timeline.
func (hr *hostRun) span(name string, start, end time.Time) {
	hr.res.Timeline = append(hr.res.Timeline, Phase{Name: name, StartMs: start.Sub(hr.res.clock).Milliseconds(), Ms: end.Sub(start).Milliseconds()})
}
