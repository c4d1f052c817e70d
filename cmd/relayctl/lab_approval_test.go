package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/relayctl/relayctl/internal/kerneltest"
	"github.com/relayctl/relayctl/internal/lab"
)

// With the machine's allowed_signers file in place, an unsigned plan
// changes nothing on a real host (apply, stage); staging with
// --skip-approval and applying a signed plan both run, and each receipt
// says how approval was decided.
func TestLabApprovalRequiredWhenConfigured(t *testing.T) {
	e := startLab(t, []lab.HostOptions{{}}, nil)
	h := e.lab.Hosts[0]
	key := filepath.Join(e.dir, "alice")
	if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "alice", "-f", key).CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen: %v\n%s", err, out)
	}
	pub, err := os.ReadFile(key + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	signers := filepath.Join(e.dir, "etc", "relayctl", "allowed_signers")
	if err := os.MkdirAll(filepath.Dir(signers), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(signers, append([]byte(`alice@example.com namespaces="relayctl-plan" `), pub...), 0o644); err != nil {
		t.Fatal(err)
	}
	old := systemAllowedSigners
	systemAllowedSigners = signers
	t.Cleanup(func() { systemAllowedSigners = old })

	if code, out, errs := e.relayctl("plan", e.spec, "--out", e.plan, "--detailed-exitcode"); code != 2 {
		t.Fatalf("plan: exit %d\n%s\n%s", code, out, errs)
	}
	pid, rb, _ := e.socket(h)
	for _, cmd := range [][]string{{"apply", e.plan}, {"apply", e.plan, "--resume"}, {"stage", e.plan}} {
		code, _, errs := e.relayctl(cmd...)
		if code != 1 || !strings.Contains(errs, "the plan is not signed") {
			t.Errorf("%s unsigned: exit %d, want 1 and not signed\n%s", cmd[0], code, errs)
		}
	}
	if p, r, _ := e.socket(h); p != pid || r != rb || kerneltest.Read(t, "net.core.rmem_max") != incidentRmem {
		t.Errorf("an unsigned plan changed the host: pid %d → %d, rb %d → %d", pid, p, rb, r)
	}
	for _, f := range []string{".receipt.json", ".stage.json", ".ledger.json"} {
		if _, err := os.Stat(e.plan + f); err == nil {
			t.Errorf("an unsigned plan left %s", e.plan+f)
		}
	}

	if code, out, errs := e.relayctl("stage", e.plan, "--skip-approval", "lab: staging before review"); code != 0 {
		t.Fatalf("stage --skip-approval: exit %d\n%s\n%s", code, out, errs)
	}
	if a := receiptApproval(t, e.plan+".stage.json"); a.Decision != "skipped" || a.SkippedBy != `--skip-approval "lab: staging before review"` || a.AllowedSigners != signers {
		t.Errorf("stage receipt approval: %+v", a)
	}
	var out, errb bytes.Buffer
	if code := run([]string{"relayctl", "approve", e.plan, "-i", key}, strings.NewReader(""), &out, &errb); code != 0 {
		t.Fatalf("approve: exit %d\n%s", code, errb.String())
	}
	if code, out, errs := e.relayctl("apply", e.plan); code != 0 {
		t.Fatalf("apply signed: exit %d\n%s\n%s", code, out, errs)
	}
	if _, r, _ := e.socket(h); r != 8388608 {
		t.Errorf("rb after the signed apply: %d, want 8388608", r)
	}
	if a := receiptApproval(t, e.plan+".receipt.json"); a.Decision != "signed" || !strings.HasPrefix(a.Signer, "alice@example.com (ssh-ed25519 SHA256:") || a.From != signers {
		t.Errorf("receipt approval: %+v", a)
	}
}

type approvalRecord struct {
	Decision       string `json:"decision"`
	AllowedSigners string `json:"allowed_signers"`
	From           string `json:"from"`
	Signer         string `json:"signer"`
	SkippedBy      string `json:"skipped_by"`
}

func receiptApproval(t *testing.T, file string) approvalRecord {
	t.Helper()
	var r struct {
		Approval *approvalRecord `json:"approval"`
	}
	body, err := os.ReadFile(file)
	if err != nil || json.Unmarshal(body, &r) != nil || r.Approval == nil {
		t.Fatalf("%s: no approval: %v\n%s", file, err, body)
	}
	return *r.Approval
}
