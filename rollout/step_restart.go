package rollout

import (
	"strconv"

	"github.com/relayctl/relayctl/plans"
)

// restart restarts the relay once, the only moment players notice: with
// systemctl restart for a unit, or the spec's stop then start commands
// (argv, no shell). Its undo restarts the restored release (or stops the
// relay if it was not running) after every other undo.
type restart struct {
	svc        plans.PlanService
	wasRunning bool
	planned    bool // the plan restarts (false: a target step, for checks only)
}

func (s restart) describe() plans.Step {
	how := "systemctl restart " + s.svc.Name
	if s.svc.Manager == "command" {
		how = plans.Argv(s.svc.Stop) + ", then " + plans.Argv(s.svc.Start)
	}
	return plans.Step{Phase: plans.PhaseWindow, Kind: KindRestart, Title: "restart relay once: " + how}
}

func (restart) prepare() []Op { return nil }

func (s restart) do() []Op { return []Op{s.service("restart")} }

func (s restart) undo() []Op {
	if s.wasRunning {
		return []Op{s.service("restart")}
	}
	return []Op{s.service("stop")}
}

// service is the restart or stop primitive for the relay's manager.
func (s restart) service(verb string) Op {
	if s.svc.Manager == "systemd" {
		return op(verb, "systemd", s.svc.Name)
	}
	o := op(verb, "command", strconv.Itoa(len(s.svc.Stop)))
	o.Argv = append(o.Argv, s.svc.Stop...)
	if verb == "restart" {
		o.Args = append(o.Args, strconv.Itoa(len(s.svc.Start)))
		o.Argv = append(o.Argv, s.svc.Start...)
	}
	return o
}

func (s restart) checks(c *checkCtx) []Check {
	out := []Check{check("relay running", "true", strconv.FormatBool(c.after.Service.Running))}
	if s.planned && c.before != nil && c.before.Service.Running {
		got := "same pid " + strconv.Itoa(c.after.Service.PID)
		if c.after.Service.PID != c.before.Service.PID {
			got = "new pid"
		}
		out = append(out, check("relay restarted", "new pid", got))
	}
	// systemctl restart sets NRestarts to 0; systemd restarting a relay
	// that died since (Restart=on-failure) counts it up. A relay that flaps
	// is not one that started.
	if s.svc.Manager == "systemd" && s.planned && c.before != nil {
		out = append(out, check("systemd restarts of "+s.svc.Name+" on its own since the window", "0", strconv.Itoa(c.after.Service.Restarts)))
	}
	return out
}

func (s restart) restored(c *checkCtx) []Check {
	return []Check{check("relay running", strconv.FormatBool(c.before.Service.Running), strconv.FormatBool(c.after.Service.Running))}
}
