// Package uplink is how a release crosses the controller's uplink to a
// host: compressed, in a format the host can decode (gzip, which every
// Debian base has; zstd, only where observe found the host's zstd), or as
// a zstd patch from a release the host keeps in its release store, which
// the host's own zstd turns back into the release (zstd -d
// --patch-from=BASE). Whatever the form, the host checks the sha256 of
// what it decoded, as of any upload, and a form it cannot decode is
// followed by the next one (rollout.Packed): the release as it is last.
//
// The Go side is github.com/klauspost/compress/zstd: its encoder takes a
// raw-content dictionary (WithEncoderDictRaw), which is exactly what the
// zstd CLI's --patch-from decodes against; TestZstdCLIDecodes holds the
// two to each other.
package uplink

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/klauspost/compress/zstd"
)

// Encodings of a release on the wire, as observe names the host's decoders
// (plans.Facts.Decoders) and the agent names what it decodes.
const (
	Raw       = "raw"        // the bytes themselves
	Gzip      = "gzip"       // gzip -dc
	Zstd      = "zstd"       // zstd -dc
	ZstdPatch = "zstd-patch" // zstd -dc --patch-from=BASE (zstd 1.4.5 and later)
)

// Encodings are the packed encodings, best first for a host that decodes
// them all.
var Encodings = []string{ZstdPatch, Zstd, Gzip}

// MaxWindow is the largest window a zstd frame relayctl makes may have:
// 128 MiB, what the zstd CLI decodes without --long or --memory. A patch
// of a release larger than that from a base refers back at most this far
// (it is bigger, never wrong).
const MaxWindow = 1 << 27

// minWindow keeps the window of small releases ordinary.
const minWindow = 1 << 20

// window is the frame window for n bytes of history (a patch's base and
// the release together): the smallest power of two that holds them, within
// [minWindow, MaxWindow]. A patch's matches reach back into the base only
// as far as the window, so it must span both.
func window(n int) int {
	w := minWindow
	for w < n && w < MaxWindow {
		w <<= 1
	}
	return w
}

// Encode is data in enc; base is the release a ZstdPatch is made from.
// The output depends only on its inputs (one encoder goroutine), so a plan
// made twice from the same bytes says the same size.
func Encode(enc string, data, base []byte) ([]byte, error) {
	switch enc {
	case Gzip:
		var b bytes.Buffer
		w, err := gzip.NewWriterLevel(&b, gzip.DefaultCompression)
		if err != nil {
			return nil, err
		}
		if _, err := w.Write(data); err != nil {
			return nil, err
		}
		if err := w.Close(); err != nil {
			return nil, err
		}
		return b.Bytes(), nil
	case Zstd, ZstdPatch:
		opts := []zstd.EOption{zstd.WithEncoderLevel(zstd.SpeedBestCompression), zstd.WithEncoderConcurrency(1), zstd.WithEncoderCRC(true), zstd.WithLowerEncoderMem(true)}
		n := len(data)
		if enc == ZstdPatch {
			if len(base) == 0 {
				return nil, errors.New("encode zstd patch: no base")
			}
			// Dictionary id 0: the frame names no dictionary, and --patch-from
			// supplies the base as raw content.
			opts = append(opts, zstd.WithEncoderDictRaw(0, base))
			n += len(base)
		}
		e, err := zstd.NewWriter(nil, append(opts, zstd.WithWindowSize(window(n)))...)
		if err != nil {
			return nil, fmt.Errorf("encode %s: %w", enc, err)
		}
		defer e.Close()
		return e.EncodeAll(data, make([]byte, 0, len(data)/2)), nil
	}
	return nil, fmt.Errorf("encode: unknown encoding %q", enc)
}

// Decode is Encode's inverse, reading at most limit bytes of output (a
// longer one is an error): the simulated hosts decode with it, and a form
// kept in the cache is checked with it.
func Decode(enc string, packed, base []byte, limit int) ([]byte, error) {
	switch enc {
	case Gzip:
		r, err := gzip.NewReader(bytes.NewReader(packed))
		if err != nil {
			return nil, fmt.Errorf("decode gzip: %w", err)
		}
		out, err := io.ReadAll(io.LimitReader(r, int64(limit)+1))
		if err != nil {
			return nil, fmt.Errorf("decode gzip: %w", err)
		}
		if len(out) > limit {
			return nil, fmt.Errorf("decode gzip: more than %d bytes", limit)
		}
		return out, nil
	case Zstd, ZstdPatch:
		d, err := zstd.NewReader(nil, zstdDecoderOptions(enc, base, uint64(limit)+1)...)
		if err != nil {
			return nil, fmt.Errorf("decode %s: %w", enc, err)
		}
		defer d.Close()
		out, err := d.DecodeAll(packed, nil)
		if err != nil {
			return nil, fmt.Errorf("decode %s: %w", enc, err)
		}
		if len(out) > limit {
			return nil, fmt.Errorf("decode %s: more than %d bytes", enc, limit)
		}
		return out, nil
	}
	return nil, fmt.Errorf("decode: unknown encoding %q", enc)
}

// Decodes reports whether a host with decoders (observe's) decodes enc.
func Decodes(decoders []string, enc string) bool {
	return enc == Raw || slices.Contains(decoders, enc)
}
