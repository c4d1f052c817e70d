package rollout

import "github.com/relayctl/relayctl/plans"

// persistDropIn puts the staged sysctl drop-in in place with a rename (or
// removes it when the plan has no sysctls left), so the values hold at the
// next boot.
type persistDropIn struct {
	noStep
	path, sha  string
	remove     bool
	prevExists bool
	prevSHA    string
}

func (s persistDropIn) describe() plans.Step {
	t := titlef("persist sysctl drop-in: %s put in place (atomic rename)", s.path)
	if s.remove {
		t = titlef("remove sysctl drop-in: %s", s.path)
	}
	return plans.Step{Phase: plans.PhaseWindow, Kind: KindPersistDropIn, Key: s.path, Title: t}
}

func (s persistDropIn) prepare() []Op { return []Op{op("backup", s.path, "backup-dropin")} }

func (s persistDropIn) do() []Op {
	if s.remove {
		return []Op{op("remove", s.path)}
	}
	return []Op{op("rename", s.path+".relayctl-new", s.path)}
}

func (s persistDropIn) undo() []Op { return []Op{op("restore", s.path, "backup-dropin")} }

func (s persistDropIn) checks(c *checkCtx) []Check {
	exists, content := dropInOf(c.after, s.path)
	return []Check{fileCheck("sysctl drop-in "+s.path, exists, content, s.sha, !s.remove)}
}

func (s persistDropIn) restored(c *checkCtx) []Check {
	exists, content := dropInOf(c.after, s.path)
	return []Check{fileCheck("sysctl drop-in "+s.path, exists, content, s.prevSHA, s.prevExists)}
}
