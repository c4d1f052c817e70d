package main

// Lab tests of the soak after each canary, on real lab hosts (real sshd,
// real relayd in a network namespace of its own), with players from the
// bench sending to the relay during the soak, and the soak's counters
// cross-checked with the bench's own census of the same datagrams; and the
// soak under a stranger's join-and-vanish flood.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/relayctl/relayctl/internal/lab"
	"github.com/relayctl/relayctl/relay/bench"
	"github.com/relayctl/relayctl/rollout"
)

// The soak in these tests: 8 s sampled at its start and its end only (so
// nothing cuts it short and its span covers the bench's whole step), after
// a baseline of 2 s.
const labSoak = "rollout:\n  soak: {duration: 8s, interval: 8s, baseline: 2s}\n"

// smallBuffer is the mistaken release: relayd told to force a 2 KiB
// buffer (rb 4096, as planned and read back), far too small for the
// players' bursts.
func smallBuffer(s string) string {
	return strings.Replace(s, "  so_rcvbuf: 4194304\n", "  so_rcvbuf: 2048\n  so_rcvbuf_force: true\n", 1) + labSoak
}

func goodRelease(s string) string { return s + labSoak }

// benchIn runs one bench step of players against a lab host's relay, as a
// process of its own (bin, built without -race) inside the relay's network
// namespace: the players reach it on its loopback, and the namespace's
// counters are the relay's and the players' alone.
func benchIn(t *testing.T, bin string, h *lab.Host, players int, d time.Duration) *bench.Report {
	t.Helper()
	lobbyBase += 20
	cmd := exec.CommandContext(t.Context(), "nsenter", "--net=/run/netns/"+h.RelayNetns, bin, "bench",
		"--relay", "127.0.0.1:7788", "--control", "127.0.0.1:7789", "--players", fmt.Sprint(players), "--step-duration", d.String(),
		"--interval", "250ms", "--calibrate", "0", "--lobby-base", fmt.Sprint(lobbyBase), "--json")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var rep bench.Report
	if jerr := json.Unmarshal(out.Bytes(), &rep); jerr != nil || len(rep.Steps) != 1 {
		t.Errorf("bench: %v, report %v\nstdout:\n%s\nstderr:\n%s", err, jerr, out.Bytes(), errb.Bytes())
		return nil
	}
	return &rep
}

// lineWatch is an io.Writer that keeps what it is given and calls on for
// each line, as it comes.
type lineWatch struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	part string
	on   func(string)
}

func (w *lineWatch) Write(p []byte) (int, error) {
	w.mu.Lock()
	w.buf.Write(p)
	text := w.part + string(p)
	lines := strings.Split(text, "\n")
	w.part = lines[len(lines)-1]
	w.mu.Unlock()
	for _, l := range lines[:len(lines)-1] {
		w.on(l)
	}
	return len(p), nil
}

func (w *lineWatch) String() string { w.mu.Lock(); defer w.mu.Unlock(); return w.buf.String() }

// applyWithPlayers applies the plan with the bench's players sending to
// host h's relay from the moment its soak starts sampling, for d.
func (e *labEnv) applyWithPlayers(bin string, h *lab.Host, players int, d time.Duration, args ...string) (int, string, string, *bench.Report) {
	e.t.Helper()
	return e.applyWithPlayersAnd(bin, h, players, d, nil, args...)
}

// applyWithPlayersAnd is applyWithPlayers that also runs also, once, when
// the soak starts sampling (beside the bench).
func (e *labEnv) applyWithPlayersAnd(bin string, h *lab.Host, players int, d time.Duration, also func(), args ...string) (int, string, string, *bench.Report) {
	e.t.Helper()
	var once sync.Once
	var rep *bench.Report
	var wg sync.WaitGroup
	stderr := &lineWatch{on: func(l string) {
		if strings.HasPrefix(l, h.Name+": soak: sampling") {
			once.Do(func() {
				wg.Add(1)
				go func() { defer wg.Done(); rep = benchIn(e.t, bin, h, players, d) }()
				if also != nil {
					wg.Go(also)
				}
			})
		}
	}}
	var out bytes.Buffer
	full := append([]string{"relayctl", "apply", e.plan}, args...)
	full = append(full, "--ssh-config", e.lab.SSHConfig, "--known-hosts", e.lab.KnownHosts, "--identity", e.lab.Identity)
	code := run(full, strings.NewReader(""), &out, stderr)
	wg.Wait()
	return code, out.String(), stderr.String(), rep
}

