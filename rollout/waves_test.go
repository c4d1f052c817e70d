package rollout_test

// Unit tests of the fleet: waves, failure budgets, the ledger and resume,
// against simulated hosts (rollouttest.Sim). The same behaviours against
// lab hosts are in cmd/relayctl/lab_fleet_test.go.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/relayctl/relayctl/plans"
	"github.com/relayctl/relayctl/rollout"
	"github.com/relayctl/relayctl/rollout/rollouttest"
)

// events records when each host starts (is dialled) and ends (is closed).
type events struct {
	mu  sync.Mutex
	log []string
}

func (e *events) add(s string) { e.mu.Lock(); e.log = append(e.log, s); e.mu.Unlock() }

type recordingDialer struct {
	d  rollouttest.Dialer
	ev *events
}

func (r recordingDialer) DialHost(ctx context.Context, name string) (rollout.Host, error) {
	r.ev.add("start " + name)
	h, err := r.d.DialHost(ctx, name)
	if err != nil {
		r.ev.add("end " + name)
		return nil, err
	}
	return closing{h, func() { r.ev.add("end " + name) }}, nil
}

// closing is a host that says when it is closed.
type closing struct {
	rollout.Host
	onClose func()
}

func (c closing) Close() error {
	c.onClose()
	return c.Host.Close()
}

func resolved(t *testing.T, waves, maxFail, maxUnreach string) *plans.Resolved {
	t.Helper()
	r := &plans.Rollout{MaxFailures: maxFail, MaxUnreachable: maxUnreach}
	if waves != "" {
		r.Waves = strings.Split(waves, ",")
	}
	res, err := r.Resolve()
	if err != nil {
		t.Fatal(err)
	}
	return &res
}

