package uplink

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

// readAtMost is how the host agent reads a form: at most size+1 bytes.
func readAtMost(enc string, packed, base []byte, size int) ([]byte, error) {
	r, err := NewReader(enc, bytes.NewReader(packed), base, int64(size))
	if err != nil {
		return nil, err
	}
	defer r.Close()
	var out bytes.Buffer
	_, err = io.CopyN(&out, r, int64(size)+1)
	if errors.Is(err, io.EOF) {
		err = nil
	}
	return out.Bytes(), err
}

// Whatever Encode makes, NewReader decodes, at every size: a release of a
// few hundred bytes (a zstd frame of its own window, not one segment),
// and one of megabytes (one segment), as a patch from the release before.
func TestNewReaderDecodesWhatEncodeMakes(t *testing.T) {
	old, new := releases(t, 2<<20)
	for _, size := range []int{300, 5000, len(new)} {
		data := new[:size]
		for _, enc := range Encodings {
			packed, err := Encode(enc, data, old)
			if err != nil {
				t.Fatalf("%s: %v", enc, err)
			}
			got, err := readAtMost(enc, packed, old, size)
			if err != nil || !bytes.Equal(got, data) {
				t.Errorf("%s of %d bytes: decoded %d bytes (%v), want the %d encoded", enc, size, len(got), err, size)
			}
		}
	}
}

// A form of more bytes than the host expects never yields more than one
// byte too many (the reader stops there, or the frame is refused at once),
// and a patch decoded against other bytes than its base is not the
// release.
func TestNewReaderHoldsItsBounds(t *testing.T) {
	old, new := releases(t, 2<<20)
	for _, enc := range Encodings {
		packed, err := Encode(enc, new, old)
		if err != nil {
			t.Fatal(err)
		}
		got, err := readAtMost(enc, packed, old, len(new)-10)
		if err == nil && len(got) <= len(new)-10 {
			t.Errorf("%s: a longer output read as %d bytes without an error", enc, len(got))
		}
		if len(got) > len(new)-10+1 {
			t.Errorf("%s: read %d bytes, more than the size and one", enc, len(got))
		}
	}
	patch, _ := Encode(ZstdPatch, new, old)
	if got, err := readAtMost(ZstdPatch, patch, new, len(new)); err == nil && bytes.Equal(got, new) {
		t.Error("a patch decoded against another base gave the release")
	}
	if _, err := NewReader(ZstdPatch, bytes.NewReader(patch), nil, int64(len(new))); err == nil {
		t.Error("a patch without a base: no error")
	}
	if _, err := NewReader("bzip2", bytes.NewReader(patch), nil, 1); err == nil {
		t.Error("an unknown encoding: no error")
	}
}
