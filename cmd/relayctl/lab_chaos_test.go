package main

// The chaos test: faults together, at random moments, on lab
// hosts with a real sshd and relayd. Each trial plans the other release
// (1.8.0 and 1.7.0 in turn), starts `relayctl apply` as a process of its
// own, and at a random moment of a phase it picks (the stage, the window,
// the read-back and commit, or any time in the first 700 ms, each found by
// watching the victim host's journal) does one of: SIGKILL relayctl, cut a
// host's SSH connection (its session and everything under it killed on
// the host, lab.Host.CutSessions: the per-connection sshd, its process
// tree and its sessions; under systemd the session scope's whole cgroup),
// kill every relayctl process on a host (its agent and its window's), or
// fill a disk on a host (its releases or its state folder). The relay's
// stop takes 300 ms, as a relay that drains does, so a window is long
// enough to be hit. 2 s after a cut every relay must be running again.
// Then it runs the one documented recovery, `relayctl apply PLAN
// --resume`, and checks every host: as planned or as it was (never in
// between), one relay process, rb as its outcome says, the ledger and the
// receipt's words true to it. A third of the trials run on hosts with a
// real systemd (relayd.service, logind sessions), the rest under the
// command manager.
//
// RELAYCTL_CHAOS_TRIALS (default 4: the CI run) and RELAYCTL_CHAOS_SEED
// choose the run; RELAYCTL_CHAOS_FAULTS (a comma-separated list of
// chaosFaults, default all) the faults it draws from;
// RELAYCTL_CHAOS_MANAGERS (command, systemd, or both: the default) the
// hosts' service managers; RELAYCTL_CHAOS_OUT=FILE writes its figures as
// JSON (scripts/chaos.sh runs the long one).

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/relayctl/relayctl/internal/kerneltest"
	"github.com/relayctl/relayctl/internal/lab"
	"github.com/relayctl/relayctl/relay/sockstat"
	"github.com/relayctl/relayctl/rollout"
)

// chaosPhase is a moment a trial aims its fault at: a random delay (up to
// within ms) after the first journal line that says the victim reached
// the phase (marker; "" is from the start).
type chaosPhase struct {
	name, marker string
	within       int
}

var chaosPhases = []chaosPhase{
	{"any time in the first 700 ms", "", 700},
	{"stage", "begin plan=", 150},
	{"window", "start window", 400},
	{"read-back and commit", "done restart", 150},
}

// chaosFaults are the faults a trial picks from (systemd hosts have no
// small disks of their own to fill).
var chaosFaults = []string{"kill relayctl", "cut a connection", "kill an agent", "fill a disk"}

// chaosFigures are a run's counts, for docs/recovery.md.
type chaosFigures struct {
	Seed       int64          `json:"seed"`
	Trials     int            `json:"trials"`
	Faults     map[string]int `json:"faults"`           // by kind
	Aimed      map[string]int `json:"aimed_at"`         // the phase each trial aimed at
	Policies   map[string]int `json:"recover_policies"` // --recover of each recovery
	Phases     map[string]int `json:"faults_by_phase"`  // where each host was when it hit
	Recoveries map[string]int `json:"recoveries"`       // what the recovering run did, by host
	Managers   map[string]int `json:"trials_by_manager"`
	CutsAimed  map[string]int `json:"cuts_aimed_at"` // the phase each cut aimed at
	// Cuts: the hosts' relays checked 2 s after each cut (hosts x cuts),
	// those not running then, and the cut trials whose own run converged.
	RelaysAfterCut   int      `json:"relays_checked_2s_after_a_cut"`
	DownAfterCut     int      `json:"relays_down_2s_after_a_cut"`
	CutsConvergedRun int      `json:"cut_trials_converged_by_the_cut_run"`
	InBetween        int      `json:"hosts_in_between"`
	MoreThanOne      int      `json:"recoveries_needing_more_than_one_command"`
	Problems         []string `json:"problems,omitempty"`
}