func applyWith(t *testing.T, ctx context.Context, d rollout.HostDialer, p *plans.Plan, o rollout.ApplyOptions) *rollout.Report {
	t.Helper()
	o.Artifact, o.VerifyTimeout = artifact, 300*time.Millisecond
	rep, err := rollout.Apply(ctx, d, checked(t, p), o)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// Waves run in order, each only after every host of the one before has
// ended, with the sizes the plan's rollout gives its hosts.
func TestWavesInOrder(t *testing.T) {
	d, p, _ := fleet(t, 7, "rollout: {waves: [1, 2, 50%]}\n")
	ev := &events{}
	rep := applyWith(t, context.Background(), recordingDialer{d, ev}, p, rollout.ApplyOptions{Parallel: 3})
	if !rep.Succeeded() {
		t.Fatalf("outcomes: %s", outcomes(rep))
	}
	var got []string
	for _, w := range rep.Waves {
		got = append(got, strings.Join(w.Hosts, ","))
	}
	// 1, 2, then 50% of the 4 left (2), 50% of 2 (1), then the last 1.
	if want := "h1|h2,h3|h4,h5|h6|h7"; strings.Join(got, "|") != want {
		t.Errorf("waves: got %s, want %s", strings.Join(got, "|"), want)
	}
	if sizes := plans.SplitWaves([]plans.Amount{{N: 1}, {N: 2}, {N: 50, Percent: true}}, 7); fmt.Sprint(sizes) != "[1 2 2 1 1]" {
		t.Errorf("the plan's counts: %v", sizes)
	}
	wave := map[string]int{}
	for _, w := range rep.Waves {
		for _, h := range w.Hosts {
			wave[h] = w.Wave
		}
	}
	for _, h := range rep.Hosts {
		if h.Wave != wave[h.Host] {
			t.Errorf("%s: wave %d in its result, %d in the waves", h.Host, h.Wave, wave[h.Host])
		}
	}
	// No host of wave k starts before every host of wave k-1 has ended.
	ended := map[string]int{}
	for i, e := range ev.log {
		if h, ok := strings.CutPrefix(e, "end "); ok {
			ended[h] = i
		}
	}
	for i, e := range ev.log {
		h, ok := strings.CutPrefix(e, "start ")
		if !ok {
			continue
		}
		for other, w := range wave {
			if w < wave[h] && ended[other] > i {
				t.Errorf("%s (wave %d) started before %s (wave %d) ended: %v", h, wave[h], other, w, ev.log)
			}
		}
	}
}

// A wave's canary is a host that changes: h1, already as planned, goes
// after h2, which runs the window first and alone, with the soak (on the
// code before, h1 was the canary: it ended unchanged, and h2 went in the
// next wave with no canary ahead of it).
func TestCanaryIsAHostThatChanges(t *testing.T) {
	_, p1, sims := fleet(t, 1, "")
	applyWith(t, context.Background(), rollouttest.Dialer{"h1": sims[0]}, p1, rollout.ApplyOptions{})
	sims = append(sims, rollouttest.NewSim("h2"), rollouttest.NewSim("h3"))
	d, p := fleetOf(t, sims, "")
	if got := p.Hosts[0].Action; got != plans.ActionNone {
		t.Fatalf("h1 planned %s, want none: the test needs a host already as planned first", got)
	}
	load(sims, quiet, quiet)
	rep := applySoak(t, d, p, fastSoak(nil))
	var got []string
	for _, w := range rep.Waves {
		got = append(got, strings.Join(w.Hosts, ","))
	}
	if want := "h2|h3,h1"; strings.Join(got, "|") != want {
		t.Errorf("waves: got %s, want %s", strings.Join(got, "|"), want)
	}
	if out := outcomes(rep); out != "h1=unchanged h2=applied h3=applied" {
		t.Errorf("outcomes: %s", out)
	}
	if s := rep.Hosts[1].Soak; s == nil {
		t.Error("h2, the canary, did not soak")
	}
}

// The budgets' edges, each as a fleet: exactly at a budget goes on, over
// it stops the wave's other hosts and every later wave, and a wave where
// nothing worked stops whatever the budget.
func TestFailureBudgets(t *testing.T) {
	rollBack := func(s *rollouttest.Sim, _ rollouttest.Dialer) { s.IgnoreRB = true }
	refuse := func(s *rollouttest.Sim, _ rollouttest.Dialer) { s.LockBusy = true }
	unreachable := func(s *rollouttest.Sim, d rollouttest.Dialer) { delete(d, s.Name) }
	type fault func(*rollouttest.Sim, rollouttest.Dialer)
	tests := []struct {
		name                 string
		hosts                int
		waves, fail, unreach string
		faults               map[int]fault // by host index
		want                 string
		stopped              string // in rep.Stopped
	}{
		{"default: the canary fails, nobody else starts", 3, "", "", "", map[int]fault{0: rollBack},
			"h1=rolled back h2=not started h3=not started", "wave 1: 1 of its 1 hosts failed"},
		{"default: the first failure of the rest stops it", 4, "", "", "", map[int]fault{1: rollBack},
			"h1=applied h2=rolled back h3=not started h4=not started", "over its budget of 0 (max failures 0)"},
		{"exactly at the budget goes on", 6, "1,3", "1", "", map[int]fault{2: rollBack},
			"h1=applied h2=applied h3=rolled back h4=applied h5=applied h6=applied", ""},
		{"over the budget stops the wave and the next", 7, "1,3", "1", "", map[int]fault{1: rollBack, 2: refuse},
			"h1=applied h2=rolled back h3=refused h4=not started h5=not started h6=not started h7=not started",
			"wave 2: 2 of its 3 hosts failed, rolled back or were refused, over its budget of 1 (max failures 1)"},
		{"a percentage exactly at the budget goes on", 5, "1,2", "50%", "", map[int]fault{1: refuse},
			"h1=applied h2=refused h3=applied h4=applied h5=applied", ""},
		{"a percentage over the budget stops", 5, "1,2", "49%", "", map[int]fault{1: refuse},
			"h1=applied h2=refused h3=not started h4=not started h5=not started", "over its budget of 0 (max failures 49%)"},
		{"a whole wave failing stops even at 100%", 5, "1,2", "100%", "", map[int]fault{1: rollBack, 2: refuse},
			"h1=applied h2=rolled back h3=refused h4=not started h5=not started", "wave 2: none of its 2 hosts applied"},
		{"unreachable has its own budget", 5, "1,2", "0", "1", map[int]fault{1: unreachable},
			"h1=applied h2=unreachable h3=applied h4=applied h5=applied", ""},
		{"over the unreachable budget stops", 5, "1,2", "1", "1", map[int]fault{1: unreachable, 2: unreachable},
			"h1=applied h2=unreachable h3=unreachable h4=not started h5=not started", "over its budget of 1 (max unreachable 1)"},
		{"unreachable does not spend the failure budget", 5, "1,2", "0", "1", map[int]fault{1: unreachable, 2: rollBack},
			"h1=applied h2=unreachable h3=rolled back h4=not started h5=not started", "max failures 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, p, sims := fleet(t, tt.hosts, "")
			for i, f := range tt.faults {
				f(sims[i], d)
			}
			rep := applyWith(t, context.Background(), d, p, rollout.ApplyOptions{Parallel: 1, Rollout: resolved(t, tt.waves, tt.fail, tt.unreach)})
			if got := outcomes(rep); got != tt.want {
				t.Errorf("got  %s\nwant %s", got, tt.want)
			}
			if !strings.Contains(rep.Stopped, tt.stopped) || (tt.stopped == "") != (rep.Stopped == "") {
				t.Errorf("stopped: got %q, want %q", rep.Stopped, tt.stopped)
			}
			for i, h := range rep.Hosts {
				if h.Outcome == rollout.NotStarted {
					if len(sims[i].Ops) != 0 {
						t.Errorf("%s not started but got %d primitives", h.Host, len(sims[i].Ops))
					}
					if !strings.Contains(h.Reason, "the rollout stopped before this host started: "+rep.Stopped) {
						t.Errorf("%s: reason %q", h.Host, h.Reason)
					}
				}
			}
		})
	}
}

