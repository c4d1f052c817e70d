package plans

import (
	"strings"
	"testing"
)

// A port range the kernel would refuse is caught before any window: by
// the spec's parser when the spec sets both keys, and by the plan against
// the host's ip_unprivileged_port_start (which it reads for that) when it
// sets only the range.
func TestPortRangeAgainstUnprivilegedStart(t *testing.T) {
	src := strings.Replace(goodSpec, "  net.core.rmem_max: 8388608\n", "  net.core.rmem_max: 8388608\n  net.ipv4.ip_local_port_range: 1000 2000\n  net.ipv4.ip_unprivileged_port_start: 1024\n", 1)
	_, err := ParseSpec("x.yaml", []byte(src))
	if err == nil || !strings.Contains(err.Error(), "sysctl: net.ipv4.ip_local_port_range starts at 1000, below net.ipv4.ip_unprivileged_port_start 1024, and the kernel refuses that (EINVAL)") {
		t.Fatalf("parse a spec whose range starts below the unprivileged start: got %v", err)
	}

	s := incidentSpec(t, func(src string) string {
		return strings.Replace(src, "  net.core.rmem_max: 8388608\n", "  net.core.rmem_max: 8388608\n  net.ipv4.ip_local_port_range: 1000 2000\n", 1)
	})
	if keys := s.ReadKeys(); !strings.Contains(strings.Join(keys, " "), "net.ipv4.ip_unprivileged_port_start") {
		t.Fatalf("the plan does not read the key the range is checked against: %v", keys)
	}
	f := incidentFacts()
	f.Sysctls["net.ipv4.ip_local_port_range"] = SysctlFact{Exists: true, Value: "32768\t60999", Writable: true}
	f.Sysctls["net.ipv4.ip_unprivileged_port_start"] = SysctlFact{Exists: true, Value: "1024", Writable: true}
	h := makePlan(t, s, f).Hosts[0]
	if h.Action != ActionBlocked || !strings.Contains(strings.Join(h.Blockers, "\n"), "starts at 1000, below net.ipv4.ip_unprivileged_port_start 1024") {
		t.Fatalf("a host whose unprivileged start is 1024: got %s, blockers %q", h.Action, h.Blockers)
	}
	f.Sysctls["net.ipv4.ip_unprivileged_port_start"] = SysctlFact{Exists: true, Value: "0", Writable: true}
	if h := makePlan(t, s, f).Hosts[0]; h.Action != ActionChange {
		t.Fatalf("a host whose unprivileged start is 0: got %s, blockers %q", h.Action, h.Blockers)
	}
}
