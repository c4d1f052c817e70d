package rollout_test

// Unit tests of the apply engine's logic (canary, fleet stop, outcomes,
// rollback, locks, journals, drift, re-derivation) against in-process
// simulated hosts (rollouttest.Sim) behind the typed Host interface. The
// real scripts are proven against lab hosts in cmd/relayctl/lab_test.go.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/relayctl/relayctl/plans"
	"github.com/relayctl/relayctl/relay/capability"
	"github.com/relayctl/relayctl/rollout"
	"github.com/relayctl/relayctl/rollout/rollouttest"
)

const fakeSpec = `name: fake
hosts: [%s]
sysctl:
  net.core.rmem_max: 8388608
relay:
  so_rcvbuf: 4194304
  release: {version: 1.8.0, artifact: relayd}
  service:
    manager: command
    start: [/opt/relay/bin/relay-service, start]
    stop: [/opt/relay/bin/relay-service, stop]
    pid_file: /opt/relay/run/relayd.pid
%s`

var artifact = []byte("abc")

const artifactSHA = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"

// fleet makes n simulated hosts and a plan for them, made as relayctl plan
// makes it.
func fleet(t *testing.T, n int, extra string) (rollouttest.Dialer, *plans.Plan, []*rollouttest.Sim) {
	t.Helper()
	var sims []*rollouttest.Sim
	for i := 1; i <= n; i++ {
		sims = append(sims, rollouttest.NewSim(fmt.Sprintf("h%d", i)))
	}
	d, p := fleetOf(t, sims, extra)
	return d, p, sims
}

// fleetOf is fleet's plan for hosts as they are.
func fleetOf(t *testing.T, sims []*rollouttest.Sim, extra string) (rollouttest.Dialer, *plans.Plan) {
	t.Helper()
	var names []string
	d := rollouttest.Dialer{}
	var facts []*plans.Facts
	for _, s := range sims {
		names = append(names, s.Name)
		d[s.Name] = s
		facts = append(facts, s.Facts())
	}
	spec, err := plans.ParseSpec("fake.yaml", []byte(fmt.Sprintf(fakeSpec, strings.Join(names, ", "), extra)))
	if err != nil {
		t.Fatal(err)
	}
	p, err := plans.Make(plans.Input{Spec: spec, Facts: facts, Artifact: plans.Artifact{SHA256: artifactSHA, Size: 3, VersionFrom: capability.FromNone}, Steps: rollout.Steps})
	if err != nil {
		t.Fatal(err)
	}
	return d, reload(t, p)
}

