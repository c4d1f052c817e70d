package agent

import (
	"bytes"
	"regexp"
	"testing"

	"github.com/relayctl/relayctl/relay/capability"
)

// firstMarker is what agent.sh's grep -o 'relayd-capabilities:
// [a-z0-9=/._ -]*' read, bounded as the agent bounds it: the capabilities
// of the first marker in b.
var firstMarkerRe = regexp.MustCompile(`relayd-capabilities: ([a-z0-9=/._ -]{0,256})`)

func firstMarker(b []byte) string {
	m := firstMarkerRe.FindSubmatch(b)
	if m == nil {
		return ""
	}
	return string(m[1])
}

// scanInPieces writes b to a markerScanner in pieces of n bytes.
func scanInPieces(b []byte, n int) string {
	var m markerScanner
	for len(b) > 0 {
		k := min(n, len(b))
		m.Write(b[:k])
		b = b[k:]
	}
	return string(m.marker)
}

// The marker is found wherever the program's bytes are cut between reads:
// in its prefix, in its capabilities, or between them.
func TestMarkerScannerAcrossReads(t *testing.T) {
	body := []byte("\x7fELF\x00relayd-capab\x00" + capability.Marker + "\x00" + capability.Prefix + "later=one/1\n")
	want := "drain=http/1 fdstore=systemd/1 handoff=unix/1 join=cookie/1 ready=fd/1"
	if firstMarker(body) != want {
		t.Fatalf("the reference reads %q", firstMarker(body))
	}
	for n := 1; n <= len(body); n++ {
		if got := scanInPieces(body, n); got != want {
			t.Fatalf("in pieces of %d bytes: got %q, want %q", n, got, want)
		}
	}
	for _, c := range []struct{ name, body, want string }{
		{"none", "no marker here", ""},
		{"the prefix alone", "x" + capability.Prefix, ""},
		{"a marker cut by a byte it cannot hold", capability.Prefix + "drain=http/1\x00ready=fd/1\n", "drain=http/1"},
		{"a marker without its end", capability.Prefix + "drain=http/1", "drain=http/1"},
		{"a marker too long", capability.Prefix + string(bytes.Repeat([]byte("a"), 1000)), string(bytes.Repeat([]byte("a"), maxMarker))},
	} {
		if got := scanInPieces([]byte(c.body), 7); got != c.want || firstMarker([]byte(c.body)) != c.want {
			t.Errorf("%s: got %q (the reference %q), want %q", c.name, got, firstMarker([]byte(c.body)), c.want)
		}
	}
}

// The scanner reads what the reference reads, however the bytes come.
func FuzzMarkerScanner(f *testing.F) {
	f.Add([]byte(capability.Marker), 3)
	f.Add([]byte("xx"+capability.Prefix+capability.Prefix+"a=b/1 c\n"), 1)
	f.Add([]byte("relayd-capabilitiesrelayd-capabilities: q"), 20)
	f.Add(append(bytes.Repeat([]byte("relayd-"), 50), capability.Marker...), 64)
	f.Fuzz(func(t *testing.T, body []byte, n int) {
		if n <= 0 || n > 4096 {
			n = 1 + n&0xff
		}
		if got, want := scanInPieces(body, n), firstMarker(body); got != want {
			t.Errorf("in pieces of %d: got %q, want %q", n, got, want)
		}
	})
}
