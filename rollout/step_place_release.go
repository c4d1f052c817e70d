package rollout

import (
	"strconv"

	"github.com/relayctl/relayctl/plans"
)

// placeRelease uploads the release and installs it in its own folder under
// the releases dir, its sha256 checked on the host. Nothing in force
// changes: the current link still points at the running release.
type placeRelease struct {
	dir, version, sha string
	data              []byte
}

func (s placeRelease) describe() plans.Step {
	return plans.Step{Phase: plans.PhaseStage, Kind: KindPlaceRelease, Value: s.sha,
		Title: titlef("place release: %s in %s, its sha256 checked on the host", s.version, s.dir)}
}

func (placeRelease) prepare() []Op { return nil }

func (s placeRelease) do() []Op {
	up := op("recv", "relayd", strconv.Itoa(len(s.data)))
	up.Data = s.data
	return []Op{up, op("place-release", s.dir, "relayd", s.sha)}
}

func (placeRelease) undo() []Op                 { return nil }
func (placeRelease) checks(*checkCtx) []Check   { return nil }
func (placeRelease) restored(*checkCtx) []Check { return nil }
