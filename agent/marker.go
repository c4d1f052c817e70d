package agent

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"io"

	"github.com/relayctl/relayctl/relay/capability"
)

// maxMarker bounds the capabilities read after the marker's prefix: a
// marker line is at most this long (package capability reads no longer
// one), so a hostile program cannot make the agent hold on to much of it.
const maxMarker = 256

var markerPrefix = []byte(capability.Prefix)

// sumAndMarker reads a release's program once: its sha256, and the
// capabilities its first marker lists (space-separated, as written).
func sumAndMarker(r io.Reader) (sum, caps string, err error) {
	h := sha256.New()
	var m markerScanner
	if _, err := io.Copy(io.MultiWriter(h, &m), r); err != nil {
		return "", "", err
	}
	return hex.EncodeToString(h.Sum(nil)), string(m.marker), nil
}

// markerScanner finds the first capabilities marker in what is written
// to it, across writes: the prefix, then the longest run (at most
// maxMarker bytes) of the characters a marker's tokens and their spaces
// are made of. agent.sh read it so: grep -o 'relayd-capabilities:
// [a-z0-9=/._ -]*', the first match; package capability judges it after.
type markerScanner struct {
	tail   []byte // before the prefix is found: the last bytes, which may start it
	found  bool
	done   bool
	marker []byte
}

func (m *markerScanner) Write(p []byte) (int, error) {
	n := len(p)
	if m.done {
		return n, nil
	}
	if !m.found {
		buf := append(m.tail, p...)
		i := bytes.Index(buf, markerPrefix)
		if i < 0 {
			keep := min(len(buf), len(markerPrefix)-1)
			m.tail = append(m.tail[:0], buf[len(buf)-keep:]...)
			return n, nil
		}
		m.found, m.tail = true, nil
		p = buf[i+len(markerPrefix):]
	}
	for _, c := range p {
		if !markerChar(c) || len(m.marker) == maxMarker {
			m.done = true
			break
		}
		m.marker = append(m.marker, c)
	}
	return n, nil
}

// markerChar: c may be in a marker's list of capabilities.
func markerChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '=' || c == '/' || c == '.' || c == '_' || c == ' ' || c == '-'
}
