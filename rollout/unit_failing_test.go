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
