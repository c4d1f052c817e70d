package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/relayctl/relayctl/internal/lab"
	"github.com/relayctl/relayctl/rollout"
)

// decodeStrict decodes stdout as exactly one JSON document of v's type:
// no unknown field, nothing after it.
func decodeStrict(t *testing.T, what, stdout string, v any) {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(stdout))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%s: stdout is not the documented JSON: %v\n%s", what, err, stdout)
	}
	if dec.More() {
		t.Fatalf("%s: more than one JSON document on stdout:\n%s", what, stdout)
	}
}

// find returns the check named what.
func find(t *testing.T, checks []rollout.Check, what string) rollout.Check {
	t.Helper()
	for _, c := range checks {
		if c.What == what {
			return c
		}
	}
	t.Fatalf("no check %q in %+v", what, checks)
	return rollout.Check{}
}

// verify --json and apply --json against a real host, decoded field by
// field; and a sysctl the host's kernel does not have blocks the plan with
// the nearest key.
func TestLabJSONOutputs(t *testing.T) {
	e := startLab(t, []lab.HostOptions{{}}, nil)
	h := e.lab.Hosts[0]
	pidBefore, _, _ := e.socket(h)

	// A typo: a warning before connecting, a blocker from the host's /proc/sys.
	spec, _ := os.ReadFile(e.spec)
	typo := filepath.Join(e.dir, "typo.yaml")
	os.WriteFile(typo, bytes.Replace(spec, []byte("  net.core.rmem_max: 8388608\n"), []byte("  net.core.rmem_max: 8388608\n  net.core.rmem_maxx: 8388608\n"), 1), 0o644)
	code, out, errs := e.relayctl("plan", typo, "--out", filepath.Join(e.dir, "typo.plan"), "--detailed-exitcode")
	if code != 1 || !strings.Contains(errs, "relayctl: warning: "+typo+":6: sysctl.net.core.rmem_maxx: not a sysctl of Linux") ||
		!strings.Contains(out, "blocked: net.core.rmem_maxx does not exist on this host (kernel ") ||
		!strings.Contains(out, "nothing can set it; did you mean net.core.rmem_max? Otherwise remove it from the spec") {
		t.Errorf("plan with a typo: exit %d, want 1 with the warning and the blocker's did-you-mean\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}

	if code, _, errs := e.relayctl("plan", e.spec, "--out", e.plan, "--detailed-exitcode"); code != 2 {
		t.Fatalf("plan: exit %d: %s", code, errs)
	}
	pc, _, err := loadPlan(e.plan)
	p := pc.Plan()
	if err != nil {
		t.Fatal(err)
	}

	// verify --json before the apply: exit 3, the rb differs.
	code, out, errs = e.relayctl("verify", e.plan, "--json")
	var vr verifyReport
	decodeStrict(t, "verify --json", out, &vr)
	if code != 3 || !strings.Contains(errs, "1 of 1 hosts differ from the plan") {
		t.Errorf("verify --json before apply: exit %d, want 3\n%s", code, errs)
	}
	if vr.FormatVersion != 3 || vr.Source != e.plan || vr.Plan != "lab-rcvbuf" || vr.Checksum != p.Checksum {
		t.Errorf("verify --json header: %+v", vr)
	}
	if vr.Summary.Hosts != 1 || vr.Summary.Match != 0 || vr.Summary.Differ != 1 || len(vr.Hosts) != 1 || vr.Hosts[0].OK || vr.Hosts[0].Host != h.Name {
		t.Errorf("verify --json before apply: summary %+v, hosts %+v; want one host that differs", vr.Summary, vr.Hosts)
	}
	rb := find(t, vr.Hosts[0].Checks, "ss rb on udp/7788")
	if rb.Want != "8388608" || rb.Got != "212992" || rb.OK {
		t.Errorf("rb check before apply: %+v, want 8388608 wanted, 212992 read, not ok", rb)
	}

	// apply --json: the receipt on stdout, byte for byte the file beside the plan.
	code, out, errs = e.relayctl("apply", e.plan, "--json")
	if code != 0 {
		t.Fatalf("apply --json: exit %d\n%s\n%s", code, out, errs)
	}
	var fr rollout.FleetReceipt
	decodeStrict(t, "apply --json", out, &fr)
	file, _ := os.ReadFile(e.plan + ".receipt.json")
	if out != string(file) {
		t.Errorf("apply --json printed something else than %s.receipt.json", e.plan)
	}
	if strings.Contains(out, "applied:") || !strings.Contains(errs, "relayctl: receipt of run "+fr.ID+" in ") {
		t.Errorf("apply --json: the recap belongs to the text output, progress to stderr\nstdout:\n%s\nstderr:\n%s", out, errs)
	}
	if fr.FormatVersion != rollout.ReceiptFormatVersion || fr.Plan != "lab-rcvbuf" || fr.Checksum != p.Checksum || fr.Started == "" || fr.Millis <= 0 || len(fr.Hosts) != 1 {
		t.Fatalf("receipt header: format %d, plan %q, checksum %q, started %q, %d ms, %d hosts", fr.FormatVersion, fr.Plan, fr.Checksum, fr.Started, fr.Millis, len(fr.Hosts))
	}
	if fr.Kind != rollout.RunApply || !rollout.ValidRunID(fr.ID) || fr.Operator == nil || fr.Relayctl == nil || fr.Ended == "" {
		t.Errorf("receipt's run: %+v, operator %+v, relayctl %+v, ended %q", fr.RunInfo, fr.Operator, fr.Relayctl, fr.Ended)
	}
	r := fr.Hosts[0]
	if r.SSH == nil || !strings.HasPrefix(r.SSH.Key, "ssh-ed25519 SHA256:") || !strings.HasPrefix(r.SSH.HostKey, "ssh-ed25519 SHA256:") || r.SSH.User != "root" {
		t.Errorf("the host's ssh: %+v, want the lab's key and host key", r.SSH)
	}
	pidAfter, _, _ := e.socket(h)
	switch {
	case r.Host != h.Name || r.Outcome != rollout.Applied || r.Plan != "lab-rcvbuf" || r.Checksum != p.Checksum:
		t.Errorf("host receipt: host %q outcome %q plan %q checksum %q", r.Host, r.Outcome, r.Plan, r.Checksum)
	case r.ReleaseBefore != "1.7.0" || r.ReleaseAfter != "1.8.0":
		t.Errorf("release %q → %q, want 1.7.0 → 1.8.0", r.ReleaseBefore, r.ReleaseAfter)
	case r.PIDBefore != pidBefore || r.PIDAfter != pidAfter || r.Restarts != 1:
		t.Errorf("pid %d → %d with %d restarts, want %d → %d with 1", r.PIDBefore, r.PIDAfter, r.Restarts, pidBefore, pidAfter)
	case r.RBBefore != 212992 || r.RBAfter != 8388608 || r.ExpectedRB != 8388608:
		t.Errorf("rb %d → %d (expected %d), want 212992 → 8388608", r.RBBefore, r.RBAfter, r.ExpectedRB)
	case r.SysctlsBefore["net.core.rmem_max"] != incidentRmem || r.SysctlsAfter["net.core.rmem_max"] != "8388608":
		t.Errorf("rmem_max %q → %q", r.SysctlsBefore["net.core.rmem_max"], r.SysctlsAfter["net.core.rmem_max"])
	case r.DropsBefore == nil || r.DropsAfter == nil || r.DropsAfter.RelayRxDrops == nil:
		t.Errorf("drop counters: before %+v, after %+v", r.DropsBefore, r.DropsAfter)
	case r.WindowMillis <= 0 || len(r.Steps) == 0:
		t.Errorf("window %d ms, %d steps", r.WindowMillis, len(r.Steps))
	}
	for _, s := range r.Steps {
		if s.Status != "done" || s.Title == "" {
			t.Errorf("step %+v: want done, with its title", s)
		}
	}
	for _, c := range r.Verify {
		if !c.OK {
			t.Errorf("read-back check %+v failed in an applied receipt", c)
		}
	}

	// verify --json after: every check ok, exit 0.
	code, out, errs = e.relayctl("verify", e.plan, "--json")
	vr = verifyReport{}
	decodeStrict(t, "verify --json", out, &vr)
	if code != 0 || vr.Summary.Match != 1 || vr.Summary.Differ != 0 || !vr.Hosts[0].OK || len(vr.Hosts[0].Checks) == 0 {
		t.Errorf("verify --json after apply: exit %d, summary %+v\n%s\n%s", code, vr.Summary, out, errs)
	}
	for _, c := range vr.Hosts[0].Checks {
		if !c.OK || c.Want != c.Got {
			t.Errorf("check %+v after apply", c)
		}
	}
	if rb := find(t, vr.Hosts[0].Checks, "ss rb on udp/7788"); rb.Got != "8388608" {
		t.Errorf("rb check after apply: %+v", rb)
	}
}