func TestLabChaos(t *testing.T) {
	trials := envInt(t, "RELAYCTL_CHAOS_TRIALS", 4)
	seed := int64(envInt(t, "RELAYCTL_CHAOS_SEED", int(time.Now().UnixNano()%1e9)))
	rng := rand.New(rand.NewPCG(uint64(seed), 20))
	fig := &chaosFigures{Seed: seed, Trials: trials, Faults: map[string]int{}, Aimed: map[string]int{}, Policies: map[string]int{},
		Phases: map[string]int{}, Recoveries: map[string]int{}, Managers: map[string]int{}, CutsAimed: map[string]int{}}
	t.Logf("chaos: seed %d, %d trials", seed, trials)
	systemd := trials / 3
	switch os.Getenv("RELAYCTL_CHAOS_MANAGERS") {
	case "", "command,systemd", "systemd,command":
	case "command":
		systemd = 0
	case "systemd":
		systemd = trials
	default:
		t.Fatalf("RELAYCTL_CHAOS_MANAGERS: %q: want command, systemd or both (command,systemd)", os.Getenv("RELAYCTL_CHAOS_MANAGERS"))
	}
	for _, m := range []struct {
		name   string
		trials int
	}{{"command", trials - systemd}, {"systemd", systemd}} {
		t.Run(m.name, func(t *testing.T) {
			if m.trials == 0 {
				t.Skip("no trials")
			}
			c := newChaos(t, m.name == "systemd")
			for n := range m.trials {
				c.trial(n, rng, fig)
				fig.Managers[m.name]++
			}
		})
	}
	t.Logf("chaos: %+v", *fig)
	if out := os.Getenv("RELAYCTL_CHAOS_OUT"); out != "" {
		b, _ := json.MarshalIndent(fig, "", "  ")
		os.WriteFile(out, b, 0o644)
	}
	if fig.InBetween > 0 || fig.MoreThanOne > 0 || fig.DownAfterCut > 0 || len(fig.Problems) > 0 {
		t.Errorf("%d host(s) in between, %d recoveries needing more than one command, %d relays down 2 s after a cut (seed %d):\n%s",
			fig.InBetween, fig.MoreThanOne, fig.DownAfterCut, seed, strings.Join(fig.Problems, "\n"))
	}
}

// chaos is the test's lab: three hosts (two with systemd), both
// releases, and relayctl built as a program of its own (it is killed).
type chaos struct {
	t       *testing.T
	e       *labEnv
	bin     string
	specs   [2]string // 1.8.0, then 1.7.0
	want    [2]chaosHost
	systemd bool
	faults  []string // what a trial draws its fault from
}

// chaosHost is what a host is: the release its link names, its rb.
type chaosHost struct {
	release string
	rb      uint64
}

