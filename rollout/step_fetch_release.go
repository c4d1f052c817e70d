package rollout

import (
	"strconv"
	"time"

	"github.com/relayctl/relayctl/plans"
)

// fetchRelease has the host fetch the release from the plan's url itself
// (curl, else wget, with a timeout), for fleets where the operator's
// uplink is the limit. The file goes into the host's release store only
// once its sha256 is checked there, and the version folder is made from
// the store as for an upload: a wrong sha256, an HTTP error or a timeout
// leaves nothing written. The url reaches the host as one data field of
// the agent and one argument of curl or wget, never a shell line.
type fetchRelease struct {
	noStep
	release
	url     string
	timeout time.Duration // for the whole fetch
}

// DefaultFetchTimeout bounds a host's fetch of a release.
const DefaultFetchTimeout = 5 * time.Minute

func (s fetchRelease) describe() plans.Step {
	return plans.Step{Phase: plans.PhaseStage, Kind: KindFetchRelease, Value: s.sha,
		Title: titlef("fetch release: %s from %s by the host itself into %s, %s", s.version, s.url, s.dir, s.what())}
}

func (s fetchRelease) do() []Op {
	t := s.timeout
	if t <= 0 {
		t = DefaultFetchTimeout
	}
	secs := strconv.Itoa(max(1, int(t.Round(time.Second)/time.Second)))
	return []Op{
		// A release the host could not fetch, or whose sha256 is not the
		// plan's, refuses the host: nothing was written.
		refusing(op("fetch", s.store, s.sha, s.url, strconv.Itoa(plans.MaxArtifactSize), secs)),
		s.place(),
	}
}
