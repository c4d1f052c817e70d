package rollout

import (
	"slices"

	"github.com/relayctl/relayctl/plans"
)

// release is the planned release as its steps need it: where it goes,
// what it is (a binary's sha256, or a tarball's and its files' tree hash),
// and its file in the host's release store (store.go).
type release struct {
	dir, version, sha string
	program, tree     string // tree "-" for a binary
	store             string
}

func releaseOf(p *plans.Plan) release {
	tree := p.Relay.TreeSHA256
	if p.Relay.Kind == plans.ReleaseKindBinary || tree == "" {
		tree = "-"
	}
	return release{dir: releaseDir(p), version: p.Relay.Version, sha: p.Relay.SHA256, program: p.Relay.Program,
		tree: tree, store: storeFile(p, p.Relay.SHA256)}
}

// releaseFor is the release a host's window switches to: the plan's, or
// for a rollback the one the window it undoes replaced, as the host keeps
// it (checked there by the sha256 its receipt records; nothing in the
// store is needed).
func releaseFor(p *plans.Plan, h *plans.HostPlan) release {
	u := h.Undo
	if u == nil || u.Release == nil {
		return releaseOf(p)
	}
	r := release{dir: p.Paths.Releases + "/" + u.Release.Was, version: u.Release.Was, sha: u.Release.SHA256, program: p.Relay.Program, tree: "-"}
	if p.Relay.Kind != plans.ReleaseKindBinary && u.Release.TreeSHA256 != "" {
		r.tree = u.Release.TreeSHA256
	}
	return r
}

// place is the primitive that makes the release folder from the store.
func (r release) place() Op { return op("place-release", r.dir, r.store, r.sha, r.program, r.tree) }

// what says how the host checks it.
func (r release) what() string {
	if r.tree == "-" {
		return "its sha256 checked on the host"
	}
	return "unpacked, its files' tree hash checked on the host"
}

// placeRelease uploads the release into the host's release store (only if
// the store does not hold those bytes yet: store.go) and installs it from
// there in its own folder under the releases dir: a binary copied, a
// tarball unpacked, checked on the host. Nothing in force changes: the
// current link still points at the running release. The bytes go in the
// smallest form the host can decode (packed), the release as it is after
// them.
type placeRelease struct {
	noStep
	release
	data   []byte
	packed []Packed
	lacks  bool // observe found the store without it: its bytes go at once
}

func (s placeRelease) describe() plans.Step {
	return plans.Step{Phase: plans.PhaseStage, Kind: KindPlaceRelease, Value: s.sha,
		Title: titlef("place release: %s in %s, %s", s.version, s.dir, s.what())}
}

func (s placeRelease) do() []Op {
	keep := keepOp(s.store, s.sha, s.data, "0755")
	keep.Packed, keep.upload, keep.Send = s.packed, true, s.lacks
	return []Op{keep, s.place()}
}

// lacksRelease: observe read the host's store, and the planned release's
// bytes are not in it.
func lacksRelease(p *plans.Plan, in stepInput) bool {
	return in.facts != nil && p.Relay.SHA256 != "" && !slices.Contains(in.facts.Release.Stored, p.Relay.SHA256)
}

// packedRelease are the forms of the release a host is sent, best first
// (uplink.Release.Forms, from what observe found it decodes and keeps): none
// when its store holds the release already (nothing is sent), or without
// the release's forms (a plan's step list).
func packedRelease(p *plans.Plan, in stepInput) []Packed {
	if in.wire == nil || in.facts == nil || in.wire.SHA256() != p.Relay.SHA256 || slices.Contains(in.facts.Release.Stored, p.Relay.SHA256) {
		return nil
	}
	var out []Packed
	for _, f := range in.wire.Forms(in.facts.Release.Decoders, in.facts.Release.Stored) {
		pk := Packed{Encoding: f.Encoding, Data: f.Bytes}
		if f.Base != "" {
			pk.Base, pk.BaseSHA = storeFile(p, f.Base), f.Base
		}
		out = append(out, pk)
	}
	return out
}
