package main

// relayctl against a lab host booted with a real systemd: relayd runs as
// relay/dist/relayd.service (Type=notify, in /run/netns/relay), and the spec
// says manager: systemd, name: relayd.

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/relayctl/relayctl/internal/kerneltest"
	"github.com/relayctl/relayctl/internal/lab"
)

// unitState is what systemctl says about relayd on the host.
func unitState(t *testing.T, h *lab.Host) (mainPID, invocation, nrestarts string) {
	t.Helper()
	out, err := h.Exec(context.Background(), "systemctl", "show", "-p", "MainPID", "-p", "InvocationID", "-p", "NRestarts", "relayd")
	if err != nil {
		t.Fatal(err)
	}
	kv := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		k, v, _ := strings.Cut(line, "=")
		kv[k] = v
	}
	return kv["MainPID"], kv["InvocationID"], kv["NRestarts"]
}

// journalStarts counts relayd's start lines in the unit's journal: every
// start of any release logs one.
func journalStarts(t *testing.T, h *lab.Host) int {
	t.Helper()
	out, err := h.Exec(context.Background(), "journalctl", "-u", "relayd", "-o", "cat", "--no-pager")
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(out), `msg="relayd started"`)
}

func TestLabSystemdPlanApplyVerify(t *testing.T) {
	lab.RequireSystemd(t)
	e := startLab(t, []lab.HostOptions{{Systemd: true}}, func(s string) string {
		return strings.Replace(s, "    manager: command\n    start: ["+lab.ServiceScript+", start]\n    stop: ["+lab.ServiceScript+", stop]\n    pid_file: "+lab.RelayPIDFile+"\n",
			"    manager: systemd\n    name: relayd\n", 1)
	})
	if b, _ := os.ReadFile(e.spec); !strings.Contains(string(b), "manager: systemd") {
		t.Fatalf("spec not switched to systemd:\n%s", b)
	}
	h := e.lab.Hosts[0]
	// The config root's alone: the shipped unit has
	// systemd copy it for relayd, which never opens it as its dynamic user.
	if out, err := h.Exec(context.Background(), "sh", "-c", "chmod 0600 /etc/relay/relayd.env && chown root:root /etc/relay/relayd.env && systemctl restart relayd"); err != nil {
		t.Fatalf("a 0600 config under the shipped unit: %v %s", err, out)
	}
	pidBefore, rbBefore, _ := e.socket(h)
	if rbBefore != 212992 {
		t.Fatalf("relayd.service starts with rb %d, want the kernel default 212992", rbBefore)
	}
	mainBefore, invBefore, nrBefore := unitState(t, h)
	startsBefore := journalStarts(t, h)

	code, out, errs := e.relayctl("plan", e.spec, "--out", e.plan, "--detailed-exitcode")
	if code != 2 {
		t.Fatalf("plan: exit %d, want 2\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	pc, _, err := loadPlan(e.plan)
	p := pc.Plan()
	if err != nil {
		t.Fatal(err)
	}
	if rb := p.Hosts[0].Readback; rb.Current != 212992 || rb.Expected != 8388608 {
		t.Errorf("plan read-back: current %d, expected %d; want 212992 then 8388608", rb.Current, rb.Expected)
	}

	code, out, errs = e.relayctl("apply", e.plan)
	if code != 0 {
		t.Fatalf("apply: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	pidAfter, rbAfter, _ := e.socket(h)
	mainAfter, invAfter, nrAfter := unitState(t, h)
	if rbAfter != 8388608 {
		t.Errorf("rb after apply: %d, want 8388608 as planned", rbAfter)
	}
	if pidAfter == pidBefore || mainAfter == mainBefore || invAfter == invBefore {
		t.Errorf("MainPID %s -> %s, InvocationID %s -> %s: want a new relay", mainBefore, mainAfter, invBefore, invAfter)
	}
	if nrAfter != nrBefore {
		t.Errorf("NRestarts %s -> %s: a failed start was retried by systemd", nrBefore, nrAfter)
	}
	if n := journalStarts(t, h) - startsBefore; n != 1 {
		t.Errorf("relayd started %d times during apply, want exactly 1", n)
	}
	var rc struct {
		Hosts []struct {
			Outcome  string `json:"outcome"`
			Restarts int    `json:"restarts"`
		} `json:"hosts"`
	}
	body, err := os.ReadFile(e.plan + ".receipt.json")
	if err != nil || json.Unmarshal(body, &rc) != nil || len(rc.Hosts) != 1 || rc.Hosts[0].Outcome != "applied" || rc.Hosts[0].Restarts != 1 {
		t.Errorf("receipt: %v\n%s\nwant applied with 1 restart", err, body)
	}
	if receipts, _ := h.Exec(context.Background(), "ls", "/var/lib/relayctl/receipts"); !strings.Contains(string(receipts), ".json") {
		t.Errorf("receipts on the host: %q", receipts)
	}
	if got := kerneltest.Read(t, "net.core.rmem_max"); got != "8388608" {
		t.Errorf("rmem_max after apply: %s, want 8388608", got)
	}
	if code, out, errs := e.relayctl("verify", e.plan); code != 0 {
		t.Errorf("verify after apply: exit %d\n%s\n%s", code, out, errs)
	}
	if mode, _ := h.Exec(context.Background(), "stat", "-c", "%a %U", "/etc/relay/relayd.env"); strings.TrimSpace(string(mode)) != "600 root" {
		t.Errorf("the config after apply: %s, want 600 root as it was", mode)
	}
}

// startSystemdLab is startLab on one host with a real systemd, the spec
// switched to manager: systemd, name: relayd, then edit applied.
func startSystemdLab(t *testing.T, edit func(string) string) *labEnv {
	t.Helper()
	lab.RequireSystemd(t)
	return startLab(t, []lab.HostOptions{{Systemd: true}}, func(s string) string {
		s = strings.Replace(s, "    manager: command\n    start: ["+lab.ServiceScript+", start]\n    stop: ["+lab.ServiceScript+", stop]\n    pid_file: "+lab.RelayPIDFile+"\n",
			"    manager: systemd\n    name: relayd\n", 1)
		if edit != nil {
			s = edit(s)
		}
		return s
	})
}

// A release that fails to start: systemd reports the unit failed, apply
// rolls back, and the receipt carries systemd's journal of the failed
// start, not a generic message.
func TestLabSystemdFailedStartKeepsItsJournal(t *testing.T) {
	broken := filepath.Join(t.TempDir(), "relayd-broken")
	os.WriteFile(broken, []byte("#!/bin/sh\necho 'relayd: cannot start: broken build 7f3a' >&2\nexit 1\n"), 0o755)
	e := startSystemdLab(t, func(s string) string {
		return strings.Replace(s, "artifact: "+lab.BuildRelayd(t, "1.8.0"), "artifact: "+broken, 1)
	})
	h := e.lab.Hosts[0]
	_, rbBefore, _ := e.socket(h)
	if code, _, errs := e.relayctl("plan", e.spec, "--out", e.plan, "--detailed-exitcode"); code != 2 {
		t.Fatalf("plan: exit %d: %s", code, errs)
	}
	code, out, errs := e.relayctl("apply", e.plan)
	if code != 1 || !strings.Contains(out, "rolled back:") || !strings.Contains(out, "systemctl restart relayd") {
		t.Fatalf("apply of a broken release: exit %d, want rolled back naming systemctl\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	var rc struct {
		Hosts []struct {
			UnitLog string `json:"unit_log"`
		} `json:"hosts"`
	}
	body, _ := os.ReadFile(e.plan + ".receipt.json")
	if json.Unmarshal(body, &rc) != nil || len(rc.Hosts) != 1 || !strings.Contains(rc.Hosts[0].UnitLog, "cannot start: broken build 7f3a") {
		t.Errorf("the receipt lacks systemd's journal of the failed start:\n%s", body)
	}
	md, _ := os.ReadFile(e.plan + ".receipt.md")
	if !strings.Contains(string(md), "broken build 7f3a") {
		t.Errorf("the receipt for people lacks the journal lines:\n%s", md)
	}
	if _, rb, _ := e.socket(h); rb != rbBefore {
		t.Errorf("rb after rollback %d, want %d", rb, rbBefore)
	}
	if state, _ := h.Exec(context.Background(), "systemctl", "is-active", "relayd"); strings.TrimSpace(string(state)) != "active" {
		t.Errorf("relayd after rollback: %s, want active", state)
	}
}

// A relay that dies after it started and is restarted by systemd
// (Restart=on-failure) has a new PID whose socket reads back as planned:
// relayctl does not take that for success.
func TestLabSystemdFlappingRelayIsNotApplied(t *testing.T) {
	e := startSystemdLab(t, nil)
	h := e.lab.Hosts[0]
	if code, _, errs := e.relayctl("plan", e.spec, "--out", e.plan, "--detailed-exitcode"); code != 2 {
		t.Fatalf("plan: exit %d: %s", code, errs)
	}
	mainBefore, _, nrBefore := unitState(t, h)
	// The new relay crashes 300 ms after it appears, once: systemd starts
	// another, which then runs fine.
	stop := make(chan struct{})
	killed := make(chan string, 1)
	go func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			if pid, _, _ := unitState(t, h); pid != mainBefore && pid != "0" && pid != "" {
				time.Sleep(300 * time.Millisecond)
				h.Exec(context.Background(), "kill", "-9", pid)
				killed <- pid
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	code, out, errs := e.relayctl("apply", e.plan, "--verify-timeout", "4s")
	close(stop)
	select {
	case pid := <-killed:
		t.Logf("killed the new relay %s", pid)
	default:
		t.Fatal("the new relay was never seen to kill")
	}
	if code != 1 || !strings.Contains(out, "rolled back:") || !strings.Contains(out, "systemd restarted relayd 1 times on its own since the window") && !strings.Contains(out, "relayd exited and systemd is about to restart it") {
		t.Errorf("apply of a relay that crashed after starting: exit %d, want rolled back naming systemd's restart\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	if nrBefore != "0" {
		t.Errorf("NRestarts before apply %s, want 0", nrBefore)
	}
}

// A unit that does not exist blocks the host in the plan, and says what to do.
func TestLabSystemdMissingUnitIsABlocker(t *testing.T) {
	e := startSystemdLab(t, func(s string) string { return strings.Replace(s, "name: relayd", "name: relayd-nosuch", 1) })
	code, out, errs := e.relayctl("plan", e.spec, "--out", e.plan, "--detailed-exitcode")
	if code != 1 || !strings.Contains(out, "blocked: the systemd unit relayd-nosuch does not exist on this host") || !strings.Contains(out, "relay/dist/relayd.service") {
		t.Errorf("plan with a missing unit: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
}

// so_rcvbuf_force under systemd: relayctl installs the shipped drop-in
// (CAP_NET_ADMIN) and reloads systemd in the window, so SO_RCVBUFFORCE
// works whatever rmem_max says; with force off again it removes it.
func TestLabSystemdForceDropInAndDaemonReload(t *testing.T) {
	e := startSystemdLab(t, func(s string) string {
		s = strings.Replace(s, "sysctl:\n  net.core.rmem_max: 8388608\n", "", 1)
		return strings.Replace(s, "  so_rcvbuf: 4194304\n", "  so_rcvbuf: 4194304\n  so_rcvbuf_force: true\n", 1)
	})
	h := e.lab.Hosts[0]
	const dropIn = "/etc/systemd/system/relayd.service.d/so-rcvbuf-force.conf"
	if code, out, errs := e.relayctl("plan", e.spec, "--out", e.plan, "--detailed-exitcode"); code != 2 {
		t.Fatalf("plan: exit %d\n%s\n%s", code, out, errs)
	}
	md, _ := os.ReadFile(e.plan + ".md")
	if !strings.Contains(string(md), "install unit drop-in: "+dropIn) || !strings.Contains(string(md), "daemon-reload") {
		t.Errorf("the review does not show the unit drop-in step:\n%s", md)
	}
	if code, out, errs := e.relayctl("apply", e.plan); code != 0 {
		t.Fatalf("apply: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	if _, rb, _ := e.socket(h); rb != 8388608 {
		t.Errorf("rb %d, want 8388608: SO_RCVBUFFORCE ignores rmem_max %s", rb, kerneltest.Read(t, "net.core.rmem_max"))
	}
	if out, err := h.Exec(context.Background(), "systemctl", "show", "-p", "DropInPaths", "--value", "relayd"); err != nil || !strings.Contains(string(out), dropIn) {
		t.Errorf("systemd does not know the drop-in (no daemon-reload?): %q %v", out, err)
	}
	// Force off: the drop-in goes, and systemd forgets it.
	spec, _ := os.ReadFile(e.spec)
	os.WriteFile(e.spec, []byte(strings.Replace(string(spec), "  so_rcvbuf_force: true\n", "", 1)), 0o644)
	if code, out, errs := e.relayctl("plan", e.spec, "--out", e.plan, "--detailed-exitcode"); code != 2 {
		t.Fatalf("plan 2: exit %d\n%s\n%s", code, out, errs)
	}
	if code, out, errs := e.relayctl("apply", e.plan); code != 0 {
		t.Fatalf("apply 2: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	if out, _ := h.Exec(context.Background(), "systemctl", "show", "-p", "DropInPaths", "--value", "relayd"); strings.Contains(string(out), dropIn) {
		t.Errorf("systemd still reads the removed drop-in: %q", out)
	}
	if _, rb, _ := e.socket(h); rb != 425984 {
		t.Errorf("rb %d without force, want 425984 (2 × min(4194304, rmem_max 212992))", rb)
	}
}

// Reboot persistence, which no runtime check shows: after apply, the
// host's own systemd-sysctl, run as at boot on a kernel back at its
// defaults, puts net.core.rmem_max in force from relayctl's drop-in, as the
// plan's "decided at boot by" said.
func TestLabSystemdDropInHoldsAtBoot(t *testing.T) {
	e := startSystemdLab(t, nil)
	h := e.lab.Hosts[0]
	if code, _, errs := e.relayctl("plan", e.spec, "--out", e.plan, "--detailed-exitcode"); code != 2 {
		t.Fatalf("plan: exit %d: %s", code, errs)
	}
	pc, _, err := loadPlan(e.plan)
	p := pc.Plan()
	if err != nil {
		t.Fatal(err)
	}
	decided := p.Hosts[0].Sysctls[0].DecidedAtBoot
	if !strings.HasPrefix(decided, "/etc/sysctl.d/90-relayctl.conf:") {
		t.Fatalf("the plan says %q decides rmem_max at boot, want relayctl's drop-in", decided)
	}
	if code, out, errs := e.relayctl("apply", e.plan); code != 0 {
		t.Fatalf("apply: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	kerneltest.Set(t, "net.core.rmem_max", incidentRmem) // a fresh boot's kernel default
	if out, err := h.RunSystemdSysctl(context.Background(), "net.core.rmem_max"); err != nil {
		t.Fatalf("systemd-sysctl: %v %s", err, out)
	}
	if got := kerneltest.Read(t, "net.core.rmem_max"); got != "8388608" {
		t.Errorf("after the host's systemd-sysctl, rmem_max is %s, want 8388608 from %s", got, decided)
	}
}
