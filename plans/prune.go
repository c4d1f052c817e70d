package plans

import (
	"sort"

	"github.com/hashicorp/go-version"
)

// planPrune lists what a window that succeeds removes from a host: the
// releases beyond the newest relay.release.keep (the planned release and
// the current one, the rollback target, are always kept, and count
// towards keep), and the release store's entries beyond the keep most
// recently stored (the planned release's entry always kept). A window that
// fails removes nothing; what one could not remove is listed again by the
// next plan.
func planPrune(p *Plan, f *Facts) (releases, store []string) {
	if p.Relay.Kind == ReleaseKindNone || p.Relay.Keep < 2 {
		return nil, nil
	}
	kept := map[string]bool{p.Relay.Version: true}
	if f.Release.Current != "" {
		kept[f.Release.Current] = true
	}
	newest := append([]string(nil), f.Release.Installed...)
	sort.SliceStable(newest, func(i, j int) bool { return versionLess(newest[j], newest[i]) })
	for _, v := range newest {
		if len(kept) >= p.Relay.Keep {
			break
		}
		kept[v] = true
	}
	for _, v := range f.Release.Installed {
		if !kept[v] {
			releases = append(releases, v)
		}
	}
	sort.SliceStable(releases, func(i, j int) bool { return versionLess(releases[i], releases[j]) })

	n := 0
	for _, sha := range f.Release.Stored { // newest first
		switch {
		case sha == p.Relay.SHA256:
		case n < p.Relay.Keep-1:
			n++
		default:
			store = append(store, sha)
		}
	}
	return releases, store
}

// versionLess orders versions by go-version, falling back to their text
// for one it cannot read (observe lists only valid ones).
func versionLess(a, b string) bool {
	va, ea := version.NewVersion(a)
	vb, eb := version.NewVersion(b)
	if ea != nil || eb != nil {
		return a < b
	}
	if va.Equal(vb) {
		return a < b
	}
	return va.LessThan(vb)
}
