package main

// relayctl against a lab host booted with a real systemd: relayd runs as
// relay/dist/relayd.service (Type=notify, in /run/netns/relay), and the spec
// says manager: systemd, name: relayd.

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"

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
	pidBefore, rbBefore, _ := e.socket(h)
	if rbBefore != 212992 {
		t.Fatalf("relayd.service starts with rb %d, want the kernel default 212992", rbBefore)
	}
	mainBefore, invBefore, nrBefore := unitState(t, h)
	startsBefore := journalStarts(t, h)

	code, out, errs := e.relayctl("plan", e.spec, "-out", e.plan)
	if code != 2 {
		t.Fatalf("plan: exit %d, want 2\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	p, _, err := loadPlan(e.plan)
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
}
