package uplink

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
)

// ErrNotSmaller is a form that would not be smaller than the release
// itself (a tiny file, one compressed already): the release goes as it is.
var ErrNotSmaller = errors.New("not smaller than the release itself")

// minPacked is the smallest release worth packing: below it the frame
// headers eat what compression saves.
const minPacked = 4 << 10

// Release is one release and its forms for the uplink. Each form is made the
// first time a host needs it (the hosts that need it meanwhile wait for
// it), then shared by every host, as the release's own bytes are: a fleet
// holds one copy of each. With a cache, a patch's base comes from the
// releases relayctl shipped before, and a form made by an earlier run
// (plan makes the first form of each host to size it) is read back,
// checked, instead of made again.
type Release struct {
	data  []byte
	sha   string
	cache *Cache

	mu    sync.Mutex
	forms map[formKey]*formEntry
	has   map[string]bool // the cache holds that release: asked once a run
}

type formKey struct{ enc, base string }

type formEntry struct {
	once sync.Once
	data []byte
	err  error
}

// NewRelease is data's forms; cache may be nil (no patches, nothing kept).
func NewRelease(data []byte, cache *Cache) *Release {
	sum := sha256.Sum256(data)
	return &Release{data: data, sha: hex.EncodeToString(sum[:]), cache: cache, forms: map[formKey]*formEntry{}, has: map[string]bool{}}
}

// SHA256 is the release's sha256 (hex).
func (r *Release) SHA256() string { return r.sha }

// Len is the release's size in bytes.
func (r *Release) Len() int { return len(r.data) }

// Form is one form of the release a host may be sent: its encoding, the
// sha256 of the release a patch is made from, and its bytes, made once.
type Form struct {
	Encoding string
	Base     string // ZstdPatch: the sha256 of the base; "" otherwise
	r        *Release
}

// Bytes are the form's bytes (ErrNotSmaller for one that does not pay).
func (f Form) Bytes() ([]byte, error) { return f.r.bytes(f.Encoding, f.Base) }

// Forms are what a host is sent that decodes decoders (observe's: Gzip,
// Zstd, ZstdPatch) and keeps stored in its release store (sha256s, the
// most recently stored first), best first: a patch from the newest stored
// release whose bytes relayctl has, then the release compressed in the
// best format the host decodes. The first is the one the host is sent;
// the others follow only if the host cannot decode it, and the release as
// it is follows them all (it is not listed). The first is made here, so
// that it is known to pay; the others only if they are needed.
func (r *Release) Forms(decoders, stored []string) []Form {
	var out []Form
	if Decodes(decoders, ZstdPatch) {
		for _, base := range stored {
			if base == r.sha || !r.cached(base) {
				continue
			}
			if _, err := r.bytes(ZstdPatch, base); err == nil {
				out = append(out, Form{Encoding: ZstdPatch, Base: base, r: r})
				break
			}
		}
	}
	for _, enc := range []string{Zstd, Gzip} {
		if !Decodes(decoders, enc) {
			continue
		}
		if len(out) == 0 {
			if _, err := r.bytes(enc, ""); err != nil {
				continue // it does not pay: the next format, or none
			}
		}
		out = append(out, Form{Encoding: enc, r: r})
		break
	}
	return out
}

// cached reports whether the cache holds the release sha, asking it once
// for the run (a fleet's hosts mostly keep the same releases).
func (r *Release) cached(sha string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	has, ok := r.has[sha]
	if !ok {
		has = r.cache.Has(sha)
		r.has[sha] = has
	}
	return has
}

func (r *Release) bytes(enc, base string) ([]byte, error) {
	r.mu.Lock()
	k := formKey{enc, base}
	f := r.forms[k]
	if f == nil {
		f = &formEntry{}
		r.forms[k] = f
	}
	r.mu.Unlock()
	f.once.Do(func() { f.data, f.err = r.make(enc, base) })
	return f.data, f.err
}

// make encodes the release in enc, or reads it back from the cache.
func (r *Release) make(enc, base string) ([]byte, error) {
	if len(r.data) < minPacked {
		return nil, ErrNotSmaller
	}
	if b, ok := r.cache.form(r.sha, enc, base, len(r.data)); ok {
		return b, nil
	}
	var from []byte
	if enc == ZstdPatch {
		b, err := r.cache.Release(base)
		if err != nil {
			return nil, fmt.Errorf("patch from %s: %w", short(base), err)
		}
		from = b
	}
	out, err := Encode(enc, r.data, from)
	if err != nil {
		return nil, err
	}
	if len(out) >= len(r.data) {
		return nil, ErrNotSmaller
	}
	r.cache.putForm(r.sha, enc, base, out)
	return out, nil
}

func short(sha string) string {
	if len(sha) > 12 {
		return sha[:12]
	}
	return sha
}
