package main

// Lab tests of restarting without losing players, through relayctl itself: the drain gate before a
// window, and the socket handoff instead of a restart, on a real relayd
// with players from the bench (relay/wire datagrams on real sockets).

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/relayctl/relayctl/internal/lab"
	"github.com/relayctl/relayctl/relay/bench"
	"github.com/relayctl/relayctl/rollout"
)

const handoffSocket = "/opt/relay/run/handoff.sock"

// playersEnv is a lab host whose relayd 1.9.0 runs in the machine's
// network namespace on a port of its own, players drop out of it a second
// after they go quiet, and a spec to ship relayd 1.9.1 to it.
type playersEnv struct {
	*labEnv
	port int
}

func startPlayersLab(t *testing.T, handoff bool, specExtra string) *playersEnv {
	t.Helper()
	port := lab.FreePort(t)
	conf := fmt.Sprintf("RELAYD_LISTEN=0.0.0.0:%d\nRELAYD_CONTROL=127.0.0.1:%d\nRELAYD_IDLE_TIMEOUT=1s\n", port, port) + lab.BenchExempt
	if handoff {
		conf += "RELAYD_HANDOFF_SOCKET=" + handoffSocket + "\n"
	}
	hosts := []lab.HostOptions{{NoRelayNetns: true, Relay: &lab.RelayInstall{Binary: lab.BuildRelayd(t, "1.9.0"), Version: "1.9.0", Config: conf, Start: true}}}
	e := startLab(t, hosts, func(s string) string {
		s = strings.Replace(s, "  port: 7788\n", fmt.Sprintf("  port: %d\n  control: 127.0.0.1:%d\n  handoff_socket: %s\n", port, port, handoffSocket), 1)
		s = strings.Replace(s, "version: 1.8.0\n    artifact: "+lab.BuildRelayd(t, "1.8.0"), "version: 1.9.1\n    artifact: "+lab.BuildRelayd(t, "1.9.1"), 1)
		s = strings.Replace(s, "    stop: ["+lab.ServiceScript+", stop]\n", "    stop: ["+lab.ServiceScript+", stop]\n    handoff: ["+lab.ServiceScript+", handoff]\n", 1)
		return s + specExtra
	})
	return &playersEnv{labEnv: e, port: port}
}

