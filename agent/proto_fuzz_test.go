package agent

import (
	"bufio"
	"bytes"
	"io"
	"strings"
	"testing"
)

// The request decoder reads whatever relayctl, or anyone who reaches the
// agent's stdin, sends: it never panics, never reads a request's payload
// as the next request, and keeps the stream in step or stops.
func FuzzReadRequest(f *testing.F) {
	f.Add([]byte(req("keep", 1, []byte("abc"), nil, "/opt/x", "sha", "3", "0755")), []byte("sync\t0\t0\t0\n"))
	f.Add([]byte(req("restart", 1, nil, []string{"/bin/true", "", "x"}, "command", "1", "2")), []byte("unlock\t0\t0\t0\n"))
	f.Add([]byte("keep\t1\t-1\t0\n"), []byte("x"))
	f.Add([]byte("keep\t1\t99999999999999999999\t0\n"), []byte(""))
	f.Add([]byte("\t\t\t\n"), []byte(strings.Repeat("a", 70000)))
	f.Fuzz(func(t *testing.T, first, rest []byte) {
		in := bufio.NewReader(io.MultiReader(bytes.NewReader(first), bytes.NewReader(rest)))
		for i := 0; i < 50; i++ {
			r, err := readRequest(in)
			if err != nil {
				return
			}
			if r.dataLeft < 0 || r.argvLeft < 0 {
				t.Fatalf("negative payload sizes: %+v", r)
			}
			data, derr := r.data(1 << 16)
			if derr == nil && len(data) > 1<<16 {
				t.Fatalf("data beyond its bound: %d bytes", len(data))
			}
			words, _ := r.argv(r.argvLeft)
			for _, w := range words {
				if strings.ContainsRune(w, '\n') {
					t.Fatalf("a word holds a newline: %q", w)
				}
			}
			if err := r.drain(); err != nil {
				return
			}
		}
	})
}

// A request line's sizes must be numbers: anything else stops the session
// (the stream could not be kept in step), answered once.
func TestABadRequestLineEndsTheSession(t *testing.T) {
	state := stateDir(t)
	out := runSession(t, state, "lock\tx\nkeep\t1\tabc\t0\n"+req("clock", 0, nil, nil))
	if out != "LOCKED\nERR bad request line\n" {
		t.Errorf("got %q", out)
	}
}