// ledgers collects every ledger saved.
type ledgers struct {
	mu    sync.Mutex
	saved [][]byte
}

func (l *ledgers) save(b []byte) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.saved = append(l.saved, append([]byte(nil), b...))
	return nil
}

func (l *ledgers) last(t *testing.T, p *plans.Plan) *rollout.Ledger {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.saved) == 0 {
		t.Fatal("no ledger saved")
	}
	led, err := rollout.LoadLedger("x.plan.ledger.json", l.saved[len(l.saved)-1], p)
	if err != nil {
		t.Fatal(err)
	}
	return led
}

func ledgerOutcomes(l *rollout.Ledger) string {
	var s []string
	for _, h := range l.Hosts {
		s = append(s, h.Host+"="+h.Outcome)
	}
	return strings.Join(s, " ")
}

// The ledger names every host, those never started included, and a
// resume changes only the hosts it does not show applied or unchanged
// (those it checks are as planned: TestResumeDoesNotTrustAnEditedLedger).
func TestLedgerAndResumeAfterFailure(t *testing.T) {
	d, p, sims := fleet(t, 5, "")
	sims[2].IgnoreRB = true // h3 rolls back: the rest of its wave stops
	var led ledgers
	rep := applyWith(t, context.Background(), d, p, rollout.ApplyOptions{Parallel: 1, SaveLedger: led.save})
	if got := outcomes(rep); got != "h1=applied h2=applied h3=rolled back h4=not started h5=not started" {
		t.Fatalf("first run: %s", got)
	}
	l := led.last(t, p)
	if got := ledgerOutcomes(l); got != "h1=applied h2=applied h3=rolled back h4=not started h5=not started" {
		t.Errorf("ledger: %s", got)
	}
	if l.Run != 1 || l.Hosts[3].Reason == "" || l.Hosts[2].Wave != 2 || l.Hosts[0].Wave != 1 {
		t.Errorf("ledger: run %d, %+v", l.Run, l.Hosts)
	}
	// Saved as each host started and ended: the save after h1 started
	// shows it in progress.
	first, _ := rollout.LoadLedger("x", led.saved[1], p)
	if first.Hosts[0].Outcome != rollout.InProgress {
		t.Errorf("second save: h1 is %q, want in progress", first.Hosts[0].Outcome)
	}
	if got := fmt.Sprint(l.Todo()); got != "[2 3 4]" {
		t.Errorf("todo: %s", got)
	}

	// The fault is fixed; resume.
	sims[2].IgnoreRB = false
	before := []int{len(sims[0].Ops), len(sims[1].Ops)}
	var led2 ledgers
	rep = applyWith(t, context.Background(), d, p, rollout.ApplyOptions{Parallel: 2, Resume: l, SaveLedger: led2.save})
	if got := outcomes(rep); got != "h1=applied h2=applied h3=applied h4=applied h5=applied" || !rep.Succeeded() || rep.Run != 2 {
		t.Errorf("resumed: %s (run %d)", got, rep.Run)
	}
	for i := range 2 {
		// Checked (the lock and an observe), not changed.
		if got := strings.Join(kinds(sims[i].Ops[before[i]:]), " "); got != "lock unlock" || sims[i].Restarts != 1 {
			t.Errorf("%s was touched again: %s, %d restarts; want only its lock taken to observe it", sims[i].Name, got, sims[i].Restarts)
		}
		if rep.Hosts[i].FromLedger != "applied in run 1" {
			t.Errorf("%s: from ledger %q", sims[i].Name, rep.Hosts[i].FromLedger)
		}
	}
	// The resumed run has its own waves over the hosts left: a canary again.
	if len(rep.Waves) != 2 || strings.Join(rep.Waves[0].Hosts, ",") != "h3" {
		t.Errorf("resumed waves: %+v", rep.Waves)
	}
	l2 := led2.last(t, p)
	if l2.Run != 2 || l2.Hosts[0].Run != 1 || l2.Hosts[2].Run != 2 || len(l2.Todo()) != 0 {
		t.Errorf("second ledger: %+v", l2)
	}
}

