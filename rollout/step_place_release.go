package rollout

import "github.com/relayctl/relayctl/plans"

// placeRelease uploads the release into the host's release store (only if
// the store does not hold those bytes yet: store.go) and installs it from
// there in its own folder under the releases dir, its sha256 checked on
// the host. Nothing in force changes: the current link still points at
// the running release.
type placeRelease struct {
	noStep
	dir, version, sha string
	store             string // the store's file for sha
	data              []byte
}

func (s placeRelease) describe() plans.Step {
	return plans.Step{Phase: plans.PhaseStage, Kind: KindPlaceRelease, Value: s.sha,
		Title: titlef("place release: %s in %s, its sha256 checked on the host", s.version, s.dir)}
}

func (s placeRelease) do() []Op {
	return []Op{keepOp(s.store, s.sha, s.data, "0755"), op("place-release", s.dir, s.store, s.sha)}
}
