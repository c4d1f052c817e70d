package uplink

import (
	"compress/gzip"
	"fmt"
	"io"

	"github.com/klauspost/compress/zstd"
)

// zstdDecoderOptions are how relayctl decodes a zstd form, in memory
// (Decode) or as a stream (NewReader): one goroutine, a frame's window at
// most MaxWindow, and for a patch the base as raw content (dictionary id
// 0, as Encode makes it). maxMemory bounds a frame's declared size and
// window: a frame that claims more is refused before anything is
// allocated for it.
func zstdDecoderOptions(enc string, base []byte, maxMemory uint64) []zstd.DOption {
	opts := []zstd.DOption{zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(MaxWindow), zstd.WithDecoderMaxMemory(maxMemory)}
	if enc == ZstdPatch {
		opts = append(opts, zstd.WithDecoderDictRaw(0, base))
	}
	return opts
}

// NewReader decodes packed, a stream in enc, as it is read: the host
// agent's way, which never holds a form in memory. size is the length the
// decoded bytes should have. The reader does not stop there: its caller
// reads at most size+1 bytes and refuses a longer output. A zstd frame
// whose header promises more than size+1 bytes, or needs a window larger
// than both that and the smallest window Encode uses, is refused at once:
// a frame Encode makes is either one segment of exactly size bytes or
// has a window Encode chose (from 1 MiB up to MaxWindow), so nothing it
// makes is refused, and a hostile frame cannot make the decoder allocate
// more than that.
func NewReader(enc string, packed io.Reader, base []byte, size int64) (io.ReadCloser, error) {
	switch enc {
	case Gzip:
		r, err := gzip.NewReader(packed)
		if err != nil {
			return nil, err
		}
		return r, nil
	case Zstd, ZstdPatch:
		if enc == ZstdPatch && len(base) == 0 {
			return nil, fmt.Errorf("decode zstd patch: no base")
		}
		limit := uint64(max(size+1, minWindow))
		d, err := zstd.NewReader(packed, append(zstdDecoderOptions(enc, base, limit), zstd.WithDecoderLowmem(true))...)
		if err != nil {
			return nil, err
		}
		return d.IOReadCloser(), nil
	}
	return nil, fmt.Errorf("decode: unknown encoding %q", enc)
}