func newChaos(t *testing.T, systemd bool) *chaos {
	c := &chaos{t: t, systemd: systemd, faults: chaosFaultsFrom(t)}
	if systemd {
		c.e = startLab(t, []lab.HostOptions{{Systemd: true, Logind: true}, {Systemd: true, Logind: true}}, func(s string) string {
			return strings.Replace(s, "    manager: command\n    start: ["+lab.ServiceScript+", start]\n    stop: ["+lab.ServiceScript+", stop]\n    pid_file: "+lab.RelayPIDFile+"\n",
				"    manager: systemd\n    name: relayd\n", 1)
		})
	} else {
		c.e = startLab(t, make([]lab.HostOptions, 3), nil)
	}
	// The lab's hosts share the machine's net.core.rmem_max (the kernel
	// keeps one for every network namespace): one host's rollback would set
	// it back under the others, which no fleet of real machines does, and
	// a resume would then rightly refuse them. The trials start with it at
	// the value both specs plan, so no trial's window changes what the
	// hosts share; the sysctl's set and rollback under a fault are the
	// single-host cut tests' (lab_cut_test.go).
	kerneltest.Set(t, "net.core.rmem_max", "8388608")
	c.bin = buildRelayctl(t)
	base, _ := os.ReadFile(c.e.spec)
	base = []byte(strings.Replace(string(base), "stop: ["+lab.ServiceScript+", stop]",
		`stop: [/bin/sh, -c, "sleep 0.3; exec `+lab.ServiceScript+` stop"]`, 1))
	os.WriteFile(c.e.spec, base, 0o644)
	older := strings.Replace(string(base), "version: 1.8.0\n    artifact: "+lab.BuildRelayd(t, "1.8.0"), "version: 1.7.0\n    artifact: "+lab.BuildRelayd(t, "1.7.0"), 1)
	older = strings.Replace(older, "so_rcvbuf: 4194304", "so_rcvbuf: 2097152", 1)
	c.specs[0] = c.e.spec
	c.specs[1] = filepath.Join(c.e.dir, "older.yaml")
	os.WriteFile(c.specs[1], []byte(older), 0o644)
	c.want = [2]chaosHost{{"1.8.0", 8388608}, {"1.7.0", 4194304}}
	if systemd {
		// The unit's stop takes 300 ms too.
		for _, h := range c.e.lab.Hosts {
			c.sh(h, `set -e
printf '[Service]\nExecStopPost=/bin/sleep 0.3\n' > /etc/systemd/system/relayd.service.d/chaos-slow-stop.conf
systemctl daemon-reload`)
		}
		return c
	}
	// Small disks of their own for the releases and the state folder, so a
	// fault can fill them.
	for _, h := range c.e.lab.Hosts {
		c.sh(h, `set -e
cp -a /opt/relay/releases /opt/relay/releases.keep
mount -t tmpfs -o size=64m,mode=0755 chaos-releases /opt/relay/releases
cp -a /opt/relay/releases.keep/. /opt/relay/releases/ && rm -rf /opt/relay/releases.keep
mkdir -p /var/lib/relayctl && mount -t tmpfs -o size=16m,mode=0755 chaos-state /var/lib/relayctl`)
	}
	return c
}

func (c *chaos) sh(h *lab.Host, script string) string {
	c.t.Helper()
	out, err := h.Exec(context.Background(), "sh", "-c", script)
	if err != nil {
		c.t.Fatalf("%s: %v %s", h.Name, err, out)
	}
	return string(out)
}

// run starts relayctl with the lab's SSH files.
func (c *chaos) run(args ...string) *exec.Cmd {
	l := c.e.lab
	cmd := exec.Command(c.bin, append(args, "--ssh-config", l.SSHConfig, "--known-hosts", l.KnownHosts, "--identity", l.Identity)...)
	cmd.Dir = c.e.dir
	return cmd
}

