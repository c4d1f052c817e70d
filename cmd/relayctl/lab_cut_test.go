package main

// A cut connection (docs/recovery.md, "A cut connection"): the host's SSH
// session and everything under it killed on the host at a chosen moment of
// an apply (lab.Host.CutSessions, as an OOM kill of the session or a logind
// session teardown would), and a controller that never comes back. The
// window finishes on the host by itself; the run that was cut off dials
// the host again and converges; a host whose run never returns ends its
// window in a known state by itself, and the one recovery command reports
// what it did.

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/relayctl/relayctl/internal/lab"
	"github.com/relayctl/relayctl/relay/sockstat"
	"github.com/relayctl/relayctl/rollout"
)

// applyAsync starts relayctl apply PLAN in-process, in the background.
func (e *labEnv) applyAsync(args ...string) <-chan result {
	done := make(chan result, 1)
	go func() {
		c, o, er := e.relayctl(append([]string{"apply", e.plan}, args...)...)
		done <- result{c, o, er}
	}()
	return done
}

// relayOn reads h's relay, if one runs: its pid and the rb of the one UDP
// socket it listens on.
func relayOn(h *lab.Host) (pid int, rb uint64, ok bool) {
	pid, err := h.RelayPID(context.Background())
	if err != nil {
		return 0, 0, false
	}
	out, err := h.Exec(context.Background(), "nsenter", "-t", strconv.Itoa(pid), "-n", "ss", "-H", "-O", "-u", "-l", "-n", "-m", "-p")
	var mine []string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, "pid="+strconv.Itoa(pid)+",") {
			mine = append(mine, l)
		}
	}
	socks, perr := sockstat.ParseSS([]byte(strings.Join(mine, "\n")))
	if err != nil || perr != nil || len(socks) != 1 {
		return pid, 0, false
	}
	return pid, socks[0].Rcvbuf, true
}

// awaitRelay waits up to d for a relay listening on h.
func awaitRelay(t *testing.T, h *lab.Host, d time.Duration) (pid int, rb uint64) {
	t.Helper()
	for deadline := time.Now().Add(d); ; time.Sleep(50 * time.Millisecond) {
		if pid, rb, ok := relayOn(h); ok {
			return pid, rb
		}
		if time.Now().After(deadline) {
			j, _ := h.Exec(context.Background(), "sh", "-c", "cat /var/lib/relayctl/journal 2>/dev/null; true")
			t.Fatalf("%s: no relay listening %v after the cut; the journal:\n%s", h.Name, d, j)
		}
	}
}

// cut kills h's SSH sessions (and what runs under them).
func cut(t *testing.T, h *lab.Host) {
	t.Helper()
	n, err := h.CutSessions()
	if err != nil || n == 0 {
		t.Fatalf("%s: cut the sessions: %d killed, %v", h.Name, n, err)
	}
}

// converged checks a host a run applied in the end: no journal or lock
// owner left, the receipt and its journal filed on the host.
func converged(t *testing.T, h *lab.Host) {
	t.Helper()
	if out, err := h.Exec(context.Background(), "sh", "-c", "test ! -e /var/lib/relayctl/journal && test ! -e /var/lib/relayctl/lock.owner && ls /var/lib/relayctl/receipts/*.journal"); err != nil {
		t.Errorf("%s: the journal or the lock owner is still there, or no journal was filed: %v %s", h.Name, err, out)
	}
}

// slowStart makes the relay's start wait 2 s, as a relay that loads its
// state does: a cut can land between the stop and the start.
func slowStart(s string) string {
	return strings.Replace(s, "start: ["+lab.ServiceScript+", start]",
		`start: [/bin/sh, -c, "sleep 2; exec `+lab.ServiceScript+` start"]`, 1)
}

// Cut between the relay's stop and its start (the command manager's
// restart is two commands): the start runs all the same, on the host, in
// the window's own process, and the run that was cut off converges. On the
// code before, the cut killed the agent and the start with it: no relay
// listened until the operator came back.
func TestLabCutBetweenStopAndStart(t *testing.T) {
	e := startLab(t, []lab.HostOptions{{}}, slowStart)
	h := e.lab.Hosts[0]
	if code, _, errs := e.relayctl("plan", e.spec, "-out", e.plan, "--detailed-exitcode"); code != 2 {
		t.Fatalf("plan: exit %d: %s", code, errs)
	}
	done := e.applyAsync()
	waitJournal(t, h, "start restart")
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := h.RelayPID(context.Background()); errors.Is(err, lab.ErrRelayNotRunning) {
			break // stopped; its start sleeps
		}
		if time.Now().After(deadline) {
			t.Fatal("the relay never stopped")
		}
	}
	cut(t, h)
	// The start's own 2 s, and the relay is back.
	if _, rb := awaitRelay(t, h, 6*time.Second); rb != 8388608 {
		t.Errorf("after the cut: rb %d, want the planned 8388608", rb)
	}
	r := <-done
	if r.code != 0 || !strings.Contains(r.out, "lab-1: applied, "+rollout.RecoveryCompletedByHost) {
		t.Errorf("the cut apply: exit %d, want 0, applied, %s\nstdout:\n%s\nstderr:\n%s", r.code, rollout.RecoveryCompletedByHost, r.out, r.err)
	}
	if rc := receiptOf(t, e.plan); rc.Outcome != rollout.Applied || rc.Recovery != rollout.RecoveryCompletedByHost || rc.Restarts != 1 {
		t.Errorf("receipt: %s, recovery %q, %d restarts; want applied by the host, its restart counted", rc.Outcome, rc.Recovery, rc.Restarts)
	}
	converged(t, h)
}

