package rollout

import "github.com/relayctl/relayctl/plans"

// checkRelease: the release is already on the host; its sha256 must be the
// one reviewed before the window may point at it.
type checkRelease struct {
	noStep
	dir, version, sha string
}

func (s checkRelease) describe() plans.Step {
	return plans.Step{Phase: plans.PhaseStage, Kind: KindCheckRelease, Value: s.sha,
		Title: titlef("check release: %s already in %s, its sha256 checked on the host", s.version, s.dir)}
}

// do checks the bytes and who owns them: a release that is not root's alone
// or not the reviewed bytes refuses the host (nothing was written).
func (s checkRelease) do() []Op { return []Op{refusing(op("check-release", s.dir, s.sha))} }
