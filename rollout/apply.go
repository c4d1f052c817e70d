package rollout

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/relayctl/relayctl/plans"
	"github.com/relayctl/relayctl/relay/capability"
	"github.com/relayctl/relayctl/tune"
)

// Outcome is how one host ended. Each is distinct on purpose: Ansible lumps
// unreachable and failed together (ansible#3845), and an operator needs to
// know which hosts were touched.
type Outcome string

// Outcomes of a host, in the order the recap lists them.
const (
	Applied     Outcome = "applied"     // changed and verified by read-back
	Unchanged   Outcome = "unchanged"   // already as planned: no restart
	RolledBack  Outcome = "rolled back" // the window failed; the old state is back and verified
	Failed      Outcome = "failed"      // see State for where the host is
	Refused     Outcome = "refused"     // nothing changed: stale or edited plan, lock, journal, window, blocked, unsafe folders, drain deadline (abort)
	Skipped     Outcome = "skipped"     // left for a later run: its players had not gone at the drain deadline (skip)
	Unreachable Outcome = "unreachable" // no connection
	NotStarted  Outcome = "not started" // an earlier failure or an interrupt stopped the fleet first
	Staged      Outcome = "staged"      // relayctl stage: staged for the window; nothing in force changed
)

// Outcomes lists every outcome in recap order.
var Outcomes = []Outcome{Applied, Unchanged, Staged, RolledBack, Failed, Refused, Skipped, Unreachable, NotStarted}

// Host states after an apply: a failed apply leaves each host as it was or
// as planned, and says which; anything else is named exactly.
const (
	StateAsWas     = "as it was"
	StateAsPlanned = "as planned"
)

// ApplyOptions travel from the CLI to the engine.
type ApplyOptions struct {
	Parallel      int    // hosts in flight after the canary
	Artifact      []byte // the release file, checked against the plan's sha256
	Now           func() time.Time
	IgnoreWindow  bool      // apply outside the plan's window
	BreakLock     bool      // take a lock a dead run left behind
	ClearJournal  bool      // archive an unfinished run's journal and go on
	Owner         string    // who applies, recorded in the host lock
	Progress      io.Writer // one line per step, for people
	VerifyTimeout time.Duration
	// StableFor is how long the read-back must hold, the same relay process
	// (PID and systemd's invocation) still reading back as planned, before
	// a host counts as applied: a relay that starts and then dies is not
	// applied. 0 is one read-back for the command manager and a second for
	// systemd, where Restart=on-failure can hide a crash behind a new PID.
	StableFor time.Duration

	// The fleet (waves.go, ledger.go, fleetview.go).
	Rollout      *plans.Resolved    // waves and budgets; nil: the plan's own
	Resume       *Ledger            // go on with the hosts this ledger has not applied
	SaveLedger   func([]byte) error // called with the ledger each time a host starts or ends
	Live         bool               // Progress is a terminal: a live fleet view instead of step lines
	LiveWidth    int                // its columns
	StageOnly    bool               // stop each host after its stage (relayctl stage)
	FetchTimeout time.Duration      // a host's fetch of a url release
	Approval     *Approval          // how the caller decided the plan may run, for the receipt
}

// StepRecord is one step as it ran.
type StepRecord struct {
	Phase  string `json:"phase"`
	Kind   string `json:"kind"`
	Key    string `json:"key,omitempty"`
	Title  string `json:"title,omitempty"`
	Status string `json:"status"` // done, failed
	Detail string `json:"detail,omitempty"`
	Millis int64  `json:"ms"` // since the host's apply started
}