// Cut during the read-back (the window done, relayctl reading the host
// back for its --stable-for): the window's process, its session gone,
// reads the host back itself and keeps the release; the run comes back
// and converges. On the code before, the run failed the host as unknown.
func TestLabCutDuringReadBack(t *testing.T) {
	e := startLab(t, []lab.HostOptions{{}}, nil)
	h := e.lab.Hosts[0]
	if code, _, errs := e.relayctl("plan", e.spec, "-out", e.plan, "--detailed-exitcode"); code != 2 {
		t.Fatalf("plan: exit %d: %s", code, errs)
	}
	done := e.applyAsync("--stable-for", "3s")
	waitJournal(t, h, "done restart")
	time.Sleep(time.Second)
	pid, _ := awaitRelay(t, h, time.Second)
	cut(t, h)
	r := <-done
	if r.code != 0 || !strings.Contains(r.out, "lab-1: applied, "+rollout.RecoveryCompletedByHost) {
		t.Errorf("the cut apply: exit %d, want 0, applied, %s\nstdout:\n%s\nstderr:\n%s", r.code, rollout.RecoveryCompletedByHost, r.out, r.err)
	}
	if p2, rb := awaitRelay(t, h, time.Second); p2 != pid || rb != 8388608 {
		t.Errorf("after: pid %d → %d, rb %d; want the window's relay kept, rb 8388608", pid, p2, rb)
	}
	converged(t, h)
}

// Cut during commit (an old release being pruned, after the window's
// keep): the run comes back, finds the window kept, and files the receipt
// and the journal. On the code before, the run said applied and left the
// host with an unfinished journal and a dead run's lock owner.
func TestLabCutDuringCommit(t *testing.T) {
	e := startLab(t, []lab.HostOptions{{}}, func(s string) string {
		return strings.Replace(s, "    version: 1.8.0\n", "    version: 1.8.0\n    keep: 2\n", 1)
	})
	h := e.lab.Hosts[0]
	// An old release heavy enough that removing it takes a while.
	if out, err := h.Exec(context.Background(), "sh", "-c", "mkdir -p /opt/relay/releases/1.5.0/data && cp /opt/relay/releases/1.7.0/relayd /opt/relay/releases/1.5.0/ && cd /opt/relay/releases/1.5.0/data && seq 1 100000 | xargs touch"); err != nil {
		t.Fatalf("old release: %v %s", err, out)
	}
	if code, _, errs := e.relayctl("plan", e.spec, "-out", e.plan, "--detailed-exitcode"); code != 2 {
		t.Fatalf("plan: exit %d: %s", code, errs)
	}
	aside, err := h.Path("/opt/relay/releases/.relayctl-prune-1.5.0")
	if err != nil {
		t.Fatal(err)
	}
	done := e.applyAsync()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(time.Millisecond) {
		if _, err := os.Stat(aside); err == nil {
			break // the prune, in commit's round trip, has begun
		}
		if time.Now().After(deadline) {
			t.Fatal("the prune never began")
		}
	}
	cut(t, h)
	r := <-done
	if r.code != 0 || !strings.Contains(r.out, "applied:       1  lab-1") {
		t.Errorf("the cut apply: exit %d, want 0 and applied\nstdout:\n%s\nstderr:\n%s", r.code, r.out, r.err)
	}
	converged(t, h)
	if out, _ := h.Exec(context.Background(), "ls", "-a", "/opt/relay/releases"); strings.Contains(string(out), "1.5.0") {
		t.Errorf("the old release is still there: %s", out)
	}
}

