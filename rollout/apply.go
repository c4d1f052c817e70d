package rollout

import (
	"bufio"
	"bytes"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/relayctl/relayctl/plans"
	"github.com/relayctl/relayctl/tune"
)

//go:embed apply.sh
var applyScript string

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
	Refused     Outcome = "refused"     // nothing changed: stale plan, lock, journal, window, blocked
	Unreachable Outcome = "unreachable" // no connection
	NotStarted  Outcome = "not started" // an earlier failure or an interrupt stopped the fleet first
)

// Outcomes lists every outcome in recap order.
var Outcomes = []Outcome{Applied, Unchanged, RolledBack, Failed, Refused, Unreachable, NotStarted}

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
}

// StepRecord is one step as it ran.
type StepRecord struct {
	Phase  string `json:"phase"`
	Kind   string `json:"kind"`
	Key    string `json:"key,omitempty"`
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
	RoundTrips   int           `json:"round_trips"`
	Verify       []Check       `json:"verify,omitempty"`
	started      time.Time
}

// Check is one read-back comparison.
type Check struct {
	What string `json:"what"`
	Want string `json:"want"`
	Got  string `json:"got"`
	OK   bool   `json:"ok"`
}

// Report is the whole apply.
type Report struct {
	Plan     string        `json:"plan"`
	Checksum string        `json:"checksum"`
	Started  string        `json:"started"`
	Millis   int64         `json:"ms"`
	Hosts    []*HostResult `json:"hosts"`
}

// Succeeded is true when every host is applied or unchanged.
func (r *Report) Succeeded() bool {
	for _, h := range r.Hosts {
		if h.Outcome != Applied && h.Outcome != Unchanged {
			return false
		}
	}
	return true
}

// Apply applies a plan: the first host alone as a canary, then the rest,
// parallel at a time. The first failure, or ctx being cancelled (SIGINT),
// stops new hosts from starting; a host inside its window finishes it or
// rolls back whatever happens to ctx.
func Apply(ctx context.Context, d Dialer, p *plans.Plan, o ApplyOptions) (*Report, error) {
	if err := ValidatePlan(p); err != nil {
		return nil, err
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
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	start := o.Now()
	rep := &Report{Plan: p.Name, Checksum: p.Checksum, Started: start.UTC().Format(time.RFC3339)}
	results := make([]*HostResult, len(p.Hosts))
	for i, h := range p.Hosts {
		results[i] = &HostResult{Host: h.Host, Address: h.Address, Outcome: NotStarted, State: StateAsWas, ExpectedRB: h.Readback.Expected, Steps: []StepRecord{}}
	}
	rep.Hosts = results
	pr := &progress{w: o.Progress}

	var (
		mu      sync.Mutex
		stopped bool
	)
	stop := func() bool { mu.Lock(); defer mu.Unlock(); return stopped || ctx.Err() != nil }
	one := func(i int) {
		if stop() {
			return
		}
		r := applyHost(ctx, d, p, p.Hosts[i], o, pr)
		results[i] = r
		if r.Outcome != Applied && r.Outcome != Unchanged {
			mu.Lock()
			stopped = true
			mu.Unlock()
		}
	}
	if len(p.Hosts) > 0 {
		one(0) // the canary
	}
	sem := make(chan struct{}, o.Parallel)
	var wg sync.WaitGroup
	for i := 1; i < len(p.Hosts); i++ {
		if stop() {
			break
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			one(i)
		}()
	}
	wg.Wait()
	for _, r := range results {
		if r.Outcome == NotStarted && r.Reason == "" {
			if ctx.Err() != nil {
				r.Reason = "interrupted before this host started"
			} else {
				r.Reason = "an earlier host did not apply cleanly"
			}
		}
	}
	rep.Millis = o.Now().Sub(start).Milliseconds()
	return rep, nil
}

type progress struct {
	mu sync.Mutex
	w  io.Writer
}

func (p *progress) say(host, format string, a ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.w, "%s: %s\n", host, fmt.Sprintf(format, a...))
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
	p    *plans.Plan
	h    *plans.HostPlan
	o    ApplyOptions
	r    *countingRunner
	res  *HostResult
	pr   *progress
	q    Query
	user string // the remote user, recorded in the facts
	lock *hostLock
}

