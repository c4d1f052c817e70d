package rollout

import "github.com/relayctl/relayctl/plans"

// installConfig puts the staged relay config in place with a rename; the
// relay reads it when it starts, in the same window.
type installConfig struct {
	noStep
	path, sha  string
	prevExists bool
	prevSHA    string
}

func (s installConfig) describe() plans.Step {
	return plans.Step{Phase: plans.PhaseWindow, Kind: KindInstallConfig, Key: s.path,
		Title: titlef("install relay config: %s put in place (atomic rename)", s.path)}
}

func (s installConfig) prepare() []Op { return []Op{op("backup", s.path, "backup-config")} }
func (s installConfig) do() []Op      { return []Op{op("rename", s.path+".relayctl-new", s.path)} }
func (s installConfig) undo() []Op    { return []Op{op("restore", s.path, "backup-config")} }

func (s installConfig) checks(c *checkCtx) []Check {
	return []Check{fileCheck("relay config "+s.path, c.after.Config.Exists, c.after.Config.Content, s.sha, true)}
}

func (s installConfig) restored(c *checkCtx) []Check {
	return []Check{fileCheck("relay config "+s.path, c.after.Config.Exists, c.after.Config.Content, s.prevSHA, s.prevExists)}
}
