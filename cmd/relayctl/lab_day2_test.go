package main

// Day two on lab hosts: a fleet with a host down (plan holds it as
// unreachable and the budget decides, apply leaves it alone, verify reports
// the others and exits 5, a later plan picks it up), and relayctl rollback
// after an upgrade (through systemd's store under load, and by a handoff
// under load) and on a host that drifted since.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/relayctl/relayctl/internal/lab"
	"github.com/relayctl/relayctl/plans"
	"github.com/relayctl/relayctl/rollout"
)

// down stops a lab host's sshd (SIGSTOP): a connection's handshake then
// times out, as to a host that hangs; up (also at the test's end) lets it
// go on.
func down(t *testing.T, h *lab.Host) (up func()) {
	t.Helper()
	if err := syscall.Kill(h.SSHDPID, syscall.SIGSTOP); err != nil {
		t.Fatalf("%s: stop its sshd: %v", h.Name, err)
	}
	up = func() { syscall.Kill(h.SSHDPID, syscall.SIGCONT) }
	t.Cleanup(up)
	return up
}

// fast are the SSH flags of a run that meets a host that hangs.
var fast = []string{"--connect-timeout", "2s"}

func TestLabPlanWithAHostDownAndAfter(t *testing.T) {
	e := startLab(t, []lab.HostOptions{{}, {}}, nil)
	h1, h2 := e.lab.Hosts[0], e.lab.Hosts[1]
	pid2, _, _ := e.socket(h2)
	up := down(t, h2)

	// Over the budget (0): the plan is written, the review lists lab-2 first, exit 1.
	code, out, errs := e.relayctl(append([]string{"plan", e.spec, "--out", e.plan}, fast...)...)
	md := mustRead(t, e.plan+".md")
	if code != 1 || !strings.Contains(errs, "1 of 2 host(s) could not be read (lab-2), over the budget of 0: not a plan to apply") {
		t.Fatalf("plan with lab-2 down: exit %d, want 1 over the budget\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	first := strings.Index(md, "**UNREACHABLE** lab-2:")
	if first < 0 || first > strings.Index(md, "## lab-1") || !strings.Contains(md, "timed out") {
		t.Errorf("the review does not list lab-2 first with why:\n%s", md)
	}
	// That plan is not one to apply: approve does not sign it, and apply
	// refuses it before anything connects, lab-1 untouched (on the code
	// before, approve signed it and apply changed lab-1 and exited 0).
	key := filepath.Join(e.dir, "alice")
	if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "alice", "-f", key).CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen: %v\n%s", err, out)
	}
	pid1, _, _ := e.socket(h1)
	over := "1 of 2 host(s) could not be read (lab-2), over the budget of 0 it was made with: not a plan to apply"
	var aout, aerr bytes.Buffer
	if code := run([]string{"relayctl", "approve", e.plan, "-i", key}, strings.NewReader(""), &aout, &aerr); code != 1 || !strings.Contains(aerr.String(), over) || !strings.Contains(aerr.String(), "--allow-unreachable") {
		t.Errorf("approve of a plan over its budget: exit %d, want 1 naming the budget and --allow-unreachable\nstdout:\n%s\nstderr:\n%s", code, &aout, &aerr)
	}
	if _, err := os.Stat(e.plan + ".sig"); err == nil {
		t.Error("approve signed a plan over its budget")
	}
	if code, out, errs := e.relayctl(append([]string{"apply", e.plan}, fast...)...); code != 1 || !strings.Contains(errs, over) || strings.Contains(errs, "[stage]") {
		t.Errorf("apply of a plan over its budget: exit %d, want refused before anything connects\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	if pid, rb, _ := e.socket(h1); pid != pid1 || rb != 212992 {
		t.Errorf("lab-1: pid %d (was %d), rb %d: the refused apply changed it", pid, pid1, rb)
	}
	// Within the budget: exit 0 (2 with --detailed-exitcode), and apply changes lab-1 alone.
	if code, out, errs := e.relayctl(append([]string{"plan", e.spec, "--out", e.plan, "--max-unreachable", "1", "--detailed-exitcode"}, fast...)...); code != 2 {
		t.Fatalf("plan --max-unreachable 1: exit %d, want 2\n%s\n%s", code, out, errs)
	}
	code, out, errs = e.relayctl(append([]string{"apply", e.plan}, fast...)...)
	if code != 0 || !strings.Contains(out, "not planned:   1  lab-2") || !strings.Contains(out, "lab-2: not planned (as it was): unreachable when the plan was made") {
		t.Fatalf("apply: exit %d, want 0 with lab-2 not planned\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	// The header counts the waves that run: lab-1's alone (it said 2).
	if !strings.Contains(errs, "relayctl: 1 host(s) in 1 wave(s) of 1 (waves 1, 100%, the default); 1 not planned (lab-2);") || !strings.Contains(errs, "wave 1/1: 1 host(s), lab-1") {
		t.Errorf("apply's header and waves:\n%s", errs)
	}
	if _, rb, _ := e.socket(h1); rb != 8388608 {
		t.Errorf("lab-1: rb %d after apply, want 8388608", rb)
	}
	var led rollout.Ledger
	if err := json.Unmarshal([]byte(mustRead(t, e.plan+".ledger.json")), &led); err != nil || led.Hosts[1].Outcome != string(rollout.NotPlanned) {
		t.Errorf("ledger: %v, lab-2 %+v; want not planned", err, led.Hosts)
	}

	// Back, lab-2 is untouched, and the next plan picks it up.
	up()
	if p, rb, _ := e.socket(h2); p != pid2 || rb != 212992 {
		t.Errorf("lab-2: pid %d (was %d), rb %d; want its relay untouched", p, pid2, rb)
	}
	next := e.plan + "2"
	if code, out, errs := e.relayctl("plan", e.spec, "--out", next, "--detailed-exitcode"); code != 2 {
		t.Fatalf("plan with lab-2 back: exit %d\n%s\n%s", code, out, errs)
	}
	pc, _, err := loadPlan(next)
	if err != nil || pc.Plan().Hosts[0].Action != plans.ActionNone || pc.Plan().Hosts[1].Action != plans.ActionChange {
		t.Fatalf("the next plan: %v; want lab-1 as planned and lab-2 to change", err)
	}
	if code, out, errs := e.relayctl("apply", next); code != 0 {
		t.Fatalf("apply the next plan: exit %d\n%s\n%s", code, out, errs)
	}
	if _, rb, _ := e.socket(h2); rb != 8388608 {
		t.Errorf("lab-2: rb %d after the next plan, want 8388608", rb)
	}
}

// verify with a host down reports every host it reaches (text and JSON)
// and exits 5, "could not look", not 3.
func TestLabVerifyWithAHostDown(t *testing.T) {
	e := startLab(t, []lab.HostOptions{{}, {}}, nil)
	if code, out, errs := e.relayctl("plan", e.spec, "--out", e.plan); code != 0 {
		t.Fatalf("plan: exit %d\n%s\n%s", code, out, errs)
	}
	if code, out, errs := e.relayctl("apply", e.plan); code != 0 {
		t.Fatalf("apply: exit %d\n%s\n%s", code, out, errs)
	}
	down(t, e.lab.Hosts[1])
	code, out, errs := e.relayctl(append([]string{"verify", e.plan}, fast...)...)
	if code != exitCouldNotLook || !strings.Contains(out, "lab-1") || !strings.Contains(out, "as planned") || !strings.Contains(out, "COULD NOT BE READ (1 host(s)") || !strings.Contains(out, "lab-2: ") {
		t.Errorf("verify: exit %d, want 5 with lab-1 as planned and lab-2 listed\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	code, out, errs = e.relayctl(append([]string{"verify", e.plan, "--json"}, fast...)...)
	var rep verifyReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil || code != exitCouldNotLook {
		t.Fatalf("verify --json: exit %d, %v\n%s\n%s", code, err, out, errs)
	}
	if rep.FormatVersion != 3 || rep.Summary.Match != 1 || rep.Summary.Unreachable != 1 || !rep.Hosts[0].OK || len(rep.Hosts[0].Checks) == 0 || rep.Hosts[1].Unreachable == "" {
		t.Errorf("verify --json: %+v; want lab-1 matching with its checks, lab-2 unreachable with why", rep)
	}
}

// rollbackPlan makes the rollback plan of e's plan from its receipt.
func (e *labEnv) rollbackPlan(t *testing.T) (string, string) {
	t.Helper()
	back := e.plan + ".back"
	code, out, errs := e.relayctl("rollback", e.plan+".receipt.json", "--out", back, "--detailed-exitcode")
	if code != 2 {
		t.Fatalf("rollback: exit %d, want 2 (changes)\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	return back, mustRead(t, back+".md")
}

func rmemMax(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("/proc/sys/net/core/rmem_max")
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// After a store-kept upgrade under systemd, rollback goes back to the
// release the host kept, through systemd's store, under load: nothing
// lost, no lobby cut, the old release and sysctls read back.
func TestLabRollbackAfterStoreKeptUpgrade(t *testing.T) {
	bin := buildRelayctl(t)
	e := startStorePlayersLab(t, "1.9.0")
	if code, out, errs := e.relayctl("plan", e.spec, "--out", e.plan); code != 0 {
		t.Fatalf("plan: exit %d\n%s\n%s", code, out, errs)
	}
	if code, out, errs := e.relayctl("apply", e.plan); code != 0 {
		t.Fatalf("apply: exit %d\n%s\n%s", code, out, errs)
	}
	if st := e.status(); st["version"] != "1.9.1" || rmemMax(t) != "8388608" {
		t.Fatalf("after the upgrade: version %v, rmem_max %s", st["version"], rmemMax(t))
	}
	// No artifact is needed: the host keeps 1.9.0.
	os.Rename(lab.BuildRelayd(t, "1.9.1"), lab.BuildRelayd(t, "1.9.1")+".away")
	t.Cleanup(func() { os.Rename(lab.BuildRelayd(t, "1.9.1")+".away", lab.BuildRelayd(t, "1.9.1")) })
	back, md := e.rollbackPlan(t)
	for _, want := range []string{"- Release: 1.9.1 → 1.9.0 (downgrade)", "Switch: **restart, socket kept in systemd's store**", "check release: 1.9.0 already in /opt/relay/releases/1.9.0, its sha256 checked on the host", "put back from the host's backup `backup-relay-config`"} {
		if !strings.Contains(md, want) {
			t.Errorf("the rollback review does not say %q:\n%s", want, md)
		}
	}
	inode := e.status()["socket_inode"]
	var code int
	var out, errs string
	rep := e.stepProcess(bin, 16, 4*time.Second, 1500*time.Millisecond, func() { code, out, errs = e.relayctl("apply", back) })
	if code != 0 {
		t.Fatalf("apply the rollback: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	s := rep.Steps[0]
	logStep(t, s)
	if s.Valid && (s.Loss != 0 || s.LostIn != 0 || s.LostOut != 0 || s.ICMPErrors != 0) {
		t.Errorf("the bench counted loss %d (in %d, out %d), %d ICMP errors across the rollback; want none", s.Loss, s.LostIn, s.LostOut, s.ICMPErrors)
	}
	if !s.Valid {
		t.Logf("the bench fell behind on the busy machine (%v): its loss figures prove nothing here; the socket and lobby checks still hold", s.Invalid)
	}
	if len(s.Restarts) != 1 || s.Restarts[0].LobbiesCut != 0 || s.Restarts[0].PlayersCut != 0 {
		t.Errorf("the bench saw %+v, want one restart cutting nothing", s.Restarts)
	}
	rc := receiptOf(t, back)
	if rc.Outcome != rollout.Applied || rc.Restarts != 1 || rc.PlayersCut == nil || *rc.PlayersCut != 0 {
		t.Errorf("the rollback's receipt: %s, %d restarts, cut %v; want applied through the store, none cut", rc.Outcome, rc.Restarts, rc.PlayersCut)
	}
	st := e.status()
	if st["version"] != "1.9.0" || st["socket_from"] != "fdstore" || st["socket_inode"] != inode || rmemMax(t) != "212992" {
		t.Errorf("after the rollback: version %v, socket from %v, inode %v (was %v), rmem_max %s; want 1.9.0 on the same socket from the store, rmem_max 212992",
			st["version"], st["socket_from"], st["socket_inode"], inode, rmemMax(t))
	}
	if code, out, errs := e.relayctl("verify", back); code != 0 {
		t.Errorf("verify the rollback: exit %d\n%s\n%s", code, out, errs)
	}
}

// After a handoff upgrade under the command manager, rollback hands the
// socket and lobbies back to the release the host kept, under load.
func TestLabRollbackAfterHandoff(t *testing.T) {
	bin := buildRelayctl(t)
	e := startPlayersLab(t, true, "")
	if code, out, errs := e.relayctl("plan", e.spec, "--out", e.plan); code != 0 || !strings.Contains(out, "handoff") {
		t.Fatalf("plan: exit %d, want a handoff\n%s\n%s", code, out, errs)
	}
	if code, out, errs := e.relayctl("apply", e.plan); code != 0 {
		t.Fatalf("apply: exit %d\n%s\n%s", code, out, errs)
	}
	back, md := e.rollbackPlan(t)
	if !strings.Contains(md, "Switch: **handoff**") || !strings.Contains(md, "1.9.1 → 1.9.0 (downgrade)") {
		t.Errorf("the rollback review is not a handoff back to 1.9.0:\n%s", md)
	}
	inode := e.status()["socket_inode"]
	var code int
	var out, errs string
	rep := e.stepProcess(bin, 16, 4*time.Second, 1500*time.Millisecond, func() { code, out, errs = e.relayctl("apply", back) })
	if code != 0 {
		j, _ := e.lab.Hosts[0].Exec(context.Background(), "sh", "-c", "cat /var/lib/relayctl/journal; ls -la /var/lib/relayctl/receipts; for f in /var/lib/relayctl/receipts/*.journal; do echo == $f; cat $f; done")
		t.Fatalf("apply the rollback: exit %d\nstdout:\n%s\nstderr:\n%s\nhost:\n%s", code, out, errs, j)
	}
	s := rep.Steps[0]
	logStep(t, s)
	if s.Valid && (s.Loss != 0 || s.LostIn != 0 || s.LostOut != 0 || s.ICMPErrors != 0) {
		t.Errorf("the bench counted loss %d (in %d, out %d), %d ICMP errors across the handoff back; want none", s.Loss, s.LostIn, s.LostOut, s.ICMPErrors)
	}
	if len(s.Restarts) != 1 || !s.Restarts[0].Handoff || s.Restarts[0].PlayersCut != 0 {
		t.Errorf("the bench saw %+v, want one handoff cutting nothing", s.Restarts)
	}
	rc := receiptOf(t, back)
	if rc.Handoffs != 1 || rc.Restarts != 0 {
		t.Errorf("the rollback's receipt: %d handoffs, %d restarts; want one handoff", rc.Handoffs, rc.Restarts)
	}
	if st := e.status(); st["version"] != "1.9.0" || st["socket_inode"] != inode || rmemMax(t) != "212992" {
		t.Errorf("after the rollback: version %v, inode %v (was %v), rmem_max %s; want 1.9.0 on the same socket, rmem_max 212992", st["version"], st["socket_inode"], inode, rmemMax(t))
	}
	if code, out, errs := e.relayctl("verify", back); code != 0 {
		t.Errorf("verify the rollback: exit %d\n%s\n%s", code, out, errs)
	}
}

// A host that changed since the receipt is refused, with what changed:
// by rollback, and by apply of a rollback plan made before it changed.
func TestLabRollbackRefusedOnADriftedHost(t *testing.T) {
	e := startLab(t, []lab.HostOptions{{}}, nil)
	h := e.lab.Hosts[0]
	if code, out, errs := e.relayctl("plan", e.spec, "--out", e.plan); code != 0 {
		t.Fatalf("plan: exit %d\n%s\n%s", code, out, errs)
	}
	if code, out, errs := e.relayctl("apply", e.plan); code != 0 {
		t.Fatalf("apply: exit %d\n%s\n%s", code, out, errs)
	}
	back, _ := e.rollbackPlan(t)
	if out, err := h.Exec(context.Background(), "sh", "-c", "echo 425984 > /proc/sys/net/core/rmem_max"); err != nil {
		t.Fatalf("drift: %v: %s", err, out)
	}
	pid, rb, _ := e.socket(h)
	code, out, errs := e.relayctl("rollback", e.plan, "--out", back+"2")
	md := mustRead(t, back+"2.md")
	if code != 1 || !strings.Contains(errs, "1 of 1 hosts are blocked (lab-1)") || !strings.Contains(md, "changed since that run") || !strings.Contains(md, "sysctl net.core.rmem\\_max is 425984, that run set 8388608") {
		t.Errorf("rollback of a drifted host: exit %d, want 1 with the drift named\nstdout:\n%s\nstderr:\n%s\nreview:\n%s", code, out, errs, md)
	}
	code, out, errs = e.relayctl("apply", back)
	if code != 1 || !strings.Contains(out, "lab-1: refused (as it was): the plan is stale") || !strings.Contains(out, "drifted: sysctl net.core.rmem_max: planned 8388608, now 425984") ||
		!strings.Contains(errs, "relayctl rollback "+e.plan+".receipt.json --out PLAN, the rollback plan made again") {
		t.Errorf("apply of the rollback plan made before the drift: exit %d, want refused as stale\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	if p, r, _ := e.socket(h); p != pid || r != rb || rmemMax(t) != "425984" {
		t.Errorf("the refused host changed: pid %d (was %d), rb %d (was %d), rmem_max %s", p, pid, r, rb, rmemMax(t))
	}
}

// receiptsOf counts a host's receipts of the plan with checksum sum: the
// windows of that plan the host has seen.
func receiptsOf(t *testing.T, h *lab.Host, sum string) int {
	t.Helper()
	out, err := h.Exec(context.Background(), "sh", "-c", `grep -l -F -- "\"plan_checksum\": \"$0\"" /var/lib/relayctl/receipts/*.json 2>/dev/null | wc -l`, sum)
	if err != nil {
		t.Fatalf("%s: count receipts: %v: %s", h.Name, err, out)
	}
	n := 0
	fmt.Sscan(strings.TrimSpace(string(out)), &n)
	return n
}

// After a soak judged a release a regression under real traffic (wave 2's
// canary, with the players of the bench; wave 1's canary had none and went
// on), the hint is followed: --resume is refused, rollback undoes the host
// that kept the release, and a fixed release rolls out. No host receives
// the rejected release again.
func TestLabSoakRegressionHintGoesForward(t *testing.T) {
	bin := buildRelayctl(t)
	soak := "rollout:\n  waves: [1, 1, 1]\n  soak: {duration: 8s, interval: 8s, baseline: 2s, no_traffic: continue}\n"
	e := startLab(t, []lab.HostOptions{{}, {}, {}}, func(s string) string {
		return strings.Replace(s, "  so_rcvbuf: 4194304\n", "  so_rcvbuf: 2048\n  so_rcvbuf_force: true\n", 1) + soak
	})
	h1, h2, h3 := e.lab.Hosts[0], e.lab.Hosts[1], e.lab.Hosts[2]
	if code, out, errs := e.relayctl("plan", e.spec, "--out", e.plan); code != 0 {
		t.Fatalf("plan: exit %d\n%s\n%s", code, out, errs)
	}
	pc, _, err := loadPlan(e.plan)
	if err != nil {
		t.Fatal(err)
	}
	rejected := pc.Plan().Checksum
	code, out, errs, _ := e.applyWithPlayers(bin, h2, 32, 4*time.Second)
	if code != 1 || !strings.Contains(out, "applied:       1  lab-1") || !strings.Contains(out, "rolled back:   1  lab-2") || !strings.Contains(out, "not started:   1  lab-3") {
		t.Fatalf("apply: exit %d, want lab-1 applied, lab-2 rolled back by its soak, lab-3 not started\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	hint := "a soak judged release 1.8.0 a regression, so the rollout of it is over and --resume is refused"
	undo := "1 host(s) keep it (lab-1): relayctl rollback " + e.plan + " --out back.plan undoes them"
	if !strings.Contains(errs, hint) || !strings.Contains(errs, undo) || strings.Contains(errs, "--resume goes on") {
		t.Fatalf("the hint does not move forward:\n%s", errs)
	}
	pid2, _, _ := e.socket(h2)
	pid3, _, _ := e.socket(h3)

	// --resume, as the old hint had it: refused, nothing connects.
	code, out, errs = e.relayctl("apply", e.plan, "--resume")
	if code != 1 || !strings.Contains(errs, "a soak judged this plan's release a regression") || !strings.Contains(errs, "--resume --retry-rejected goes on all the same") {
		t.Fatalf("apply --resume after the regression: exit %d, want refused with the reason\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	if p2, _, _ := e.socket(h2); p2 != pid2 {
		t.Errorf("lab-2's relay restarted (pid %d, was %d): the refused --resume touched it", p2, pid2)
	}
	if p3, _, _ := e.socket(h3); p3 != pid3 {
		t.Errorf("lab-3's relay restarted (pid %d, was %d): the refused --resume touched it", p3, pid3)
	}
	// The hint's way on: undo the host that kept the release...
	if code, out, errs := e.relayctl("rollback", e.plan, "--out", e.plan+".back"); code != 0 {
		t.Fatalf("rollback: exit %d\n%s\n%s\n%s", code, out, errs, mustRead(t, e.plan+".back.md"))
	}
	if code, out, errs := e.relayctl("apply", e.plan+".back"); code != 0 {
		t.Fatalf("apply the rollback: exit %d\n%s\n%s", code, out, errs)
	}
	if _, rb, _ := e.socket(h1); rb != 212992 {
		t.Errorf("lab-1 after the rollback: rb %d, want 212992 (1.7.0's)", rb)
	}
	// ...and ship a fixed release.
	spec, _ := os.ReadFile(e.spec)
	fixed := strings.Replace(string(spec), "  so_rcvbuf: 2048\n  so_rcvbuf_force: true\n", "  so_rcvbuf: 4194304\n", 1)
	fixed = strings.Replace(fixed, "version: 1.8.0\n    artifact: "+lab.BuildRelayd(t, "1.8.0"), "version: 1.8.1\n    artifact: "+lab.BuildRelayd(t, "1.8.1"), 1)
	os.WriteFile(e.spec, []byte(fixed), 0o644)
	if code, out, errs := e.relayctl("plan", e.spec, "--out", e.plan+".fixed"); code != 0 {
		t.Fatalf("plan the fixed release: exit %d\n%s\n%s", code, out, errs)
	}
	if code, out, errs := e.relayctl("apply", e.plan+".fixed"); code != 0 {
		t.Fatalf("apply the fixed release: exit %d\n%s\n%s", code, out, errs)
	}
	for _, h := range []*lab.Host{h1, h2, h3} {
		if _, rb, _ := e.socket(h); rb != 8388608 {
			t.Errorf("%s after the fixed release: rb %d, want 8388608", h.Name, rb)
		}
	}
	// The rejected release's windows: lab-1's and lab-2's one each, lab-3 none.
	for h, want := range map[*lab.Host]int{h1: 1, h2: 1, h3: 0} {
		if got := receiptsOf(t, h, rejected); got != want {
			t.Errorf("%s saw %d window(s) of the rejected plan, want %d", h.Name, got, want)
		}
	}
}
