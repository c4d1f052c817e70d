package main

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/relayctl/relayctl/internal/lab"
)

// labUser is a non-root account on this machine (lab hosts share its
// /etc/passwd and /etc/sudoers.d): relayctl logs in as it and runs
// everything through the real sudo -n.
const labUser = "relayctl-lab"

func ensureLabUser(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("sudo"); err != nil {
		t.Fatalf("sudo is not installed (make lab-deps installs it): %v", err)
	}
	if exec.Command("id", labUser).Run() != nil {
		if out, err := exec.Command("useradd", "--system", "--no-create-home", "--home-dir", "/nonexistent", "--shell", "/bin/sh", labUser).CombinedOutput(); err != nil {
			t.Fatalf("useradd %s: %v\n%s", labUser, err, out)
		}
	}
	// A new account is locked ("!"), which sshd refuses even for keys;
	// "*" allows no password either, but is not locked.
	if out, err := exec.Command("usermod", "-p", "*", labUser).CombinedOutput(); err != nil {
		t.Fatalf("usermod %s: %v\n%s", labUser, err, out)
	}
}

func TestLabPlanAsNonRootThroughSudo(t *testing.T) {
	e := startLab(t, []lab.HostOptions{{}}, func(s string) string {
		return strings.Replace(s, "  - lab-1\n", "  - "+labUser+"@lab-1\n", 1)
	})
	ensureLabUser(t)
	sudoers := "/etc/sudoers.d/" + labUser
	os.Remove(sudoers)
	t.Cleanup(func() { os.Remove(sudoers) })

	// No sudoers entry: sudo -n wants a password, and relayctl says so.
	code, out, errs := e.relayctl("plan", e.spec, "--out", e.plan, "--detailed-exitcode")
	if code != 1 || !strings.Contains(errs, "sudo requires a password; configure NOPASSWD for "+labUser) {
		t.Errorf("plan without sudo rights: exit %d, want 1 and the sudo message\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}

	if err := os.WriteFile(sudoers, []byte(labUser+" ALL=(root) NOPASSWD: ALL\n"), 0o440); err != nil {
		t.Fatal(err)
	}
	code, out, errs = e.relayctl("plan", e.spec, "--out", e.plan, "--detailed-exitcode")
	if code != 2 {
		t.Fatalf("plan through sudo: exit %d, want 2\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	pc, _, err := loadPlan(e.plan)
	p := pc.Plan()
	if err != nil {
		t.Fatal(err)
	}
	if h := p.Hosts[0]; !h.Readback.CurrentFound || h.Readback.Current != 212992 || len(h.Blockers) != 0 {
		t.Errorf("through sudo: current rb %d (found %v), blockers %q; want 212992 read from the relay's netns as root", h.Readback.Current, h.Readback.CurrentFound, h.Blockers)
	}
	code, out, errs = e.relayctl("apply", e.plan)
	if code != 0 {
		t.Errorf("apply through sudo: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	if _, rb, _ := e.socket(e.lab.Hosts[0]); rb != 8388608 {
		t.Errorf("after apply through sudo: rb %d, want 8388608", rb)
	}
}
