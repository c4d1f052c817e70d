package main

// relayctl killed (SIGKILL) inside a window, on lab hosts, and what comes
// after: the host ends the window by itself against what the plan being
// applied planned, whatever its kind (forward, rollback, sysctl-only,
// file-only); a plain re-run over the killed run's ledger refuses and
// names --resume, which converges, with a host the killed run had
// applied found as planned, not stale. And a canary rolled back because
// its new relay crashed blocks the release on --resume.

import (
	"context"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/relayctl/relayctl/internal/lab"
	"github.com/relayctl/relayctl/plans"
	"github.com/relayctl/relayctl/rollout"
)

// killedApply starts the built relayctl on apply PLAN (the host's own
// read-back bounded by --verify-timeout and --stable-for) and kills it
// with SIGKILL once h's journal shows the window begun: from there the
// window is the host's alone.
func (e *labEnv) killedApply(bin, plan string, h *lab.Host) {
	e.t.Helper()
	apply := exec.Command(bin, "apply", plan, "--verify-timeout", "4s", "--stable-for", "1s",
		"--ssh-config", e.lab.SSHConfig, "--known-hosts", e.lab.KnownHosts, "--identity", e.lab.Identity)
	if err := apply.Start(); err != nil {
		e.t.Fatal(err)
	}
	waitJournal(e.t, h, "start window")
	apply.Process.Signal(syscall.SIGKILL)
	apply.Wait()
}

var windowEndRe = regexp.MustCompile(`window (kept|rolled-back|rollback-failed) by=[a-z]+[^\n]*`)

// windowEnd waits for the journal's line that ends h's window, and
// returns it.
func windowEnd(t *testing.T, h *lab.Host, d time.Duration) string {
	t.Helper()
	var j []byte
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		j, _ = h.Exec(context.Background(), "sh", "-c", "cat /var/lib/relayctl/journal 2>/dev/null; true")
		if m := windowEndRe.Find(j); m != nil {
			return string(m)
		}
	}
	t.Fatalf("%s: the window did not end within %v; the journal:\n%s", h.Name, d, j)
	return ""
}

// relayExe is the program the relay on h runs, as /proc/PID/exe resolves.
func relayExe(t *testing.T, h *lab.Host, pid int) string {
	t.Helper()
	out, err := h.Exec(context.Background(), "readlink", "/proc/"+strconv.Itoa(pid)+"/exe")
	if err != nil {
		t.Fatalf("%s: relay exe: %v", h.Name, err)
	}
	return strings.TrimSpace(string(out))
}

// windowKinds are the kinds of a plan's window steps on its first host.
func windowKinds(t *testing.T, plan string) map[string]bool {
	t.Helper()
	pc, _, err := loadPlan(plan)
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]bool{}
	for _, s := range pc.Plan().Hosts[0].Steps {
		if s.Phase == plans.PhaseWindow {
			kinds[s.Kind] = true
		}
	}
	return kinds
}

