package rollout

import (
	"fmt"

	"github.com/relayctl/relayctl/plans"
	"github.com/relayctl/relayctl/tune"
)

// setSysctl writes one sysctl to /proc/sys and reads it back: a sysctl's
// exit status proves nothing (docs/kernel.md), so the value that reads back is
// what counts, compared with tune.Equal.
type setSysctl struct {
	noStep
	key, value, previous string
}

func (s setSysctl) describe() plans.Step {
	undo := titlef("set %s back to %s in /proc/sys, read back", s.key, s.previous)
	if s.previous == "" {
		undo = titlef("leave %s as set: no value was read before to put back", s.key)
	}
	return plans.Step{Phase: plans.PhaseWindow, Kind: KindSetSysctl, Key: s.key, Value: s.value,
		Title: titlef("set sysctl: %s = %s in /proc/sys, read back", s.key, s.value), Undo: undo}
}

func (s setSysctl) do() []Op { return []Op{s.write(s.value)} }

func (s setSysctl) undo() []Op {
	if s.previous == "" {
		return nil
	}
	return []Op{s.write(s.previous)}
}

func (s setSysctl) write(v string) Op {
	// The agent compares the read-back with v too, and stops its batch
	// there: the restart after it never runs on a wrong value.
	o := op("sysctl", s.key, v, v)
	o.hostChecked, o.specValue = true, true
	o.expect = func(r Result) error {
		if !tune.Equal(r.Value, v) {
			return fmt.Errorf("%s: read back %s, want %s", s.key, tune.Normalize(r.Value), v)
		}
		return nil
	}
	return o
}

func (s setSysctl) checks(c *checkCtx) []Check {
	return []Check{check("sysctl "+s.key, s.value, tune.Normalize(c.after.Sysctls[s.key].Value))}
}

func (s setSysctl) hostChecks(*checkCtx) []HostCheck {
	return []HostCheck{{Kind: "sysctl", Args: []string{s.key, s.value}}}
}

func (s setSysctl) restored(c *checkCtx) []Check {
	return []Check{check("sysctl "+s.key, tune.Normalize(c.before.Sysctls[s.key].Value), tune.Normalize(c.after.Sysctls[s.key].Value))}
}
