package rollout

import (
	"strings"

	"github.com/relayctl/relayctl/uplink"
)

// UploadRecord is how the release crossed the uplink to a host: the form
// the host took (package wire: a patch, compressed, or the release as it
// is), a patch's base, the bytes the release took on the wire (the forms
// the host refused included) against the release's own size, and why each
// form before the one taken was refused.
type UploadRecord struct {
	Form     string   `json:"form"`
	From     string   `json:"from,omitempty"`
	Bytes    int64    `json:"bytes"`
	Size     int64    `json:"release_bytes"`
	Fallback []string `json:"fallback,omitempty"`
}

// uploaded records the release's upload from the host's answer, and says
// so when the host took another form than the first (a failed decode, a
// base not the planned one): it was sent the next, its sha256 checked on
// the host as any upload's.
func (hr *hostRun) uploaded(o Op, r Result) {
	if r.Form == "" {
		return // the host had the bytes: nothing was sent
	}
	u := &UploadRecord{Form: r.Form, Bytes: int64(r.Sent), Size: int64(len(o.Data)), Fallback: r.Refused}
	for _, pk := range o.Packed {
		if pk.Encoding == r.Form {
			u.From = pk.BaseSHA
		}
	}
	hr.res.Upload = u
	if len(r.Refused) > 0 {
		hr.pr.say(hr.h.Host, "upload: %s; sent %s instead (%d bytes on the wire in all), its sha256 checked on the host", strings.Join(r.Refused, "; "), formWords(r.Form), r.Sent)
	}
}

// formWords names a form for people.
func formWords(form string) string {
	switch form {
	case uplink.Raw:
		return "the release as it is"
	case uplink.ZstdPatch:
		return "a zstd patch"
	}
	return "the release " + form + "-compressed"
}