// crossCheck holds the soak's counters against the bench's census of the
// same datagrams: every datagram no player received (the bench's lost in)
// was dropped at the relay's socket, which the socket's d, the namespace's
// RcvbufErrors and the relay's rx_drops all counted. The soak's span also
// covers the bench's join and flush, whose datagrams the census leaves
// out: the socket may have dropped a few of those too.
func crossCheck(t *testing.T, s *rollout.SoakResult, rep *bench.Report) {
	t.Helper()
	if rep == nil || s == nil || s.After == nil {
		t.Fatalf("no bench report (%v) or no soak span (%+v)", rep != nil, s)
	}
	st := rep.Steps[0]
	a := s.After
	t.Logf("census: lost in %d, lost out %d, sent %d, bench's own drops %d; soak: ss d +%d, RcvbufErrors +%d, InErrors +%d, rx_drops +%v over %.1f s, %.0f datagrams/s",
		st.LostIn, st.LostOut, st.Sent, st.BenchDrops, a.SSDrops, a.RcvbufErrors, a.InErrors, ptrText(a.RelayRxDrops), a.Seconds, a.Traffic)
	if !st.Census {
		t.Fatal("the bench kept no census")
	}
	slack := uint64(st.Players) * 4 // join rounds and the flush: a few datagrams a player
	if a.SSDrops < st.LostIn || a.SSDrops > st.LostIn+slack+a.SSDrops/20 {
		t.Errorf("the socket's d rose by %d over the soak, the bench lost %d datagrams on the way in: they should agree (within the join's %d and 5%%)", a.SSDrops, st.LostIn, slack)
	}
	if a.RelayRxDrops == nil || *a.RelayRxDrops+2 < a.SSDrops-a.SSDrops/20 || *a.RelayRxDrops > a.SSDrops {
		t.Errorf("rx_drops rose by %v, the socket's d by %d", ptrText(a.RelayRxDrops), a.SSDrops)
	}
	// The namespace is the relay's and the players': RcvbufErrors is the
	// relay's drops and the players' own.
	if a.RcvbufErrors < a.SSDrops || a.RcvbufErrors > a.SSDrops+st.BenchDrops+slack+a.SSDrops/20 {
		t.Errorf("RcvbufErrors rose by %d; the socket dropped %d and the players' sockets %d", a.RcvbufErrors, a.SSDrops, st.BenchDrops)
	}
	if st.BenchDrops == 0 && len(a.Disagreement) != 0 {
		t.Errorf("the counters agree, the soak says they do not: %v", a.Disagreement)
	}
}

func ptrText(p *uint64) string {
	if p == nil {
		return "-"
	}
	return fmt.Sprint(*p)
}

