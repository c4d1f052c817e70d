package shellhost

import (
	"github.com/relayctl/relayctl/rollout"
	"github.com/relayctl/relayctl/uplink"
)

// A keep with packed forms of its data (rollout.Packed) sends them in
// order until the host takes one: the offer names the first form, so the
// host can refuse it before its bytes are sent (a patch's base that is
// not the planned one), and after a NEED the bytes follow in that form.
// The agent answers a form it cannot decode, or that decodes to other
// bytes, NEED and why; the form after it follows in the next batch, and
// the release as it is after them all.

// keepState is one keep's way through its forms: the next to send, the
// bytes of the forms sent so far, and why each form passed over was.
type keepState struct {
	next    int
	sent    int
	refused []string
}

// payload is what one Op of a batch sends: its arguments, data and
// command words, and for a keep the form its data is in (uplink.Raw or an
// encoding; "" for an offer, which sends no data).
type payload struct {
	args, argv []string
	data       []byte
	form       string
	offered    string // an offer's: the form it names, "" for none
	keep       *keepState
}

// payloads lays out a batch: observe's and sample's framed words, and
// each keep's offer or data. withData: the batch follows a NEED, and its
// keeps send their bytes instead of offering them; so does a keep whose
// host was seen lacking them (Op.Send). keeps holds each keep's
// state by its index in the batch plus base.
func payloads(batch []rollout.Op, calls map[int]framed, withData bool, keeps map[int]*keepState, base int) []payload {
	pl := make([]payload, len(batch))
	for i, o := range batch {
		p := payload{args: o.Args, argv: o.Argv, data: o.Data}
		if c := calls[i]; c != nil {
			p.args, p.argv = c.words()
			if d, ok := c.(carriesData); ok {
				p.data = d.data()
			}
		}
		if o.Offer {
			st := keeps[base+i]
			if st == nil {
				st = &keepState{}
				keeps[base+i] = st
			}
			p = keepPayload(o, st, withData || o.Send)
		}
		pl[i] = p
	}
	return pl
}

// keepPayload is a keep's request: an offer names the form its state is
// at; with data it sends that form's bytes, a form relayctl could not
// make passed over (and said so), the release as it is after the last.
func keepPayload(o rollout.Op, st *keepState, withData bool) payload {
	for st.next < len(o.Packed) {
		pk := o.Packed[st.next]
		data, err := pk.Data()
		if err != nil {
			st.refused = append(st.refused, "the "+pk.Encoding+" form: relayctl could not make it: "+err.Error())
			st.next++
			continue
		}
		p := payload{args: packedArgs(o.Args, pk), form: pk.Encoding, data: data, keep: st}
		if !withData {
			p.data, p.form, p.offered = nil, "", pk.Encoding
		}
		return p
	}
	p := payload{args: o.Args, data: o.Data, form: uplink.Raw, keep: st}
	if !withData {
		p.data, p.form = nil, ""
	}
	return p
}

// packedArgs are a keep's arguments with a form: LIKE (- for none), then
// ENCODING BASE BASESHA (- for none).
func packedArgs(args []string, pk rollout.Packed) []string {
	a := append([]string(nil), args...)
	if len(a) < 5 {
		a = append(a, "-")
	}
	base, sha := pk.Base, pk.BaseSHA
	if base == "" {
		base, sha = "-", "-"
	}
	return append(a, pk.Encoding, base, sha)
}

// needed takes a keep's NEED: to an offer, the bytes are wanted (with a
// reason, not in the form the offer named: the next one, then); after
// data in a packed form, that form was refused and the next follows. It
// reports false for a NEED the keep cannot have had.
func (p payload) needed(why string) bool {
	switch {
	case p.keep == nil:
		return false
	case p.form == "" && why == "":
	case p.form == "" && p.offered != "":
		p.keep.refused = append(p.keep.refused, "the "+p.offered+" form: "+why)
		p.keep.next++
	case p.form != uplink.Raw && why != "":
		p.keep.sent += len(p.data)
		p.keep.refused = append(p.keep.refused, why)
		p.keep.next++
	default:
		return false
	}
	return true
}

// took fills in what an Op sent: its data's bytes, and for a keep the
// bytes of every form it sent and the form the host took ("" when it held
// the bytes already).
func (p payload) took(r *rollout.Result) {
	if p.keep == nil {
		r.Sent = len(p.data)
		return
	}
	r.Sent, r.Form, r.Refused = p.keep.sent+len(p.data), p.form, p.keep.refused
	if r.Value == "kept" {
		r.Form = "" // the host had the bytes after all (nothing it decoded)
	}
}