// HostResult is one host's part of the receipt.
type HostResult struct {
	Host         string        `json:"host"`
	Address      string        `json:"address"`
	Outcome      Outcome       `json:"outcome"`
	State        string        `json:"state"` // as it was, as planned, or what exactly
	Reason       string        `json:"reason,omitempty"`
	Drift        []plans.Drift `json:"drift,omitempty"`
	Journal      string        `json:"journal,omitempty"` // an unfinished run's journal, when that refused us
	Steps        []StepRecord  `json:"steps"`
	Before       *plans.Facts  `json:"before,omitempty"`
	After        *plans.Facts  `json:"after,omitempty"`
	ExpectedRB   int           `json:"expected_rb"`
	WindowMillis int64         `json:"window_ms"` // relay stopped → new socket verified, on the host's clock
	Restarts     int           `json:"restarts"`
	Handoffs     int           `json:"handoffs"`
	RoundTrips   int           `json:"round_trips"`
	Verify       []Check       `json:"verify,omitempty"`
	UnitLog      string        `json:"unit_log,omitempty"` // systemd's journal of a failed start
	// Timeline is where the host's time went, phase by phase, on
	// relayctl's clock (ms since the host's apply started).
	Timeline []Phase `json:"timeline,omitempty"`
	// The players: what the relay held when the window began (at the drain
	// gate, or when observed), how long the gate waited, and how many
	// players the switch cut (a restart cuts every lobby; a handoff none).
	PlayersAtWindow *plans.Players `json:"players_at_window,omitempty"`
	DrainWaitMillis int64          `json:"drain_wait_ms,omitempty"`
	PlayersCut      *int           `json:"players_cut,omitempty"`
	HandoffGapUS    *int64         `json:"handoff_gap_us,omitempty"` // the relay's own: old's last read → new's first
	Wave            int            `json:"wave,omitempty"`
	// BytesUploaded counts the file bytes relayctl sent to the host
	// (release, config, drop-in; not the receipt): 0 when all of it was
	// staged ahead.
	BytesUploaded int64         `json:"bytes_uploaded"`
	TowardPlan    []plans.Drift `json:"toward_plan,omitempty"` // facts that moved toward the plan since it was made (staged ahead)
	FromLedger    string        `json:"from_ledger,omitempty"` // not touched: its outcome is an earlier run's (apply --resume)
	started       time.Time     // on the options' clock (a test's may be fixed)
	clock         time.Time     // the real clock at the start, for the timeline
}

// Phase is one span of a host's apply: connect, lock, observe, stage,
// drain, window, read-back, commit.
type Phase struct {
	Name    string `json:"name"`
	StartMs int64  `json:"start_ms"`
	Ms      int64  `json:"ms"`
}

// Report is the whole apply.
type Report struct {
	Plan     string        `json:"plan"`
	Checksum string        `json:"checksum"`
	Started  string        `json:"started"`
	Millis   int64         `json:"ms"`
	Hosts    []*HostResult `json:"hosts"`
	Run      int           `json:"run,omitempty"` // 1, then one more per apply --resume
	Waves    []*WaveResult `json:"waves,omitempty"`
	Stopped  string        `json:"stopped,omitempty"`  // why hosts were left not started
	Approval *Approval     `json:"approval,omitempty"` // ApplyOptions.Approval
}

// Succeeded is true when every host is applied or unchanged (or staged,
// for relayctl stage).
func (r *Report) Succeeded() bool {
	for _, h := range r.Hosts {
		if h.Outcome != Applied && h.Outcome != Unchanged && h.Outcome != Staged {
			return false
		}
	}
	return true
}

// CheckPlan is everything apply and verify check in a plan file before
// anything connects: the plan against its recorded spec (plans.Validate),
// and each host's recorded steps against the ones its own recorded
// decisions give. A plan edited after it was made, checksum recomputed or
// not, fails here or, for what needs the host, when apply derives the
// host's plan again from what it observes.
func CheckPlan(p *plans.Plan) error {
	if err := plans.Validate(p); err != nil {
		return err
	}
	for _, h := range p.Hosts {
		if d := stepDiff(h.Steps, describeHost(p, h)); d != "" {
			return fmt.Errorf("%w: host %s: %s; make and review the plan again", plans.ErrPlanEdited, h.Host, d)
		}
	}
	return nil
}

// stepDiff names the first difference between two step lists.
func stepDiff(stored, derived []plans.Step) string {
	for i := 0; i < max(len(stored), len(derived)); i++ {
		switch {
		case i >= len(derived):
			return fmt.Sprintf("step %d (%s) is not one this plan takes", i+1, plans.Visible(stored[i].Title))
		case i >= len(stored):
			return fmt.Sprintf("step %d (%s) is missing", i+1, derived[i].Title)
		case stored[i] != derived[i]:
			return fmt.Sprintf("step %d is %q, the plan's decisions give %q", i+1, plans.Visible(stored[i].Title), derived[i].Title)
		}
	}
	return ""
}

