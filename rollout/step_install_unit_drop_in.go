package rollout

import "github.com/relayctl/relayctl/plans"

// installUnitDropIn puts relayctl's drop-in of the relay's systemd unit in
// place (or removes it) and has systemd read it again, before the restart:
// the shipped unit grants no capabilities, and SO_RCVBUFFORCE needs
// CAP_NET_ADMIN.
type installUnitDropIn struct {
	noStep
	path, sha  string
	remove     bool
	prevExists bool
	prevSHA    string
}

func (s installUnitDropIn) describe() plans.Step {
	t := titlef("install unit drop-in: %s put in place (atomic rename), then systemctl daemon-reload", s.path)
	if s.remove {
		t = titlef("remove unit drop-in: %s, then systemctl daemon-reload", s.path)
	}
	return plans.Step{Phase: plans.PhaseWindow, Kind: KindUnitDropIn, Key: s.path, Title: t}
}

func (s installUnitDropIn) prepare() []Op { return []Op{op("backup", s.path, "backup-unitdropin")} }

func (s installUnitDropIn) do() []Op {
	if s.remove {
		return []Op{op("remove", s.path), op("daemon-reload")}
	}
	return []Op{op("rename", s.path+".relayctl-new", s.path), op("daemon-reload")}
}

func (s installUnitDropIn) undo() []Op {
	return []Op{op("restore", s.path, "backup-unitdropin"), op("daemon-reload")}
}

func (s installUnitDropIn) checks(c *checkCtx) []Check {
	exists, content := false, ""
	if d := c.after.UnitDropIn; d != nil {
		exists, content = d.Exists, d.Content
	}
	return []Check{fileCheck("unit drop-in "+s.path, exists, content, s.sha, !s.remove)}
}

func (s installUnitDropIn) restored(c *checkCtx) []Check {
	exists, content := false, ""
	if d := c.after.UnitDropIn; d != nil {
		exists, content = d.Exists, d.Content
	}
	return []Check{fileCheck("unit drop-in "+s.path, exists, content, s.prevSHA, s.prevExists)}
}