// trial is one plan, one faulty apply, one recovery, and the checks.
func (c *chaos) trial(n int, rng *rand.Rand, fig *chaosFigures) {
	t := c.t
	target := n % 2
	plan := filepath.Join(c.e.dir, fmt.Sprintf("trial-%d.plan", n))
	before := c.hosts()
	args := []string{"plan", c.specs[target], "--out", plan}
	if target == 1 {
		args = append(args, "--allow-downgrade")
	}
	if out, err := c.run(args...).CombinedOutput(); err != nil {
		t.Fatalf("trial %d: plan: %v %s", n, err, out)
	}
	faults := c.faults
	if c.systemd && len(faults) > 1 {
		faults = slices.DeleteFunc(slices.Clone(faults), func(f string) bool { return f == "fill a disk" })
	}
	fault := faults[rng.IntN(len(faults))]
	victim := c.e.lab.Hosts[rng.IntN(len(c.e.lab.Hosts))]
	fig.Faults[fault]++
	first := c.run("apply", plan, "--waves", "100%", "--parallel", "3", "--max-failures", "3", "--max-unreachable", "3")
	var out strings.Builder
	first.Stdout, first.Stderr = &out, &out
	began := time.Now()
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- first.Wait() }()
	phase := chaosPhases[rng.IntN(len(chaosPhases))]
	fig.Aimed[phase.name]++
	ended := c.await(victim, phase, done, rng)
	undo := c.inject(fault, victim, first, rng)
	if fault == "cut a connection" {
		fig.CutsAimed[phase.name]++
		c.relaysAfterCut(n, fig)
	}
	select {
	case <-ended:
	case <-time.After(3 * time.Minute):
		first.Process.Kill()
		<-done
		t.Fatalf("trial %d: the faulty apply never ended:\n%s", n, out.String())
	}
	faulty := time.Since(began)
	if fault == "cut a connection" && c.converged(plan) {
		fig.CutsConvergedRun++
	}
	c.waitAgents()
	for _, h := range c.e.lab.Hosts {
		fig.Phases[c.phaseOf(h)]++
	}
	undo()

	// The one documented recovery command, with either policy.
	policy := []string{"complete", "rollback"}[rng.IntN(2)]
	fig.Policies[policy]++
	rec := c.run("apply", plan, "--resume", "--recover", policy, "--waves", "100%", "--parallel", "3", "--max-failures", "3", "--max-unreachable", "3")
	began = time.Now()
	recOut, err := rec.CombinedOutput()
	code := exitOf(err)
	t.Logf("trial %d: %s on %s aimed at %s: the faulty apply %.1f s (exit %d); the recovery, --recover %s, %.1f s (exit %d)",
		n, fault, victim.Name, phase.name, faulty.Seconds(), first.ProcessState.ExitCode(), policy, time.Since(began).Seconds(), code)
	c.check(n, target, fault, before, plan, code, string(recOut), fig)
}

// inject does the fault and returns what puts the host back (a disk freed).
func (c *chaos) inject(fault string, h *lab.Host, apply *exec.Cmd, rng *rand.Rand) func() {
	switch fault {
	case "kill relayctl":
		apply.Process.Signal(syscall.SIGKILL)
	case "cut a connection":
		if _, err := h.CutSessions(); err != nil {
			c.t.Errorf("cut: %v", err)
		}
	case "kill an agent":
		for _, pid := range c.agents(h) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	case "fill a disk":
		dir := "/opt/relay/releases"
		if rng.IntN(2) == 1 {
			dir = "/var/lib/relayctl"
		}
		h.Exec(context.Background(), "sh", "-c", "dd if=/dev/zero of="+dir+"/.chaos-fill bs=64k 2>/dev/null; true")
		return func() { h.Exec(context.Background(), "rm", "-f", dir+"/.chaos-fill") }
	}
	return func() {}
}