// Apply applies a plan in waves (waves.go): by default the first host
// alone as a canary, then the rest, parallel at a time. A wave over its
// failure budget, or ctx being cancelled (SIGINT), stops new hosts from
// starting; a host inside its window finishes it or rolls back whatever
// happens to ctx. The ledger (ledger.go) is saved as each host starts and
// ends; with o.Resume, hosts it has applied or unchanged are not touched.
func Apply(ctx context.Context, d HostDialer, p *plans.Plan, o ApplyOptions) (*Report, error) {
	if err := CheckPlan(p); err != nil {
		return nil, err
	}
	// The release's capabilities are read from its bytes, not taken from
	// the plan file: a plan edited to claim a handoff gets none.
	if o.Artifact != nil {
		caps, err := capability.Capabilities(o.Artifact)
		if err != nil {
			return nil, err
		}
		if !slices.Equal(caps, p.Relay.Capabilities) {
			return nil, fmt.Errorf("%w: the plan says release %s can %q, its artifact says %q", plans.ErrPlanEdited, p.Relay.Version, p.Relay.Capabilities, caps)
		}
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Parallel < 1 {
		o.Parallel = 1
	}
	if o.VerifyTimeout <= 0 {
		o.VerifyTimeout = 15 * time.Second
	}
	if o.StableFor <= 0 && p.Relay.Service.Manager == "systemd" {
		o.StableFor = time.Second
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	return runFleet(ctx, d, p, o)
}

// countingRunner counts round trips.
type countingRunner struct {
	Runner
	n  int
	mu sync.Mutex
}

func (c *countingRunner) Run(ctx context.Context, cmd string, stdin io.Reader, stdout, stderr io.Writer) error {
	c.mu.Lock()
	c.n++
	c.mu.Unlock()
	return c.Runner.Run(ctx, cmd, stdin, stdout, stderr)
}

func (c *countingRunner) count() int { c.mu.Lock(); defer c.mu.Unlock(); return c.n }

// hostRun is one host's apply in progress.
type hostRun struct {
	p     *plans.Plan
	h     *plans.HostPlan // the plan derived from the host as observed: what runs
	o     ApplyOptions
	host  Host
	res   *HostResult
	pr    *progress
	q     Query
	yield func() func() // gives up the parallel slot while draining; returns how to take one back
	// stepsDone is when the answer to the last step of a runSteps came.
	stepsDone time.Time
}

func (hr *hostRun) observe(ctx context.Context) (*plans.Facts, error) {
	f, err := hr.host.Observe(ctx, hr.q)
	if err != nil {
		return nil, err
	}
	f.Host, f.Address, f.User = hr.h.Host, hr.host.Address(), hr.host.User()
	return f, nil
}

// Hosts that batch (ShellHost) save round trips where the engine knows
// what comes next: the lock and the first observe go together, the
// read-back follows the window's last step in its batch, and the unlock
// follows the receipt.
type (
	lockObserver interface {
		LockObserve(ctx context.Context, owner string, breakLock bool, q Query) (locked time.Time, f *plans.Facts, lockErr, err error)
	}
	observeOper interface {
		ObserveOp(q Query) (Op, func(Result) (*plans.Facts, error), error)
	}
	batchUnlocker interface {
		UnlocksInBatch() bool
	}
)

// lockAndObserve takes the host lock and reads the host, in one round trip
// where the host can; the timeline gets both phases.
func (hr *hostRun) lockAndObserve(ctx context.Context) (before *plans.Facts, lockErr, err error) {
	lo, ok := hr.host.(lockObserver)
	if !ok {
		end := hr.phase("lock")
		lockErr = hr.host.Lock(ctx, hr.o.Owner, hr.o.BreakLock)
		end()
		if lockErr != nil {
			return nil, lockErr, nil
		}
		hr.pr.say(hr.h.Host, "observe")
		end = hr.phase("observe")
		before, err = hr.observe(ctx)
		end()
		return before, nil, err
	}
	start := time.Now()
	locked, f, lockErr, err := lo.LockObserve(ctx, hr.o.Owner, hr.o.BreakLock, hr.q)
	if locked.IsZero() {
		locked = time.Now()
	}
	hr.span("lock", start, locked)
	if lockErr != nil {
		return nil, lockErr, nil
	}
	hr.pr.say(hr.h.Host, "observe")
	hr.span("observe", locked, time.Now())
	if err != nil {
		return nil, nil, err
	}
	f.Host, f.Address, f.User = hr.h.Host, hr.host.Address(), hr.host.User()
	return f, nil, nil
}

func (hr *hostRun) record(phase string, s plans.Step, status, detail string) {
	hr.res.Steps = append(hr.res.Steps, StepRecord{Phase: phase, Kind: s.Kind, Key: s.Key, Title: s.Title, Status: status, Detail: detail,
		Millis: hr.o.Now().Sub(hr.res.started).Milliseconds()})
}

func (hr *hostRun) end(out Outcome, state, reason string) *HostResult {
	hr.res.Outcome, hr.res.State, hr.res.Reason = out, state, reason
	hr.res.RoundTrips = hr.host.RoundTrips()
	return hr.res
}

func applyHost(ctx context.Context, d HostDialer, p *plans.Plan, h *plans.HostPlan, o ApplyOptions, pr *progress, yield func() func()) *HostResult {
	res := &HostResult{Host: h.Host, Address: h.Address, State: StateAsWas, ExpectedRB: h.Readback.Expected, Steps: []StepRecord{}, started: o.Now(), clock: time.Now()}
	t0 := res.clock
	host, err := d.DialHost(ctx, h.Host)
	res.Timeline = append(res.Timeline, Phase{Name: "connect", Ms: time.Since(t0).Milliseconds()})
	if err != nil {
		res.Outcome, res.Reason = Unreachable, err.Error()
		if IsRefusal(err) {
			res.Outcome = Refused
		}
		return res
	}
	defer host.Close()
	res.Address = host.Address()
	hr := &hostRun{p: p, h: h, o: o, host: host, res: res, pr: pr, q: QueryForPlan(p), yield: yield}
	return hr.run(ctx)
}

func (hr *hostRun) run(ctx context.Context) *HostResult {
	p, stored := hr.p, hr.h
	// The lock first: while another apply runs, the host's journal and the
	// drift it causes are that run's business, not evidence of a dead run.
	before, lockErr, err := hr.lockAndObserve(ctx)
	if lockErr != nil {
		if isConnLost(lockErr) {
			return hr.end(Unreachable, StateAsWas, lockErr.Error())
		}
		return hr.end(Refused, StateAsWas, lockErr.Error())
	}
	defer hr.host.Unlock()
	if err != nil {
		return hr.end(Failed, StateAsWas, "observe: "+err.Error())
	}
	hr.res.Before = before

	// An unfinished run's journal: refuse with what it says, unless it
	// stopped before its window (nothing in force changed) or the user
	// cleared it after checking the host.
	if before.Journal != "" {
		if windowStarted(before.Journal) && !hr.o.ClearJournal {
			hr.res.Journal = before.Journal
			return hr.end(Refused, "unknown: an earlier apply stopped inside its window",
				"an earlier apply did not finish; its journal on the host ("+p.Paths.StateDir+"/journal) ends with: "+plans.Visible(lastLine(before.Journal))+
					"; check the host (relayctl verify PLAN), then apply with --clear-journal")
		}
		if !windowStarted(before.Journal) {
			hr.pr.say(stored.Host, "an earlier apply stopped before its window (nothing in force changed); its journal is archived")
		}
		if err := hr.host.Run(ctx, []Op{op("clear")}, nil); err != nil {
			return hr.end(Failed, StateAsWas, "archive the earlier journal: "+err.Error())
		}
	}
	if len(stored.Blockers) > 0 {
		return hr.end(Refused, StateAsWas, "blocked in the plan: "+strings.Join(stored.Blockers, "; "))
	}
	if p.Window != nil && !hr.o.IgnoreWindow && !hr.o.StageOnly {
		nb, _ := plans.ParseWindowTime(p.Window.NotBefore) // checked by plans.Validate
		na, _ := plans.ParseWindowTime(p.Window.NotAfter)
		if now := hr.o.Now(); now.Before(nb) || now.After(na) {
			return hr.end(Refused, StateAsWas, fmt.Sprintf("outside the plan's window %s to %s (now %s); wait for it or use --ignore-window", p.Window.NotBefore, p.Window.NotAfter, now.UTC().Format(time.RFC3339)))
		}
	}

	// What runs is derived again, from the recorded spec and the host as it
	// is now, by the code that made the plan; the plan file only has to
	// agree with it.
	derived, err := plans.Replan(p, before)
	if err != nil {
		return hr.end(Refused, StateAsWas, err.Error())
	}
	derived.Steps = describeHost(p, derived)
	if derived.Fingerprint == stored.Fingerprint {
		if d := plans.ActionDiff(stored, derived); len(d) > 0 {
			return hr.end(Refused, StateAsWas, "the plan's actions for this host are not what its spec and the host give (it was edited, or made by another relayctl): "+strings.Join(d, "; ")+"; make and review the plan again")
		}
	} else {
		if derived.Action == plans.ActionNone {
			hr.res.After = before
			return hr.end(Unchanged, StateAsPlanned, "already as planned")
		}
		drift := plans.Diff(stored.Facts, derived.Facts)
		if !towardPlan(p, drift) || !subsequence(derived.Steps, stored.Steps) {
			hr.res.Drift = drift
			return hr.end(Refused, StateAsWas, fmt.Sprintf("the plan is stale: %d fact(s) changed since it was made (%s); make a new plan", len(drift), driftText(drift)))
		}
		// Only planned sysctls moved, and to their planned values (a global
		// key set through another host of the same machine), or the planned
		// release was staged ahead (staged.go): the rest of the plan stands,
		// without those steps.
		hr.res.TowardPlan = drift
		hr.pr.say(stored.Host, "%s", towardText(p, drift))
	}
	hr.h = derived
	if derived.Action == plans.ActionNone {
		hr.res.After = before
		return hr.end(Unchanged, StateAsPlanned, "nothing to change")
	}
	if derived.Config.Change && derived.Config.SHA256 != stored.Config.SHA256 {
		return hr.end(Refused, StateAsWas, "the relay config derived now does not hash to the reviewed one; make a new plan")
	}

	st := steps(p, derived, stepInput{artifact: hr.o.Artifact, fetchTimeout: hr.o.FetchTimeout}, false)
	if hr.o.StageOnly {
		st = stageSteps(st)
	}
	end := hr.phase("stage")
	err = hr.stage(ctx, st)
	end()
	if err != nil {
		// Folders others can write, a symlink where a file goes, or a
		// release already there that is not root's alone or not the
		// reviewed bytes: the host is refused before anything is written.
		if n := len(hr.res.Steps); n > 0 && (hr.res.Steps[n-1].Kind == KindCheckFolders || hr.res.Steps[n-1].Kind == KindCheckRelease) {
			return hr.end(Refused, StateAsWas, err.Error()+" (nothing was written)")
		}
		// A release the host could not fetch, or whose sha256 is not the
		// plan's: nothing was written either (agent.sh fetch).
		if oe := (*OpError)(nil); errors.As(err, &oe) && oe.Op.Kind == "fetch" {
			return hr.end(Refused, StateAsWas, err.Error())
		}
		return hr.end(Failed, StateAsWas, err.Error()+" (nothing in force changed)")
	}
	if hr.o.StageOnly {
		return hr.endStaged(ctx)
	}
	if ctx.Err() != nil {
		return hr.end(NotStarted, StateAsWas, "interrupted after staging, before its window (nothing in force changed)")
	}
	gate := before
	if p.Drain != nil {
		var out Outcome
		var why string
		end = hr.phase("drain")
		gate, out, why = hr.drainGate(ctx, before)
		end()
		if gate == nil {
			return hr.end(out, StateAsWas, why)
		}
	}
	if st := gate.RelayStatus; st != nil && st.Read {
		hr.res.PlayersAtWindow = &plans.Players{Players: st.Players, Lobbies: st.Lobbies}
	}

	// From here on the host is in its window: it finishes or rolls back,
	// whatever happens to ctx (an interrupt stops other hosts, not this one).
	wctx := context.WithoutCancel(ctx)
	wstart := time.Now()
	started, stopClock, first, werr := hr.window(wctx, st)
	windowFailed := werr != nil // a step of the window failed (not its read-back)
	var after *plans.Facts
	if werr != nil {
		hr.span("window", wstart, time.Now())
	} else {
		// The window ends with its last step's answer; the first read-back
		// may have come in the same batch.
		rstart := hr.stepsDone
		if rstart.IsZero() {
			rstart = time.Now()
		}
		hr.span("window", wstart, rstart)
		after, werr = hr.verify(wctx, before, first)
		hr.span("read-back", rstart, time.Now())
		if after != nil && stopClock > 0 && after.ClockNanos > stopClock {
			hr.res.WindowMillis = (after.ClockNanos - stopClock) / 1e6
		}
	}
	hr.res.After = after
	hr.playerImpact(after)
	if werr == nil {
		hr.commit(wctx, Applied)
		return hr.end(Applied, StateAsPlanned, "")
	}
	if isConnLost(werr) {
		return hr.end(Failed, "unknown: the connection was lost inside the window; the journal on the host says where it stopped",
			"window: "+werr.Error())
	}
	hr.unitLog(wctx, stopClock)
	hr.pr.say(stored.Host, "window failed: %v; rolling back", werr)
	state, rerr := hr.rollback(wctx, st[:started], windowFailed, before)
	if rerr != nil {
		return hr.end(Failed, state, "window: "+werr.Error()+"; rollback: "+rerr.Error())
	}
	hr.commit(wctx, RolledBack)
	return hr.end(RolledBack, StateAsWas, werr.Error())
}

// subsequence reports whether every step of a is in b, in order.
func subsequence(a, b []plans.Step) bool {
	j := 0
	for _, s := range a {
		for j < len(b) && !sameStep(s, b[j]) {
			j++
		}
		if j == len(b) {
			return false
		}
		j++
	}
	return true
}

// towardPlan reports whether every drifted fact is a planned sysctl that
// now holds its planned value, or the planned release staged ahead.
func towardPlan(p *plans.Plan, drift []plans.Drift) bool {
	if len(drift) == 0 {
		return false
	}
	for _, d := range drift {
		if stagedRelease(p, d) {
			continue
		}
		key, ok := strings.CutPrefix(d.Name, "sysctl ")
		if !ok {
			return false
		}
		planned := ""
		for _, s := range p.Sysctl {
			if s.Key == key {
				planned = s.Value
			}
		}
		if planned == "" || !tune.Equal(d.Observed, planned) {
			return false
		}
	}
	return true
}

func driftText(d []plans.Drift) string {
	var parts []string
	for _, x := range d {
		parts = append(parts, fmt.Sprintf("%s: planned %s, now %s", x.Name, x.Planned, x.Observed))
	}
	return plans.Visible(strings.Join(parts, "; "))
}

// windowStarted reports whether an unfinished run's journal shows it began
// its window (or a rollback): then something in force may have changed.
func windowStarted(journal string) bool {
	for _, l := range strings.Split(journal, "\n") {
		if f := strings.Fields(l); len(f) >= 3 && f[1] == "start" && (f[2] == plans.PhaseWindow || f[2] == "rollback") {
			return true
		}
	}
	return false
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// runSteps runs the given phase's primitives of each step in order,
// journalled and recorded under the step's title, as one batch (one round
// trip on a real host; the host stops at the first failure). It returns
// how many steps started and the host clock a restart reported.
func (hr *hostRun) runSteps(ctx context.Context, phase string, st []step, ops func(step) []Op, lead []Op, tail *tailOp) (started int, clock int64, err error) {
	type span struct {
		step       int // index in st
		d          plans.Step
		first, end int // the step's ops in list: [first, end)
	}
	hr.stepsDone = time.Time{}
	list := append([]Op(nil), lead...)
	var spans []span
	for i, s := range st {
		l := ops(s)
		if len(l) == 0 {
			continue
		}
		d := s.describe()
		if d.Phase != phase {
			// A window step's preparation, before the window: what its undo
			// will need.
			d.Title = "prepare for " + d.Title
		}
		// The journal says where a run that dies stopped: each step's
		// start and end, by kind and title.
		first := len(list)
		list = append(list, op("step", "start "+d.Kind+": "+d.Title))
		list = append(list, l...)
		list = append(list, op("step", "done "+d.Kind+": "+d.Title))
		spans = append(spans, span{step: i, d: d, first: first, end: len(list)})
	}
	if len(spans) == 0 {
		if len(lead) > 0 {
			if err := hr.host.Run(ctx, lead, nil); err != nil {
				if isConnLost(err) {
					return 0, 0, err
				}
				return 0, 0, fmt.Errorf("%s: %s: %w", phase, lead[0].Kind, err)
			}
		}
		return 0, 0, nil
	}
	if tail != nil {
		list = append(list, tail.op)
	}
	cur := 0 // the span the next answer belongs to
	begin := func(k int) {
		started = spans[k].step + 1
		hr.pr.step(hr.h.Host, phase, spans[k].d.Title)
	}
	begin(0)
	next := 0 // the op whose answer comes next
	err = hr.host.Run(ctx, list, func(j int, r Result) error {
		next = j + 1
		if cur == len(spans) { // past the steps: the tail's answer
			tail.got(r)
			return nil
		}
		hr.res.BytesUploaded += int64(r.Sent)
		if k := list[j].Kind; k == "restart" || k == "handoff" {
			fmt.Sscan(r.Value, &clock)
		}
		if err := list[j].Check(r); err != nil {
			return err
		}
		if j == spans[cur].end-1 {
			hr.record(phase, spans[cur].d, "done", "")
			if cur++; cur < len(spans) {
				begin(cur)
			} else {
				hr.stepsDone = time.Now()
			}
		}
		return nil
	})
	if err != nil && next < len(lead) {
		// A lead op (the journal's begin): no step started.
		if isConnLost(err) {
			return 0, clock, err
		}
		return 0, clock, fmt.Errorf("%s: %s: %w", phase, list[next].Kind, err)
	}
	if err != nil && cur < len(spans) {
		d := spans[cur].d
		hr.record(phase, d, "failed", err.Error())
		if isConnLost(err) {
			return started, clock, err
		}
		return started, clock, fmt.Errorf("%s: %s: %w", phase, stepName(d), err)
	}
	return started, clock, nil
}

// tailOp is a primitive sent behind a phase's steps in their batch, done
// only if they all were (the read-back after the window).
type tailOp struct {
	op  Op
	got func(Result)
}

// stepName is a step's title up to its details: "place release", "set sysctl".
func stepName(d plans.Step) string {
	if i := strings.IndexAny(d.Title, ":"); i > 0 {
		return d.Title[:i]
	}
	return d.Title
}

// stage runs before the window: begin the journal, then every step's
// preparation and the stage steps themselves. Nothing in force changes.
func (hr *hostRun) stage(ctx context.Context, st []step) error {
	_, _, err := hr.runSteps(ctx, plans.PhaseStage, st, func(s step) []Op {
		ops := s.prepare()
		if s.describe().Phase == plans.PhaseStage {
			ops = append(ops, s.do()...)
		}
		return ops
	}, []Op{op("begin", hr.p.Name, hr.p.Checksum)}, nil)
	return err
}

// window runs the window steps in order and, on a host that batches, the
// first read-back right behind them (first; nil otherwise or if the
// window failed).
func (hr *hostRun) window(ctx context.Context, st []step) (started int, clock int64, first *plans.Facts, err error) {
	var tail *tailOp
	if oo, ok := hr.host.(observeOper); ok {
		if o, read, err := oo.ObserveOp(hr.q); err == nil {
			tail = &tailOp{op: o, got: func(r Result) {
				if f, err := read(r); err == nil {
					f.Host, f.Address, f.User = hr.h.Host, hr.host.Address(), hr.host.User()
					first = f
				}
			}}
		}
	}
	started, clock, err = hr.runSteps(ctx, plans.PhaseWindow, st, func(s step) []Op {
		if s.describe().Phase != plans.PhaseWindow {
			return nil
		}
		return s.do()
	}, []Op{op("step", "start window")}, tail)
	for _, r := range hr.res.Steps {
		if r.Phase == plans.PhaseWindow && r.Status == "done" {
			switch r.Kind {
			case KindRestart:
				hr.res.Restarts++
			case KindHandoff:
				hr.res.Handoffs++
			}
		}
	}
	return started, clock, first, err
}

// unitLog keeps systemd's own account of a failed start in the receipt.
func (hr *hostRun) unitLog(ctx context.Context, since int64) {
	svc := hr.p.Relay.Service
	if svc.Manager != "systemd" {
		return
	}
	if since == 0 {
		since = hr.res.started.UnixNano()
	}
	hr.host.Run(ctx, []Op{op("unit-log", svc.Name, fmt.Sprint(since))}, func(_ int, r Result) error {
		hr.res.UnitLog = r.Value
		return nil
	})
}

// connLost is a transport failure (not a refusal by the host): inside the
// window it means nobody knows how far the host got but its journal.
type connLost struct{ err error }

func (e *connLost) Error() string { return "connection lost: " + e.err.Error() }
func (e *connLost) Unwrap() error { return e.err }

func isConnLost(err error) bool {
	var c *connLost
	return errors.As(err, &c)
}

// verify reads the host back until it matches the plan, and has for
// StableFor with the same relay process, or time runs out. It returns the
// first reading that matched: the window ends there.
func (hr *hostRun) verify(ctx context.Context, before, reading *plans.Facts) (*plans.Facts, error) {
	deadline := time.Now().Add(hr.o.VerifyTimeout) // a real clock: Now may be a test's fixed one
	d := plans.Step{Phase: plans.PhaseVerify, Kind: KindReadBack, Title: "read back"}
	var first *plans.Facts // the first matching reading of the process seen now
	var since time.Time
	for {
		after := reading // a reading made already (in the window's batch)
		reading = nil
		if after == nil {
			var err error
			if after, err = hr.observe(ctx); err != nil {
				return nil, &connLost{err}
			}
		}
		checks := PlannedChecks(hr.p, hr.h, before, after)
		ok := allOK(checks)
		switch {
		case !ok:
			first = nil
		case first == nil || !sameProcess(first, after):
			first, since = after, time.Now()
		}
		stable := first != nil && time.Since(since) >= hr.o.StableFor
		if stable || time.Now().After(deadline) {
			hr.res.Verify = checks
			if bad := failed(checks); bad != "" {
				hr.record(plans.PhaseVerify, d, "failed", bad)
				return after, errors.New("read-back: " + bad)
			}
			if !stable {
				why := fmt.Sprintf("the relay read back as planned but did not stay up for %s (pid %d)", hr.o.StableFor, after.Service.PID)
				hr.record(plans.PhaseVerify, d, "failed", why)
				return after, errors.New("read-back: " + why)
			}
			hr.record(plans.PhaseVerify, d, "done", "")
			return first, nil
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// sameProcess reports whether two readings show the same relay process.
func sameProcess(a, b *plans.Facts) bool {
	return a.Service.PID == b.Service.PID && a.Service.InvocationID == b.Service.InvocationID && a.Service.Restarts == b.Service.Restarts
}

func allOK(c []Check) bool { return failed(c) == "" }

func failed(c []Check) string {
	var bad []string
	for _, x := range c {
		if !x.OK {
			bad = append(bad, fmt.Sprintf("%s: got %s, want %s", x.What, x.Got, x.Want))
		}
	}
	return plans.Visible(strings.Join(bad, "; "))
}

// rollback undoes the window steps that started, last first, with the
// relay restarted (or handed back, or stopped) once after everything else
// is back, and verifies the old state. lastFailed says the last step's do
// failed, which some steps undo differently (a failed handoff left the old
// relay serving). It returns the host's state in words when that is not
// "as it was".
func (hr *hostRun) rollback(ctx context.Context, ran []step, lastFailed bool, before *plans.Facts) (string, error) {
	var ops, last []Op
	var undone []step
	for i := len(ran) - 1; i >= 0; i-- {
		s := ran[i]
		if s.describe().Phase != plans.PhaseWindow {
			continue
		}
		undone = append(undone, s)
		undo := s.undo()
		if f, ok := s.(failedUndoer); ok && lastFailed && i == len(ran)-1 {
			undo = f.undoAfterFailure()
		}
		if _, ok := s.(restart); ok {
			last = undo
			continue
		}
		ops = append(ops, undo...)
	}
	ops = append(ops, last...)
	ops = append([]Op{op("step", "start rollback")}, ops...)
	d := plans.Step{Phase: "rollback", Kind: "rollback", Title: "roll back the window"}
	err := hr.host.Run(ctx, ops, nil)
	c := &checkCtx{p: hr.p, h: hr.h, before: before}
	if err != nil {
		hr.record("rollback", d, "failed", err.Error())
		if isConnLost(err) {
			return "unknown: the connection was lost during rollback; see the journal on the host", err
		}
		// Continue to read back: say exactly what the host looks like.
		after, oerr := hr.observe(ctx)
		if oerr != nil {
			return "unknown: rollback failed and the host could not be read back", err
		}
		hr.res.After = after
		c.after = after
		return "in between: " + failed(restoredChecks(undone, c)), err
	}
	hr.record("rollback", d, "done", "")
	if len(last) > 0 {
		switch last[0].Kind {
		case "restart":
			hr.res.Restarts++
		case "handoff":
			hr.res.Handoffs++
		}
	}
	deadline := time.Now().Add(hr.o.VerifyTimeout) // a real clock: Now may be a test's fixed one
	for {
		after, err := hr.observe(ctx)
		if err != nil {
			return "unknown: the host could not be read back after rollback", &connLost{err}
		}
		c.after = after
		checks := restoredChecks(undone, c)
		if allOK(checks) || time.Now().After(deadline) {
			hr.res.After = after
			hr.res.Verify = append(hr.res.Verify, checks...)
			if bad := failed(checks); bad != "" {
				return "in between: " + bad, errors.New("old state not verified: " + bad)
			}
			return StateAsWas, nil
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// restoredChecks are the rollback's read-back: each undone step's own, and
// the relay socket as it was.
func restoredChecks(undone []step, c *checkCtx) []Check {
	var out []Check
	for _, s := range undone {
		for _, x := range s.restored(c) {
			x.What = "rollback: " + x.What
			out = append(out, x)
		}
	}
	for _, x := range (readBack{port: c.p.Relay.Port}).restored(c) {
		x.What = "rollback: " + x.What
		out = append(out, x)
	}
	return out
}

// phase starts a span of the timeline; the returned func ends it.
func (hr *hostRun) phase(name string) func() {
	start := time.Now()
	return func() { hr.span(name, start, time.Now()) }
}

// span adds a phase that ran from start to end to the timeline.
func (hr *hostRun) span(name string, start, end time.Time) {
	hr.res.Timeline = append(hr.res.Timeline, Phase{Name: name, StartMs: start.Sub(hr.res.clock).Milliseconds(), Ms: end.Sub(start).Milliseconds()})
}

// commit files the journal and the host's receipt on the host.
func (hr *hostRun) commit(ctx context.Context, out Outcome) {
	defer hr.phase("commit")()
	hr.res.Outcome = out
	hr.res.RoundTrips = hr.host.RoundTrips() + 1 // with the commit's own
	body, err := receiptJSON(hr.p, hr.res)
	if err != nil {
		hr.pr.say(hr.h.Host, "receipt: %v", err)
		return
	}
	name := receiptName(hr.p, hr.o.Now())
	o := op("commit", name, strings.ReplaceAll(string(out), " ", "-"), fmt.Sprint(len(body)))
	o.Data = body
	ops := []Op{o}
	if bu, ok := hr.host.(batchUnlocker); ok && bu.UnlocksInBatch() {
		ops = append(ops, op("unlock")) // the deferred Unlock finds it done
	}
	if err := hr.host.Run(ctx, ops, nil); err != nil {
		hr.pr.say(hr.h.Host, "could not file the receipt on the host: %v", err)
	}
}

func receiptName(p *plans.Plan, now time.Time) string {
	sum := strings.TrimPrefix(p.Checksum, "sha256:")
	if len(sum) > 12 {
		sum = sum[:12]
	}
	return now.UTC().Format("20060102T150405Z") + "-" + p.Name + "-" + sum
}

// ConnLost marks a transport failure, for fakes of Host.
func ConnLost(err error) error { return &connLost{err} }