// A release that reads its rb back as planned but drops under the
// players' load regresses in its canary's soak: the canary is rolled
// back, the fleet stops after it, and the recap names the counters and
// their numbers, which the bench's census confirms.
func TestLabSoakRollsBackARegressionAndStopsTheFleet(t *testing.T) {
	bin := buildRelayctl(t)
	e := startLab(t, []lab.HostOptions{{}, {}}, smallBuffer)
	if code, out, errs := e.relayctl("plan", e.spec, "--out", e.plan, "--detailed-exitcode"); code != 2 {
		t.Fatalf("plan: exit %d\n%s\n%s", code, out, errs)
	}
	md, _ := os.ReadFile(e.plan + ".md")
	if !strings.Contains(string(md), "- Soak: the first host of each wave (its canary) is sampled for 8s") || !strings.Contains(string(md), "rb 4096") {
		t.Errorf("the review does not show the soak and the small rb:\n%s", md)
	}
	h1 := e.lab.Hosts[0]
	pid, _, _ := e.socket(h1)
	code, out, errs, rep := e.applyWithPlayers(bin, h1, 32, 4*time.Second)
	if code != 1 || !strings.Contains(out, "rolled back") || !strings.Contains(out, "not started") {
		t.Fatalf("apply: exit %d, want lab-1 rolled back and lab-2 not started\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	t.Logf("recap:\n%s", out)
	rc := receiptOf2(t, e.plan, 0)
	s := rc.Soak
	if s == nil || s.Verdict != rollout.SoakRegression || s.Action != "rolled back" || rc.RBAfter != 212992 {
		t.Fatalf("lab-1's receipt: soak %+v, rb after %d; want a regression, rolled back to rb 212992\nstderr:\n%s", s, rc.RBAfter, errs)
	}
	// The read-back passed: the release read back rb 4096 as planned.
	readBack := false
	for _, c := range rc.Verify {
		if c.What == "ss rb on udp/7788" {
			readBack = c.OK && c.Got == "4096"
		}
	}
	if !readBack {
		t.Errorf("the release did not read back rb 4096 as planned: %+v", rc.Verify)
	}
	want := fmt.Sprintf("stopped: canary lab-1: 0.0 drops/s before, %.1f drops/s over the 8 s soak (%s), over the 1.0 drops/s allowed: rolled back, rollout stopped",
		s.After.DropRate, s.After.Counts())
	if !strings.Contains(out, want) {
		t.Errorf("the recap does not say %q:\n%s", want, out)
	}
	if s.After.SSDrops < 100 || s.After.DropRate <= 1 {
		t.Errorf("the soak counted %d drops (%.1f/s); a 4 KiB buffer under 32 players drops far more", s.After.SSDrops, s.After.DropRate)
	}
	crossCheck(t, s, rep)
	// Rolled back: relayd 1.7.0 serves again, on the default buffer.
	if p, rb, _ := e.socket(h1); p == pid || rb != 212992 {
		t.Errorf("after the rollback: pid %d (was %d), rb %d; want a restarted 1.7.0 on rb 212992", p, pid, rb)
	}
	if rc2 := receiptOf2(t, e.plan, 1); rc2.Outcome != rollout.NotStarted {
		t.Errorf("lab-2: %s, want not started", rc2.Outcome)
	}
}

// A release that holds passes its canary's soak under the same players
// and the fleet goes on; the next wave's canary has no traffic at all and
// gets "insufficient traffic", never a pass.
func TestLabSoakPassesAGoodReleaseAndNeverPassesNoTraffic(t *testing.T) {
	bin := buildRelayctl(t)
	e := startLab(t, []lab.HostOptions{{}, {}}, goodRelease)
	if code, out, errs := e.relayctl("plan", e.spec, "--out", e.plan, "--detailed-exitcode"); code != 2 {
		t.Fatalf("plan: exit %d\n%s\n%s", code, out, errs)
	}
	code, out, errs, rep := e.applyWithPlayers(bin, e.lab.Hosts[0], 32, 4*time.Second)
	rc1, rc2 := receiptOf2(t, e.plan, 0), receiptOf2(t, e.plan, 1)
	if code != 0 || rc1.Outcome != rollout.Applied || rc2.Outcome != rollout.Applied {
		t.Fatalf("apply: exit %d, lab-1 %s, lab-2 %s; want both applied\nstdout:\n%s\nstderr:\n%s", code, rc1.Outcome, rc2.Outcome, out, errs)
	}
	if s := rc1.Soak; s == nil || s.Verdict != rollout.SoakPass || s.After.SSDrops != 0 || s.After.Traffic < 500 {
		t.Errorf("lab-1's soak: %+v; want a pass with no drops under the players' traffic", s)
	}
	crossCheck(t, rc1.Soak, rep)
	s := rc2.Soak
	if s == nil || s.Verdict != rollout.SoakInsufficient || s.Action != "kept" || !strings.Contains(s.Why, "under the 100 needed to judge it") {
		t.Errorf("lab-2's soak without players: %+v; want insufficient traffic, kept", s)
	}
	if !strings.Contains(out, "lab-2: applied, soak: insufficient traffic:") || !strings.Contains(out, "stopped: canary lab-2: insufficient traffic in its soak") {
		t.Errorf("the recap does not tell lab-2's soak:\n%s", out)
	}
	// verify: every host as planned, its drops since this apply.
	code, vout, verrs := e.relayctl("verify", e.plan)
	if code != 0 || !strings.Contains(vout, "last apply") || !strings.Contains(vout, "within 1/s") {
		t.Errorf("verify: exit %d, want 0 with each host's drops since the last apply\n%s\n%s", code, vout, verrs)
	}
}

// verify reads each host's drop counters and their rate since the last
// apply from the host's own receipt, and exits 3 when a host drops more
// than the promise allows.
func TestLabVerifyReportsDropsSinceTheLastApply(t *testing.T) {
	bin := buildRelayctl(t)
	e := startLab(t, []lab.HostOptions{{}}, smallBuffer)
	if code, out, errs := e.relayctl("plan", e.spec, "--out", e.plan, "--detailed-exitcode"); code != 2 {
		t.Fatalf("plan: exit %d\n%s\n%s", code, out, errs)
	}
	// Applied without its soak, the mistaken release stays.
	if code, out, errs := e.relayctl("apply", e.plan, "--soak", "0"); code != 0 {
		t.Fatalf("apply --soak 0: exit %d\n%s\n%s", code, out, errs)
	}
	code, vout, _ := e.relayctl("verify", e.plan)
	if code != 0 {
		t.Errorf("verify with no players since the apply: exit %d, want 0\n%s", code, vout)
	}
	benchIn(t, bin, e.lab.Hosts[0], 32, 3*time.Second)
	code, vout, verrs := e.relayctl("verify", e.plan)
	t.Logf("verify:\n%s%s", vout, verrs)
	if code != 3 || !strings.Contains(vout, "last apply") || !strings.Contains(vout, "OVER 1/s") || !strings.Contains(verrs, "drop more than the promise allows") {
		t.Errorf("verify after players on a 4 KiB buffer: exit %d, want 3 with the host over the promise\n%s\n%s", code, vout, verrs)
	}
	code, jout, _ := e.relayctl("verify", e.plan, "--json")
	var vr struct {
		FormatVersion int `json:"format_version"`
		Hosts         []struct {
			OK    bool        `json:"ok"`
			Drops verifyDrops `json:"drops"`
		} `json:"hosts"`
		Summary struct {
			OverPromise int `json:"over_promise"`
		} `json:"summary"`
	}
	if err := json.Unmarshal([]byte(jout), &vr); err != nil || code != 3 || vr.FormatVersion != 3 || len(vr.Hosts) != 1 || vr.Summary.OverPromise != 1 {
		t.Fatalf("verify --json: exit %d, %v\n%s", code, err, jout)
	}
	d := vr.Hosts[0].Drops
	if vr.Hosts[0].OK || d.Since != "last apply" || d.Span == nil || d.Span.SSDrops == 0 || d.Span.DropRate <= d.Allowed || d.Now.SSDrops < d.Span.SSDrops {
		t.Errorf("verify --json drops: %+v", d)
	}
}

// receiptOf2 is host i of the plan's local receipt.
func receiptOf2(t *testing.T, plan string, i int) rollout.HostReceipt {
	t.Helper()
	var rc rollout.FleetReceipt
	b, err := os.ReadFile(plan + ".receipt.json")
	if err != nil || json.Unmarshal(b, &rc) != nil || len(rc.Hosts) <= i {
		t.Fatalf("receipt: %v\n%s", err, b)
	}
	return rc.Hosts[i]
}
