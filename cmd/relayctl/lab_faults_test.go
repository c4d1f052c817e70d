package main

// Faults, each against the lab: a second concurrent apply, a
// connection killed inside the window, a host whose sysctl is read-only, an
// interrupt during a fleet apply, and the canary order of a fleet.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/relayctl/relayctl/internal/kerneltest"
	"github.com/relayctl/relayctl/internal/lab"
	"github.com/relayctl/relayctl/rollout"
	"github.com/relayctl/relayctl/tune"
)

// slowStop makes the relay's stop take a while, so a test can act while a
// host is inside its window. It is a real command, as a spec could give.
func slowStop(s string) string {
	return strings.Replace(s, "stop: ["+lab.ServiceScript+", stop]",
		`stop: [/bin/sh, -c, "sleep 2; exec `+lab.ServiceScript+` stop"]`, 1)
}

// waitJournal polls the host's journal until it contains want (bounded).
func waitJournal(t *testing.T, h *lab.Host, want string) string {
	t.Helper()
	var j []byte
	for i := 0; i < 300; i++ {
		j, _ = h.Exec(context.Background(), "cat", "/var/lib/relayctl/journal")
		if strings.Contains(string(j), want) {
			return string(j)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s: journal never showed %q; it has:\n%s", h.Name, want, j)
	return ""
}

type result struct {
	code     int
	out, err string
}

// applyIntoWindow plans, starts an apply in the background and returns
// once host h is inside its window (its journal shows the restart), with
// the channel the apply's result arrives on.
func (e *labEnv) applyIntoWindow(h *lab.Host) <-chan result {
	e.t.Helper()
	if code, _, errs := e.relayctl("plan", e.spec, "--out", e.plan, "--detailed-exitcode"); code != 2 {
		e.t.Fatalf("plan: exit %d: %s", code, errs)
	}
	done := make(chan result, 1)
	go func() {
		c, o, er := e.relayctl("apply", e.plan)
		done <- result{c, o, er}
	}()
	waitJournal(e.t, h, "start restart")
	return done
}

func TestLabSecondApplyIsRefused(t *testing.T) {
	e := startLab(t, []lab.HostOptions{{}}, slowStop)
	h := e.lab.Hosts[0]
	first := e.applyIntoWindow(h)
	// The same plan again, from this machine, meets the first run's hold
	// on the plan file, --resume too: the ledger shows a host in
	// progress, but its run is alive, not killed.
	for _, args := range [][]string{{"apply", e.plan}, {"apply", e.plan, "--resume"}} {
		code, out, errs := e.relayctl(args...)
		if code != 1 || !strings.Contains(errs, "another relayctl on this machine is applying this plan now") {
			t.Errorf("%s: exit %d, want 1 and refused naming the run\nstdout:\n%s\nstderr:\n%s", args, code, out, errs)
		}
	}
	// Another plan for the same host, with other paths, meets the same
	// lock: the lock and journal do not depend on anything a spec says.
	other := filepath.Join(e.dir, "other.yaml")
	spec, _ := os.ReadFile(e.spec)
	os.WriteFile(other, []byte(strings.Replace(string(spec), "name: lab-rcvbuf", "name: other-plan\nhost:\n  relay_config: /etc/relay/other.env", 1)), 0o644)
	if code, _, errs := e.relayctl("plan", other, "--out", other+".plan", "--detailed-exitcode"); code != 2 && code != 0 {
		t.Fatalf("plan of the other spec: exit %d: %s", code, errs)
	}
	code, out, errs := e.relayctl("apply", other+".plan")
	if code != 1 || !strings.Contains(out, "another apply holds the host lock: relayctl") || !strings.Contains(out, "plan lab-rcvbuf") {
		t.Errorf("apply of another plan: exit %d, want 1 and refused naming the holder\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	r := <-first
	if r.code != 0 {
		t.Errorf("first apply: exit %d\n%s\n%s", r.code, r.out, r.err)
	}
}

// A run whose connection is killed inside the window, and that does not
// dial the host again (--reconnects 0), says the host ends the window by
// itself; the host does, and the one recovery command reports it.
func TestLabConnectionKilledInWindow(t *testing.T) {
	e := startLab(t, []lab.HostOptions{{}}, slowStop)
	h := e.lab.Hosts[0]
	if code, _, errs := e.relayctl("plan", e.spec, "-out", e.plan, "--detailed-exitcode"); code != 2 {
		t.Fatalf("plan: exit %d: %s", code, errs)
	}
	first := e.applyAsync("--reconnects", "0")
	waitJournal(t, h, "start restart")
	// Kill the SSH connection: the per-connection sshd processes are the
	// listening sshd's children.
	if out, err := exec.Command("pkill", "-KILL", "-P", strconv.Itoa(h.SSHDPID)).CombinedOutput(); err != nil {
		t.Fatalf("pkill: %v %s", err, out)
	}
	r := <-first
	if r.code != 1 || !strings.Contains(r.out, "failed:") || !strings.Contains(r.out, "the host ends its window by itself") || !strings.Contains(r.out, "journal") {
		t.Errorf("killed apply: exit %d, want 1, failed, the host ending its window, its journal named\nstdout:\n%s\nstderr:\n%s", r.code, r.out, r.err)
	}
	// The window goes on on the host, reads itself back, and keeps it.
	waitJournal(t, h, "window kept by=host")

	// The one recovery command: --resume. The journal shows the host kept
	// the window: no restart, the read-back, the receipt, the journal filed.
	pid, _, _ := e.socket(h)
	code, out, errs := e.relayctl("apply", e.plan, "--resume")
	if code != 0 || !strings.Contains(out, "lab-1: applied, "+rollout.RecoveryCompletedByHost) || !strings.Contains(errs, "a dead run's lock was left") {
		t.Errorf("apply --resume: exit %d, want 0, %s, the dead run's lock named\nstdout:\n%s\nstderr:\n%s", code, rollout.RecoveryCompletedByHost, out, errs)
	}
	if p2, rb, _ := e.socket(h); p2 != pid || rb != 8388608 {
		t.Errorf("after the recovery: pid %d → %d, rb %d; want no restart and rb 8388608", pid, p2, rb)
	}
	if r := readReceipt(t, e.plan+".receipt.json"); r.Hosts[0].Outcome != "applied" || r.Hosts[0].Recovery != rollout.RecoveryCompletedByHost || r.Hosts[0].Restarts != 0 {
		t.Errorf("receipt: %+v; want applied, %s, no restart", r.Hosts[0], rollout.RecoveryCompletedByHost)
	}
	if out, err := h.Exec(context.Background(), "sh", "-c", "test ! -e /var/lib/relayctl/journal && test ! -e /var/lib/relayctl/lock.owner && ls /var/lib/relayctl/receipts/*.journal"); err != nil {
		t.Errorf("after the recovery the journal or the lock owner is still there, or no journal was filed: %v %s", err, out)
	}
}

// A value the kernel refuses by a rule relayctl does not know (here a
// kernel build's floor, forgotten as a relayctl that predates it would):
// the plan cannot foresee it, so the window's write is read back and
// refused. The kernel's own words reach the operator, the sysctl written
// before it is put back, nothing is persisted, and the relay is not
// restarted.
func TestLabKernelRefusesAValueRelayctlCannotKnow(t *testing.T) {
	e := startLab(t, []lab.HostOptions{{}}, func(s string) string {
		return strings.Replace(s, "  net.core.rmem_max: 8388608\n", "  net.core.rmem_max: 8388608\n  net.ipv4.tcp_rmem: 1 1 1\n", 1)
	})
	kerneltest.Set(t, "net.ipv4.tcp_rmem", kerneltest.Read(t, "net.ipv4.tcp_rmem"))
	var vout, verr strings.Builder
	if code := run([]string{"relayctl", "validate", e.spec}, strings.NewReader(""), &vout, &verr); code != 1 || !strings.Contains(vout.String()+verr.String(), "Linux 6.18.44-fc refuses less") {
		t.Fatalf("validate: exit %d, want 1 naming the kernel's floor\n%s%s", code, vout.String(), verr.String())
	}
	defer tune.ForgetBuildFloors()()
	h := e.lab.Hosts[0]
	pid, _, _ := e.socket(h)
	if code, out, errs := e.relayctl("plan", e.spec, "--out", e.plan, "--detailed-exitcode"); code != 2 {
		t.Fatalf("plan: exit %d, want 2\n%s%s", code, out, errs)
	}
	code, out, errs := e.relayctl("apply", e.plan)
	if code != 1 || !strings.Contains(out, "the kernel refused net.ipv4.tcp_rmem = 1 1 1 (Invalid argument)") || !strings.Contains(out, "rolled back") {
		t.Errorf("apply: exit %d, want 1, rolled back with the kernel's reason\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	if p2, rb, _ := e.socket(h); p2 != pid || rb != 212992 {
		t.Errorf("relay pid %d → %d, rb %d: want the same process, not restarted, on 212992", pid, p2, rb)
	}
	if got := kerneltest.Read(t, "net.core.rmem_max"); got != incidentRmem {
		t.Errorf("rmem_max after the rollback: %s, want %s put back", got, incidentRmem)
	}
	if out, err := h.Exec(context.Background(), "sh", "-c", "test ! -e /etc/sysctl.d/90-relayctl.conf"); err != nil {
		t.Errorf("the sysctl drop-in was persisted: %v %s", err, out)
	}
	if r := readReceipt(t, e.plan+".receipt.json"); r.Hosts[0].Outcome != "rolled back" || r.Hosts[0].Restarts != 0 {
		t.Errorf("receipt: outcome %q, restarts %d; want rolled back, no restart", r.Hosts[0].Outcome, r.Hosts[0].Restarts)
	}
}

func TestLabReadOnlySysctlIsRefusedBeforeTheWindow(t *testing.T) {
	e := startLab(t, []lab.HostOptions{{SSHDInNetns: true}}, nil)
	h := e.lab.Hosts[0]
	pid, rb, _ := e.socket(h)
	code, out, errs := e.relayctl("plan", e.spec, "--out", e.plan, "--detailed-exitcode")
	if code != 1 || !strings.Contains(out, "net.core.rmem_max is read-only in this host's network namespace") {
		t.Fatalf("plan: exit %d, want 1 with the read-only blocker\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	md, _ := os.ReadFile(e.plan + ".md")
	if !strings.Contains(string(md), "BLOCKED") {
		t.Errorf("the review does not show the blocker:\n%s", md)
	}
	code, out, errs = e.relayctl("apply", e.plan)
	if code != 1 || !strings.Contains(out, "refused:") || !strings.Contains(out, "blocked in the plan") {
		t.Errorf("apply: exit %d, want 1 and refused\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	if p2, rb2, _ := e.socket(h); p2 != pid || rb2 != rb {
		t.Errorf("a refused host changed: pid %d → %d, rb %d → %d", pid, p2, rb, rb2)
	}
	if _, err := h.Exec(context.Background(), "test", "-e", "/opt/relay/releases/1.8.0"); err == nil {
		t.Error("the release was staged on a refused host")
	}
}

// buildRelayctl builds the CLI for tests that need a real process
// (signals), once a test process: a build is seconds of link time, and a
// dozen lab tests need one. Tests only run it, so they share it.
func buildRelayctl(t *testing.T) string {
	t.Helper()
	lab.Require(t) // only lab tests run a built relayctl: no build to skip
	relayctlBuild.Do(func() {
		dir, err := os.MkdirTemp("", "relayctl-test-build-")
		if err != nil {
			relayctlBuild.err = err
			return
		}
		relayctlBuild.path = filepath.Join(dir, "relayctl")
		if b, err := exec.Command("go", "build", "-o", relayctlBuild.path, ".").CombinedOutput(); err != nil {
			relayctlBuild.err = fmt.Errorf("%v\n%s", err, b)
		}
	})
	if relayctlBuild.err != nil {
		t.Fatalf("build relayctl: %v", relayctlBuild.err)
	}
	return relayctlBuild.path
}

var relayctlBuild struct {
	sync.Once
	path string
	err  error
}

func TestLabFleetCanaryAndInterrupt(t *testing.T) {
	bin := buildRelayctl(t)
	e := startLab(t, []lab.HostOptions{{}, {}, {}}, slowStop)
	pids := map[string]int{}
	for _, h := range e.lab.Hosts {
		pids[h.Name], _, _ = e.socket(h)
	}
	if code, _, errs := e.relayctl("plan", e.spec, "--out", e.plan, "--detailed-exitcode"); code != 2 {
		t.Fatalf("plan: exit %d: %s", code, errs)
	}
	cmd := exec.Command(bin, "apply", e.plan, "--parallel", "2",
		"--ssh-config", e.lab.SSHConfig, "--known-hosts", e.lab.KnownHosts, "--identity", e.lab.Identity)
	var out strings.Builder
	var errb lockedBuffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	canary := e.lab.Hosts[0]
	waitJournal(t, canary, "start restart")
	// Only the canary may have started its window.
	for _, h := range e.lab.Hosts[1:] {
		if j, _ := h.Exec(context.Background(), "cat", "/var/lib/relayctl/journal"); len(j) > 0 {
			t.Errorf("%s started before the canary verified:\n%s", h.Name, j)
		}
	}
	// Each interrupt is answered at once, while the canary's relay is still
	// stopping (slowStop): what the first does, and that the second cuts
	// no window short.
	cmd.Process.Signal(syscall.SIGINT)
	errb.waitFor(t, "relayctl: interrupt: no new host starts; finishing the window on 1 host (lab-1): it ends applied or rolled back; then relayctl stops")
	cmd.Process.Signal(syscall.SIGINT)
	errb.waitFor(t, "relayctl: interrupt again: still finishing the windows in flight")
	err := cmd.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Errorf("interrupted apply: %v, want exit 1", err)
	}
	if !strings.Contains(out.String(), "applied:       1  lab-1") || !strings.Contains(out.String(), "not started:   2") {
		t.Errorf("recap: got\n%s\nwant lab-1 applied and 2 not started\nstderr:\n%s", out.String(), errb.String())
	}
	for _, h := range e.lab.Hosts {
		p, rb, _ := e.socket(h)
		switch h.Name {
		case canary.Name:
			if p == pids[h.Name] || rb != 8388608 {
				t.Errorf("canary: pid %d → %d, rb %d; want it to finish its window", pids[h.Name], p, rb)
			}
		default:
			if p != pids[h.Name] || rb != 212992 {
				t.Errorf("%s: pid %d → %d, rb %d; want untouched", h.Name, pids[h.Name], p, rb)
			}
		}
	}
	// The rest of the fleet, in a second run: the canary is unchanged.
	code, o2, errs := e.relayctl("apply", e.plan, "--parallel", "2")
	if code != 0 || !strings.Contains(o2, "applied:       2") || !strings.Contains(o2, "unchanged:     1  lab-1") {
		t.Errorf("second run: exit %d\n%s\n%s", code, o2, errs)
	}
	if got := kerneltest.Read(t, "net.core.rmem_max"); got != "8388608" {
		t.Errorf("rmem_max: %s", got)
	}
}

// lockedBuffer is a process's stderr, read while it runs.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// waitFor waits up to a second for want to appear: "at once".
func (l *lockedBuffer) waitFor(t *testing.T, want string) {
	t.Helper()
	for deadline := time.Now().Add(time.Second); !strings.Contains(l.String(), want); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("not said within a second: %q\nstderr so far:\n%s", want, l.String())
		}
	}
}
