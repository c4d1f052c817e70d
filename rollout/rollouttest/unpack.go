package rollouttest

import (
	"sync"
	"unsafe"

	"github.com/relayctl/relayctl/plans"
	"github.com/relayctl/relayctl/rollout"
	"github.com/relayctl/relayctl/uplink"
)

// unpack is a keep's upload as the shell backend sends it and the agent
// takes it (shellhost/packed.go, the agent's keep): the first keep of a
// Run the host lacks the bytes of (unless they were sent at once,
// Op.Send) answers its offer NEED, and the rest of
// the Run follows with the keeps' bytes (a round trip more: s.needs); the
// offer names the first form, which a host that cannot decode it refuses
// before its bytes are sent. Then each form's bytes until one decodes to
// the sha256, the release as it is last, every form refused after its
// bytes a round trip more. The result's Sent is every form's bytes that
// were sent; it returns the bytes the host ends with.
func (s *Sim) unpack(o rollout.Op) ([]byte, rollout.Result) {
	r := rollout.Result{Form: uplink.Raw}
	offered := s.needs == 0 && !o.Send // sent at once: no offer, no NEED
	if offered {
		s.needs++
	}
	for i, pk := range o.Packed {
		b, err := pk.Data()
		if err != nil {
			r.Refused = append(r.Refused, "the "+pk.Encoding+" form: relayctl could not make it: "+err.Error())
			continue
		}
		why := s.decodable(pk)
		if why != "" && i == 0 && offered {
			r.Refused = append(r.Refused, "the "+pk.Encoding+" form: "+why) // said to the offer
			continue
		}
		r.Sent += len(b)
		var out []byte
		if why == "" {
			out, why = s.decode(pk, b, o.Args[1], len(o.Data))
		}
		if why == "" {
			r.Form = pk.Encoding
			return out, r
		}
		r.Refused = append(r.Refused, "the "+pk.Encoding+" form: "+why)
		s.needs++
	}
	r.Sent += len(o.Data)
	return o.Data, r
}

// decodable says why the Sim cannot decode a form ("" when it can): its
// decoder missing, or a patch's base not the file planned.
func (s *Sim) decodable(pk rollout.Packed) string {
	if !uplink.Decodes(s.Decoders, pk.Encoding) {
		return "no decoder for it on the host"
	}
	if pk.Encoding != uplink.ZstdPatch {
		return ""
	}
	if c, ok := s.Files[pk.Base]; !ok || contentSHA(c) != pk.BaseSHA {
		return "the patch's base " + pk.Base + " is not the " + pk.BaseSHA + " it was made from"
	}
	return ""
}

// decode turns a form's bytes back into the release of sha256 want and
// size bytes, or says why not. A lean Sim keeps no release's bytes: it
// knows what each distinct buffer decodes to (decoding it once for the
// fleet, since every host is sent the same buffer; the hosts' work is not
// relayctl's), and gives back the planned release's bytes when the form
// decodes to them.
func (s *Sim) decode(pk rollout.Packed, b []byte, want string, size int) ([]byte, string) {
	var base []byte
	if pk.Encoding == uplink.ZstdPatch {
		base = s.bytesOf(s.Files[pk.Base])
	}
	if !s.Lean {
		out, err := uplink.Decode(pk.Encoding, b, base, size)
		if err != nil {
			return nil, err.Error()
		}
		return out, ""
	}
	k := decodeKey{unsafe.SliceData(b), len(b), pk.Encoding, pk.BaseSHA}
	v, _ := decodes.LoadOrStore(k, &decoded{})
	d := v.(*decoded)
	d.once.Do(func() {
		out, err := uplink.Decode(pk.Encoding, b, base, size)
		if err != nil {
			d.why = err.Error()
			return
		}
		d.sha = plans.SHA256(string(out))
		blobs.LoadOrStore(d.sha, out)
	})
	if d.why != "" {
		return nil, d.why
	}
	if d.sha != want {
		return nil, "it decoded to bytes with sha256 " + d.sha + ", want " + want
	}
	out, _ := blobs.Load(d.sha)
	return out.([]byte), ""
}

type decodeKey struct {
	p        *byte
	n        int
	enc, sha string
}

type decoded struct {
	once     sync.Once
	sha, why string
}

var (
	decodes sync.Map // decodeKey → *decoded
	blobs   sync.Map // sha256 → the bytes, for lean Sims: one copy for the fleet
)

// bytesOf is a file's content as bytes, a lean one's from the fleet's copy.
func (s *Sim) bytesOf(c string) []byte {
	if len(c) > len(leanPrefix) && c[:len(leanPrefix)] == leanPrefix {
		if b, ok := blobs.Load(c[len(leanPrefix):]); ok {
			return b.([]byte)
		}
		return nil
	}
	return []byte(c)
}

// StoreRelease puts a binary release in the Sim's release store as an
// earlier apply would have (the newest entry): the base a patch is made
// from. A lean Sim keeps it by its sha256, the fleet one copy of its bytes.
func (s *Sim) StoreRelease(data []byte) string { return s.StoreReleaseAs(data, "relayd") }

// StoreReleaseAs is StoreRelease for a release the store keeps as name
// (release.tar for a tarball).
func (s *Sim) StoreReleaseAs(data []byte, name string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	sha := s.sum(data) // a lean Sim's is hashed once for the fleet
	if s.Lean {
		blobs.LoadOrStore(sha, data)
	}
	s.keepFile(s.Paths.Releases+"/.sha256/"+sha+"/"+name, data, sha)
	return sha
}

// requestBytes is what one request puts on the wire besides its data
// (Result.Sent counts that): its line and its command words.
func requestBytes(o rollout.Op) int {
	n := len(o.Kind) + 8
	for _, a := range o.Args {
		n += len(a) + 1
	}
	for _, w := range o.Argv {
		n += len(w) + 1
	}
	return n
}
