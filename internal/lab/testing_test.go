package lab

import (
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
