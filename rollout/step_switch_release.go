package rollout

import "github.com/relayctl/relayctl/plans"

// switchRelease points the current link at the new release's folder: a
// new link renamed over the old one, so the link is never missing.
type switchRelease struct {
	noStep
	link, dir, version string
	paths              plans.PlanPaths
	previous           string // the link's target before, "" when absent
	// program and tree are how the release switched away from is
	// described for the receipt (releaseSum: its program's sha256, its
	// tree hash when tree, its capabilities), which heard hears.
	program string
	tree    bool
	heard   func(string)
}

func (s switchRelease) describe() plans.Step {
	undo := titlef("point %s back at %s", s.link, s.previous)
	if s.previous == "" {
		undo = titlef("remove %s again (there was none)", s.link)
	}
	return plans.Step{Phase: plans.PhaseWindow, Kind: KindSwitchRelease, Key: s.link, Value: s.version,
		Title: titlef("switch release: %s → %s (atomic rename of a new link)", s.link, s.dir), Undo: undo}
}

// prepare backs the link up for undo, and has the host describe the
// release it points at now (when that is a release folder): the
// receipt's record of what a rollback would go back to.
func (s switchRelease) prepare() []Op {
	ops := []Op{op("backup-link", s.link, "backup-current")}
	if v := plans.ReleaseOf(s.paths, s.previous); v != "" {
		tree := "-"
		if s.tree {
			tree = "tree"
		}
		o := op("release-sum", s.paths.Releases+"/"+v, s.program, tree)
		o.heard = s.heard
		ops = append(ops, o)
	}
	return ops
}
func (s switchRelease) do() []Op   { return []Op{op("link", s.link, s.dir)} }
func (s switchRelease) undo() []Op { return []Op{op("restore-link", s.link, "backup-current")} }

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