// status reads the relay's /status from the machine (the relay shares its
// network namespace).
func (e *playersEnv) status() map[string]any {
	e.t.Helper()
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/status", e.port))
	if err != nil {
		e.t.Fatalf("GET /status: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var st map[string]any
	if err := json.Unmarshal(b, &st); err != nil {
		e.t.Fatalf("/status: %v: %s", err, b)
	}
	return st
}

var lobbyBase uint32 = 1000

// step runs one bench step of players for d in the background and calls
// during (if any) at the given time into it; the report arrives on the
// channel. A step the busy machine made invalid is run again, up to
// attempts times, only when valid matters.
func (e *playersEnv) step(players int, d, at time.Duration, during func()) <-chan *bench.Report {
	out := make(chan *bench.Report, 1)
	cfg := bench.Defaults()
	cfg.Relay, cfg.Control = fmt.Sprintf("127.0.0.1:%d", e.port), fmt.Sprintf("127.0.0.1:%d", e.port)
	cfg.Ramp = bench.Ramp{From: players, To: players, Step: 1}
	cfg.StepDuration, cfg.Interval, cfg.Calibrate = d, 250*time.Millisecond, 0
	lobbyBase += 20
	cfg.LobbyBase = lobbyBase
	go func() {
		var once sync.Once
		rep, err := bench.Run(e.t.Context(), cfg, bench.Options{Progress: func(p bench.Progress) {
			if during != nil && p.Elapsed >= at {
				once.Do(func() { go during() })
			}
		}})
		if err != nil {
			e.t.Errorf("bench: %v", err)
		}
		out <- rep
	}()
	return out
}

// stepProcess is step run by `relayctl bench --json` in its own process
// (bin): during starts at the given time after the process does, and the
// call returns the decoded report once the step has ended.
func (e *playersEnv) stepProcess(bin string, players int, d, at time.Duration, during func()) *bench.Report {
	e.t.Helper()
	lobbyBase += 20
	addr := fmt.Sprintf("127.0.0.1:%d", e.port)
	cmd := exec.CommandContext(e.t.Context(), bin, "bench", "--relay", addr, "--control", addr,
		"--players", strconv.Itoa(players), "--step-duration", d.String(), "--interval", "250ms",
		"--calibrate", "0", "--lobby-base", strconv.Itoa(int(lobbyBase)), "--json")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		e.t.Fatalf("bench: %v", err)
	}
	// The caller reads what during wrote once this returns, so wait for it
	// to finish (the race detector found the bench ending first).
	done := make(chan struct{})
	timer := time.AfterFunc(at, func() { defer close(done); during() })
	err := cmd.Wait()
	if timer.Stop() {
		close(done) // it never ran
	}
	<-done
	var rep bench.Report
	if jerr := json.Unmarshal(out.Bytes(), &rep); jerr != nil || len(rep.Steps) != 1 {
		e.t.Fatalf("bench: %v, report %v\nstdout:\n%s\nstderr:\n%s", err, jerr, out.Bytes(), errb.Bytes())
	}
	return &rep
}

func receiptOf(t *testing.T, plan string) rollout.HostReceipt {
	t.Helper()
	var rc rollout.FleetReceipt
	b, err := os.ReadFile(plan + ".receipt.json")
	if err != nil || json.Unmarshal(b, &rc) != nil || len(rc.Hosts) != 1 {
		t.Fatalf("receipt: %v\n%s", err, b)
	}
	return rc.Hosts[0]
}

// The gate waits while players are connected, closing the relay to new
// lobbies meanwhile, and the window goes on once they have left.
func TestLabDrainGateWaitsForPlayers(t *testing.T) {
	e := startPlayersLab(t, false, "drain: {max_players: 0, deadline: 60s, poll: 300ms, on_deadline: abort, no_new_lobbies: true}\n")
	if code, out, errs := e.relayctl("plan", e.spec, "--out", e.plan, "--detailed-exitcode"); code != 2 {
		t.Fatalf("plan: exit %d\n%s\n%s", code, out, errs)
	}
	md, _ := os.ReadFile(e.plan + ".md")
	if !strings.Contains(string(md), "Drain gate: wait until at most 0 players (polling every 300ms, refusing new lobbies meanwhile), up to 1m0s, then abort") {
		t.Errorf("the review does not show the drain gate:\n%s", md)
	}
	players := e.step(16, 4*time.Second, 0, nil)
	time.Sleep(time.Second)
	type result struct {
		code     int
		out, err string
	}
	done := make(chan result, 1)
	go func() {
		c, o, er := e.relayctl("apply", e.plan)
		done <- result{c, o, er}
	}()
	var st map[string]any
	for i := 0; i < 50; i++ {
		if st = e.status(); st["draining"] == true {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if st["draining"] != true || st["players"].(float64) != 16 {
		t.Errorf("while the gate waits: /status draining %v, players %v; want true and 16", st["draining"], st["players"])
	}
	<-players
	r := <-done
	if r.code != 0 || !strings.Contains(r.err, "16 players in 2 lobbies, waiting") {
		t.Fatalf("apply: exit %d, want 0 after waiting for 16 players in 2 lobbies\nstdout:\n%s\nstderr:\n%s", r.code, r.out, r.err)
	}
	rc := receiptOf(t, e.plan)
	if rc.DrainWaitMillis < 2000 || rc.PlayersAtWindow == nil || rc.PlayersAtWindow.Players != 0 || rc.PlayersCut == nil || *rc.PlayersCut != 0 {
		t.Errorf("receipt: waited %d ms, players at window %+v, cut %v; want a wait of seconds, 0 and 0", rc.DrainWaitMillis, rc.PlayersAtWindow, rc.PlayersCut)
	}
}

// At the deadline with players still there: abort refuses the host and
// opens the relay to new lobbies again, skip leaves it for a later run,
// force restarts and the receipt says how many players were cut.
func TestLabDrainDeadlinePolicies(t *testing.T) {
	e := startPlayersLab(t, false, "drain: {max_players: 0, deadline: 1s, poll: 200ms, on_deadline: abort, no_new_lobbies: true}\n")
	// The players stay through all three policies' plans and applies: on a
	// loaded machine under -race those took more than 12 s, the players
	// left before skip's deadline, and its gate rightly let it through.
	players := e.step(16, 24*time.Second, 0, nil)
	time.Sleep(time.Second)
	for _, tt := range []struct {
		policy, want string
	}{
		{"abort", "refused (as it was): drain: 16 players in 2 lobbies after 1s (on_deadline: abort)"},
		{"skip", "skipped (as it was): drain: 16 players in 2 lobbies after 1s (on_deadline: skip): left for a later run"},
		{"force", "applied:"},
	} {
		spec, _ := os.ReadFile(e.spec)
		os.WriteFile(e.spec, []byte(strings.Replace(string(spec), "on_deadline: abort", "on_deadline: "+tt.policy, 1)), 0o644)
		if code, out, errs := e.relayctl("plan", e.spec, "--out", e.plan, "--detailed-exitcode"); code != 2 {
			t.Fatalf("%s: plan: exit %d\n%s\n%s", tt.policy, code, out, errs)
		}
		code, out, errs := e.relayctl("apply", e.plan)
		if !strings.Contains(out, tt.want) {
			t.Errorf("%s: exit %d, want %q\nstdout:\n%s\nstderr:\n%s", tt.policy, code, tt.want, out, errs)
		}
		os.WriteFile(e.spec, spec, 0o644)
		switch tt.policy {
		case "abort", "skip":
			if st := e.status(); st["draining"] != false || st["version"] != "1.9.0" {
				t.Errorf("%s: /status draining %v version %v; want the relay open again and untouched", tt.policy, st["draining"], st["version"])
			}
			if tt.policy == "skip" && !strings.Contains(errs, "hint: lab-1 still had players at the drain deadline: relayctl apply "+e.plan+" --resume when they have gone") {
				t.Errorf("skip: no hint for the follow-up run:\n%s", errs)
			}
		case "force":
			rc := receiptOf(t, e.plan)
			if code != 0 || rc.PlayersCut == nil || *rc.PlayersCut != 16 || rc.Restarts != 1 {
				t.Errorf("force: exit %d, players cut %v, restarts %d; want 0, 16 cut by one restart", code, rc.PlayersCut, rc.Restarts)
			}
		}
	}
	<-players
}

// A relay that cannot hand over (its config has no handoff socket yet) is
// restarted, and the plan says why; once restarted with the socket, the
// next window is a handoff.
func TestLabHandoffFallsBackToRestart(t *testing.T) {
	e := startPlayersLab(t, false, "")
	code, out, errs := e.relayctl("plan", e.spec, "--out", e.plan, "--detailed-exitcode")
	if code != 2 || !strings.Contains(out, "restart") {
		t.Fatalf("plan: exit %d\n%s\n%s", code, out, errs)
	}
	md, _ := os.ReadFile(e.plan + ".md")
	if !strings.Contains(string(md), "Switch: **restart**: the running relay 1.9.0 does not offer a handoff") {
		t.Errorf("the review does not say why a restart:\n%s", md)
	}
	if code, out, errs := e.relayctl("apply", e.plan); code != 0 {
		t.Fatalf("apply: exit %d\n%s\n%s", code, out, errs)
	}
	if rc := receiptOf(t, e.plan); rc.Restarts != 1 || rc.Handoffs != 0 {
		t.Errorf("receipt: %d restarts, %d handoffs; want a restart", rc.Restarts, rc.Handoffs)
	}
	// The relay now listens for a handoff: a new release goes by handoff.
	spec, _ := os.ReadFile(e.spec)
	os.WriteFile(e.spec, []byte(strings.Replace(string(spec), "version: 1.9.1\n    artifact: "+lab.BuildRelayd(t, "1.9.1"), "version: 1.9.2\n    artifact: "+lab.BuildRelayd(t, "1.9.2"), 1)), 0o644)
	if code, _, errs := e.relayctl("plan", e.spec, "--out", e.plan, "--detailed-exitcode"); code != 2 {
		t.Fatalf("plan 2: exit %d: %s", code, errs)
	}
	md, _ = os.ReadFile(e.plan + ".md")
	if !strings.Contains(string(md), "Switch: **handoff**") {
		t.Errorf("the second plan is not a handoff:\n%s", md)
	}
}

// Under load, a handoff loses no datagram and cuts no lobby: the same
// socket (same inode) serves with the buffer the plan ships.
func TestLabHandoffUnderLoad(t *testing.T) {
	// The players run in a relayctl bench process built without -race: the
	// race detector slows the senders so much that on a busy CI machine
	// every step fell behind its schedule and proved nothing.
	bin := buildRelayctl(t)
	e := startPlayersLab(t, true, "")
	if code, out, errs := e.relayctl("plan", e.spec, "--out", e.plan, "--detailed-exitcode"); code != 2 || !strings.Contains(out, "handoff") {
		t.Fatalf("plan: exit %d, want a handoff\n%s\n%s", code, out, errs)
	}
	inodeBefore := e.status()["socket_inode"]
	var applyCode int
	var applyOut, applyErr string
	var rep *bench.Report
	release := "1.9.1"
	// A step the busy machine made invalid (the bench fell behind) proves
	// nothing: hand over again to the next release and measure again.
	for _, next := range []string{"1.9.2", "1.9.3", "1.9.4", ""} {
		done := make(chan struct{})
		rep = e.stepProcess(bin, 16, 4*time.Second, 1500*time.Millisecond, func() {
			applyCode, applyOut, applyErr = e.relayctl("apply", e.plan)
			close(done)
		})
		<-done
		if applyCode != 0 {
			t.Fatalf("apply: exit %d\nstdout:\n%s\nstderr:\n%s", applyCode, applyOut, applyErr)
		}
		if rep.Steps[0].Valid {
			break
		}
		if next == "" {
			t.Fatal("the bench fell behind in every attempt: the machine is too busy to measure a handoff under load")
		}
		t.Logf("release %s: the bench fell behind (%v); handing over to %s and measuring again", release, rep.Steps[0].Invalid, next)
		spec, _ := os.ReadFile(e.spec)
		os.WriteFile(e.spec, []byte(strings.Replace(string(spec), "version: "+release+"\n    artifact: "+lab.BuildRelayd(t, release), "version: "+next+"\n    artifact: "+lab.BuildRelayd(t, next), 1)), 0o644)
		if code, out, errs := e.relayctl("plan", e.spec, "--out", e.plan, "--detailed-exitcode"); code != 2 || !strings.Contains(out, "handoff") {
			t.Fatalf("plan %s: exit %d, want a handoff\n%s\n%s", next, code, out, errs)
		}
		release = next
	}
	s := rep.Steps[0]
	if s.Loss != 0 || s.LostIn != 0 || s.LostOut != 0 || s.Duplicates != 0 || s.ICMPErrors != 0 {
		t.Errorf("the bench counted loss %d (in %d, out %d), %d duplicates, %d ICMP errors across the handoff; want none", s.Loss, s.LostIn, s.LostOut, s.Duplicates, s.ICMPErrors)
	}
	if len(s.Restarts) != 1 || !s.Restarts[0].Handoff || s.Restarts[0].LobbiesCut != 0 || s.Restarts[0].PlayersCut != 0 {
		t.Errorf("the bench saw %+v, want one handoff cutting nothing", s.Restarts)
	}
	rc := receiptOf(t, e.plan)
	if rc.Handoffs != 1 || rc.Restarts != 0 || rc.PlayersCut == nil || *rc.PlayersCut != 0 || rc.HandoffGapUS == nil || rc.RBAfter != 8388608 {
		t.Errorf("receipt: %d handoffs, %d restarts, cut %v, gap %v µs, rb %d; want one handoff, none cut, its gap, rb 8388608",
			rc.Handoffs, rc.Restarts, rc.PlayersCut, rc.HandoffGapUS, rc.RBAfter)
	}
	if st := e.status(); st["socket_inode"] != inodeBefore || st["version"] != release {
		t.Errorf("after: /status inode %v (was %v), version %v; want the same socket under %s", st["socket_inode"], inodeBefore, st["version"], release)
	}
}

// planHandoffToWrapper starts a players lab whose next release is a script
// that offers a handoff and runs the running relayd 1.9.0 with env set
// (a release that misbehaves in a known way), and plans the handoff to it.
func planHandoffToWrapper(t *testing.T, env string) *playersEnv {
	t.Helper()
	wrapper := filepath.Join(t.TempDir(), "relayd")
	os.WriteFile(wrapper, []byte("#!/bin/sh\n# relayd-capabilities: drain=http/1 handoff=unix/1\n"+env+" exec /opt/relay/releases/1.9.0/relayd \"$@\"\n"), 0o755)
	e := startPlayersLab(t, true, "")
	spec, _ := os.ReadFile(e.spec)
	os.WriteFile(e.spec, []byte(strings.Replace(string(spec), "artifact: "+lab.BuildRelayd(t, "1.9.1"), "artifact: "+wrapper, 1)), 0o644)
	if code, out, errs := e.relayctl("plan", e.spec, "--out", e.plan, "--detailed-exitcode"); code != 2 || !strings.Contains(out, "handoff") {
		t.Fatalf("plan: exit %d, want a handoff\n%s\n%s", code, out, errs)
	}
	return e
}

// A new release that fails after it got the socket (it cannot hold the
// running lobbies) gives it back: the old relay serves on, nothing is
// lost, and the host is rolled back and verified without a restart.
func TestLabHandoffFailureGivesTheSocketBack(t *testing.T) {
	// The new release is relayd told lobbies hold 4 players: the
	// lobbies of 8 it receives do not fit, so it refuses the state.
	e := planHandoffToWrapper(t, "RELAYD_LOBBY_SIZE=4")
	pidBefore, inodeBefore := e.status()["pid"], e.status()["socket_inode"]
	var code int
	var out, errs string
	done := make(chan struct{})
	rep := <-e.step(16, 4*time.Second, 1500*time.Millisecond, func() {
		code, out, errs = e.relayctl("apply", e.plan)
		close(done)
	})
	<-done
	if code != 1 || !strings.Contains(out, "rolled back (as it was)") || !strings.Contains(out, "still serves") {
		t.Errorf("apply: exit %d, want rolled back, the old relay still serving\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	if st := e.status(); st["pid"] != pidBefore || st["socket_inode"] != inodeBefore || st["version"] != "1.9.0" {
		t.Errorf("after: /status pid %v inode %v version %v; want the old relay %v on socket %v", st["pid"], st["socket_inode"], st["version"], pidBefore, inodeBefore)
	}
	if rc := receiptOf(t, e.plan); rc.Restarts != 0 || rc.State != "as it was" {
		t.Errorf("receipt: %d restarts, state %q; want none and as it was", rc.Restarts, rc.State)
	}
	if s := rep.Steps[0]; s.Valid && (s.Loss != 0 || s.LostIn != 0) {
		t.Errorf("the bench counted loss %d (in %d) across the failed handoff; want none", s.Loss, s.LostIn)
	}
}

// A handoff that succeeded but whose read-back fails is undone by a second
// handoff, back to the restored release: the host ends as it was, on the
// same socket, the players' lobbies kept through both.
func TestLabHandoffReadBackFailureHandsBack(t *testing.T) {
	// The new release takes the socket and serves, but it is relayd 1.9.0
	// asking for 64 KiB: neither the planned version nor the planned rb.
	e := planHandoffToWrapper(t, "RELAYD_SO_RCVBUF=65536")
	before := e.status()
	var code int
	var out, errs string
	done := make(chan struct{})
	// The read-back waits --verify-timeout for the relay to come right
	// before it gives up: 2 s, so both handoffs fall inside the step.
	rep := <-e.step(16, 8*time.Second, 1500*time.Millisecond, func() {
		code, out, errs = e.relayctl("apply", e.plan, "--verify-timeout", "2s")
		close(done)
	})
	<-done
	if code != 1 || !strings.Contains(out, "rolled back (as it was)") || !strings.Contains(errs+out, "read-back") {
		t.Errorf("apply: exit %d, want a failed read-back, rolled back as it was\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	after := e.status()
	if after["socket_inode"] != before["socket_inode"] || after["version"] != "1.9.0" || after["pid"] == before["pid"] || after["so_rcvbuf_effective"] != before["so_rcvbuf_effective"] {
		t.Errorf("after: /status pid %v inode %v version %v rb %v; want a new 1.9.0 process on socket %v with rb %v",
			after["pid"], after["socket_inode"], after["version"], after["so_rcvbuf_effective"], before["socket_inode"], before["so_rcvbuf_effective"])
	}
	if rc := receiptOf(t, e.plan); rc.Restarts != 0 || rc.State != "as it was" {
		t.Errorf("receipt: %d restarts, %d handoffs, state %q; want no restart and as it was", rc.Restarts, rc.Handoffs, rc.State)
	}
	s := rep.Steps[0]
	if len(s.Restarts) != 2 || !s.Restarts[0].Handoff || !s.Restarts[1].Handoff || s.Restarts[0].PlayersCut+s.Restarts[1].PlayersCut != 0 {
		t.Errorf("the bench saw %+v; want two handoffs cutting nobody", s.Restarts)
	}
	if s.Valid && (s.Loss != 0 || s.LostIn != 0) {
		t.Errorf("the bench counted loss %d (in %d) across the two handoffs; want none", s.Loss, s.LostIn)
	}
}
