package rollout

import (
	"strings"
	"testing"

	"github.com/relayctl/relayctl/plans"
)

func TestUnitFailingStopsTheWait(t *testing.T) {
	p := &plans.Plan{Relay: plans.PlannedRelay{Service: plans.PlanService{Manager: "systemd", Name: "relayd"}}}
	for _, c := range []struct {
		s    plans.ServiceFact
		want string
	}{
		{plans.ServiceFact{Running: true, ActiveState: "active", SubState: "running"}, ""},
		{plans.ServiceFact{ActiveState: "activating", SubState: "start"}, ""},
		{plans.ServiceFact{ActiveState: "activating", SubState: "auto-restart", Restarts: 1}, "about to restart it"},
		{plans.ServiceFact{ActiveState: "failed", SubState: "failed", Restarts: 5}, "gave up on relayd"},
		{plans.ServiceFact{Running: true, ActiveState: "active", SubState: "running", Restarts: 2}, "restarted relayd 2 times on its own"},
	} {
		got := unitFailing(p, &plans.Facts{Service: c.s})
		if c.want == "" && got != "" || c.want != "" && !strings.Contains(got, c.want) {
			t.Errorf("%+v: got %q, want %q", c.s, got, c.want)
		}
	}
	p.Relay.Service.Manager = "command"
	if got := unitFailing(p, &plans.Facts{Service: plans.ServiceFact{ActiveState: "failed"}}); got != "" {
		t.Errorf("command manager: got %q", got)
	}
}

func TestLastLinesOfAJournal(t *testing.T) {
	log := "2026-12-01T16:02:03+0000 lab-1 relayd[212]: relayd: error: listen 0.0.0.0:7788: address in use\n" +
		"2026-12-01T16:02:03+0000 lab-1 systemd[1]: relayd.service: Main process exited, code=exited, status=2/INVALIDARGUMENT\n" +
		"-- Boot 1 --\n"
	got := lastLines(log, 4)
	want := "relayd[212]: relayd: error: listen 0.0.0.0:7788: address in use | systemd[1]: relayd.service: Main process exited, code=exited, status=2/INVALIDARGUMENT"
	if got != want {
		t.Errorf("got %q\nwant %q", got, want)
	}
}

// The failed run's invocation id goes to the host only in systemd's form:
// it is the host's own answer, and a hostile one is dropped.
func TestUnitLogArgsPassOnlyAnInvocationID(t *testing.T) {
	p := &plans.Plan{Relay: plans.PlannedRelay{Service: plans.PlanService{Manager: "systemd", Name: "relayd"}}}
	failing := func(id string) *plans.Facts {
		return &plans.Facts{Service: plans.ServiceFact{ActiveState: "activating", SubState: "auto-restart", InvocationID: id}}
	}
	good := "7476053e4ee447e1a7512f6697feb2de"
	if got := unitLogArgs(p, failing(good), 5); strings.Join(got, " ") != "relayd 5 "+good {
		t.Errorf("a failing run: %q", got)
	}
	running := &plans.Facts{Service: plans.ServiceFact{Running: true, ActiveState: "active", SubState: "running", InvocationID: good}}
	if got := unitLogArgs(p, running, 5); len(got) != 2 {
		t.Errorf("a unit not failing: %q, want no invocation", got)
	}
	for _, hostile := range []string{"-f", "x\ny", "7476053E4EE447E1A7512F6697FEB2DE", good + "0", "$(id)", ""} {
		if got := unitLogArgs(p, failing(hostile), 5); len(got) != 2 {
			t.Errorf("invocation %q: %q, want it dropped", hostile, got)
		}
	}
	if got := unitLogArgs(p, nil, 5); len(got) != 2 {
		t.Errorf("no reading: %q", got)
	}
}