func (hr *hostRun) observe(ctx context.Context) (*plans.Facts, error) {
	return Observe(ctx, hr.r, hr.h.Host, hr.res.Address, hr.user, hr.q)
}

func (hr *hostRun) record(phase, kind, key, status, detail string) {
	hr.res.Steps = append(hr.res.Steps, StepRecord{Phase: phase, Kind: kind, Key: key, Status: status, Detail: detail,
		Millis: hr.o.Now().Sub(hr.res.started).Milliseconds()})
}

func (hr *hostRun) end(out Outcome, state, reason string) *HostResult {
	hr.res.Outcome, hr.res.State, hr.res.Reason = out, state, reason
	hr.res.RoundTrips = hr.r.count()
	return hr.res
}

func applyHost(ctx context.Context, d Dialer, p *plans.Plan, h *plans.HostPlan, o ApplyOptions, pr *progress) *HostResult {
	res := &HostResult{Host: h.Host, Address: h.Address, State: StateAsWas, ExpectedRB: h.Readback.Expected, Steps: []StepRecord{}, started: o.Now()}
	conn, err := d.Dial(ctx, h.Host)
	if err != nil {
		res.Outcome, res.Reason = Unreachable, err.Error()
		if IsRefusal(err) {
			res.Outcome = Refused
		}
		pr.say(h.Host, "%s: %v", res.Outcome, err)
		return res
	}
	defer conn.Close()
	res.Address = conn.Address()
	hr := &hostRun{p: p, h: h, o: o, r: &countingRunner{Runner: conn}, res: res, pr: pr, q: QueryForPlan(p), user: conn.User()}
	return hr.run(ctx)
}

