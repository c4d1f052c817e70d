package main

// The record against the lab: every run keeps its receipt beside the plan
// and on the hosts it reached, under a name of its own, and history lists
// them from both; plans of unchanged hosts are the same bytes.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/crypto/ssh"

	"github.com/relayctl/relayctl/internal/lab"
	"github.com/relayctl/relayctl/plans"
)

// labKeys are the lab's client key and each host's key, as the receipts
// name them (type and SHA256 fingerprint).
func labKeys(t *testing.T, l *lab.Lab) (user string, hosts map[string]string) {
	t.Helper()
	priv, err := os.ReadFile(l.Identity)
	if err != nil {
		t.Fatal(err)
	}
	s, err := ssh.ParsePrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	user = s.PublicKey().Type() + " " + ssh.FingerprintSHA256(s.PublicKey())
	hosts = map[string]string{}
	kh, err := os.ReadFile(l.KnownHosts)
	if err != nil {
		t.Fatal(err)
	}
	for rest := kh; len(rest) > 0; {
		_, names, key, _, next, err := ssh.ParseKnownHosts(rest)
		if err != nil {
			break
		}
		for _, h := range l.Hosts {
			for _, n := range names {
				if n == h.HostName || n == fmt.Sprintf("[%s]:%d", h.HostName, h.Port) {
					hosts[h.Name] = key.Type() + " " + ssh.FingerprintSHA256(key)
				}
			}
		}
		rest = next
	}
	return user, hosts
}

// hostReceipts lists the receipts a lab host keeps.
func hostReceipts(t *testing.T, h *lab.Host) []string {
	t.Helper()
	out, err := h.Exec(context.Background(), "sh", "-c", "cd /var/lib/relayctl/receipts && ls -1 -- *.json")
	if err != nil {
		t.Fatalf("%s: %v %s", h.Name, err, out)
	}
	return strings.Fields(string(out))
}

