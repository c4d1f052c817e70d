package plans

import (
	"strings"
	"testing"
)

// A host that could not be read is in the plan as unreachable: it
// validates with nothing but its error, is listed first in the review, and
// counts against the unreachable budget.
func TestUnreachableHostIsPlannedAsSuch(t *testing.T) {
	s := incidentSpec(t, func(src string) string {
		return strings.Replace(src, "  - relay-ash-1\n", "  - relay-ash-1\n  - relay-ash-2\n", 1)
	})
	p, err := Make(Input{Spec: s, Facts: []*Facts{incidentFacts()}, Unreachable: map[string]string{"relay-ash-2": "dial tcp 10.0.0.5:22: connect: connection refused\n\x1b[31m"},
		Artifact: testArtifact, Steps: testSteps})
	if err != nil {
		t.Fatal(err)
	}
	h := p.Hosts[1]
	if want := "dial tcp 10.0.0.5:22: connect: connection refused " + Visible("\x1b[31m"); h.Action != ActionUnreachable || h.Unreachable != want {
		t.Fatalf("host 2: got action %q, unreachable %q, want %q", h.Action, h.Unreachable, want)
	}
	if _, err := p.JSON(); err != nil {
		t.Fatal(err)
	}
	if err := Validate(p); err != nil {
		t.Fatalf("validate: %v", err)
	}
	// One line of text is all a plan keeps of the error: one edited to
	// hold an escape is refused...
	h.Unreachable = "refused\x1b[31m"
	if err := Validate(p); err == nil || !strings.Contains(err.Error(), "unreachable without an error") {
		t.Fatalf("validate an error with an escape: got %v", err)
	}
	h.Unreachable = "refused"
	// ...and so is an unreachable host with decisions.
	h.Steps = []Step{{Phase: PhaseWindow, Kind: "restart", Title: "restart"}}
	if err := Validate(p); err == nil || !strings.Contains(err.Error(), "holds facts or decisions") {
		t.Fatalf("validate an unreachable host with steps: got %v", err)
	}
	h.Steps = []Step{}
	md := string(p.Markdown("x.plan"))
	if i, j := strings.Index(md, "**UNREACHABLE** relay-ash-2"), strings.Index(md, "## relay-ash-1"); i < 0 || i > j {
		t.Errorf("the review does not list the unreachable host first:\n%s", md)
	}
	if ok, text := p.UnreachableBudget(Amount{N: 0}); ok || !strings.Contains(text, "1 of 2 host(s) could not be read (relay-ash-2), over the budget of 0") {
		t.Errorf("budget 0: got %v, %q", ok, text)
	}
	if ok, _ := p.UnreachableBudget(Amount{N: 50, Percent: true}); !ok {
		t.Errorf("budget 50%%: exactly at the budget is within it")
	}
}

// A plan with a host not read records the budget it was made with, so
// approve and apply know whether plan called it "not a plan to apply"
// (OverBudget); a plan that records none (made before it did) is held to
// its spec's rollout.max_unreachable; an edited record is an edited plan.
func TestPlanRecordsItsUnreachableBudget(t *testing.T) {
	s := incidentSpec(t, func(src string) string {
		return strings.Replace(src, "  - relay-ash-1\n", "  - relay-ash-1\n  - relay-ash-2\n", 1)
	})
	in := Input{Spec: s, Facts: []*Facts{incidentFacts()}, Unreachable: map[string]string{"relay-ash-2": "timed out"}, Artifact: testArtifact, Steps: testSteps}
	p, err := Make(in)
	if err != nil {
		t.Fatal(err)
	}
	if over, text := p.OverBudget(); p.UnreachableAllowed != "0" || !over || text != "1 of 2 host(s) could not be read (relay-ash-2), over the budget of 0 it was made with" {
		t.Errorf("budget 0: recorded %q, over %v %q", p.UnreachableAllowed, over, text)
	}
	in.UnreachableAllowed = Amount{N: 1}
	if p, err = Make(in); err != nil {
		t.Fatal(err)
	}
	if over, _ := p.OverBudget(); p.UnreachableAllowed != "1" || over {
		t.Errorf("budget 1: recorded %q, over %v", p.UnreachableAllowed, over)
	}
	if err := Validate(p); err != nil {
		t.Fatalf("validate: %v", err)
	}
	p.UnreachableAllowed = ""
	if over, _ := p.OverBudget(); !over {
		t.Error("no record: held to the spec's budget, 0, it is over")
	}
	for _, edit := range []string{"lots", "-1"} {
		p.UnreachableAllowed = edit
		if err := Validate(p); err == nil || !strings.Contains(err.Error(), "unreachable_allowed") {
			t.Errorf("unreachable_allowed %q: got %v", edit, err)
		}
	}
	in.Unreachable, in.Facts = nil, []*Facts{incidentFacts(), incidentFacts()}
	in.Facts[1].Host = "relay-ash-2"
	if p, err = Make(in); err != nil {
		t.Fatal(err)
	}
	if p.UnreachableAllowed != "" {
		t.Errorf("every host read: recorded %q, want nothing", p.UnreachableAllowed)
	}
	p.UnreachableAllowed = "5"
	if err := Validate(p); err == nil || !strings.Contains(err.Error(), "every host was read") {
		t.Errorf("a budget on a plan that read every host: got %v", err)
	}
}
