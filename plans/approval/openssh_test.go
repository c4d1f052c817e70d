package approval

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestOptionsAgreeWithSSHKeygen checks a table of allowed_signers options,
// namespaces= patterns above all, against `ssh-keygen -Y verify` itself:
// relayctl must accept a signature exactly when OpenSSH does. The want
// column says what OpenSSH 9.2 answered when the table was written, so a
// disagreement names which side moved.
func TestOptionsAgreeWithSSHKeygen(t *testing.T) {
	keygen := requireSSHKeygen(t)
	s := newSigner(t)
	plan := []byte(`{"format_version": 2}` + "\n")
	sig, err := Sign(plan, s)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	planFile, sigFile := filepath.Join(dir, "x.plan"), filepath.Join(dir, "x.plan.sig")
	if err := os.WriteFile(planFile, plan, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(sigFile, sig, 0o600); err != nil {
		t.Fatal(err)
	}
	long := func(n int) string { return "relayctl-" + strings.Repeat("*", n-9) } // n characters in all
	tests := []struct {
		name, opts string
		want       bool // OpenSSH accepts the signature
	}{
		{"exact", `namespaces="relayctl-plan"`, true},
		{"star", `namespaces="*"`, true},
		{"prefix star", `namespaces="relayctl-*"`, true},
		{"question mark", `namespaces="relayctl?plan"`, true},
		{"star then negation", `namespaces="*,!relayctl-plan"`, false},
		{"negation then star", `namespaces="!relayctl-plan,*"`, false},
		{"negated pattern", `namespaces="relayctl-*,!*-plan"`, false},
		{"other negation", `namespaces="!git,relayctl-plan"`, true},
		{"only a negation of another", `namespaces="!git"`, false},
		{"negated star", `namespaces="!*"`, false},
		{"bare bang", `namespaces="!,relayctl-plan"`, true},
		{"double bang is a literal bang", `namespaces="!!relayctl-plan"`, false},
		{"brackets are literal", `namespaces="relayctl-pla[n]"`, false},
		{"backslash is literal", `namespaces="relayctl-pla\n"`, false},
		{"backslash before a star", `namespaces="relayctl-\*"`, false},
		{"case matters", `namespaces="RELAYCTL-PLAN"`, false},
		{"leading comma", `namespaces=",relayctl-plan"`, true},
		{"trailing comma", `namespaces="relayctl-plan,"`, true},
		{"empty", `namespaces=""`, false},
		{"a list", `namespaces="file,git,relayctl-plan"`, true},
		{"a list without it", `namespaces="file,git"`, false},
		{"spaces are part of a pattern", `namespaces="file, relayctl-plan"`, false},
		{"space in another pattern", `namespaces="a b,relayctl-plan"`, true},
		{"escaped quote", `namespaces="x\"y,relayctl-plan"`, true},
		{"star matches nothing too", `namespaces="relayctl-plan*"`, true},
		{"many stars", `namespaces="r*e*l*a*y*c*t*l*-*p*l*a*n"`, true},
		{"longest pattern", `namespaces="` + long(1022) + `"`, true},
		{"pattern too long", `namespaces="` + long(1023) + `"`, false},
		{"too long after a match", `namespaces="relayctl-plan,` + long(1023) + `"`, false},
		{"negation before too long", `namespaces="!relayctl-plan,` + long(1023) + `"`, false},
		{"unquoted", `namespaces=relayctl-plan`, false},
		{"option name in capitals", `NAMESPACES="relayctl-plan"`, true},
		{"two namespaces clauses", `namespaces="git",namespaces="relayctl-plan"`, false},
		{"trailing comma after options", `namespaces="relayctl-plan",`, false},
		{"unterminated quote", `namespaces="relayctl-plan`, false},
		{"unknown option", `namespaces="relayctl-plan",verify-required`, false},
		{"valid window", `valid-after="20200101",valid-before="20991231"`, true},
		{"window ends before it starts", `valid-after="20991231",valid-before="20200101"`, false},
		{"unquoted time", `valid-after=20200101`, false},
		{"cert-authority", `cert-authority`, false},
		{"cert-authority in capitals", `CERT-AUTHORITY`, false},
	}
	now := time.Now()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			allowed := line(tt.opts, s) + "\n"
			asFile := filepath.Join(dir, "allowed_signers")
			if err := os.WriteFile(asFile, []byte(allowed), 0o600); err != nil {
				t.Fatal(err)
			}
			openssh := sshKeygenVerifies(t, keygen, asFile, sigFile, planFile)
			_, err := Verify(plan, sig, []byte(allowed), "allowed_signers", now)
			ours := err == nil
			if openssh != tt.want {
				t.Errorf("ssh-keygen -Y verify says %v for %s, the table %v: OpenSSH changed; look again", openssh, clip(tt.opts), tt.want)
			}
			if ours != openssh {
				t.Errorf("relayctl says %v (%v), ssh-keygen -Y verify %v, for %s", ours, err, openssh, clip(tt.opts))
			}
		})
	}
}

// requireSSHKeygen finds ssh-keygen; without it the test skips, or fails
// with CI=true (a check that skips in CI proves nothing).
func requireSSHKeygen(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("ssh-keygen")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("ssh-keygen: %v", err)
		}
		t.Skipf("ssh-keygen: %v (set CI=true to make this a failure)", err)
	}
	return p
}

func sshKeygenVerifies(t *testing.T, keygen, allowed, sig, plan string) bool {
	t.Helper()
	in, err := os.Open(plan)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	cmd := exec.Command(keygen, "-Y", "verify", "-f", allowed, "-I", "alice@example.com", "-n", Namespace, "-s", sig)
	cmd.Stdin = in
	out, err := cmd.CombinedOutput()
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		t.Fatalf("run ssh-keygen: %v", err)
	}
	t.Logf("ssh-keygen: %s", strings.TrimSpace(string(out)))
	return err == nil
}
