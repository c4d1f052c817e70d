package agent

import (
	"bufio"
	"io"
	"strings"
	"testing"
)

// A primitive that reads part of its data as a stream (a decoder that
// stops at a bad byte, a write that fails) leaves the rest to drain: the
// next line read is the next request, never the rest of the data.
func TestDataReaderLeavesTheRestToDrain(t *testing.T) {
	in := bufio.NewReader(strings.NewReader(req("keep", 0, []byte("0123456789"), nil, "/x") + req("clock", 0, nil, nil)))
	r, err := readRequest(in)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 4)
	if _, err := io.ReadFull(r.dataReader(), b); err != nil || string(b) != "0123" {
		t.Fatalf("read %q %v", b, err)
	}
	if rest, _ := io.ReadAll(io.LimitReader(r.dataReader(), 3)); string(rest) != "456" {
		t.Fatalf("a second reader read %q, want what the first left", rest)
	}
	if err := r.drain(); err != nil {
		t.Fatal(err)
	}
	next, err := readRequest(in)
	if err != nil || next.kind != "clock" {
		t.Fatalf("the request after it: %+v %v, want clock", next, err)
	}
	if n, err := r.dataReader().Read(b); n != 0 || err != io.EOF {
		t.Errorf("a drained request's data: %d bytes, %v; want EOF", n, err)
	}
}
