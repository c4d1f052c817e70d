package lab

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Under -short (make test-unit) Require skips, prerequisites or not, so a
// unit run starts no sshd, relay or systemd. Without -short there is
// nothing to check here: the lab tests themselves run.
func TestRequireSkipsUnderShort(t *testing.T) {
	if !testing.Short() {
		t.Skip("checks -short; run with go test -short")
	}
	var ran bool
	t.Run("lab test", func(t *testing.T) {
		Require(t)
		ran = true
	})
	if ran {
		t.Error("Require let a lab test run under -short")
	}
}

// Under -short a lab test that forgot Require still starts nothing:
// BuildRelayd skips it, and Start refuses.
func TestNoLabUnderShort(t *testing.T) {
	if !testing.Short() {
		t.Skip("checks -short; run with go test -short")
	}
	var built bool
	t.Run("build", func(t *testing.T) {
		BuildRelayd(t, "1.0.0")
		built = true
	})
	if built {
		t.Error("BuildRelayd built relayd under -short")
	}
	if l, err := Start(t.Context(), Options{Dir: t.TempDir(), Hosts: []HostOptions{{}}}); err == nil || !strings.Contains(err.Error(), "lab.Require") {
		if l != nil {
			l.Close()
		}
		t.Errorf("Start under -short: %v, want a refusal naming lab.Require", err)
	}
}

// relaylab down stops every process in a host's mount namespace: Load
// refuses a lab.json that gives the machine's own.
func TestLoadRefusesTheMachinesMountNamespace(t *testing.T) {
	own, err := os.Readlink("/proc/self/ns/mnt")
	if err != nil {
		t.Skip("no /proc/self/ns/mnt")
	}
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "lab.json"), []byte(`{"dir": "`+dir+`", "hosts": [{"name": "lab-1", "sshd_pid": 1, "mount_ns": "`+own+`"}]}`), 0o644)
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), "lab-1 gives the machine's own mount namespace") {
		t.Errorf("Load of a lab.json naming the machine's mount namespace: %v, want a refusal", err)
	}
}
