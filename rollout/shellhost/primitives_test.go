package shellhost

import (
	"context"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/relayctl/relayctl/plans"
	"github.com/relayctl/relayctl/rollout"
	"github.com/relayctl/relayctl/rollout/rollouttest"
)

// rollout.Primitives is the one list of host primitives: agent.sh defines
// a function for each (and no other), lock aside, which is the session's
// first line, and sync, which ends a batch; the Sim has a case for each.
func TestEveryPrimitiveHasAnAgentFunctionAndASimCase(t *testing.T) {
	var agent []string
	for _, m := range regexp.MustCompile(`(?m)^p_([a-z_]+)\(\) \{`).FindAllStringSubmatch(agentScript, -1) {
		agent = append(agent, strings.ReplaceAll(m[1], "_", "-"))
	}
	want := []string{"sync"}
	for _, p := range rollout.Primitives {
		if p.Kind != "lock" {
			want = append(want, p.Kind)
		}
	}
	sort.Strings(agent)
	sort.Strings(want)
	if strings.Join(agent, " ") != strings.Join(want, " ") {
		t.Errorf("agent.sh's primitives:\n%s\nthe table's (lock aside, sync added):\n%s", strings.Join(agent, " "), strings.Join(want, " "))
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