// Every kind of plan, relayctl killed with SIGKILL inside its window: the
// host judges the window by itself against what that plan planned and
// keeps it (the relay on the plan's release, the plan's rb, started once),
// and apply --resume reports it completed by the host. On the code
// before, the host judged a rollback plan's window against the spec's
// release (the one being rolled back), so it rolled the completed
// rollback back: a second restart, onto the release being undone.
func TestLabKilledInTheWindowOfEveryKindOfPlan(t *testing.T) {
	bin := buildRelayctl(t)
	withConfig := func(cfg string) []lab.HostOptions {
		return []lab.HostOptions{{Relay: &lab.RelayInstall{Binary: lab.BuildRelayd(t, "1.7.0"), Version: "1.7.0", Start: true, Config: cfg}}}
	}
	keep170 := func(s string) string { // the release the hosts run already
		return strings.Replace(s, "version: 1.8.0\n    artifact: "+lab.BuildRelayd(t, "1.8.0"), "version: 1.7.0\n    artifact: "+lab.BuildRelayd(t, "1.7.0"), 1)
	}
	for _, tt := range []struct {
		name  string
		hosts []lab.HostOptions
		spec  func(string) string
		plan  func(e *labEnv) string // makes the plan to apply (and anything before it)
		kinds []string               // the window's steps the plan must have...
		not   []string               // ...and must not
		dir   string                 // the release the relay runs from after the window
		rb    uint64
	}{
		{name: "forward", plan: func(e *labEnv) string { e.mustPlan(e.spec, e.plan); return e.plan },
			kinds: []string{rollout.KindSetSysctl, rollout.KindSwitchRelease, rollout.KindInstallConfig, rollout.KindRestart},
			dir:   "/opt/relay/releases/1.8.0", rb: 8388608},
		{name: "rollback", plan: func(e *labEnv) string {
			e.mustPlan(e.spec, e.plan)
			if code, out, errs := e.relayctl("apply", e.plan); code != 0 {
				t.Fatalf("apply the forward plan: exit %d\n%s\n%s", code, out, errs)
			}
			back, _ := e.rollbackPlan(t)
			return back
		},
			kinds: []string{rollout.KindSetSysctl, rollout.KindSwitchRelease, rollout.KindInstallConfig, rollout.KindRestart},
			dir:   "/opt/relay/releases/1.7.0", rb: 212992},
		{name: "sysctl-only", hosts: withConfig(lab.DefaultRelayConfig + "RELAYD_SO_RCVBUF=4194304\nRELAYD_SO_RCVBUF_FORCE=false\n"), spec: keep170,
			plan:  func(e *labEnv) string { e.mustPlan(e.spec, e.plan); return e.plan },
			kinds: []string{rollout.KindSetSysctl, rollout.KindRestart}, not: []string{rollout.KindSwitchRelease, rollout.KindInstallConfig},
			dir: "/opt/relay/releases/1.7.0", rb: 8388608},
		{name: "file-only", spec: func(s string) string {
			return strings.Replace(keep170(s), "sysctl:\n  net.core.rmem_max: 8388608\n", "", 1)
		},
			plan:  func(e *labEnv) string { e.mustPlan(e.spec, e.plan); return e.plan },
			kinds: []string{rollout.KindInstallConfig, rollout.KindRestart}, not: []string{rollout.KindSetSysctl, rollout.KindSwitchRelease},
			dir: "/opt/relay/releases/1.7.0", rb: 425984},
	} {
		t.Run(tt.name, func(t *testing.T) {
			hosts := tt.hosts
			if hosts == nil {
				hosts = []lab.HostOptions{{}}
			}
			e := startLab(t, hosts, tt.spec)
			h := e.lab.Hosts[0]
			plan := tt.plan(e)
			kinds := windowKinds(t, plan)
			for _, k := range tt.kinds {
				if !kinds[k] {
					t.Fatalf("the %s plan's window has no %s step: %v", tt.name, k, kinds)
				}
			}
			for _, k := range tt.not {
				if kinds[k] {
					t.Fatalf("the %s plan's window has a %s step: %v", tt.name, k, kinds)
				}
			}
			starts := e.starts(h)
			e.killedApply(bin, plan, h)
			// The host's own read-back: 4 s, 1 s stable, and a rollback.
			end := windowEnd(t, h, 30*time.Second)
			pid, rb := awaitRelay(t, h, 5*time.Second)
			// It names the relay process its read-back held.
			if want := "window kept by=host pid=" + strconv.Itoa(pid); end != want {
				t.Errorf("the host ended the window with %q, want %q", end, want)
			}
			if exe := relayExe(t, h, pid); !strings.HasPrefix(exe, tt.dir+"/") || rb != tt.rb {
				t.Errorf("after the window: the relay runs %s with rb %d, want the release in %s with rb %d", exe, rb, tt.dir, tt.rb)
			}
			if n := e.starts(h) - starts; n != 1 {
				t.Errorf("the relay started %d times after the kill, want once (the window's restart)", n)
			}
			code, out, errs := e.relayctl("apply", plan, "--resume")
			if code != 0 || !strings.Contains(out, "lab-1: applied, "+rollout.RecoveryCompletedByHost) {
				t.Errorf("apply --resume: exit %d, want 0 and applied, %s\nstdout:\n%s\nstderr:\n%s", code, rollout.RecoveryCompletedByHost, out, errs)
			}
			if code, out, errs := e.relayctl("verify", plan); code != 0 {
				t.Errorf("verify: exit %d\n%s\n%s", code, out, errs)
			}
			converged(t, h)
		})
	}
}