// A ledger is a file: one edited to show a host applied does not make a
// resume skip it. The host is checked, found as it was, and applied.
func TestResumeDoesNotTrustAnEditedLedger(t *testing.T) {
	d, p, sims := fleet(t, 3, "")
	sims[1].IgnoreRB = true
	var led ledgers
	applyWith(t, context.Background(), d, p, rollout.ApplyOptions{Parallel: 1, SaveLedger: led.save})
	l := led.last(t, p)
	l.Hosts[1].Outcome, l.Hosts[2].Outcome = string(rollout.Applied), string(rollout.Applied) // the edit
	sims[1].IgnoreRB = false
	rep := applyWith(t, context.Background(), d, p, rollout.ApplyOptions{Parallel: 2, Resume: l})
	if got := outcomes(rep); got != "h1=applied h2=applied h3=applied" || !rep.Succeeded() {
		t.Fatalf("resumed: %s", got)
	}
	for _, s := range sims {
		if s.RB != 8388608 || s.Restarts < 1 {
			t.Errorf("%s: rb %d, %d restarts: skipped on the ledger's word", s.Name, s.RB, s.Restarts)
		}
	}
	if rep.Hosts[1].FromLedger != "" || rep.Hosts[0].FromLedger == "" {
		t.Errorf("from ledger: h1 %q, h2 %q; want h1 confirmed, h2 applied in this run", rep.Hosts[0].FromLedger, rep.Hosts[1].FromLedger)
	}
}

