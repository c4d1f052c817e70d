package shellhost

import (
	"context"
	"sort"
	"strings"
	"testing"

	"github.com/relayctl/relayctl/agent"
	"github.com/relayctl/relayctl/plans"
	"github.com/relayctl/relayctl/rollout"
	"github.com/relayctl/relayctl/rollout/rollouttest"
)

// rollout.Primitives is the one list of host primitives: the agent has a
// handler for each (and no other) besides sync, which ends a batch; the
// Sim has a case for each.
func TestEveryPrimitiveHasAnAgentFunctionAndASimCase(t *testing.T) {
	got := agent.Kinds()
	want := []string{"sync"}
	for _, p := range rollout.Primitives {
		want = append(want, p.Kind)
	}
	sort.Strings(got)
	sort.Strings(want)
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("the agent's primitives:\n%s\nthe table's (sync added):\n%s", strings.Join(got, " "), strings.Join(want, " "))
	}

	q := rollout.Query{Port: 7788, Paths: plans.PlanPaths(plans.DefaultPaths), Service: plans.PlanService{Manager: "none"}}
	for _, p := range rollout.Primitives {
		sim := rollouttest.NewSim("h")
		o := rollout.Op{Kind: p.Kind, Args: []string{"x", "1", "2", "3", "4"}}
		switch p.Kind {
		case "lock":
			o.Args = []string{"owner", "keep"}
		case "observe":
			o = rollout.Op{Kind: "observe", Query: &q}
		}
		ops := []rollout.Op{o}
		if p.Kind != "lock" {
			ops = append([]rollout.Op{{Kind: "lock", Args: []string{"owner", "keep"}}}, ops...)
		}
		if err := sim.Run(context.Background(), ops, nil); err != nil && strings.Contains(err.Error(), "unknown request") {
			t.Errorf("the Sim has no case for %s: %v", p.Kind, err)
		}
	}
}