// checked is p through rollout.CheckPlan, as apply takes a plan.
func checked(t *testing.T, p *plans.Plan) rollout.Checked {
	t.Helper()
	c, err := rollout.CheckPlan(p)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// reload writes a plan and loads it back, as apply reads a plan file.
func reload(t *testing.T, p *plans.Plan) *plans.Plan {
	t.Helper()
	body, err := p.JSON()
	if err != nil {
		t.Fatal(err)
	}
	q, err := plans.Load("x.plan", body)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

func applyFake(t *testing.T, ctx context.Context, d rollout.HostDialer, p *plans.Plan, parallel int) *rollout.Report {
	t.Helper()
	rep, err := rollout.Apply(ctx, d, checked(t, p), rollout.ApplyOptions{Parallel: parallel, Artifact: artifact, VerifyTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func outcomes(rep *rollout.Report) string {
	var s []string
	for _, h := range rep.Hosts {
		s = append(s, h.Host+"="+string(h.Outcome))
	}
	return strings.Join(s, " ")
}

func kinds(ops []rollout.Op) []string {
	var k []string
	for _, o := range ops {
		if o.Kind != "step" {
			k = append(k, o.Kind)
		}
	}
	return k
}

func TestApplyFleetOutcomes(t *testing.T) {
	tests := []struct {
		name     string
		hosts    int
		parallel int
		setup    func([]*rollouttest.Sim, rollouttest.Dialer)
		want     string
	}{
		{"all apply", 3, 2, nil, "h1=applied h2=applied h3=applied"},
		{"canary fails: nobody else starts", 3, 2, func(s []*rollouttest.Sim, _ rollouttest.Dialer) { s[0].IgnoreRB = true }, "h1=rolled back h2=not started h3=not started"},
		{"first failure stops new hosts", 4, 1, func(s []*rollouttest.Sim, _ rollouttest.Dialer) { s[1].IgnoreRB = true }, "h1=applied h2=rolled back h3=not started h4=not started"},
		{"unreachable is not failed", 2, 1, func(_ []*rollouttest.Sim, d rollouttest.Dialer) { delete(d, "h1") }, "h1=unreachable h2=not started"},
		{"lock held elsewhere", 1, 1, func(s []*rollouttest.Sim, _ rollouttest.Dialer) { s[0].LockBusy = true }, "h1=refused"},
		{"connection lost in the window", 1, 1, func(s []*rollouttest.Sim, _ rollouttest.Dialer) { s[0].DropIn = "restart" }, "h1=applied"},
		{"connection lost in the window, its process too", 1, 1, func(s []*rollouttest.Sim, _ rollouttest.Dialer) { s[0].DropIn, s[0].WindowDies = "restart", true }, "h1=applied"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, p, sims := fleet(t, tt.hosts, "")
			if tt.setup != nil {
				tt.setup(sims, d)
			}
			rep := applyFake(t, context.Background(), d, p, tt.parallel)
			if got := outcomes(rep); got != tt.want {
				t.Errorf("got %s, want %s", got, tt.want)
				for _, h := range rep.Hosts {
					t.Logf("%s: %s", h.Host, h.Reason)
				}
			}
			for i, h := range rep.Hosts {
				if h.Outcome == rollout.Applied && (sims[i].Restarts != 1 || h.Restarts != 1) {
					t.Errorf("%s applied with %d restarts on the host (%d counted), want exactly 1", h.Host, sims[i].Restarts, h.Restarts)
				}
				if h.Outcome == rollout.RolledBack && (h.State != rollout.StateAsWas || sims[i].Link != "/opt/relay/releases/1.7.0" || sims[i].Sysctls["net.core.rmem_max"] != "212992") {
					t.Errorf("%s rolled back but state %q, link %s, rmem_max %s", h.Host, h.State, sims[i].Link, sims[i].Sysctls["net.core.rmem_max"])
				}
			}
		})
	}
}

// The window's steps run in the plan's order, each its primitives; the
// keep behind them is refused (the host's own read-back did not hold), and
// the rollback undoes them last first, with the one extra restart after
// every file is back.
func TestApplyWindowAndRollbackOrder(t *testing.T) {
	d, p, sims := fleet(t, 1, "")
	sims[0].IgnoreRB = true
	rep := applyFake(t, context.Background(), d, p, 1)
	if rep.Hosts[0].Outcome != rollout.RolledBack {
		t.Fatalf("got %s: %s", rep.Hosts[0].Outcome, rep.Hosts[0].Reason)
	}
	got := strings.Join(kinds(sims[0].Ops), " ")
	want := "lock begin dir dir dir dir dir file-ok file-ok file-ok file-ok link-ok exec-ok keep place-release keep keep backup backup backup-link release-sum " +
		"detach sysctl rename rename link restart verdict " +
		"verdict restore-link restore restore sysctl restart " +
		"commit unlock"
	if got != want {
		t.Errorf("primitives:\n got %s\nwant %s", got, want)
	}
	if sims[0].Restarts != 2 || rep.Hosts[0].Restarts != 2 {
		t.Errorf("restarts: host %d, counted %d; want the window's and the rollback's", sims[0].Restarts, rep.Hosts[0].Restarts)
	}
}

// A step that fails keeps the host's own words, under the step's name; a
// window that fails before its restart rolls back without restarting.
func TestApplyFailedStepKeepsHostError(t *testing.T) {
	d, p, sims := fleet(t, 1, "")
	sims[0].FailOp = "place-release"
	sims[0].FailMsg = "cp: error writing '/opt/relay/releases/1.8.0.relayctl-new/relayd': No space left on device"
	rep := applyFake(t, context.Background(), d, p, 1)
	h := rep.Hosts[0]
	if h.Outcome != rollout.Failed || h.State != rollout.StateAsWas {
		t.Errorf("got %s (%s), want failed as it was", h.Outcome, h.State)
	}
	if want := "stage: place release: cp: error writing '/opt/relay/releases/1.8.0.relayctl-new/relayd': No space left on device (nothing in force changed)"; h.Reason != want {
		t.Errorf("reason:\n got %q\nwant %q", h.Reason, want)
	}
	last := h.Steps[len(h.Steps)-1]
	if last.Status != "failed" || last.Kind != rollout.KindPlaceRelease || !strings.HasPrefix(last.Title, "place release: 1.8.0") {
		t.Errorf("last step record: %+v", last)
	}

	d, p, sims = fleet(t, 1, "")
	sims[0].FailOp = "link"
	sims[0].FailMsg = "ln: failed to create symbolic link: Read-only file system"
	rep = applyFake(t, context.Background(), d, p, 1)
	if h := rep.Hosts[0]; h.Outcome != rollout.RolledBack || sims[0].Restarts != 0 || !strings.Contains(h.Reason, "window: switch release: ln: failed") {
		t.Errorf("got %s (%s) with %d restarts; want rolled back without a restart", h.Outcome, h.Reason, sims[0].Restarts)
	}
	if sims[0].Sysctls["net.core.rmem_max"] != "212992" {
		t.Errorf("rmem_max left at %s after rollback", sims[0].Sysctls["net.core.rmem_max"])
	}
}

// A run whose connection is lost once the host has carried out its
// window's batch to the end (its read-back held, the keep, the receipt
// filed, the journal with it) reads the host again, checks it itself and
// takes it as applied by the host: the journal it would have gone on from
// is gone with the receipt. It called the host failed, the journal "not
// with a receipt of this run".
func TestConnectionLostAfterTheWindowsBatchFiled(t *testing.T) {
	d, p, sims := fleet(t, 1, "")
	sims[0].CrashAfter = "commit"
	rep := applyFake(t, context.Background(), d, p, 1)
	h := rep.Hosts[0]
	if h.Outcome != rollout.Applied || h.State != rollout.StateAsPlanned || h.Recovery != rollout.RecoveryCompletedByHost || sims[0].Restarts != 1 {
		t.Fatalf("got %s, %s, recovery %q, %d restarts: %s; want applied as planned, completed by the host, one restart", h.Outcome, h.State, h.Recovery, sims[0].Restarts, h.Reason)
	}
	if len(sims[0].Receipts) != 1 {
		t.Errorf("%d receipts on the host, want the one the window's batch filed", len(sims[0].Receipts))
	}
}

// A run that loses its host inside the window and cannot reach it again
// says the host ends the window by itself, and that its journal will say
// how; it attempts no rollback blind. The host, meanwhile, did end it.
func TestApplyLostConnectionSaysJournal(t *testing.T) {
	d, p, sims := fleet(t, 1, "")
	sims[0].DropIn = "restart"
	rep, err := rollout.Apply(context.Background(), d, checked(t, p), rollout.ApplyOptions{Artifact: artifact, VerifyTimeout: 300 * time.Millisecond, Reconnects: -1})
	if err != nil {
		t.Fatal(err)
	}
	if h := rep.Hosts[0]; !strings.Contains(h.State, "the host ends its window by itself") || !strings.Contains(h.State, "journal") || h.Restarts != 0 || h.Next != rollout.NextResume {
		t.Errorf("got state %q, %d restarts, next %q; want the host's own end and its journal named, no rollback attempted blind, and --resume", h.State, h.Restarts, h.Next)
	}
	for _, o := range sims[0].Ops {
		if o.Kind == "restore" {
			t.Error("rolled back over a lost connection without knowing the host's state")
		}
	}
	if e := sims[0].WindowEnd(); e == nil || e.Verdict != rollout.EndKept || e.By != rollout.ByHost {
		t.Errorf("the host's window ended %+v, want kept by the host", e)
	}
}

// A run that loses its host inside the window dials it again and goes on
// from what the host did by itself: kept when its read-back held, rolled
// back when it did not; either way the one run converges.
func TestApplyLostConnectionResyncs(t *testing.T) {
	for _, bad := range []bool{false, true} {
		d, p, sims := fleet(t, 1, "")
		sims[0].DropIn, sims[0].IgnoreRB = "restart", bad
		rep := applyFake(t, context.Background(), d, p, 1)
		h := rep.Hosts[0]
		want, recovery, state := rollout.Applied, rollout.RecoveryCompletedByHost, rollout.StateAsPlanned
		if bad {
			want, recovery, state = rollout.RolledBack, rollout.RecoveryRolledBackByHost, rollout.StateAsWas
		}
		if h.Outcome != want || h.Recovery != recovery || h.State != state || h.Restarts != sims[0].Restarts {
			t.Errorf("bad release %v: got %s (%s), recovery %q, %d restarts: %s; want %s, %q, the window's restart counted", bad, h.Outcome, h.State, h.Recovery, h.Restarts, h.Reason, want, recovery)
		}
		if sims[0].Journal != "" || sims[0].Owner != "" {
			t.Errorf("bad release %v: the host keeps a journal %q or a lock owner %q", bad, sims[0].Journal, sims[0].Owner)
		}
		if !bad && !asPlanned(sims[0]) || bad && !asWas(sims[0]) {
			t.Errorf("bad release %v: the host is in between: rb %d, link %s", bad, sims[0].RB, sims[0].Link)
		}
	}
}

func TestApplyStaleAndAlreadyApplied(t *testing.T) {
	d, p, sims := fleet(t, 2, "")
	sims[0].Sysctls["net.core.rmem_default"] = "425984"
	rep := applyFake(t, context.Background(), d, p, 1)
	h := rep.Hosts[0]
	if h.Outcome != rollout.Refused || len(h.Drift) != 1 || h.Drift[0].Name != "sysctl net.core.rmem_default" || h.Drift[0].Observed != "425984" {
		t.Errorf("got %s drift %+v; want refused with rmem_default drifted to 425984", h.Outcome, h.Drift)
	}
	if sims[0].Restarts != 0 {
		t.Error("a stale host was restarted")
	}

	d, p, sims = fleet(t, 1, "")
	applyFake(t, context.Background(), d, p, 1)
	rep = applyFake(t, context.Background(), d, p, 1)
	if rep.Hosts[0].Outcome != rollout.Unchanged || sims[0].Restarts != 1 {
		t.Errorf("second apply: got %s with %d restarts in all, want unchanged and still 1", rep.Hosts[0].Outcome, sims[0].Restarts)
	}
}

// A global key set through another host of the same machine (containers,
// or the lab) is a drift toward the plan, not a stale plan.
func TestApplyDriftTowardPlan(t *testing.T) {
	d, p, sims := fleet(t, 1, "")
	sims[0].Sysctls["net.core.rmem_max"] = "8388608"
	rep := applyFake(t, context.Background(), d, p, 1)
	if h := rep.Hosts[0]; h.Outcome != rollout.Applied || sims[0].Restarts != 1 {
		t.Fatalf("got %s (%s) with %d restarts, want applied with one", h.Outcome, h.Reason, sims[0].Restarts)
	}
	for _, o := range sims[0].Ops {
		if o.Kind == "sysctl" {
			t.Errorf("the window still set a key that already holds its planned value: %v", o.Args)
		}
	}
	// Toward another value is stale.
	d, p, sims = fleet(t, 1, "")
	sims[0].Sysctls["net.core.rmem_max"] = "4194304"
	if rep := applyFake(t, context.Background(), d, p, 1); rep.Hosts[0].Outcome != rollout.Refused {
		t.Errorf("rmem_max moved elsewhere: got %s, want refused", rep.Hosts[0].Outcome)
	}
}

func TestApplyRefusesOutsideWindow(t *testing.T) {
	d, p, sims := fleet(t, 1, "window: {not_before: 2026-12-02T04:00:00Z, not_after: 2026-12-02T05:00:00Z}\n")
	for _, tt := range []struct {
		now    string
		ignore bool
		want   rollout.Outcome
	}{
		{"2026-12-02T03:59:59Z", false, rollout.Refused},
		{"2026-12-02T05:00:01Z", false, rollout.Refused},
		{"2026-12-02T03:00:00Z", true, rollout.Applied},
	} {
		now, _ := time.Parse(time.RFC3339, tt.now)
		rep, err := rollout.Apply(context.Background(), d, checked(t, p), rollout.ApplyOptions{Artifact: artifact, VerifyTimeout: 300 * time.Millisecond,
			Now: func() time.Time { return now }, IgnoreWindow: tt.ignore})
		if err != nil {
			t.Fatal(err)
		}
		h := rep.Hosts[0]
		if h.Outcome != tt.want {
			t.Errorf("at %s (ignore %v): got %s (%s), want %s", tt.now, tt.ignore, h.Outcome, h.Reason, tt.want)
		}
		if h.Outcome == rollout.Refused && (!strings.Contains(h.Reason, "outside the plan's window") || sims[0].Restarts != 0) {
			t.Errorf("at %s: reason %q, %d restarts; want the window named and no restart", tt.now, h.Reason, sims[0].Restarts)
		}
	}
}

func TestApplyInterruptFinishesWindow(t *testing.T) {
	d, p, sims := fleet(t, 3, "")
	sims[0].InWindow = make(chan struct{})
	sims[0].ReleaseIn = make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-sims[0].InWindow
		cancel() // SIGINT while the canary is in its window
		close(sims[0].ReleaseIn)
	}()
	rep := applyFake(t, ctx, d, p, 2)
	if got := outcomes(rep); got != "h1=applied h2=not started h3=not started" {
		t.Errorf("got %s, want the canary to finish its window and nobody else to start", got)
	}
	if !strings.Contains(rep.Hosts[1].Reason, "interrupted") {
		t.Errorf("reason: got %q, want interrupted", rep.Hosts[1].Reason)
	}
}

// A plan edited after it was made, checksum recomputed, is refused before
// any host is dialled when the edit contradicts its recorded spec, and
// after observing (nothing changed) when only the host shows it.
func TestApplyRefusesEditedPlan(t *testing.T) {
	tests := []struct {
		name    string
		edit    func(p *plans.Plan)
		dialled bool
		want    string
	}{
		{"extra sysctl step", func(p *plans.Plan) {
			h := p.Hosts[0]
			h.Steps = append(h.Steps[:5:5], append([]plans.Step{{Phase: plans.PhaseWindow, Kind: rollout.KindSetSysctl, Key: "kernel.core_pattern", Value: "|/tmp/x",
				Title: "set sysctl: kernel.core_pattern = |/tmp/x in /proc/sys, read back"}}, h.Steps[5:]...)...)
		}, false, `step 6 is "set sysctl: kernel.core_pattern`},
		{"release ..", func(p *plans.Plan) { p.Relay.Version = ".." }, false, `relay.version is ".."`},
		// The artifact records no version: a plan claiming its marker was
		// read would take the review's warning away.
		{"version checked, it says", func(p *plans.Plan) { p.Relay.VersionFrom = capability.FromMarker }, false,
			`the plan says release 1.8.0's version was read from marker, its artifact's is "" from none`},
		{"version_from missing", func(p *plans.Plan) { p.Relay.VersionFrom = "" }, false, `relay.version_from is "", want one of`},
		{"reviewed config swapped", func(p *plans.Plan) { p.Hosts[0].File(plans.RoleRelayConfig).SHA256 = strings.Repeat("0", 64) }, true, "relay config /etc/relay/relayd.env: the plan says written with sha256 0000"},
		{"no restart reviewed", func(p *plans.Plan) {
			h := p.Hosts[0]
			h.Restart = false
			var keep []plans.Step
			for _, s := range h.Steps {
				if s.Kind != rollout.KindRestart {
					keep = append(keep, s)
				}
			}
			h.Steps = keep
		}, true, "restart: the plan says false, derived true"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, p, sims := fleet(t, 1, "")
			tt.edit(p)
			p = reload(t, p)
			var rep *rollout.Report
			c, err := rollout.CheckPlan(p)
			if err == nil {
				rep, err = rollout.Apply(context.Background(), d, c, rollout.ApplyOptions{Artifact: artifact, VerifyTimeout: 300 * time.Millisecond})
			}
			if !tt.dialled {
				if !errors.Is(err, plans.ErrPlanEdited) || !strings.Contains(err.Error(), tt.want) {
					t.Errorf("got %v, want ErrPlanEdited naming %q", err, tt.want)
				}
				if len(sims[0].Ops) != 0 {
					t.Errorf("the host got %d primitives", len(sims[0].Ops))
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			h := rep.Hosts[0]
			if h.Outcome != rollout.Refused || !strings.Contains(h.Reason, tt.want) {
				t.Errorf("got %s (%s), want refused naming %q", h.Outcome, h.Reason, tt.want)
			}
			// Nothing but its receipt filed: the run is on record there.
			for _, o := range sims[0].Ops {
				if o.Kind != "clear" && o.Kind != "lock" && o.Kind != "unlock" && o.Kind != "record" {
					t.Errorf("a refused host got primitive %s", o.Kind)
				}
			}
			if n := len(sims[0].Receipts); n != 1 {
				t.Errorf("a refused host has %d receipts, want its run's", n)
			}
		})
	}
}

// The drain gate's states: players leave before the deadline (the window
// goes on), or the deadline comes with players still there and the policy
// decides: abort refuses, skip leaves the host for later, force restarts
// and says how many players were cut. no_new_lobbies closes the relay to
// new lobbies while waiting, and opens it again if the host does not go on.
func TestApplyDrainGate(t *testing.T) {
	const drain = "drain: {max_players: 0, deadline: 1s, poll: 100ms, on_deadline: %s, no_new_lobbies: true}\n"
	tests := []struct {
		name     string
		policy   string
		players  []int
		want     rollout.Outcome
		cut      int
		reopened bool
	}{
		{"players leave", "abort", []int{16, 16, 8, 0}, rollout.Applied, 0, false},
		{"abort at the deadline", "abort", []int{16}, rollout.Refused, -1, true},
		{"skip at the deadline", "skip", []int{16}, rollout.Skipped, -1, true},
		{"force at the deadline", "force", []int{16}, rollout.Applied, 16, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, p, sims := fleet(t, 1, fmt.Sprintf(drain, tt.policy))
			sims[0].Players = tt.players
			rep := applyFake(t, context.Background(), d, p, 1)
			h := rep.Hosts[0]
			if h.Outcome != tt.want {
				t.Fatalf("got %s (%s), want %s", h.Outcome, h.Reason, tt.want)
			}
			switch {
			case tt.cut < 0 && (sims[0].Restarts != 0 || h.PlayersCut != nil):
				t.Errorf("the host was restarted (%d) or reports players cut (%v)", sims[0].Restarts, h.PlayersCut)
			case tt.cut >= 0 && (h.PlayersCut == nil || *h.PlayersCut != tt.cut):
				t.Errorf("players cut: got %v, want %d", h.PlayersCut, tt.cut)
			}
			var verbs []string
			for _, o := range sims[0].Ops {
				if o.Kind == "relay-drain" {
					verbs = append(verbs, o.Args[2])
				}
			}
			want := "POST"
			if tt.reopened {
				want = "POST DELETE"
			}
			if strings.Join(verbs, " ") != want {
				t.Errorf("no-new-lobbies calls: got %v, want %s", verbs, want)
			}
			if tt.want != rollout.Applied && !strings.Contains(h.Reason, "16 players in 2 lobbies after 1s") {
				t.Errorf("reason %q does not say who was still there", h.Reason)
			}
		})
	}
}

// batchLog is a host that notes the kinds of each Run call: one a round
// trip.
type batchLog struct {
	rollout.Host
	batches *[]string
}

func (h batchLog) Run(ctx context.Context, ops []rollout.Op, each func(int, rollout.Result) error) error {
	*h.batches = append(*h.batches, strings.Join(kinds(ops), " "))
	return h.Host.Run(ctx, ops, each)
}

// A full apply of a host that lacks the release is three round trips:
// lock and observe; the stage with the release's bytes and the files' (no
// offer first: observe saw the store without them); the window, with the
// host's own read-back inside it and, since it held, the keep, the receipt
// and the unlock behind it (docs/bench-apply.md, "Round trips").
func TestFullApplyIsThreeRoundTrips(t *testing.T) {
	d, p, _ := fleet(t, 1, "")
	var batches []string
	for name, h := range d {
		d[name] = batchLog{h, &batches}
	}
	rep := applyFake(t, context.Background(), d, p, 1)
	h := rep.Hosts[0]
	if h.Outcome != rollout.Applied || h.RoundTrips != 3 || len(batches) != 3 {
		t.Fatalf("%s, %d round trips in the receipt; batches:\n%s\nwant applied in 3", h.Outcome, h.RoundTrips, strings.Join(batches, "\n"))
	}
	for i, want := range []string{"lock observe", "begin ", "detach "} {
		if !strings.HasPrefix(batches[i], want) {
			t.Errorf("batch %d: %s; want it to begin %q", i+1, batches[i], want)
		}
	}
	if !strings.Contains(batches[1], "keep place-release") || !strings.HasSuffix(batches[2], "restart read-back verdict commit unlock") {
		t.Errorf("batches:\n%s\nwant the release in the stage, the read-back in the window, the receipt with the keep", strings.Join(batches, "\n"))
	}
}

// relayctl checks the reading a host judged its own window on: where the
// host held it (and kept it, filed its receipt and unlocked in the
// window's batch) but relayctl's checks of the same reading do not, the
// receipt is taken back (reopen) and the window rolled back, and the
// receipt says why.
func TestHostReadBackRelayctlDisagreesWith(t *testing.T) {
	d, p, sims := fleet(t, 1, "")
	sims[0].IgnoreRB = true    // the relay's socket never gets its rb
	sims[0].HoldsAnyway = true // but the host's own read-back says it held
	rep := applyFake(t, context.Background(), d, p, 1)
	h := rep.Hosts[0]
	if h.Outcome != rollout.RolledBack || !strings.Contains(h.Reason, "relayctl's check of the same reading does not") {
		t.Fatalf("got %s: %s; want rolled back, relayctl's check named", h.Outcome, h.Reason)
	}
	got := strings.Join(kinds(sims[0].Ops), " ")
	if !strings.Contains(got, "restart verdict commit unlock lock reopen detach ") || !strings.HasSuffix(got, "commit unlock") {
		t.Errorf("primitives: %s; want the batch's keep and commit, then lock, reopen, a rollback and its commit", got)
	}
	if sims[0].Link != "/opt/relay/releases/1.7.0" || len(sims[0].Receipts) != 1 || !strings.Contains(sims[0].Receipts[0].Body, `"outcome": "rolled back"`) {
		t.Errorf("link %s, receipts %d; want back on 1.7.0 with one receipt, rolled back", sims[0].Link, len(sims[0].Receipts))
	}
}

// A connection lost after the window's batch kept the window but before
// it filed the run (in its prune, say): relayctl, back on the host, finds
// the window kept and its journal open, reads the host back itself and
// files the run. It rolled the kept window back: the host's verdict from
// the lost session stood without its reading.
func TestConnectionLostAfterTheWindowsKeep(t *testing.T) {
	d, p, sims := fleet(t, 1, "")
	sims[0].DropIn, sims[0].WindowDies = "commit", true // the session, cut, does no more of its batch
	rep := applyFake(t, context.Background(), d, p, 1)
	h := rep.Hosts[0]
	if h.Outcome != rollout.Applied || h.State != rollout.StateAsPlanned || sims[0].Restarts != 1 {
		t.Fatalf("got %s, %s, recovery %q, %d restarts: %s; want applied as planned, one restart", h.Outcome, h.State, h.Recovery, sims[0].Restarts, h.Reason)
	}
	if len(sims[0].Receipts) != 1 {
		t.Errorf("%d receipts on the host, want one", len(sims[0].Receipts))
	}
}