// A host the ledger shows applied whose sysctl has since been set back is
// refused by the resume with what the plan would still do there, not with
// the facts the applying run itself changed.
func TestResumeNamesWhatMovedOnAnAppliedHost(t *testing.T) {
	d, p, sims := fleet(t, 2, "")
	var led ledgers
	applyWith(t, context.Background(), d, p, rollout.ApplyOptions{Parallel: 1, SaveLedger: led.save})
	sims[0].Sysctls["net.core.rmem_max"] = "212992" // someone sets it back
	rep := applyWith(t, context.Background(), d, p, rollout.ApplyOptions{Parallel: 2, Resume: led.last(t, p)})
	h := rep.Hosts[0]
	if h.Outcome != rollout.Refused || !strings.Contains(h.Reason, "no longer as planned: the plan would still set sysctl: net.core.rmem_max = 8388608") || strings.Contains(h.Reason, "stale") {
		t.Errorf("h1: %s: %s", h.Outcome, h.Reason)
	}
	if rep.Hosts[1].Outcome != rollout.Applied || rep.Hosts[1].FromLedger == "" {
		t.Errorf("h2: %s (%q)", rep.Hosts[1].Outcome, rep.Hosts[1].FromLedger)
	}
}

// An interrupt leaves the ledger with the hosts in flight finished and the
// rest not started; the resume finishes the fleet.
func TestResumeAfterInterrupt(t *testing.T) {
	d, p, sims := fleet(t, 3, "")
	sims[0].InWindow = make(chan struct{})
	sims[0].ReleaseIn = make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-sims[0].InWindow
		cancel()
		close(sims[0].ReleaseIn)
	}()
	var led ledgers
	applyWith(t, ctx, d, p, rollout.ApplyOptions{Parallel: 2, SaveLedger: led.save})
	l := led.last(t, p)
	if got := ledgerOutcomes(l); got != "h1=applied h2=not started h3=not started" || !strings.Contains(l.Hosts[1].Reason, "interrupted") {
		t.Fatalf("ledger after the interrupt: %s (%q)", got, l.Hosts[1].Reason)
	}
	rep := applyWith(t, context.Background(), d, p, rollout.ApplyOptions{Parallel: 2, Resume: l})
	if got := outcomes(rep); got != "h1=applied h2=applied h3=applied" || sims[0].Restarts != 1 {
		t.Errorf("resumed: %s; canary restarts %d", got, sims[0].Restarts)
	}
}

// A ledger written for another plan (another checksum) is refused, by
// the loader and by the engine.
func TestLedgerOfAnotherPlan(t *testing.T) {
	_, p, _ := fleet(t, 2, "")
	_, other, _ := fleet(t, 2, "rollout: {waves: [2]}\n")
	body, _ := rollout.NewLedger(other).JSON()
	if _, err := rollout.LoadLedger("x.plan.ledger.json", body, p); !errors.Is(err, rollout.ErrLedgerOtherPlan) || !strings.Contains(err.Error(), other.Checksum) {
		t.Errorf("load: got %v", err)
	}
	d, p, sims := fleet(t, 2, "")
	if _, err := rollout.Apply(context.Background(), d, checked(t, p), rollout.ApplyOptions{Artifact: artifact, Resume: rollout.NewLedger(other)}); !errors.Is(err, rollout.ErrLedgerOtherPlan) {
		t.Errorf("apply: got %v", err)
	}
	if len(sims[0].Ops) != 0 {
		t.Error("a host was touched")
	}
	for _, bad := range []string{`{"format_version": 2}`, `{"format_version": 1, "plan_checksum": "` + p.Checksum + `", "run": 1, "hosts": []}`, `{"x": 1}`} {
		if _, err := rollout.LoadLedger("x", []byte(bad), p); err == nil {
			t.Errorf("ledger %s: no error", bad)
		}
	}
}

