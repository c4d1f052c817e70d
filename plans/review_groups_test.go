package plans

import (
	"fmt"
	"strings"
	"testing"
)

// A review of more than 50 hosts gives hosts whose sections read the same
// one section, and each warning once with its hosts; a host unlike the
// others keeps its own section.
func TestReviewGroupsHostsOfABigFleet(t *testing.T) {
	hosts := ""
	var facts []*Facts
	for i := 1; i <= 60; i++ {
		name := fmt.Sprintf("relay-%02d", i)
		hosts += "  - " + name + "\n"
		f := incidentFacts()
		f.Host, f.Socket.Drops = name, uint64(i) // drop counts differ, and do not split a group
		if i == 7 {
			f.Sysctls["net.core.rmem_max"] = SysctlFact{Exists: true, Value: "4194304", Writable: true}
		}
		facts = append(facts, f)
	}
	s := incidentSpec(t, func(y string) string { return strings.Replace(y, "  - relay-ash-1\n", hosts, 1) })
	p := makePlan(t, s, facts...)
	md := string(p.Markdown("x.plan"))
	for _, want := range []string{
		"60 hosts in 2 section(s)",
		"## 59 hosts: changes\n\nKernel `6.18.44` · hosts relay-01 … relay-06 (6), relay-08 … relay-60 (53)\n",
		"## relay-07 (10.0.0.4:22): changes",
		"; now rb 212992\n",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("review lacks %q", want)
		}
	}
	if n := strings.Count(md, "\n## "); n != 2 {
		t.Errorf("%d sections, want 2", n)
	}
	if lines := strings.Count(md, "\n"); lines > 200 {
		t.Errorf("%d lines", lines)
	}
}
