package rollout

import "github.com/relayctl/relayctl/plans"

// checkRelease: the release is already on the host; its sha256 must be the
// one reviewed before the window may point at it.
type checkRelease struct {
	dir, version, sha string
}

func (s checkRelease) describe() plans.Step {
	return plans.Step{Phase: plans.PhaseStage, Kind: KindCheckRelease, Value: s.sha,
		Title: titlef("check release: %s already in %s, its sha256 checked on the host", s.version, s.dir)}
}

func (checkRelease) prepare() []Op              { return nil }
func (s checkRelease) do() []Op                 { return []Op{op("check-release", s.dir, s.sha)} }
func (checkRelease) undo() []Op                 { return nil }
func (checkRelease) checks(*checkCtx) []Check   { return nil }
func (checkRelease) restored(*checkCtx) []Check { return nil }
