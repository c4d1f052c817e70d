package plans

import (
	"fmt"
	"slices"
	"strings"

	"github.com/relayctl/relayctl/uplink"
)

// Upload is how the release crosses the controller's uplink to a host
// that lacks it, as planned: the form it is sent in (package wire) and its
// size, so the review says what each host will cost the uplink. It is the
// plan's estimate, never an instruction: apply decides the form again from
// the host as it finds it and what relayctl then has (a form the host
// cannot decode is followed by the full release), and the receipt says
// what was sent. Nothing compares it: a plan whose upload changed is not
// stale.
type Upload struct {
	// Form is uplink.ZstdPatch, uplink.Zstd, uplink.Gzip, uplink.Raw, or
	// UploadStored.
	Form string `json:"form"`
	// From is a patch's base: the sha256 of the release in the host's
	// store it is made from.
	From  string `json:"from,omitempty"`
	Bytes int64  `json:"bytes"`
	// Note says why the release is not sent as a patch, where that could
	// be asked.
	Note string `json:"note,omitempty"`
}

// UploadStored: the host's release store holds the planned release
// already (a stage, or the same bytes under another version): nothing is
// sent.
const UploadStored = "stored"

// Uploads makes the forms of the plan's release for a host that decodes
// decoders and keeps stored (uplink.Release.Forms).
type Uploads interface {
	Forms(decoders, stored []string) []uplink.Form
}

// uploads says the release crosses the uplink to the host: apply places
// it from relayctl's bytes (releaseSteps' placeRelease).
func (h *HostPlan) uploads(p *Plan) bool {
	return h.Action == ActionChange && p.Relay.Kind != ReleaseKindNone && h.Release.Action != ReleaseKeep &&
		!h.Release.Installed && p.Relay.URL == ""
}

// planUpload is the host's Upload, nil for a host that is sent no release.
func planUpload(h *HostPlan, p *Plan, f *Facts, up Uploads) (*Upload, error) {
	if !h.uploads(p) {
		return nil, nil
	}
	if slices.Contains(f.Release.Stored, p.Relay.SHA256) {
		return &Upload{Form: UploadStored}, nil
	}
	u := &Upload{Form: uplink.Raw, Bytes: p.Relay.Size}
	if forms := up.Forms(f.Release.Decoders, f.Release.Stored); len(forms) > 0 {
		b, err := forms[0].Bytes()
		if err != nil {
			return nil, fmt.Errorf("plan %s: host %s: %s of the release: %w", p.Name, h.Host, forms[0].Encoding, err)
		}
		u.Form, u.From, u.Bytes = forms[0].Encoding, forms[0].Base, int64(len(b))
	}
	u.Note = uploadNote(u, f, p)
	return u, nil
}

// uploadNote says why a host is not sent a patch, "" when it is, or when
// it keeps no other release to patch from.
func uploadNote(u *Upload, f *Facts, p *Plan) string {
	others := 0
	for _, sha := range f.Release.Stored {
		if sha != p.Relay.SHA256 {
			others++
		}
	}
	switch {
	case u.Form == uplink.ZstdPatch:
		return ""
	case u.Form == uplink.Raw && len(f.Release.Decoders) == 0:
		return "the host has neither gzip nor zstd"
	case u.Form == uplink.Raw:
		return "compressed, it would not be smaller"
	case others == 0:
		return ""
	case !uplink.Decodes(f.Release.Decoders, uplink.ZstdPatch):
		return "no patch: the host's zstd cannot decode one (it has none, or one older than 1.4.5)"
	}
	return fmt.Sprintf("no patch: relayctl's release cache has none of the %d release(s) in the host's store", others)
}

// uploadText is the review's line for a host's upload.
func uploadText(u *Upload, size int64) string {
	pct := func() string {
		if size <= 0 {
			return ""
		}
		return fmt.Sprintf(", %.1f%% of the release's %d", 100*float64(u.Bytes)/float64(size), size)
	}
	var s string
	switch u.Form {
	case UploadStored:
		return "nothing: the host's release store holds the release already"
	case uplink.ZstdPatch:
		s = fmt.Sprintf("%d bytes, a zstd patch from the release the host keeps (sha256 %s)%s", u.Bytes, MDCode(short(u.From)), pct())
	case uplink.Zstd, uplink.Gzip:
		s = fmt.Sprintf("%d bytes, %s-compressed%s", u.Bytes, u.Form, pct())
	default:
		s = fmt.Sprintf("%d bytes, the release as it is", u.Bytes)
	}
	if u.Note != "" {
		s += "; " + MDText(u.Note)
	}
	return s
}

// uplinkText is the review's line for what the release costs the uplink,
// all hosts together, "" when no host is sent it.
func uplinkText(p *Plan) string {
	hosts, forms := 0, map[string]int{}
	var sent int64
	for _, h := range p.Hosts {
		if u := h.Release.Upload; u != nil && u.Form != UploadStored {
			hosts++
			sent += u.Bytes
			forms[u.Form]++
		}
	}
	if hosts == 0 {
		return ""
	}
	var parts []string
	for _, f := range []string{uplink.ZstdPatch, uplink.Zstd, uplink.Gzip, uplink.Raw} {
		if forms[f] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", forms[f], formName[f]))
		}
	}
	whole := int64(hosts) * p.Relay.Size
	return fmt.Sprintf("the release reaches %d host(s) (%s) in %d bytes in all, %.1f%% of sending it whole (%d bytes)",
		hosts, strings.Join(parts, ", "), sent, 100*float64(sent)/float64(max(whole, 1)), whole)
}

// formName is how the review names a form for a count of hosts.
var formName = map[string]string{uplink.ZstdPatch: "as a zstd patch", uplink.Zstd: "zstd-compressed", uplink.Gzip: "gzip-compressed", uplink.Raw: "as it is"}
