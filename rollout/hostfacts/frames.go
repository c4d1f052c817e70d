package hostfacts

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
)

// Frame is one section of observe's output.
type Frame struct {
	Name   string
	Status int
	Data   []byte
}

var errFrame = errors.New("malformed observe output")

// ErrForgedFrame is host output that carries the frame marker, or a frame
// seen twice: something on the host tried to write facts of its own.
var ErrForgedFrame = errors.New("forged observe output")

// NewBoundary is a frame marker no host output can guess.
func NewBoundary() (string, error) {
	var r [16]byte
	if _, err := rand.Read(r[:]); err != nil {
		return "", fmt.Errorf("observe: %w", err)
	}
	return "@@relayctl-" + hex.EncodeToString(r[:]), nil
}

// ParseFrames splits the observe script's output into its sections:
// "BOUNDARY NAME\n", the output, "\nBOUNDARY end STATUS\n". Host output is
// untrusted: anything outside that shape is an error, and so are a frame
// name seen twice and a section whose output holds the boundary (which
// only a host that learnt the secret could print).
func ParseFrames(b []byte, boundary string) ([]Frame, error) {
	var out []Frame
	seen := map[string]bool{}
	open := []byte(boundary + " ")
	closing := []byte("\n" + boundary + " end ")
	for len(b) > 0 {
		if !bytes.HasPrefix(b, open) {
			return nil, fmt.Errorf("%w: unexpected text %q", errFrame, Clip(string(b)))
		}
		nl := bytes.IndexByte(b, '\n')
		if nl < 0 {
			return nil, fmt.Errorf("%w: header without newline", errFrame)
		}
		name := string(b[len(open):nl])
		b = b[nl+1:]
		end := bytes.Index(b, closing)
		if end < 0 {
			return nil, fmt.Errorf("%w: section %q does not end", errFrame, Clip(name))
		}
		data := b[:end]
		b = b[end+len(closing):]
		nl = bytes.IndexByte(b, '\n')
		if nl < 0 {
			return nil, fmt.Errorf("%w: section %q: end without newline", errFrame, Clip(name))
		}
		st, err := strconv.Atoi(string(b[:nl]))
		if err != nil || st < 0 || st > 255 {
			return nil, fmt.Errorf("%w: section %q: bad status %q", errFrame, Clip(name), Clip(string(b[:nl])))
		}
		if bytes.Contains(data, []byte(boundary)) {
			return nil, fmt.Errorf("%w: section %q holds the frame marker", ErrForgedFrame, Clip(name))
		}
		if seen[name] {
			return nil, fmt.Errorf("%w: section %q appears twice", ErrForgedFrame, Clip(name))
		}
		seen[name] = true
		out = append(out, Frame{Name: name, Status: st, Data: data})
		b = b[nl+1:]
	}
	return out, nil
}

func Clip(s string) string { return ClipTo(s, 60) }

func ClipTo(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