// A controller that never comes back (relayctl killed inside the window):
// the host ends the window by itself within its deadline, kept when its
// own read-back holds and rolled back when it does not, whatever the
// manager and the switch; the one recovery command reports which. On the
// code before, nothing ended the window: the next apply found it
// unfinished.
func TestLabControllerNeverReturns(t *testing.T) {
	bin := buildRelayctl(t)
	for _, tt := range []struct {
		name string
		lab  func(t *testing.T) *labEnv
		// bad makes the window fail (or its release die) once the relay was
		// stopped; "" for a good release.
		bad     string
		applied bool
		sw      string // the switch, as the review names it
	}{
		{"command-restart-good", func(t *testing.T) *labEnv { return startLab(t, []lab.HostOptions{{}}, slowStop) }, "", true, "Switch: **restart**"},
		{"command-restart-dies", func(t *testing.T) *labEnv { return startLab(t, []lab.HostOptions{{}}, slowStop) }, "dies", false, "Switch: **restart**"},
		{"command-handoff-good", func(t *testing.T) *labEnv { return startPlayersLab(t, true, "").labEnv }, "", true, "Switch: **handoff**"},
		{"systemd-good", startLogindLab, "", true, "Switch: **restart, socket kept in systemd's store**"},
		{"systemd-broken", startLogindLab, "broken", false, "Switch: **restart"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := tt.lab(t)
			h := e.lab.Hosts[0]
			if tt.bad == "broken" {
				broken := filepath.Join(t.TempDir(), "relayd")
				os.WriteFile(broken, []byte("#!/bin/sh\necho 'relayd: cannot start: broken build 5e21' >&2\nexit 1\n"), 0o755)
				spec, _ := os.ReadFile(e.spec)
				os.WriteFile(e.spec, []byte(strings.Replace(string(spec), "artifact: "+lab.BuildRelayd(t, "1.8.0"), "artifact: "+broken, 1)), 0o644)
			}
			pid0, rb0, _ := relayOn(h)
			if code, _, errs := e.relayctl("plan", e.spec, "-out", e.plan, "--detailed-exitcode"); code != 2 {
				t.Fatalf("plan: exit %d: %s", code, errs)
			}
			if md, _ := os.ReadFile(e.plan + ".md"); !strings.Contains(string(md), tt.sw) {
				t.Fatalf("the plan's switch is not %q:\n%s", tt.sw, md)
			}
			apply := exec.Command(bin, "apply", e.plan, "--verify-timeout", "4s", "--stable-for", "2s",
				"--ssh-config", e.lab.SSHConfig, "--known-hosts", e.lab.KnownHosts, "--identity", e.lab.Identity)
			if err := apply.Start(); err != nil {
				t.Fatal(err)
			}
			waitJournal(t, h, "start window")
			apply.Process.Signal(syscall.SIGKILL)
			apply.Wait()
			if tt.bad == "dies" { // the new relay dies once it runs
				waitJournal(t, h, "done restart")
				if pid, _, ok := relayOn(h); ok {
					syscall.Kill(pid, syscall.SIGKILL)
				}
			}
			// Its deadline: the read-back's 4 s and 2 s stable, and a rollback.
			want := "window kept by=host"
			if !tt.applied {
				want = "window rolled-back by=host"
			}
			waitJournalFor(t, h, want, 30*time.Second)
			pid, rb, ok := relayOn(h)
			switch {
			case !ok:
				t.Errorf("no relay runs after the host ended its window")
			case tt.applied && (pid == pid0 || rb == rb0):
				t.Errorf("kept, but the relay is the old one: pid %d, rb %d", pid, rb)
			case !tt.applied && rb != rb0:
				t.Errorf("rolled back, but rb %d, want the old %d", rb, rb0)
			}
			// The one recovery command reports what the host did.
			code, out, errs := e.relayctl("apply", e.plan, "--resume")
			words := "lab-1: applied, " + rollout.RecoveryCompletedByHost
			if !tt.applied {
				words = "lab-1: rolled back (as it was): the host rolled its window back by itself"
			}
			if code != map[bool]int{true: 0, false: 1}[tt.applied] || !strings.Contains(out, words) {
				t.Errorf("apply --resume: exit %d, want %q\nstdout:\n%s\nstderr:\n%s", code, words, out, errs)
			}
			recovery := rollout.RecoveryCompletedByHost
			if !tt.applied {
				recovery = rollout.RecoveryRolledBackByHost
			}
			if rc := receiptOf(t, e.plan); rc.Recovery != recovery {
				t.Errorf("receipt: recovery %q, want %q", rc.Recovery, recovery)
			}
			converged(t, h)
		})
	}
}

// waitJournalFor polls h's journal until it contains want, for at most d.
func waitJournalFor(t *testing.T, h *lab.Host, want string, d time.Duration) {
	t.Helper()
	var j []byte
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		j, _ = h.Exec(context.Background(), "sh", "-c", "cat /var/lib/relayctl/journal 2>/dev/null; true")
		if strings.Contains(string(j), want) {
			return
		}
	}
	t.Fatalf("%s: the journal did not say %q within %v; it has:\n%s", h.Name, want, d, j)
}

