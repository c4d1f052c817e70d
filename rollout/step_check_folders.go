package rollout

import (
	"path"

	"github.com/relayctl/relayctl/plans"
)

// checkFolders: before anything is written, every folder relayctl writes in
// (the folders of the files it changes, the releases, the current link's)
// must belong to root and be writable by root alone (so nobody can plant a
// symlink or swap a staged file), the files it replaces must be regular
// files, the link a symlink, and every program relayctl runs as root
// (start, stop, handoff) root's alone.
type checkFolders struct {
	noStep
	dirs, files, links, programs []string
}

func newCheckFolders(p *plans.Plan, h *plans.HostPlan) checkFolders {
	var c checkFolders
	for _, fc := range h.Files {
		if fc.Change {
			c.dirs = append(c.dirs, path.Dir(fc.Path))
			c.files = append(c.files, fc.Path, fc.Path+".relayctl-new")
		}
	}
	c.programs = p.Relay.Service.Programs()
	if p.Relay.Kind == plans.ReleaseKindNone {
		return c // no release: nothing in the releases folder or at the link
	}
	c.dirs = append(c.dirs, p.Paths.Releases, path.Dir(p.Paths.Current))
	c.links = []string{p.Paths.Current}
	if h.Release.Action != plans.ReleaseKeep {
		// A release arrives in the store first (store.go): bytes there are
		// trusted only in folders root alone can change. The store itself
		// is vetted whether or not this host still needs the bytes, so a
		// host staged ahead takes the same steps as the plan.
		c.dirs = append(c.dirs, storeDir(p))
	}
	return c
}

func (c checkFolders) describe() plans.Step {
	return plans.Step{Phase: plans.PhaseStage, Kind: KindCheckFolders,
		Title: "check target folders: root alone can write " + joinWords(c.dirs) + "; the files there are not symlinks"}
}

func (c checkFolders) do() []Op {
	var ops []Op
	for _, d := range c.dirs {
		ops = append(ops, refusing(op("dir", d)))
	}
	for _, f := range c.files {
		ops = append(ops, refusing(op("file-ok", f)))
	}
	for _, l := range c.links {
		ops = append(ops, refusing(op("link-ok", l)))
	}
	for _, p := range c.programs {
		ops = append(ops, refusing(op("exec-ok", p)))
	}
	return ops
}

// refusing marks a primitive whose failure means nothing was written: the
// host is refused, not failed.
func refusing(o Op) Op {
	o.refuses = true
	return o
}

func joinWords(w []string) string {
	seen := map[string]bool{}
	out := ""
	for _, x := range w {
		if seen[x] {
			continue
		}
		seen[x] = true
		if out != "" {
			out += ", "
		}
		out += x
	}
	return out
}