// A rollback plan's run killed inside its second host's window, its
// canary applied: a plain re-run over that run's ledger refuses, naming
// the one command that goes on from it, --resume, which finds the canary
// as planned and the second host completed by itself. A host already at
// the rollback plan's target is as planned whichever command finds it:
// the rollback plan made again, and a plain apply once the ledger is
// done. On the code before, the re-run started a new ledger and refused
// the canary as stale (the facts the killed run changed), --resume did
// the same, and the rollback plan made again blocked it as "changed since
// that run". (The plan sets no sysctl: the lab's hosts share one kernel,
// so the canary's rollback of a global sysctl would be drift on the
// other host, which a real fleet does not have.)
func TestLabKilledRunThenRerunAndResume(t *testing.T) {
	bin := buildRelayctl(t)
	e := startLab(t, []lab.HostOptions{{}, {}}, func(s string) string {
		return strings.Replace(s, "sysctl:\n  net.core.rmem_max: 8388608\n", "", 1)
	})
	h1, h2 := e.lab.Hosts[0], e.lab.Hosts[1]
	e.mustPlan(e.spec, e.plan)
	if code, out, errs := e.relayctl("apply", e.plan); code != 0 {
		t.Fatalf("apply the forward plan: exit %d\n%s\n%s", code, out, errs)
	}
	back, _ := e.rollbackPlan(t)
	apply := exec.Command(bin, "apply", back, "--verify-timeout", "4s", "--stable-for", "1s",
		"--ssh-config", e.lab.SSHConfig, "--known-hosts", e.lab.KnownHosts, "--identity", e.lab.Identity)
	var progress lockedBuffer
	apply.Stderr = &progress
	if err := apply.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the killed run said:\n%s", progress.String())
		}
	})
	waitJournalFor(t, h2, "start window", 60*time.Second) // lab-1, the canary, is done
	apply.Process.Signal(syscall.SIGKILL)
	apply.Wait()
	if led := readLedger(t, back); ledgerLine(led) != "lab-1=applied lab-2="+rollout.InProgress {
		t.Fatalf("the killed run's ledger: %s, want lab-1 applied and lab-2 in progress", ledgerLine(led))
	}
	if end := windowEnd(t, h2, 30*time.Second); !strings.HasPrefix(end, "window kept by=host pid=") {
		t.Fatalf("lab-2's window ended %q, want kept by the host", end)
	}
	pid1, _, _ := e.socket(h1)

	code, out, errs := e.relayctl("apply", back)
	if code != 1 || !strings.Contains(errs, back+".ledger.json") || !strings.Contains(errs, "relayctl apply "+back+" --resume") || strings.Contains(out, "refused") {
		t.Errorf("a plain apply over the killed run's ledger: exit %d, want refused before anything connects, naming --resume\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	if led := readLedger(t, back); ledgerLine(led) != "lab-1=applied lab-2="+rollout.InProgress {
		t.Errorf("the refused apply changed the ledger: %s", ledgerLine(led))
	}
	code, out, errs = e.relayctl("apply", back, "--resume")
	if code != 0 || !strings.Contains(out, "lab-2: applied, "+rollout.RecoveryCompletedByHost) {
		t.Errorf("apply --resume: exit %d, want 0, lab-1 as planned and lab-2 completed by the host\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	code, out, errs = e.relayctl("rollback", e.plan, "--out", back+"2", "--detailed-exitcode")
	if md := mustRead(t, back+"2.md"); code != 0 || strings.Contains(md, "changed since that run") {
		t.Errorf("the rollback plan made again: exit %d, want 0 (both hosts back already)\nstdout:\n%s\nstderr:\n%s\nreview:\n%s", code, out, errs, md)
	}
	code, out, errs = e.relayctl("apply", back)
	if code != 0 || !strings.Contains(out, "unchanged:     2  lab-1 lab-2") {
		t.Errorf("apply once the ledger is done: exit %d, want 0 with both hosts unchanged\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	for _, h := range []*lab.Host{h1, h2} {
		pid, rb := awaitRelay(t, h, time.Second)
		if exe := relayExe(t, h, pid); !strings.HasPrefix(exe, "/opt/relay/releases/1.7.0/") || rb != 212992 {
			t.Errorf("%s: the relay runs %s with rb %d, want 1.7.0 with rb 212992", h.Name, exe, rb)
		}
		converged(t, h)
	}
	if pid, _, _ := e.socket(h1); pid != pid1 {
		t.Errorf("lab-1's relay restarted (pid %d, was %d) after the killed run had applied it", pid, pid1)
	}
}

// A canary whose new relay crashed during its read-back is rolled back,
// and that blocks the release: the first hint is a fixed release (or the
// rollback plan), not --resume, and --resume is refused with why, its
// canary left alone; --retry-rejected is the operator's word to go on. On
// the code before, only a soak's verdict blocked a release: the hint
// offered --resume, which deployed the same release to the same canary
// again.
func TestLabResumeAfterACanaryCrashed(t *testing.T) {
	e := startLab(t, []lab.HostOptions{{}, {}}, nil)
	h1, h2 := e.lab.Hosts[0], e.lab.Hosts[1]
	e.mustPlan(e.spec, e.plan)
	pid2, _, _ := e.socket(h2)
	done := e.applyAsync("--stable-for", "3s")
	waitJournal(t, h1, "done restart")
	if pid, _, ok := relayOn(h1); ok {
		syscall.Kill(pid, syscall.SIGKILL) // the new release crashes
	}
	r := <-done
	if r.code != 1 || !strings.Contains(r.out, "rolled back:   1  lab-1") || !strings.Contains(r.out, "not started:   1  lab-2") {
		t.Fatalf("apply: exit %d, want lab-1 rolled back and lab-2 not started\nstdout:\n%s\nstderr:\n%s", r.code, r.out, r.err)
	}
	hints := hintLines(r.err)
	if len(hints) == 0 || strings.Contains(hints[0], "--resume goes on") || !strings.Contains(hints[0], "fixed release") {
		t.Errorf("the first hint is not a fixed release or the rollback plan: %q", hints)
	}
	for _, hint := range hints {
		if strings.Contains(hint, "--resume goes on") {
			t.Errorf("a hint offers --resume after the release crashed: %s", hint)
		}
	}
	pid1, _, _ := e.socket(h1)
	starts1 := e.starts(h1)

	code, out, errs := e.relayctl("apply", e.plan, "--resume")
	if code != 1 || !strings.Contains(errs, "failed on lab-1 and was rolled back there") || !strings.Contains(errs, "--resume --retry-rejected goes on all the same") {
		t.Errorf("apply --resume after the crash: exit %d, want refused with the reason\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	if p, _, _ := e.socket(h1); p != pid1 || e.starts(h1) != starts1 {
		t.Errorf("lab-1's relay restarted (pid %d, was %d; %d starts since): the refused --resume deployed the release again", p, pid1, e.starts(h1)-starts1)
	}
	if p, _, _ := e.socket(h2); p != pid2 {
		t.Errorf("lab-2's relay restarted (pid %d, was %d): the refused --resume touched it", p, pid2)
	}
	// The operator's word: the same release again, knowingly.
	if code, out, errs := e.relayctl("apply", e.plan, "--resume", "--retry-rejected"); code != 0 {
		t.Errorf("apply --resume --retry-rejected: exit %d, want 0 (nothing crashes this time)\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
}

// hintLines are relayctl's hints in stderr, in order.
func hintLines(stderr string) []string {
	var out []string
	for _, l := range strings.Split(stderr, "\n") {
		if h, ok := strings.CutPrefix(l, "relayctl: hint: "); ok {
			out = append(out, h)
		}
	}
	return out
}
