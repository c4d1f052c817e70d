package rollout

import (
	"testing"

	"github.com/relayctl/relayctl/plans"
)

// A sysctl already at the value the host's plan sets it to is drift
// toward the plan: a rollback plan's value is what the undone window
// found, not the spec's. On the code before, the spec's value was the
// plan's, so a rollback plan's host whose sysctl was already back (in the
// lab, reset by another host's rollback: they share a kernel) was stale.
func TestTowardTheHostPlansValue(t *testing.T) {
	p := &plans.Plan{Sysctl: []plans.PlannedSysctl{{Key: "net.core.rmem_max", Value: "8388608"}}}
	forward := &plans.HostPlan{Sysctls: []plans.SysctlChange{{Key: "net.core.rmem_max", Current: "212992", Planned: "8388608"}}}
	back := &plans.HostPlan{Sysctls: []plans.SysctlChange{{Key: "net.core.rmem_max", Current: "8388608", Planned: "212992"}}}
	tests := []struct {
		name     string
		h        *plans.HostPlan
		observed string
		want     bool
	}{
		{"forward, at its value", forward, "8388608", true},
		{"forward, elsewhere", forward, "425984", false},
		{"rollback, back already", back, "212992", true},
		{"rollback, at the spec's value", back, "8388608", false},
	}
	for _, tt := range tests {
		d := []plans.Drift{{Name: "sysctl net.core.rmem_max", Observed: tt.observed}}
		if got := towardPlan(p, tt.h, d); got != tt.want {
			t.Errorf("%s: got %v, want %v", tt.name, got, tt.want)
		}
	}
}
