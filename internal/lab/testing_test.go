package lab

import "testing"

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
