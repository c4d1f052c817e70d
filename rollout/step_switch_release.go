package rollout

import "github.com/relayctl/relayctl/plans"

// switchRelease points the current link at the new release's folder: a
// new link renamed over the old one, so the link is never missing.
type switchRelease struct {
	noStep
	link, dir, version string
	paths              plans.PlanPaths
	previous           string // the link's target before, "" when absent
}

func (s switchRelease) describe() plans.Step {
	return plans.Step{Phase: plans.PhaseWindow, Kind: KindSwitchRelease, Key: s.link, Value: s.version,
		Title: titlef("switch release: %s → %s (atomic rename of a new link)", s.link, s.dir)}
}

func (s switchRelease) prepare() []Op { return []Op{op("backup-link", s.link, "backup-current")} }
func (s switchRelease) do() []Op      { return []Op{op("link", s.link, s.dir)} }
func (s switchRelease) undo() []Op    { return []Op{op("restore-link", s.link, "backup-current")} }

// checks compare the link's whole target, resolved, with the release
// folder: a link to /anywhere/1.8.0 is not release 1.8.0.
func (s switchRelease) checks(c *checkCtx) []Check {
	got := plans.ResolveLink(s.link, c.after.Release.CurrentRaw)
	if c.after.Release.CurrentRaw == "" {
		got = "(no link)"
	}
	return []Check{check("release "+s.link, s.dir, got)}
}

// hostChecks: the link holds exactly what the window's link op wrote.
func (s switchRelease) hostChecks(*checkCtx) []HostCheck {
	return []HostCheck{{Kind: "link", Args: []string{s.dir}}}
}

func (s switchRelease) restored(c *checkCtx) []Check {
	return []Check{check("release link "+s.link, orAbsent(c.before.Release.CurrentRaw), orAbsent(c.after.Release.CurrentRaw))}
}

func orAbsent(s string) string {
	if s == "" {
		return "(absent)"
	}
	return s
}
