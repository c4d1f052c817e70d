package main

// End-to-end tests against the lab: a real OpenSSH sshd per host, the real
// kernel, and the real relayd managed by relay-service. They change the
// machine's global net.core.rmem_max, so each takes kerneltest.Lock.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/relayctl/relayctl/internal/kerneltest"
	"github.com/relayctl/relayctl/internal/lab"
	"github.com/relayctl/relayctl/plans"
	"github.com/relayctl/relayctl/relay/sockstat"
	"github.com/relayctl/relayctl/rollout"
)

// labEnv is a lab on the incident's kernel defaults, with relayd 1.7.0
// running on every host, and a spec for the fix.
type labEnv struct {
	t    *testing.T
	lab  *lab.Lab
	dir  string
	spec string
	plan string
}

const incidentRmem = "212992"

func startLab(t *testing.T, hosts []lab.HostOptions, specEdit func(string) string) *labEnv {
	t.Helper()
	lab.Require(t)
	t.Setenv("XDG_CACHE_HOME", t.TempDir()) // the releases this lab's relayctl ships, its own
	kerneltest.Lock(t)
	// One read-back a window, as before --stable-for had a default: the
	// tests of the hold itself set stableForDefault back, or pass the flag.
	stableForDefault = 0
	t.Cleanup(func() { stableForDefault = rollout.DefaultStableFor })
	kerneltest.Set(t, "net.core.rmem_max", incidentRmem)
	kerneltest.Set(t, "net.core.rmem_default", incidentRmem)
	old := lab.BuildRelayd(t, "1.7.0")
	for i := range hosts {
		if hosts[i].Relay == nil {
			hosts[i].Relay = &lab.RelayInstall{Binary: old, Version: "1.7.0", Start: true}
		}
	}
	began := time.Now()
	l := lab.StartT(t, lab.Options{Hosts: hosts})
	t.Logf("a lab of %d host(s) started in %.2f s", len(hosts), time.Since(began).Seconds())
	dir := t.TempDir()
	names := make([]string, len(l.Hosts))
	for i, h := range l.Hosts {
		names[i] = "  - " + h.Name
	}
	spec := fmt.Sprintf(`name: lab-rcvbuf
hosts:
%s
sysctl:
  net.core.rmem_max: 8388608
relay:
  port: 7788
  so_rcvbuf: 4194304
  release:
    version: 1.8.0
    artifact: %s
  service:
    manager: command
    start: [%s, start]
    stop: [%s, stop]
    pid_file: %s
`, strings.Join(names, "\n"), lab.BuildRelayd(t, "1.8.0"), lab.ServiceScript, lab.ServiceScript, lab.RelayPIDFile)
	if specEdit != nil {
		spec = specEdit(spec)
	}
	e := &labEnv{t: t, lab: l, dir: dir, spec: filepath.Join(dir, "lab.yaml"), plan: filepath.Join(dir, "lab.plan")}
	if err := os.WriteFile(e.spec, []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	return e
}

// relayctl runs the CLI in-process with the lab's SSH files.
func (e *labEnv) relayctl(args ...string) (int, string, string) {
	e.t.Helper()
	var out, errb bytes.Buffer
	full := append([]string{"relayctl"}, args...)
	full = append(full, "--ssh-config", e.lab.SSHConfig, "--known-hosts", e.lab.KnownHosts, "--identity", e.lab.Identity)
	began := time.Now()
	code := run(full, strings.NewReader(""), &out, &errb)
	// Where a lab test's time goes, for go test -v (the suite's length is
	// CI's budget).
	e.t.Logf("relayctl %s: exit %d in %.2f s", args[0], code, time.Since(began).Seconds())
	return code, out.String(), errb.String()
}

// socket reads the relay socket on a host the way an operator would:
// ss inside the relay process's network namespace.
func (e *labEnv) socket(h *lab.Host) (pid int, rb, drops uint64) {
	e.t.Helper()
	pid, err := h.RelayPID(context.Background())
	if err != nil {
		e.t.Fatalf("%s: relay pid: %v", h.Name, err)
	}
	out, err := h.Exec(context.Background(), "nsenter", "-t", strconv.Itoa(pid), "-n", "ss", "-H", "-O", "-u", "-l", "-n", "-m", "sport = :7788")
	if err != nil {
		e.t.Fatalf("%s: ss: %v", h.Name, err)
	}
	socks, err := sockstat.ParseSS(out)
	if err != nil || len(socks) != 1 {
		e.t.Fatalf("%s: ss output %q: %v", h.Name, out, err)
	}
	return pid, socks[0].Rcvbuf, socks[0].Drops
}

func TestLabPlanReadsRealHost(t *testing.T) {
	e := startLab(t, []lab.HostOptions{{}}, nil)
	h := e.lab.Hosts[0]
	_, rb, _ := e.socket(h)
	if rb != 212992 {
		t.Fatalf("the lab relay starts with rb %d, want the kernel default 212992", rb)
	}
	code, out, errs := e.relayctl("plan", e.spec, "--out", e.plan, "--detailed-exitcode")
	if code != 2 {
		t.Fatalf("plan: exit %d, want 2 (changes)\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	pc, _, err := loadPlan(e.plan)
	p := pc.Plan()
	if err != nil {
		t.Fatal(err)
	}
	hp := p.Hosts[0]
	if hp.Readback.Current != 212992 || !hp.Readback.CurrentFound {
		t.Errorf("current rb in the plan: got %d (found %v), want 212992 read from the relay's socket", hp.Readback.Current, hp.Readback.CurrentFound)
	}
	if hp.Readback.Expected != 8388608 {
		t.Errorf("expected rb: got %d, want 8388608", hp.Readback.Expected)
	}
	if got := hp.Sysctls[0].Current; got != incidentRmem {
		t.Errorf("rmem_max in the plan: got %q, want the kernel's %s", got, incidentRmem)
	}
	if hp.Release.Current != "1.7.0" || hp.Release.Action != "upgrade" {
		t.Errorf("release: got %+v, want 1.7.0 upgraded", hp.Release)
	}
	md, _ := os.ReadFile(e.plan + ".md")
	if !bytes.Contains(md, []byte("rb 8388608")) || !bytes.Contains(md, []byte("now rb 212992")) {
		t.Errorf("review lacks the read-back:\n%s", md)
	}

	// facts --json feeds an offline plan that says the same, and no secret
	// in the relay config leaves the host on the way.
	const secret = "hunter2-do-not-print"
	if out, err := h.Exec(context.Background(), "sh", "-c", "echo '# API_TOKEN="+secret+"' >> /etc/relay/relayd.env"); err != nil {
		t.Fatalf("add a secret: %v %s", err, out)
	}
	code, factsJSON, errs := e.relayctl("facts", "--spec", e.spec, "--json")
	if code != 0 {
		t.Fatalf("facts: exit %d: %s", code, errs)
	}
	var ff plans.FactsFile
	if err := json.Unmarshal([]byte(factsJSON), &ff); err != nil || len(ff.Hosts) != 1 {
		t.Fatalf("facts json: %v", err)
	}
	if f := ff.Hosts[0]; !f.Socket.OwnNetns || f.RelayStatus == nil || !f.RelayStatus.Read || f.RelayStatus.SORcvbufEffective != 212992 {
		t.Errorf("facts: socket %+v, relay status %+v; want the relay's own netns and /status effective 212992", f.Socket, f.RelayStatus)
	}
	ffile := filepath.Join(e.dir, "facts.json")
	os.WriteFile(ffile, []byte(factsJSON), 0o644)
	offline := filepath.Join(e.dir, "offline.plan")
	if code, _, errs := e.relayctl("plan", e.spec, "--facts", ffile, "--out", offline, "--detailed-exitcode"); code != 2 {
		t.Fatalf("offline plan: exit %d: %s", code, errs)
	}
	poc, _, _ := loadPlan(offline)
	po := poc.Plan()
	if code, out, errs := e.relayctl("plan", e.spec, "--out", e.plan, "--detailed-exitcode"); code != 2 {
		t.Fatalf("plan with the secret: exit %d\n%s\n%s", code, out, errs)
	}
	pc, _, _ = loadPlan(e.plan)
	if fp := pc.Plan().Hosts[0].Fingerprint; po.Hosts[0].Fingerprint != fp {
		t.Errorf("offline plan fingerprint %s, SSH plan %s: the same host state must give the same fingerprint", po.Hosts[0].Fingerprint, fp)
	}
	code, applyOut, errs := e.relayctl("apply", offline)
	if code != 0 {
		t.Fatalf("apply of the plan made from facts: exit %d\n%s\n%s", code, applyOut, errs)
	}
	cfg, _ := h.Exec(context.Background(), "cat", "/etc/relay/relayd.env")
	if !strings.Contains(string(cfg), secret) || !strings.Contains(string(cfg), "RELAYD_SO_RCVBUF=4194304") {
		t.Errorf("the applied config lost the secret line or lacks the planned value:\n%s", cfg)
	}
	for _, f := range []string{ffile, offline, offline + ".md", e.plan, e.plan + ".md", offline + ".receipt.json", offline + ".receipt.md"} {
		if b, err := os.ReadFile(f); err != nil {
			t.Error(err)
		} else if bytes.Contains(b, []byte(secret)) {
			t.Errorf("%s holds the secret", filepath.Base(f))
		}
	}
	if strings.Contains(factsJSON+applyOut+errs, secret) {
		t.Error("relayctl printed the secret")
	}
}

// starts counts "relayd started" lines in the relay's log on a host: every
// start of any release appends one, so it counts restarts exactly.
func (e *labEnv) starts(h *lab.Host) int {
	e.t.Helper()
	out, err := h.Exec(context.Background(), "cat", lab.RelayLog)
	if err != nil {
		e.t.Fatalf("%s: read relay log: %v", h.Name, err)
	}
	return strings.Count(string(out), `msg="relayd started"`)
}

func TestLabApplyVerifyAndRerun(t *testing.T) {
	e := startLab(t, []lab.HostOptions{{}}, nil)
	h := e.lab.Hosts[0]
	pidBefore, rbBefore, _ := e.socket(h)
	startsBefore := e.starts(h)
	if code, out, errs := e.relayctl("plan", e.spec, "--out", e.plan, "--detailed-exitcode"); code != 2 {
		t.Fatalf("plan: exit %d\n%s\n%s", code, out, errs)
	}
	if code, out, _ := e.relayctl("verify", e.plan); code != 3 || !strings.Contains(out, "ss rb on udp/7788") {
		t.Errorf("verify before apply: exit %d, want 3 with the rb difference\n%s", code, out)
	}
	code, out, errs := e.relayctl("apply", e.plan)
	if code != 0 {
		t.Fatalf("apply: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	pidAfter, rbAfter, _ := e.socket(h)
	if rbBefore != 212992 || rbAfter != 8388608 {
		t.Errorf("socket rb: before %d, after %d; want 212992 then 8388608", rbBefore, rbAfter)
	}
	if pidAfter == pidBefore {
		t.Errorf("relay pid unchanged (%d): no restart happened", pidAfter)
	}
	if n := e.starts(h) - startsBefore; n != 1 {
		t.Errorf("the relay started %d times during apply, want exactly 1", n)
	}
	if got := kerneltest.Read(t, "net.core.rmem_max"); got != "8388608" {
		t.Errorf("rmem_max after apply: got %s, want 8388608", got)
	}
	dropIn, err := h.Exec(context.Background(), "cat", "/etc/sysctl.d/90-relayctl.conf")
	if err != nil || !bytes.Contains(dropIn, []byte("net.core.rmem_max = 8388608")) {
		t.Errorf("drop-in on the host: %q, %v", dropIn, err)
	}
	var rc struct {
		Hosts []struct {
			Outcome      string `json:"outcome"`
			Restarts     int    `json:"restarts"`
			RoundTrips   int    `json:"round_trips"`
			WindowMillis int64  `json:"window_ms"`
			PIDBefore    int    `json:"relay_pid_before"`
			PIDAfter     int    `json:"relay_pid_after"`
		} `json:"hosts"`
	}
	body, err := os.ReadFile(e.plan + ".receipt.json")
	if err != nil || json.Unmarshal(body, &rc) != nil || len(rc.Hosts) != 1 {
		t.Fatalf("receipt: %v\n%s", err, body)
	}
	r := rc.Hosts[0]
	if r.Outcome != "applied" || r.Restarts != 1 || r.PIDBefore != pidBefore || r.PIDAfter != pidAfter {
		t.Errorf("receipt: %+v; want applied, exactly 1 restart, pids %d → %d", r, pidBefore, pidAfter)
	}
	if r.WindowMillis <= 0 {
		t.Errorf("receipt window: got %d ms, want the measured window", r.WindowMillis)
	}
	t.Logf("apply: %d round trips, window %d ms", r.RoundTrips, r.WindowMillis)
	receipts, _ := h.Exec(context.Background(), "ls", "/var/lib/relayctl/receipts")
	if !bytes.Contains(receipts, []byte(".json")) || !bytes.Contains(receipts, []byte(".journal")) {
		t.Errorf("receipts on the host: %q, want the receipt and the filed journal", receipts)
	}

	if code, out, errs := e.relayctl("verify", e.plan); code != 0 {
		t.Errorf("verify after apply: exit %d\n%s\n%s", code, out, errs)
	}
	// The same plan again: the host is already as planned, so no restart.
	code, out, errs = e.relayctl("apply", e.plan)
	if code != 0 || !strings.Contains(out, "unchanged:") {
		t.Errorf("second apply: exit %d, want 0 and unchanged\n%s\n%s", code, out, errs)
	}
	if pid, _, _ := e.socket(h); pid != pidAfter || e.starts(h) != startsBefore+1 {
		t.Errorf("second apply restarted the relay: pid %d → %d, %d starts in all", pidAfter, pid, e.starts(h)-startsBefore)
	}
	if code, _, errs := e.relayctl("plan", e.spec, "--out", e.plan+"2", "--detailed-exitcode"); code != 0 {
		t.Errorf("plan after apply: exit %d, want 0 (nothing to change)\n%s", code, errs)
	}
}

// A release that cannot start is rolled back: the old relay runs again
// with its old read-back, and the sysctl is restored.
func TestLabApplyRollsBackBrokenRelease(t *testing.T) {
	var broken string
	e := startLab(t, []lab.HostOptions{{}}, func(s string) string {
		broken = filepath.Join(os.TempDir(), fmt.Sprintf("relayd-broken-%d", time.Now().UnixNano()))
		os.WriteFile(broken, []byte("#!/bin/sh\necho 'relayd: cannot start: broken build' >&2\nexit 1\n"), 0o755)
		return strings.Replace(s, "artifact: "+lab.BuildRelayd(t, "1.8.0"), "artifact: "+broken, 1)
	})
	t.Cleanup(func() { os.Remove(broken) })
	h := e.lab.Hosts[0]
	// A config that may hold a secret: its mode and owner hold through the
	// stage, the window and the rollback.
	if out, err := h.Exec(context.Background(), "sh", "-c", "chmod 0600 /etc/relay/relayd.env && chgrp nogroup /etc/relay/relayd.env"); err != nil {
		t.Fatalf("chmod: %v %s", err, out)
	}
	pidBefore, rbBefore, _ := e.socket(h)
	if code, _, errs := e.relayctl("plan", e.spec, "--out", e.plan, "--detailed-exitcode"); code != 2 {
		t.Fatalf("plan: exit %d: %s", code, errs)
	}
	code, out, errs := e.relayctl("apply", e.plan)
	if code != 1 || !strings.Contains(out, "rolled back:") {
		t.Fatalf("apply of a broken release: exit %d, want 1 and rolled back\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	pidAfter, rbAfter, _ := e.socket(h)
	if rbAfter != rbBefore || pidAfter == pidBefore {
		t.Errorf("after rollback: rb %d (want %d), pid %d (want a restarted old relay, not %d)", rbAfter, rbBefore, pidAfter, pidBefore)
	}
	if got := kerneltest.Read(t, "net.core.rmem_max"); got != incidentRmem {
		t.Errorf("rmem_max after rollback: got %s, want %s", got, incidentRmem)
	}
	link, _ := h.Exec(context.Background(), "readlink", "/opt/relay/current")
	if !bytes.Contains(link, []byte("1.7.0")) {
		t.Errorf("current link after rollback: %q, want 1.7.0", link)
	}
	if _, err := h.Exec(context.Background(), "test", "-e", "/etc/sysctl.d/90-relayctl.conf"); err == nil {
		t.Error("the drop-in is still in place after rollback")
	}
	if code, out, _ := e.relayctl("verify", e.plan); code != 3 {
		t.Errorf("verify after rollback: exit %d, want 3 (not as planned)\n%s", code, out)
	}
	if mode, _ := h.Exec(context.Background(), "stat", "-c", "%a %G", "/etc/relay/relayd.env"); string(mode) != "600 nogroup\n" {
		t.Errorf("the config after rollback: mode and group %q, want 600 nogroup", mode)
	}
	// Applied for real (the release fixed), the config keeps them too.
	// (As 1.8.1: the broken 1.8.0 stays in its folder, and apply refuses a
	// release folder whose bytes are not the plan's.)
	fixed := strings.Replace(mustRead(t, e.spec), "artifact: "+broken, "artifact: "+lab.BuildRelayd(t, "1.8.1"), 1)
	fixed = strings.Replace(fixed, "version: 1.8.0", "version: 1.8.1", 1)
	os.WriteFile(e.spec, []byte(fixed), 0o644)
	if code, _, errs := e.relayctl("plan", e.spec, "--out", e.plan, "--detailed-exitcode"); code != 2 {
		t.Fatalf("plan 2: exit %d: %s", code, errs)
	}
	if code, out, errs := e.relayctl("apply", e.plan); code != 0 {
		t.Fatalf("apply 2: exit %d\n%s\n%s", code, out, errs)
	}
	if mode, _ := h.Exec(context.Background(), "stat", "-c", "%a %G", "/etc/relay/relayd.env"); string(mode) != "600 nogroup\n" {
		t.Errorf("the config after apply: mode and group %q, want 600 nogroup", mode)
	}
}

func mustRead(t *testing.T, file string) string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestLabApplyRefusesStalePlan(t *testing.T) {
	e := startLab(t, []lab.HostOptions{{}}, nil)
	h := e.lab.Hosts[0]
	pid, _, _ := e.socket(h)
	if code, _, errs := e.relayctl("plan", e.spec, "--out", e.plan, "--detailed-exitcode"); code != 2 {
		t.Fatalf("plan: exit %d: %s", code, errs)
	}
	// Someone adds a sysctl.d file after the review.
	if _, err := h.Exec(context.Background(), "sh", "-c", "echo 'net.core.rmem_max = 212992' > /etc/sysctl.d/95-tuning.conf"); err != nil {
		t.Fatal(err)
	}
	code, out, errs := e.relayctl("apply", e.plan)
	if code != 1 || !strings.Contains(out, "refused:") || !strings.Contains(out, "file /etc/sysctl.d/95-tuning.conf: planned (not present)") {
		t.Errorf("apply of a stale plan: exit %d, want 1, refused, naming the new file\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	if p2, _, _ := e.socket(h); p2 != pid {
		t.Errorf("a refused apply restarted the relay")
	}
	if got := kerneltest.Read(t, "net.core.rmem_max"); got != incidentRmem {
		t.Errorf("a refused apply changed rmem_max to %s", got)
	}
}

func TestLabApplyRefusesEditedPlanAndChangedHostKey(t *testing.T) {
	e := startLab(t, []lab.HostOptions{{}}, nil)
	if code, _, errs := e.relayctl("plan", e.spec, "--out", e.plan, "--detailed-exitcode"); code != 2 {
		t.Fatalf("plan: exit %d: %s", code, errs)
	}
	body, _ := os.ReadFile(e.plan)
	edited := filepath.Join(e.dir, "edited.plan")
	os.WriteFile(edited, bytes.Replace(body, []byte("8388608"), []byte("8388600"), 1), 0o644)
	if code, _, errs := e.relayctl("apply", edited); code != 1 || !strings.Contains(errs, "edited after review") {
		t.Errorf("edited plan: exit %d, want 1 and 'edited after review'\n%s", code, errs)
	}

	// Replace the host's key in known_hosts with another key.
	kh, _ := os.ReadFile(e.lab.KnownHosts)
	other := filepath.Join(e.dir, "other")
	if out, err := runCmd("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", other); err != nil {
		t.Fatalf("ssh-keygen: %v %s", err, out)
	}
	pub, _ := os.ReadFile(other + ".pub")
	f := strings.Fields(strings.TrimSpace(string(kh)))
	bad := f[0] + " " + strings.Join(strings.Fields(string(pub))[:2], " ") + "\n"
	os.WriteFile(e.lab.KnownHosts, []byte(bad), 0o600)
	code, out, errs := e.relayctl("apply", e.plan)
	if code != 1 || !strings.Contains(out, "refused:") || !strings.Contains(out, "host key changed: "+e.lab.KnownHosts+":1") {
		t.Errorf("changed host key: exit %d, want 1, refused, naming known_hosts line 1\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	if got := kerneltest.Read(t, "net.core.rmem_max"); got != incidentRmem {
		t.Errorf("rmem_max changed to %s despite the host key", got)
	}
}

func runCmd(name string, args ...string) ([]byte, error) {
	return exec.Command(name, args...).CombinedOutput()
}

// facts without --pid-file or --systemd-unit (the first example of facts
// --help): the relay is found by its socket, read back in its own
// namespace; with none running, facts says it cannot tell and how to tell
// it, never "not running" for a relay it could not look for.
func TestLabFactsFindsTheRelayByItsSocket(t *testing.T) {
	e := startLab(t, []lab.HostOptions{{}}, nil)
	h := e.lab.Hosts[0]
	pid, rb, _ := e.socket(h)
	code, out, errs := e.relayctl("facts", h.Name)
	want := fmt.Sprintf("relay: running, pid %d, /opt/relay/releases/1.7.0/relayd (found by its socket", pid)
	if code != 0 || !strings.Contains(out, want) || !strings.Contains(out, fmt.Sprintf("socket udp/7788 (in the relay's own network namespace): rb %d", rb)) {
		t.Errorf("facts: exit %d, want %q and the socket's rb %d\nstdout:\n%s\nstderr:\n%s", code, want, rb, out, errs)
	}
	if _, err := h.Exec(context.Background(), lab.ServiceScript, "stop"); err != nil {
		t.Fatal(err)
	}
	code, out, errs = e.relayctl("facts", h.Name)
	if code != 0 || !strings.Contains(out, "relay: cannot tell: nothing names the relay's process") || !strings.Contains(out, "name it with --pid-file or --systemd-unit") ||
		strings.Contains(out, "not running") {
		t.Errorf("facts with the relay stopped: exit %d, want cannot tell and how to tell it\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
}
