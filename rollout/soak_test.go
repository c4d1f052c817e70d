package rollout_test

// The soak against Sims whose drop counters move with the release their
// relay runs (rollouttest.SimLoad): verdicts, what each does to the host
// and to the fleet, and what the receipt keeps. The real scripts, a real
// relayd and the bench's players are in cmd/relayctl/lab_soak_test.go.

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/relayctl/relayctl/plans"
	"github.com/relayctl/relayctl/rollout"
	"github.com/relayctl/relayctl/rollout/rollouttest"
)

// fastSoak is the default soak in milliseconds: a unit test's.
func fastSoak(edit func(*plans.Soak)) plans.Soak {
	s := plans.DefaultSoak
	s.Duration, s.Interval, s.Baseline = 400*time.Millisecond, 50*time.Millisecond, 200*time.Millisecond
	if edit != nil {
		edit(&s)
	}
	return s
}

func applySoak(t *testing.T, d rollout.HostDialer, p *plans.Plan, s plans.Soak, waves ...plans.Amount) *rollout.Report {
	t.Helper()
	if len(waves) == 0 {
		waves = plans.DefaultWaves
	}
	r := plans.Resolved{Waves: waves, Recover: plans.RecoverComplete, Soak: &s}
	rep, err := rollout.Apply(context.Background(), d, checked(t, p), rollout.ApplyOptions{Parallel: 1, Artifact: artifact, VerifyTimeout: 300 * time.Millisecond, Rollout: &r})
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// load gives every Sim the same traffic: old on release 1.7.0, new on 1.8.0.
func load(sims []*rollouttest.Sim, old, new *rollouttest.SimLoad) {
	for _, s := range sims {
		s.Load = map[string]*rollouttest.SimLoad{}
		if old != nil {
			o := *old
			s.Load["1.7.0"] = &o
		}
		if new != nil {
			n := *new
			s.Load["1.8.0"] = &n
		}
	}
}

var (
	quiet   = &rollouttest.SimLoad{Datagrams: 2000}
	dropper = &rollouttest.SimLoad{Datagrams: 2000, Drops: 400}
)

// A release that reads back as planned but drops under traffic is rolled
// back by its canary's soak, and no other host starts; the stop says
// which counters moved and by how much.
func TestSoakRegressionRollsBackTheCanaryAndStopsTheFleet(t *testing.T) {
	d, p, sims := fleet(t, 3, "")
	load(sims, quiet, dropper)
	rep := applySoak(t, d, p, fastSoak(nil))
	if got := outcomes(rep); got != "h1=rolled back h2=not started h3=not started" {
		t.Fatalf("got %s\n%s", got, rep.Stopped)
	}
	h := rep.Hosts[0]
	s := h.Soak
	if s == nil || s.Verdict != rollout.SoakRegression || s.Action != "rolled back" || s.Role != rollout.SoakRoleCanary {
		t.Fatalf("soak: %+v", s)
	}
	if s.Before == nil || s.Before.DropRate != 0 || s.Before.Traffic < 1000 || s.After == nil || s.After.DropRate < 200 || s.After.SSDrops == 0 {
		t.Errorf("rates: before %+v, after %+v; want 0 drops/s of 2000 datagrams/s, then about 400 drops/s", s.Before, s.After)
	}
	if s.After.RcvbufErrors != s.After.SSDrops || s.After.RelayRxDrops == nil || *s.After.RelayRxDrops != s.After.SSDrops || len(s.After.Disagreement) != 0 {
		t.Errorf("the counters do not agree: %+v", s.After)
	}
	// Certain early: drops over the allowed count for the whole soak.
	if s.Seconds >= s.Planned {
		t.Errorf("the soak ran its full %.1f s although the regression was certain early", s.Planned)
	}
	want := "canary h1: 0.0 drops/s before, "
	if !strings.HasPrefix(rep.Stopped, want) || !strings.Contains(rep.Stopped, " drops/s over the first ") ||
		!strings.Contains(rep.Stopped, "(ss d +"+thousandsOf(s.After.SSDrops)+", UdpRcvbufErrors +") || !strings.HasSuffix(rep.Stopped, ", over the 1.0 drops/s allowed: rolled back, rollout stopped") {
		t.Errorf("stopped: %q", rep.Stopped)
	}
	if !strings.HasPrefix(h.Reason, "soak: regression: 0.0 drops/s before") || h.State != rollout.StateAsWas {
		t.Errorf("h1: %s (%s)", h.Reason, h.State)
	}
	if sims[0].Link != "/opt/relay/releases/1.7.0" || sims[0].Restarts != 2 {
		t.Errorf("h1 runs %s after %d restarts; want 1.7.0 back after the window's restart and the rollback's", sims[0].Link, sims[0].Restarts)
	}
	// The soak read the counters with the light primitive, not observe.
	var samples, observes int
	for _, o := range sims[0].Ops {
		switch o.Kind {
		case "sample":
			samples++
		case "observe":
			observes++
		}
	}
	if samples < 3 {
		t.Errorf("%d samples; want the baseline's and the soak's", samples)
	}
	md := string(rollout.ReceiptMarkdown(p, rep))
	for _, w := range []string{"- Soak (canary): **regression**, rolled back:", "| soak |", "| UdpRcvbufErrors |"} {
		if !strings.Contains(md, w) {
			t.Errorf("the receipt has no %q:\n%s", w, md)
		}
	}
	if body, _ := rollout.ReceiptJSON(p, rep); !strings.Contains(string(body), `"verdict": "regression"`) || !strings.Contains(string(body), `"drops_per_s"`) {
		t.Errorf("the JSON receipt does not carry the soak:\n%s", body)
	}
}

// thousandsOf writes n as the recap does: 2,502.
func thousandsOf(n uint64) string {
	s := strconv.FormatUint(n, 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// A release that holds passes its soak and the fleet goes on; each
// wave's first host soaks, the others do not.
func TestSoakPassLetsTheFleetProceed(t *testing.T) {
	d, p, sims := fleet(t, 3, "")
	load(sims, quiet, quiet)
	rep := applySoak(t, d, p, fastSoak(nil))
	if got := outcomes(rep); got != "h1=applied h2=applied h3=applied" || rep.Stopped != "" {
		t.Fatalf("got %s, stopped %q", got, rep.Stopped)
	}
	if s := rep.Hosts[0].Soak; s == nil || s.Verdict != rollout.SoakPass || s.Action != "kept" || !strings.Contains(s.Why, "0.0 drops/s before, 0.0 drops/s over the 0.4 s soak") {
		t.Errorf("h1's soak: %+v", s)
	}
	if s := rep.Hosts[1].Soak; s == nil || s.Role != rollout.SoakRoleCanary {
		t.Errorf("h2, the canary of wave 2, did not soak: %+v", s)
	}
	if rep.Hosts[2].Soak != nil || sims[2].Samples != 0 {
		t.Errorf("h3 soaked (%d samples); only each wave's first host does", sims[2].Samples)
	}
	// With hosts: all, every host soaks.
	d, p, sims = fleet(t, 3, "")
	load(sims, quiet, quiet)
	rep = applySoak(t, d, p, fastSoak(func(s *plans.Soak) { s.Hosts = plans.SoakAll }))
	if s := rep.Hosts[2].Soak; s == nil || s.Role != rollout.SoakRoleHost || s.Verdict != rollout.SoakPass {
		t.Errorf("hosts: all: h3's soak %+v", s)
	}
}

// A host with no traffic is never a pass: "insufficient traffic", and
// no_traffic says what that does.
func TestSoakInsufficientTraffic(t *testing.T) {
	for _, tt := range []struct {
		policy, want, action string
		stops                bool
	}{
		{plans.SoakStop, "h1=applied h2=not started", "kept", true},
		{plans.SoakContinue, "h1=applied h2=applied", "kept", false},
		{plans.SoakRollback, "h1=rolled back h2=not started", "rolled back", true},
	} {
		d, p, sims := fleet(t, 2, "")
		load(sims, &rollouttest.SimLoad{Datagrams: 20}, &rollouttest.SimLoad{Datagrams: 20})
		rep := applySoak(t, d, p, fastSoak(func(s *plans.Soak) { s.NoTraffic = tt.policy; s.Hosts = plans.SoakCanary }), plans.Amount{N: 1})
		s := rep.Hosts[0].Soak
		if got := outcomes(rep); got != tt.want || s == nil || s.Verdict != rollout.SoakInsufficient || s.Action != tt.action {
			t.Errorf("%s: got %s, soak %+v", tt.policy, got, s)
			continue
		}
		if !strings.Contains(s.Why, "datagrams/s reached the relay over the 0 s soak, under the 100 needed to judge it") && !strings.Contains(s.Why, "under the 100 needed to judge it") {
			t.Errorf("%s: why %q", tt.policy, s.Why)
		}
		if stopped := rep.Stopped != ""; stopped != tt.stops || tt.stops && !strings.Contains(rep.Stopped, "canary h1: insufficient traffic in its soak") {
			t.Errorf("%s: stopped %q", tt.policy, rep.Stopped)
		}
	}
}

// The baseline decides how much is a regression: a relay that dropped
// before may drop up to max_drop_factor times as much after.
func TestSoakComparesWithTheBaseline(t *testing.T) {
	before := &rollouttest.SimLoad{Datagrams: 5000, Drops: 100}
	for _, tt := range []struct {
		after   float64
		verdict string
	}{{150, rollout.SoakPass}, {600, rollout.SoakRegression}} {
		d, p, sims := fleet(t, 1, "")
		load(sims, before, &rollouttest.SimLoad{Datagrams: 5000, Drops: tt.after})
		rep := applySoak(t, d, p, fastSoak(nil))
		s := rep.Hosts[0].Soak
		if s == nil || s.Verdict != tt.verdict || s.Allowed < 150 || s.Allowed > 250 {
			t.Errorf("%.0f drops/s after 100 before: %+v; want %s, allowing about 200", tt.after, s, tt.verdict)
		}
	}
}

// A regression with on_regression: keep leaves the release in place and
// still stops the rollout.
func TestSoakRegressionKept(t *testing.T) {
	d, p, sims := fleet(t, 2, "")
	load(sims, quiet, dropper)
	rep := applySoak(t, d, p, fastSoak(func(s *plans.Soak) { s.OnRegression = plans.SoakKeep }))
	if got := outcomes(rep); got != "h1=applied h2=not started" || !strings.HasSuffix(rep.Stopped, ": kept, rollout stopped") {
		t.Errorf("got %s, stopped %q", got, rep.Stopped)
	}
	if sims[0].Link != "/opt/relay/releases/1.8.0" {
		t.Errorf("h1 runs %s; want the kept release", sims[0].Link)
	}
}

// The players: a relay that loses most of its established players, and
// their traffic with them, over its soak regressed, whatever its drop
// counters say.
func TestSoakPlayersLost(t *testing.T) {
	d, p, sims := fleet(t, 1, "")
	lose := &rollouttest.SimLoad{Datagrams: 2000, Players: []int{100, 100, 90, 60, 30, 20}, Established: []int{100, 100, 90, 60, 30, 20},
		Forwarded: []float64{2000, 2000, 1800, 1200, 600, 400}}
	load(sims, quiet, lose)
	rep := applySoak(t, d, p, fastSoak(nil))
	s := rep.Hosts[0].Soak
	if s == nil || s.Verdict != rollout.SoakRegression || s.PlayersCounted != rollout.PlayersEstablished ||
		!strings.Contains(s.Why, "100 established players (that had played 5 s) at the soak's peak, 20 at its end: 80% gone, and their traffic with them (") ||
		!strings.Contains(s.Why, "% fell): over the 50% allowed") {
		t.Errorf("soak: %+v", s)
	}
}

// The attack of a stranger, on a fleet: players that join from the
// stranger's own addresses (a handshake each), never play and expire
// inside the soak. The relay's players fall from 182 to 32, its
// established players and its traffic do not: the canary passes and the
// fleet goes on.
func TestSoakPlayersThatJoinAndVanishAreNotLost(t *testing.T) {
	d, p, sims := fleet(t, 2, "")
	load(sims, quiet, &rollouttest.SimLoad{Datagrams: 2000, Players: []int{32, 182, 182, 120, 32}, Established: []int{32}})
	rep := applySoak(t, d, p, fastSoak(nil))
	s := rep.Hosts[0].Soak
	if got := outcomes(rep); got != "h1=applied h2=applied" || s == nil || s.Verdict != rollout.SoakPass || s.PlayersCounted != rollout.PlayersEstablished || *s.PlayersPeak != 32 {
		t.Errorf("got %s, soak %+v", got, s)
	}
}

// sample is a reading of a relay's socket 1 at second sec: its forwarded
// datagrams and players, established ones when est >= 0.
func sample(sec float64, forwarded uint64, players, est int) plans.DropCounters {
	rx, drops := forwarded+500, uint64(0)
	c := plans.DropCounters{SocketInode: 1, Sockets: 1, ClockNanos: 1e15 + int64(sec*1e9), InDatagrams: rx,
		RelayRxPackets: &rx, RelayRxDrops: &drops, RelayForwarded: &forwarded, Players: &players}
	if est >= 0 {
		c.PlayersEstablished = &est
	}
	return c
}

// The verdict on players lost, from samples: a loss counts only with the
// players' traffic, judged by the established players where the relay
// reports them and by all of them (said so) where it does not, and only
// where the traffic can be compared between two intervals.
func TestJudgeSamplesPlayersLost(t *testing.T) {
	cfg := plans.DefaultSoak
	cfg.Duration, cfg.Interval = 20*time.Second, 5*time.Second
	// 32 players at 60 datagrams/s, and strangers' players that come and go.
	steady := func(p func(i int) (int, int)) []plans.DropCounters {
		var out []plans.DropCounters
		for i := range 5 {
			n, est := p(i)
			out = append(out, sample(float64(5*i), uint64(i)*5*60*32, n, est))
		}
		return out
	}
	joinVanish := func(i int) (int, int) { return []int{32, 182, 182, 32, 32}[i], 32 }
	oldRelay := func(i int) (int, int) { n, _ := joinVanish(i); return n, -1 }
	var leaving []plans.DropCounters // 100 players playing, 80 leave: the traffic falls with them
	fwd := uint64(0)
	for i, n := range []int{100, 100, 100, 40, 20} {
		leaving = append(leaving, sample(float64(5*i), fwd, n, n))
		fwd += uint64(n) * 5 * 60
	}
	for _, tt := range []struct {
		name    string
		samples []plans.DropCounters
		verdict string
		why     string
	}{
		{"join and vanish, established", steady(joinVanish), rollout.SoakPass, ""},
		{"join and vanish, a relay without established players", steady(oldRelay), rollout.SoakPass,
			"; 182 players (the relay reports no established players: every member, a stranger's join too) at the soak's peak, 32 at its end: 82% gone, not counted as lost: their traffic held (1920 forwarded datagrams/s at the soak's busiest interval, 1920 over its last)"},
		{"players leave with their traffic", leaving, rollout.SoakRegression,
			"100 established players (that had played 5 s) at the soak's peak, 20 at its end: 80% gone, and their traffic with them (6000 forwarded datagrams/s at the soak's busiest interval, 2400 over its last: 60% fell): over the 50% allowed"},
		{"one interval", []plans.DropCounters{leaving[0], leaving[4]}, rollout.SoakPass,
			"; 100 established players (that had played 5 s) at the soak's peak, 20 at its end: 80% gone, not judged as lost: the relay's forwarded traffic could not be compared over two intervals of the soak"},
	} {
		r := rollout.JudgeSamples(cfg, nil, tt.samples)
		if r.Verdict != tt.verdict || !strings.Contains(r.Why, tt.why) {
			t.Errorf("%s: %s: %s; want %s saying %q", tt.name, r.Verdict, r.Why, tt.verdict, tt.why)
		}
	}
}

// Traffic is the players': a relay that reads only strangers' datagrams
// (joins that never complete, spoofed data) forwards nothing, and its
// canary is never a pass on them.
func TestSoakStrangersAreNoTraffic(t *testing.T) {
	d, p, sims := fleet(t, 1, "")
	load(sims, quiet, &rollouttest.SimLoad{Datagrams: 2000, Strangers: 2000})
	rep := applySoak(t, d, p, fastSoak(nil))
	if s := rep.Hosts[0].Soak; s == nil || s.Verdict != rollout.SoakInsufficient || !strings.Contains(s.Why, "0.0 datagrams/s forwarded for the relay's players over the") {
		t.Errorf("soak: %+v", s)
	}
}

// A relay that restarts during its soak (a crash under load, brought back
// by its manager) regressed: its counters started again from zero.
func TestSoakRelayRestarted(t *testing.T) {
	d, p, sims := fleet(t, 1, "")
	load(sims, quiet, quiet)
	sims[0].RestartAt = 6 // past the baseline's samples
	rep := applySoak(t, d, p, fastSoak(nil))
	s := rep.Hosts[0].Soak
	if s == nil || s.Verdict != rollout.SoakRegression || !strings.Contains(s.Why, "the relay's socket changed during the soak") || rep.Hosts[0].Outcome != rollout.RolledBack {
		t.Errorf("soak: %+v, outcome %s", s, rep.Hosts[0].Outcome)
	}
}

// Counters that disagree are a finding of their own, in the soak's span:
// drops on another socket of the namespace, a relay blind to some drops.
func TestSoakReportsDisagreement(t *testing.T) {
	d, p, sims := fleet(t, 1, "")
	load(sims, quiet, &rollouttest.SimLoad{Datagrams: 4000, OtherDrops: 300})
	rep := applySoak(t, d, p, fastSoak(nil))
	s := rep.Hosts[0].Soak
	if s == nil || s.Verdict != rollout.SoakPass || len(s.After.Disagreement) != 1 || !strings.Contains(s.After.Disagreement[0], "were dropped by another UDP socket of the relay's network namespace") {
		t.Fatalf("another socket's drops: %+v", s)
	}
	md := string(rollout.ReceiptMarkdown(p, rep))
	if !strings.Contains(md, "The counters disagree") {
		t.Errorf("the receipt does not say the counters disagree:\n%s", md)
	}
	d, p, sims = fleet(t, 1, "")
	load(sims, quiet, &rollouttest.SimLoad{Datagrams: 4000, Drops: 300, Unseen: 300})
	rep = applySoak(t, d, p, fastSoak(func(s *plans.Soak) { s.MaxDropRate = 1000 }))
	if s := rep.Hosts[0].Soak; s == nil || len(s.After.Disagreement) != 1 || !strings.Contains(s.After.Disagreement[0], "the relay did not see") {
		t.Errorf("a relay blind to its drops: %+v", s.After)
	}
}

// An interrupt during a soak cuts it short: judged on what was sampled,
// a pass cannot be claimed from part of it, and the rollout stops.
func TestSoakInterrupted(t *testing.T) {
	d, p, sims := fleet(t, 2, "")
	load(sims, quiet, quiet)
	ctx, cancel := context.WithCancel(context.Background())
	s := fastSoak(func(s *plans.Soak) { s.Duration = 3 * time.Second })
	r := plans.Resolved{Waves: plans.DefaultWaves, Recover: plans.RecoverComplete, Soak: &s}
	go func() {
		// The baseline takes about 200/50 samples; a few more and the soak
		// is under way.
		for sims[0].Sampled() < 8 {
			time.Sleep(10 * time.Millisecond)
		}
		cancel()
	}()
	start := time.Now()
	rep, err := rollout.Apply(ctx, d, checked(t, p), rollout.ApplyOptions{Parallel: 1, Artifact: artifact, VerifyTimeout: 300 * time.Millisecond, Rollout: &r})
	if err != nil {
		t.Fatal(err)
	}
	if time.Since(start) > 2500*time.Millisecond {
		t.Errorf("the interrupted soak ran on for %v", time.Since(start))
	}
	h := rep.Hosts[0]
	if h.Outcome != rollout.Applied || h.Soak == nil || h.Soak.Verdict != rollout.SoakUnknown || !strings.Contains(h.Soak.Why, "interrupted after") || rep.Hosts[1].Outcome != rollout.NotStarted {
		t.Errorf("h1 %s, soak %+v, h2 %s", h.Outcome, h.Soak, rep.Hosts[1].Outcome)
	}
}

// Staging does not soak, and a run without a soak samples nothing.
func TestNoSoakSamplesNothing(t *testing.T) {
	d, p, sims := fleet(t, 1, "")
	load(sims, quiet, dropper)
	rep := applyFake(t, context.Background(), d, p, 1)
	if rep.Hosts[0].Outcome != rollout.Applied || rep.Hosts[0].Soak != nil || sims[0].Samples != 0 {
		t.Errorf("without a soak: %s, %+v, %d samples", rep.Hosts[0].Outcome, rep.Hosts[0].Soak, sims[0].Samples)
	}
}

// A sample names a process whose network namespace the agent enters and
// an address it asks for /status: only a pid, a port and a loopback
// control address (or -) leave relayctl.
func TestSampleArgumentsAreChecked(t *testing.T) {
	for _, args := range [][]string{{"42", "7788", "127.0.0.1:7789"}, {"42", "7788", "-"}} {
		if err := (rollout.Op{Kind: "sample", Args: args}).Validate(); err != nil {
			t.Errorf("%q: %v", args, err)
		}
	}
	for _, args := range [][]string{
		{"0", "7788", "-"}, {"042", "7788", "-"}, {"-1", "7788", "-"}, {"42 43", "7788", "-"},
		{"42", "0", "-"}, {"42", "70000", "-"}, {"42", "7788", "0.0.0.0:7789"}, {"42", "7788", "127.0.0.1"}, {"42", "7788"},
	} {
		if err := (rollout.Op{Kind: "sample", Args: args}).Validate(); err == nil {
			t.Errorf("%q was accepted", args)
		}
	}
}
