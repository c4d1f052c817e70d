package plans

import (
	"slices"
	"strings"
)

// ReleaseName is the release a plan leaves its hosts on, as receipts and
// history name a run by it: the spec's version; for a rollback plan, each
// host's own target (the release its window replaced, or the one it runs
// when that window changed none), each once in the hosts' order, joined by
// ", " when they differ; "" for a plan that ships no release
// (relay.release.kind none).
func (p *Plan) ReleaseName() string {
	if p.Relay.Kind == ReleaseKindNone {
		return ""
	}
	if p.Rollback == nil {
		return p.Relay.Version
	}
	var seen []string
	for _, h := range p.Hosts {
		if v := h.Release.Planned; v != "" && !slices.Contains(seen, v) {
			seen = append(seen, v)
		}
	}
	return strings.Join(seen, ", ")
}