// await waits until the victim's journal shows the phase's marker (or the
// apply ends, or 10 s pass), then a random part of the phase's length. It
// returns where the apply's end arrives.
func (c *chaos) await(h *lab.Host, ph chaosPhase, done chan error, rng *rand.Rand) <-chan error {
	if ph.marker != "" {
		// Read through the host's own root: its state folder is a mount of
		// its mount namespace.
		path := fmt.Sprintf("/proc/%d/root/var/lib/relayctl/journal", h.SSHDPID)
		for i := 0; i < 2000; i++ {
			if b, _ := os.ReadFile(path); strings.Contains(string(b), ph.marker) {
				break
			}
			select {
			case err := <-done: // over before the phase came
				again := make(chan error, 1)
				again <- err
				return again
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
	time.Sleep(time.Duration(rng.IntN(ph.within+1)) * time.Millisecond)
	return done
}

// relaysAfterCut checks, 2 s after a cut, that every host's relay runs.
func (c *chaos) relaysAfterCut(n int, fig *chaosFigures) {
	time.Sleep(2 * time.Second)
	for _, h := range c.e.lab.Hosts {
		fig.RelaysAfterCut++
		if k := c.relays(h); k < 1 {
			fig.DownAfterCut++
			fig.Problems = append(fig.Problems, fmt.Sprintf("trial %d (cut a connection): %s: no relay running 2 s after the cut", n, h.Name))
		}
	}
}

// converged says the faulty run's own receipt has every host applied,
// unchanged or rolled back: the run that was cut off converged.
func (c *chaos) converged(plan string) bool {
	var r rollout.FleetReceipt
	if b, err := os.ReadFile(plan + ".receipt.json"); err != nil || json.Unmarshal(b, &r) != nil || len(r.Hosts) == 0 {
		return false
	}
	for _, h := range r.Hosts {
		if h.Outcome != rollout.Applied && h.Outcome != rollout.Unchanged && h.Outcome != rollout.RolledBack {
			return false
		}
	}
	return true
}

// agents are the PIDs of relayctl's processes on h (in its mount
// namespace): its sessions' agents (AGENT serve) and its windows'
// (relayctl-window, or AGENT window where systemd-run started it in a
// scope of its own, which sets no argv[0] of its choosing).
func (c *chaos) agents(h *lab.Host) []int {
	var pids []int
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		cmdline, _ := os.ReadFile("/proc/" + p.Name() + "/cmdline")
		ns, _ := os.Readlink("/proc/" + p.Name() + "/ns/mnt")
		agent := strings.Contains(string(cmdline), "/agent/") &&
			(strings.Contains(string(cmdline), "\x00serve\x00") || strings.Contains(string(cmdline), "\x00window\x00"))
		if (agent || strings.HasPrefix(string(cmdline), "relayctl-window\x00")) && ns == h.MountNS {
			pids = append(pids, pid)
		}
	}
	return pids
}

// waitAgents waits until no agent runs on any host: a window whose
// relayctl is gone ends by itself (its read-back, at most
// --verify-timeout), and an agent goes on with its batch until it next
// writes to relayctl.
func (c *chaos) waitAgents() {
	for range 1200 {
		busy := false
		for _, h := range c.e.lab.Hosts {
			busy = busy || len(c.agents(h)) > 0
		}
		if !busy {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.t.Fatal("agents still running 60 s after the faulty apply ended")
}

// phaseOf is where the faulty run left a host, from its journal.
func (c *chaos) phaseOf(h *lab.Host) string {
	j, _ := h.Exec(context.Background(), "sh", "-c", "cat /var/lib/relayctl/journal 2>/dev/null; true")
	s := string(j)
	switch {
	case s == "":
		return "none left (done, or not begun)"
	case strings.Contains(s, "start rollback"):
		return "rollback"
	case strings.Contains(s, " end "):
		return "commit"
	case strings.Contains(s, "start window"):
		return "window"
	}
	return "stage"
}

// hosts reads what each host is now.
func (c *chaos) hosts() []chaosHost {
	var out []chaosHost
	for _, h := range c.e.lab.Hosts {
		out = append(out, c.host(h))
	}
	return out
}

func (c *chaos) host(h *lab.Host) chaosHost {
	link, _ := h.Exec(context.Background(), "readlink", "/opt/relay/current")
	ch := chaosHost{release: filepath.Base(strings.TrimSpace(string(link)))}
	pid, err := h.RelayPID(context.Background())
	if err != nil {
		return ch
	}
	out, err := h.Exec(context.Background(), "nsenter", "-t", strconv.Itoa(pid), "-n", "ss", "-H", "-O", "-u", "-l", "-n", "-m", "sport = :7788")
	if socks, perr := sockstat.ParseSS(out); err == nil && perr == nil && len(socks) == 1 {
		ch.rb = socks[0].Rcvbuf
	}
	return ch
}

// relays counts the relayd processes in h's relay network namespace (on
// a systemd host, in relayd.service's cgroup).
func (c *chaos) relays(h *lab.Host) int {
	if h.Kind == lab.KindSystemd {
		n := 0
		procs, _ := os.ReadFile(filepath.Join(h.Cgroup, "system.slice", "relayd.service", "cgroup.procs"))
		for _, p := range strings.Fields(string(procs)) {
			if exe, _ := os.Readlink("/proc/" + p + "/exe"); strings.Contains(exe, "/opt/relay/releases/") {
				n++
			}
		}
		return n
	}
	want, err := os.Stat("/run/netns/" + h.RelayNetns)
	if err != nil {
		return -1
	}
	n := 0
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		if _, err := strconv.Atoi(p.Name()); err != nil {
			continue
		}
		exe, _ := os.Readlink("/proc/" + p.Name() + "/exe")
		ns, err := os.Stat("/proc/" + p.Name() + "/ns/net")
		if err == nil && strings.Contains(exe, "/opt/relay/releases/") && os.SameFile(ns, want) {
			n++
		}
	}
	return n
}

// check holds every host to "as planned or as it was", and the receipt and
// ledger to the truth.
func (c *chaos) check(n, target int, fault string, before []chaosHost, plan string, code int, out string, fig *chaosFigures) {
	problem := func(format string, a ...any) {
		fig.Problems = append(fig.Problems, fmt.Sprintf("trial %d (%s): ", n, fault)+fmt.Sprintf(format, a...))
	}
	var r rollout.FleetReceipt
	if b, err := os.ReadFile(plan + ".receipt.json"); err != nil || json.Unmarshal(b, &r) != nil || len(r.Hosts) != len(c.e.lab.Hosts) {
		problem("no receipt from the recovery (exit %d):\n%s", code, out)
		fig.MoreThanOne++
		return
	}
	led := readLedger(c.t, plan)
	for i, h := range c.e.lab.Hosts {
		now, rh := c.host(h), r.Hosts[i]
		planned, was := now == c.want[target], now == before[i]
		switch {
		case !planned && !was:
			fig.InBetween++
			problem("%s is in between: %+v (planned %+v, was %+v); the recovery said %s (%s): %s", h.Name, now, c.want[target], before[i], rh.Outcome, rh.State, rh.Reason)
		case rh.Outcome == rollout.Applied || rh.Outcome == rollout.Unchanged:
			if !planned {
				problem("%s: the receipt says %s, the host is not as planned: %+v", h.Name, rh.Outcome, now)
			}
		case rh.State == rollout.StateAsWas:
			if !was {
				problem("%s: the receipt says %s (as it was: %s), the host is not: %+v", h.Name, rh.Outcome, rh.Reason, now)
			}
		default:
			// Neither applied nor as it was: a recovery that did not converge.
			fig.MoreThanOne++
			problem("%s: the recovery ended %s (%s): %s", h.Name, rh.Outcome, rh.State, rh.Reason)
		}
		if k := c.relays(h); k != 1 {
			problem("%s: %d relay processes", h.Name, k)
		}
		if led.Hosts[i].Outcome != string(rh.Outcome) {
			problem("%s: the ledger says %s, the receipt %s", h.Name, led.Hosts[i].Outcome, rh.Outcome)
		}
		kind := rh.Recovery
		if kind == "" {
			kind = "none: " + string(rh.Outcome)
		}
		fig.Recoveries[kind]++
	}
}

func exitOf(err error) int {
	if err == nil {
		return 0
	}
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	return -1
}

// chaosFaultsFrom is RELAYCTL_CHAOS_FAULTS's list, each one of chaosFaults.
func chaosFaultsFrom(t *testing.T) []string {
	v := os.Getenv("RELAYCTL_CHAOS_FAULTS")
	if v == "" {
		return chaosFaults
	}
	var out []string
	for _, f := range strings.Split(v, ",") {
		f = strings.TrimSpace(f)
		if !slices.Contains(chaosFaults, f) {
			t.Fatalf("RELAYCTL_CHAOS_FAULTS: %q is not a fault; want some of %q", f, chaosFaults)
		}
		out = append(out, f)
	}
	return out
}

func envInt(t *testing.T, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return n
}