// startLogindLab is a systemd host whose SSH sessions are logind's
// (each in a session scope), its relay as relayd.service.
func startLogindLab(t *testing.T) *labEnv {
	t.Helper()
	lab.RequireSystemd(t)
	return startLab(t, []lab.HostOptions{{Systemd: true, Logind: true}}, func(s string) string {
		return strings.Replace(s, "    manager: command\n    start: ["+lab.ServiceScript+", start]\n    stop: ["+lab.ServiceScript+", stop]\n    pid_file: "+lab.RelayPIDFile+"\n",
			"    manager: systemd\n    name: relayd\n", 1)
	})
}

// Under systemd with logind sessions: a cut of the session's scope (its
// whole cgroup) inside the window leaves the window's own scope alone; the
// run converges. On the code before, the agent went with the scope and the
// run failed the host as unknown.
func TestLabSystemdCutTheSessionScope(t *testing.T) {
	e := startLogindLab(t)
	h := e.lab.Hosts[0]
	if code, _, errs := e.relayctl("plan", e.spec, "-out", e.plan, "--detailed-exitcode"); code != 2 {
		t.Fatalf("plan: exit %d: %s", code, errs)
	}
	done := e.applyAsync("--stable-for", "3s")
	waitJournal(t, h, "start window")
	cut(t, h)
	r := <-done
	if r.code != 0 || !strings.Contains(r.out, "lab-1: applied, "+rollout.RecoveryCompletedByHost) {
		t.Errorf("the cut apply: exit %d, want 0, applied, %s\nstdout:\n%s\nstderr:\n%s", r.code, rollout.RecoveryCompletedByHost, r.out, r.err)
	}
	if _, rb := awaitRelay(t, h, time.Second); rb != 8388608 {
		t.Errorf("rb %d, want 8388608", rb)
	}
	converged(t, h)
}

// killWindow kills every relayctl process on h (its session's agent and
// the window's own process), as a host whose window died with its run.
func killWindow(t *testing.T, h *lab.Host) {
	t.Helper()
	for range 10 {
		ents, _ := os.ReadDir("/proc")
		for _, ent := range ents {
			cmd, _ := os.ReadFile("/proc/" + ent.Name() + "/cmdline")
			ns, _ := os.Readlink("/proc/" + ent.Name() + "/ns/mnt")
			if ns == h.MountNS && (strings.Contains(string(cmd), "/agent/") && strings.Contains(string(cmd), "\x00serve\x00") || strings.HasPrefix(string(cmd), "relayctl-window\x00")) {
				pid, _ := strconv.Atoi(ent.Name())
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Completing means making the window's end hold: a window whose restart is
// marked done in its journal but whose relay no longer runs (the window's
// process, its session and the new relay all died) is completed by
// starting the planned release and reading it back. On the code before,
// the read-back failed and the host was rolled back, to be applied with a
// second command.
func TestLabCompletingStartsARelayThatIsDown(t *testing.T) {
	e := startLab(t, []lab.HostOptions{{}}, nil)
	h := e.lab.Hosts[0]
	if code, _, errs := e.relayctl("plan", e.spec, "-out", e.plan, "--detailed-exitcode"); code != 2 {
		t.Fatalf("plan: exit %d: %s", code, errs)
	}
	done := e.applyAsync("--stable-for", "3s", "--reconnects", "0")
	waitJournal(t, h, "done restart")
	killWindow(t, h)
	if pid, _, ok := relayOn(h); ok {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	if r := <-done; r.code != 1 {
		t.Fatalf("the apply whose window died: exit %d\n%s\n%s", r.code, r.out, r.err)
	}
	if _, _, ok := relayOn(h); ok {
		t.Fatal("a relay still runs: the test did not kill it")
	}
	code, out, errs := e.relayctl("apply", e.plan, "--resume")
	if code != 0 || !strings.Contains(out, "lab-1: applied, "+rollout.RecoveryCompleted) {
		t.Errorf("apply --resume: exit %d, want 0, applied, %s\nstdout:\n%s\nstderr:\n%s", code, rollout.RecoveryCompleted, out, errs)
	}
	if _, rb := awaitRelay(t, h, time.Second); rb != 8388608 {
		t.Errorf("rb %d, want 8388608", rb)
	}
	if rc := receiptOf(t, e.plan); rc.Restarts != 1 {
		t.Errorf("the recovery's receipt: %d restarts, want the start of the planned release", rc.Restarts)
	}
	converged(t, h)
}