func (hr *hostRun) run(ctx context.Context) *HostResult {
	p, h := hr.p, hr.h
	// The lock first: while another apply runs, the host's journal and the
	// drift it causes are that run's business, not evidence of a dead run.
	lock, err := takeLock(ctx, hr.r, p.Paths.StateDir, hr.o.Owner, hr.o.BreakLock)
	if err != nil {
		return hr.end(Refused, StateAsWas, err.Error())
	}
	hr.lock = lock
	defer lock.release()

	hr.pr.say(h.Host, "observe")
	before, err := hr.observe(ctx)
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
				"an earlier apply did not finish; its journal on the host ("+p.Paths.StateDir+"/journal) ends with: "+lastLine(before.Journal)+
					"; check the host (relayctl verify PLAN), then apply with --clear-journal")
		}
		if !windowStarted(before.Journal) {
			hr.pr.say(h.Host, "an earlier apply stopped before its window (nothing in force changed); its journal is archived")
		}
		if _, err := hr.stream(ctx, "clear", hr.helper("clear", p.Paths.StateDir), nil); err != nil {
			return hr.end(Failed, StateAsWas, "archive the earlier journal: "+err.Error())
		}
	}
	if len(h.Blockers) > 0 {
		return hr.end(Refused, StateAsWas, "blocked in the plan: "+strings.Join(h.Blockers, "; "))
	}
	if p.Window != nil && !hr.o.IgnoreWindow {
		nb, _ := time.Parse(time.RFC3339, p.Window.NotBefore)
		na, _ := time.Parse(time.RFC3339, p.Window.NotAfter)
		if now := hr.o.Now(); now.Before(nb) || now.After(na) {
			return hr.end(Refused, StateAsWas, fmt.Sprintf("outside the plan's window %s to %s (now %s); wait for it or use --ignore-window", p.Window.NotBefore, p.Window.NotAfter, now.UTC().Format(time.RFC3339)))
		}
	}
	observed := plans.Fingerprinted(before, p.ReadKeys())
	if fp := plans.Fingerprint(observed); fp != h.Fingerprint {
		now := plans.Replan(p, before)
		if now.Action == plans.ActionNone {
			hr.res.After = before
			return hr.end(Unchanged, StateAsPlanned, "already as planned")
		}
		drift := plans.Diff(h.Facts, observed)
		if !towardPlan(p, drift) {
			hr.res.Drift = drift
			return hr.end(Refused, StateAsWas, fmt.Sprintf("the plan is stale: %d fact(s) changed since it was made (%s); make a new plan", len(drift), driftText(drift)))
		}
		// Only planned sysctls moved, and to their planned values (a global
		// key set through another host of the same machine): the rest of the
		// plan stands, without those steps.
		hr.pr.say(h.Host, "already at the planned value: %s", driftText(drift))
		h = now
		hr.h = now
	}
	if h.Action == plans.ActionNone {
		hr.res.After = before
		return hr.end(Unchanged, StateAsPlanned, "nothing to change")
	}

	script, err := buildScript(p, h, hr.o.Artifact)
	if err != nil {
		return hr.end(Refused, StateAsWas, err.Error())
	}
	if err := hr.stage(ctx, script); err != nil {
		return hr.end(Failed, StateAsWas, "stage: "+err.Error()+" (nothing in force changed)")
	}
	if ctx.Err() != nil {
		return hr.end(NotStarted, StateAsWas, "interrupted after staging, before its window (nothing in force changed)")
	}

	// From here on the host is in its window: it finishes or rolls back,
	// whatever happens to ctx (an interrupt stops other hosts, not this one).
	wctx := context.WithoutCancel(ctx)
	stopClock, werr := hr.runList(wctx, plans.PhaseWindow, listWindow)
	for _, s := range hr.res.Steps {
		if s.Kind == "restart" && s.Status == "done" {
			hr.res.Restarts++
		}
	}
	var after *plans.Facts
	if werr == nil {
		after, werr = hr.verify(wctx, before)
		if after != nil && stopClock > 0 && after.ClockNanos > stopClock {
			hr.res.WindowMillis = (after.ClockNanos - stopClock) / 1e6
		}
	}
	hr.res.After = after
	if werr == nil {
		hr.commit(wctx, Applied)
		return hr.end(Applied, StateAsPlanned, "")
	}
	if isConnLost(werr) {
		return hr.end(Failed, "unknown: the connection was lost inside the window; the journal on the host says where it stopped",
			"window: "+werr.Error())
	}
	hr.pr.say(h.Host, "window failed: %v; rolling back", werr)
	state, rerr := hr.rollback(wctx, before)
	if rerr != nil {
		return hr.end(Failed, state, "window: "+werr.Error()+"; rollback: "+rerr.Error())
	}
	hr.commit(wctx, RolledBack)
	return hr.end(RolledBack, StateAsWas, werr.Error())
}

