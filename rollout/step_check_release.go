package rollout

import "github.com/relayctl/relayctl/plans"

// checkRelease: the release is already on the host; it must be the one
// reviewed (a binary's sha256, a tarball's tree hash) before the window
// may point at it.
type checkRelease struct {
	noStep
	release
}

func (s checkRelease) describe() plans.Step {
	return plans.Step{Phase: plans.PhaseStage, Kind: KindCheckRelease, Value: s.sha,
		Title: titlef("check release: %s already in %s, %s", s.version, s.dir, s.what())}
}

// do checks the bytes and who owns them: a release that is not root's alone
// or not the reviewed bytes refuses the host (nothing was written).
func (s checkRelease) do() []Op {
	return []Op{refusing(op("check-release", s.dir, s.sha, s.program, s.tree))}
}