// Two applies of one plan, the second with lab-2's sshd stopped (its
// connections time out): two records beside the plan, two receipts on
// lab-1 (applied, then unchanged) and one on lab-2; history lists both
// runs from the records and from the hosts, with the operator, relayctl's
// version, the key each host accepted and how it ended, and the second
// run hides nothing of the first.
func TestLabTwoRunsAreTwoRecords(t *testing.T) {
	e := startLab(t, make([]lab.HostOptions, 2), nil)
	h1, h2 := e.lab.Hosts[0], e.lab.Hosts[1]
	userKey, hostKeys := labKeys(t, e.lab)
	if code, _, errs := e.relayctl("plan", e.spec, "--out", e.plan); code != 0 {
		t.Fatalf("plan: exit %d\n%s", code, errs)
	}
	if code, out, errs := e.relayctl("apply", e.plan, "--waves", "100%"); code != 0 {
		t.Fatalf("apply: exit %d\n%s\n%s", code, out, errs)
	}
	if err := syscall.Kill(h2.SSHDPID, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := true
	cont := func() {
		if stopped {
			syscall.Kill(h2.SSHDPID, syscall.SIGCONT)
			stopped = false
		}
	}
	t.Cleanup(cont)
	code, out, errs := e.relayctl("apply", e.plan, "--waves", "100%", "--max-unreachable", "1", "--connect-timeout", "2s")
	if code != 1 || !strings.Contains(out, "unchanged:") || !strings.Contains(out, "unreachable:") {
		t.Fatalf("second apply: exit %d, want 1 with lab-1 unchanged and lab-2 unreachable\n%s\n%s", code, out, errs)
	}

	records, _ := filepath.Glob(e.plan + ".receipts/*.json")
	if len(records) != 2 {
		t.Fatalf("records beside the plan: %q, want two", records)
	}
	if got := hostReceipts(t, h1); len(got) != 2 {
		t.Errorf("lab-1 keeps %q, want both runs' receipts", got)
	}
	cont()
	if got := hostReceipts(t, h2); len(got) != 1 {
		t.Errorf("lab-2 keeps %q, want the first run's receipt", got)
	}
	syscall.Kill(h2.SSHDPID, syscall.SIGSTOP)
	stopped = true

	var local historyReport
	code, out, errs = e.relayctl("history", e.plan, "--json")
	if code != 0 || json.Unmarshal([]byte(out), &local) != nil || len(local.Runs) != 2 {
		t.Fatalf("history: exit %d, %d runs, want 2\n%s\n%s", code, len(local.Runs), out, errs)
	}
	second, first := local.Runs[0], local.Runs[1]
	me := runInfo("apply").Operator
	for _, r := range local.Runs {
		if r.Operator == nil || r.Operator.User != me.User || r.Operator.Machine != me.Machine || r.Relayctl == nil || r.Relayctl.Version != version() {
			t.Errorf("run %s: operator %+v, relayctl %+v; want %+v and %s", r.RunID, r.Operator, r.Relayctl, me, version())
		}
		if len(r.Keys) != 1 || r.Keys[0] != userKey {
			t.Errorf("run %s: keys %q, want the lab's %s", r.RunID, r.Keys, userKey)
		}
	}
	if first.Outcomes["applied"] != 2 || second.Outcomes["unchanged"] != 1 || second.Outcomes["unreachable"] != 1 || first.RunID >= second.RunID {
		t.Errorf("runs, newest first: %s %v, then %s %v; want unchanged 1 + unreachable 1, then applied 2", second.RunID, second.Outcomes, first.RunID, first.Outcomes)
	}
	code, text, _ := e.relayctl("history", e.plan)
	if code != 0 || !strings.Contains(text, first.RunID) || !strings.Contains(text, second.RunID) || !strings.Contains(text, userKey) {
		t.Errorf("history's table: exit %d\n%s", code, text)
	}

	// From the hosts: lab-1's own receipts name both runs, the key it
	// accepted and its host key; lab-2 cannot be read while its sshd is
	// stopped, and says so; once it runs again, its one receipt.
	var remote historyReport
	code, out, errs = e.relayctl("history", e.plan, "--hosts", "--connect-timeout", "2s", "--json")
	if code != 1 || json.Unmarshal([]byte(out), &remote) != nil || len(remote.Unread) != 1 || remote.Unread[0].Host != h2.Name {
		t.Fatalf("history --hosts with lab-2 stopped: exit %d, want 1 naming lab-2 unread\n%s\n%s", code, out, errs)
	}
	var ids []string
	for _, r := range remote.Runs {
		ids = append(ids, r.RunID)
		hl := r.Hosts[0]
		if hl.Host != h1.Name || hl.SSH == nil || hl.SSH.Key != userKey || hl.SSH.HostKey != hostKeys[h1.Name] || r.Operator == nil || r.Relayctl == nil {
			t.Errorf("lab-1's receipt of %s: %+v (ssh %+v), operator %+v; want key %s, host key %s", r.RunID, hl, hl.SSH, r.Operator, userKey, hostKeys[h1.Name])
		}
	}
	if strings.Join(ids, " ") != second.RunID+" "+first.RunID {
		t.Errorf("lab-1's receipts: %q, want %s then %s", ids, second.RunID, first.RunID)
	}
	cont()
	code, out, errs = e.relayctl("history", e.plan, "--hosts", "--host", h2.Name, "--json")
	remote = historyReport{}
	if code != 0 || json.Unmarshal([]byte(out), &remote) != nil || len(remote.Runs) != 1 || remote.Runs[0].RunID != first.RunID || remote.Runs[0].Hosts[0].Outcome != "applied" {
		t.Errorf("history --hosts --host lab-2: exit %d\n%s\n%s", code, out, errs)
	}

	// The second run hides nothing of the first: its record is whole, and
	// the stable name points at the second.
	body, err := os.ReadFile(first.Receipt)
	if err != nil || !bytes.Contains(body, []byte(`"outcome": "applied"`)) || bytes.Contains(body, []byte(`"outcome": "unreachable"`)) {
		t.Errorf("the first run's record %s: %v\n%s", first.Receipt, err, body)
	}
	if target, err := os.Readlink(e.plan + ".receipt.json"); err != nil || filepath.Join(e.dir, target) != second.Receipt {
		t.Errorf("%s.receipt.json → %q (%v), want %s", e.plan, target, err, second.Receipt)
	}
}

// Two plans of one spec against unchanged lab hosts, one after the other,
// are the same bytes, and so are their reviews; the readings beside them,
// taken at another time on the host's clock, are not.
func TestLabPlanTwiceIsTheSameBytes(t *testing.T) {
	e := startLab(t, make([]lab.HostOptions, 2), nil)
	a, b := filepath.Join(e.dir, "a.plan"), filepath.Join(e.dir, "b.plan")
	for _, p := range []string{a, b} {
		if code, _, errs := e.relayctl("plan", e.spec, "--out", p); code != 0 {
			t.Fatalf("plan %s: exit %d\n%s", p, code, errs)
		}
	}
	if pa, pb := mustRead(t, a), mustRead(t, b); pa != pb {
		t.Errorf("two plans of unchanged hosts differ:\n%s", firstDifference(pa, pb))
	}
	if ma, mb := mustRead(t, a+".md"), mustRead(t, b+".md"); strings.ReplaceAll(ma, "a.plan", "b.plan") != mb {
		t.Errorf("their reviews differ:\n%s", firstDifference(ma, mb))
	}
	var ra, rb plans.Readings
	if json.Unmarshal([]byte(mustRead(t, readingsFile(a))), &ra) != nil || json.Unmarshal([]byte(mustRead(t, readingsFile(b))), &rb) != nil {
		t.Fatal("the readings do not decode")
	}
	for i := range ra.Hosts {
		da, db := ra.Hosts[i].Drops, rb.Hosts[i].Drops
		if da == nil || db == nil || da.ClockNanos >= db.ClockNanos {
			t.Errorf("%s: readings %+v then %+v; want the drop counters read on the host's clock, the second later", ra.Hosts[i].Host, da, db)
		}
	}
}

// firstDifference is the first line where a and b differ.
func firstDifference(a, b string) string {
	la, lb := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := range min(len(la), len(lb)) {
		if la[i] != lb[i] {
			return "- " + la[i] + "\n+ " + lb[i]
		}
	}
	return "one is longer"
}