// towardPlan reports whether every drifted fact is a planned sysctl that
// now holds its planned value.
func towardPlan(p *plans.Plan, drift []plans.Drift) bool {
	if len(drift) == 0 {
		return false
	}
	for _, d := range drift {
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
	return strings.Join(parts, "; ")
}

func windowStarted(journal string) bool {
	for _, l := range strings.Split(journal, "\n") {
		if f := strings.Fields(l); len(f) >= 3 && f[1] == "start" && (f[2] == listWindow || f[2] == listRollback) {
			return true
		}
	}
	return false
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

func (hr *hostRun) helper(args ...string) string {
	return Command(append([]string{"sh", "-c", applyScript, "relayctl"}, args...)...)
}

func (hr *hostRun) stage(ctx context.Context, s *hostScript) error {
	// Headers and files stream from the one copy of each in memory: a
	// release is megabytes, and many hosts stage at once.
	var parts []io.Reader
	names := make([]string, 0, len(s.files))
	for n := range s.files {
		if n != stagedManifest {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	names = append(names, stagedManifest) // last, so every file it names is there
	for _, n := range names {
		parts = append(parts, strings.NewReader(fmt.Sprintf("FILE %s %d\n", n, len(s.files[n]))), bytes.NewReader(s.files[n]))
	}
	parts = append(parts, strings.NewReader("END\n"))
	_, err := hr.stream(ctx, plans.PhaseStage, hr.helper("stage", hr.p.Paths.StateDir), io.MultiReader(parts...))
	return err
}

// runList runs a staged step list and returns the host clock at the moment
// the relay was stopped.
func (hr *hostRun) runList(ctx context.Context, phase, list string) (int64, error) {
	return hr.stream(ctx, phase, hr.helper("run", hr.p.Paths.StateDir, list), nil)
}

// stream runs apply.sh and turns its progress lines into step records.
func (hr *hostRun) stream(ctx context.Context, phase, cmd string, stdin io.Reader) (int64, error) {
	pr, pw := io.Pipe()
	var stderr bytes.Buffer
	done := make(chan error, 1)
	go func() {
		err := hr.r.Run(ctx, cmd, stdin, pw, &stderr)
		pw.CloseWithError(err)
		done <- err
	}()
	var clock int64
	var failMsg string
	sc := bufio.NewScanner(pr)
	for sc.Scan() {
		f := strings.SplitN(sc.Text(), " ", 3)
		switch f[0] {
		case "STEP":
			key := ""
			if len(f) > 2 {
				key = f[2]
			}
			hr.pr.say(hr.h.Host, "[%s] %s %s", phase, f[1], key)
		case "DONE":
			hr.record(phase, f[1], "", "done", "")
		case "FAIL":
			if len(f) > 2 {
				failMsg = f[2]
			}
			hr.record(phase, f[1], "", "failed", failMsg)
		case "CLOCK":
			if len(f) > 1 {
				clock, _ = strconv.ParseInt(f[1], 10, 64)
			}
		}
	}
	io.Copy(io.Discard, pr)
	err := <-done
	if failMsg != "" {
		return clock, errors.New(failMsg)
	}
	if err != nil {
		var ee *ExitError
		if errors.As(err, &ee) {
			return clock, fmt.Errorf("%s: %s", phase, strings.TrimSpace(stderr.String()+" "+ee.Error()))
		}
		return clock, &connLost{err}
	}
	return clock, nil
}

// connLost is a transport failure (not a remote exit status): inside the
// window it means nobody knows how far the host got but its journal.
type connLost struct{ err error }

func (e *connLost) Error() string { return "connection lost: " + e.err.Error() }
func (e *connLost) Unwrap() error { return e.err }

func isConnLost(err error) bool {
	var c *connLost
	return errors.As(err, &c)
}

// verify reads the host back until it matches the plan or time runs out.
func (hr *hostRun) verify(ctx context.Context, before *plans.Facts) (*plans.Facts, error) {
	deadline := time.Now().Add(hr.o.VerifyTimeout) // a real clock: Now may be a test's fixed one
	for {
		after, err := hr.observe(ctx)
		if err != nil {
			return nil, &connLost{err}
		}
		checks := PlannedChecks(hr.p, hr.h, before, after)
		if allOK(checks) || time.Now().After(deadline) {
			hr.res.Verify = checks
			if bad := failed(checks); bad != "" {
				hr.record(plans.PhaseVerify, "read-back", "", "failed", bad)
				return after, errors.New("read-back: " + bad)
			}
			hr.record(plans.PhaseVerify, "read-back", "", "done", "")
			return after, nil
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// PlannedChecks compares a host read back after the window with the plan.
func PlannedChecks(p *plans.Plan, h *plans.HostPlan, before, after *plans.Facts) []Check {
	var c []Check
	add := func(what, want, got string) { c = append(c, Check{What: what, Want: want, Got: got, OK: want == got}) }
	add("relay running", "true", strconv.FormatBool(after.Service.Running))
	if h.Restart && before != nil && before.Service.Running {
		got := "same pid " + strconv.Itoa(after.Service.PID)
		if after.Service.PID != before.Service.PID {
			got = "new pid"
		}
		add("relay restarted", "new pid", got)
	}
	add("release "+p.Paths.Current, p.Relay.Version, after.Release.Current)
	for _, s := range p.Sysctl {
		add("sysctl "+s.Key, s.Value, tune.Normalize(after.Sysctls[s.Key].Value))
	}
	add("relay config "+h.Config.Path, "as planned", sameText(after.Config.Exists, after.Config.Content, h.Config.Planned))
	if len(p.Sysctl) > 0 || h.DropIn.Exists {
		dropIn := plans.FileFact{}
		for _, cf := range after.SysctlFiles {
			if cf.Path == h.DropIn.Path {
				dropIn = plans.FileFact{Exists: true, Content: cf.Content}
			}
		}
		add("sysctl drop-in "+h.DropIn.Path, "as planned", sameText(dropIn.Exists, dropIn.Content, h.DropIn.Planned))
	}
	rb := "no socket"
	if after.Socket.Found {
		rb = strconv.FormatUint(after.Socket.Rcvbuf, 10)
	}
	add(fmt.Sprintf("ss rb on udp/%d", p.Relay.Port), strconv.Itoa(h.Readback.Expected), rb)
	if st := after.RelayStatus; st != nil && st.Read {
		add("relay /status so_rcvbuf_effective", strconv.Itoa(h.Readback.Expected), strconv.Itoa(st.SORcvbufEffective))
		add("relay /status version", p.Relay.Version, st.Version)
	}
	return c
}

func sameText(exists bool, got, want string) string {
	switch {
	case !exists && want == "":
		return "as planned"
	case !exists:
		return "absent"
	case got == want:
		return "as planned"
	}
	return "differs"
}

func allOK(c []Check) bool { return failed(c) == "" }

func failed(c []Check) string {
	var bad []string
	for _, x := range c {
		if !x.OK {
			bad = append(bad, fmt.Sprintf("%s: got %s, want %s", x.What, x.Got, x.Want))
		}
	}
	return strings.Join(bad, "; ")
}

// rollback restores the previous state and verifies it. It returns the
// host's state in words when that is not "as it was".
func (hr *hostRun) rollback(ctx context.Context, before *plans.Facts) (string, error) {
	if _, err := hr.runList(ctx, "rollback", listRollback); err != nil {
		if isConnLost(err) {
			return "unknown: the connection was lost during rollback; see the journal on the host", err
		}
		// Continue to read back: say exactly what the host looks like.
		after, oerr := hr.observe(ctx)
		if oerr != nil {
			return "unknown: rollback failed and the host could not be read back", err
		}
		hr.res.After = after
		return "in between: " + failed(previousChecks(hr.p, hr.h, before, after)), err
	}
	for _, s := range hr.res.Steps {
		if s.Phase == "rollback" && s.Kind == "restart" && s.Status == "done" {
			hr.res.Restarts++
		}
	}
	deadline := time.Now().Add(hr.o.VerifyTimeout) // a real clock: Now may be a test's fixed one
	for {
		after, err := hr.observe(ctx)
		if err != nil {
			return "unknown: the host could not be read back after rollback", &connLost{err}
		}
		checks := previousChecks(hr.p, hr.h, before, after)
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

// previousChecks compares a host after rollback with what it was.
func previousChecks(p *plans.Plan, h *plans.HostPlan, before, after *plans.Facts) []Check {
	var c []Check
	add := func(what, want, got string) {
		c = append(c, Check{What: "rollback: " + what, Want: want, Got: got, OK: want == got})
	}
	add("relay running", strconv.FormatBool(before.Service.Running), strconv.FormatBool(after.Service.Running))
	add("release link", before.Release.CurrentRaw, after.Release.CurrentRaw)
	for _, s := range p.Sysctl {
		add("sysctl "+s.Key, tune.Normalize(before.Sysctls[s.Key].Value), tune.Normalize(after.Sysctls[s.Key].Value))
	}
	if before.Socket.Found {
		add(fmt.Sprintf("ss rb on udp/%d", p.Relay.Port), strconv.FormatUint(before.Socket.Rcvbuf, 10), strconv.FormatUint(after.Socket.Rcvbuf, 10))
	}
	return c
}

// commit files the journal and the host's receipt on the host.
func (hr *hostRun) commit(ctx context.Context, out Outcome) {
	hr.res.Outcome = out
	hr.res.RoundTrips = hr.r.count() + 1
	body, err := receiptJSON(hr.p, hr.res)
	if err != nil {
		hr.pr.say(hr.h.Host, "receipt: %v", err)
		return
	}
	name := receiptName(hr.p, hr.o.Now())
	if _, err := hr.stream(ctx, "commit", hr.helper("commit", hr.p.Paths.StateDir, name, strings.ReplaceAll(string(out), " ", "-")), bytes.NewReader(body)); err != nil {
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