// The ledger file is JSON with one host a line, and the book's saves
// (re-encoding only the host that changed) give the same bytes as
// encoding the whole ledger.
func TestLedgerFile(t *testing.T) {
	d, p, sims := fleet(t, 3, "")
	sims[1].IgnoreRB = true
	var led ledgers
	applyWith(t, context.Background(), d, p, rollout.ApplyOptions{Parallel: 1, SaveLedger: led.save})
	for i, b := range led.saved {
		l, err := rollout.LoadLedger("x", b, p)
		if err != nil {
			t.Fatalf("save %d: %v\n%s", i, err, b)
		}
		again, _ := l.JSON()
		if string(again) != string(b) {
			t.Errorf("save %d differs from the ledger encoded whole:\n%s\n---\n%s", i, b, again)
		}
	}
	last := string(led.saved[len(led.saved)-1])
	if !strings.Contains(last, "\n    {\"host\":\"h2\",\"outcome\":\"rolled back\"") || strings.Count(last, "\n") != 12 {
		t.Errorf("ledger file:\n%s", last)
	}
}

// A release whose relay dies a moment after it starts: read back once as
// planned, it counts as applied when one reading is enough (StableFor 0),
// and the canary protects nothing; held for StableFor, the canary sees it
// die and is rolled back, the next host is not started, and the receipt
// and the reason quote the relay's last words from its log
// (relay.service.log) as soon as the read-back finds it gone, not at the
// end of the read-back's time. (On the code before, the reason named only
// the checks, after the whole read-back's time, and the receipt had no
// words of the relay.)
func TestARelayThatDiesAfterItStarts(t *testing.T) {
	d, p, sims := fleet(t, 2, "    log: /opt/relay/log/relayd.log\n")
	for _, s := range sims {
		s.Crashes, s.RelayLog = "1.8.0", "relayd started\n"
	}
	rep := applyWith(t, context.Background(), d, p, rollout.ApplyOptions{})
	if out := outcomes(rep); out != "h1=applied h2=applied" {
		t.Errorf("one reading: %s, want both applied (what --stable-for 0 lets through)", out)
	}

	d, p, sims = fleet(t, 2, "    log: /opt/relay/log/relayd.log\n")
	for _, s := range sims {
		s.Crashes, s.RelayLog = "1.8.0", "relayd started\n"
	}
	began := time.Now()
	rep = applyWith(t, context.Background(), d, p, rollout.ApplyOptions{StableFor: 3 * time.Second})
	h := rep.Hosts[0]
	if out := outcomes(rep); out != "h1=rolled back h2=not started" {
		t.Fatalf("held 3s: %s, want the canary rolled back (%s)", out, h.Reason)
	}
	if !strings.Contains(h.Reason, "the relay read back as planned (pid ") || !strings.HasSuffix(h.Reason, "; its log ends: relayd started | relayd 1.8.0: fatal error: lobby table corrupt") {
		t.Errorf("reason: %s", h.Reason)
	}
	if !strings.Contains(h.RelayLog, "relayd 1.8.0: fatal error: lobby table corrupt") {
		t.Errorf("receipt's relay log: %q", h.RelayLog)
	}
	if took := time.Since(began); took > 2*time.Second {
		t.Errorf("the canary took %v: its read-back waited out its time for a relay that had died", took)
	}
	if sims[1].Restarts != 0 {
		t.Error("h2 was restarted after the canary failed")
	}

	// Without relay.service.log there are no last words to read: nothing
	// asks for them.
	d, p, sims = fleet(t, 1, "")
	sims[0].Crashes = "1.8.0"
	rep = applyWith(t, context.Background(), d, p, rollout.ApplyOptions{StableFor: time.Second})
	if h := rep.Hosts[0]; h.Outcome != rollout.RolledBack || h.RelayLog != "" || strings.Contains(h.Reason, "its log") {
		t.Errorf("no log: %s, %q, %q", h.Outcome, h.Reason, h.RelayLog)
	}
	for _, o := range sims[0].Ops {
		if o.Kind == "relay-log" {
			t.Error("relay-log asked for without a log")
		}
	}
}
