// Package capability is what a relayd binary can do, said in a way a
// planner can read from the artifact's bytes without running it.
//
// relayd keeps Marker, one line of text, in its read-only data (it prints
// it with --capabilities, which is what keeps the linker from dropping it,
// even with -ldflags "-s -w"). Capabilities finds that line in an artifact.
package capability

import (
	"bytes"
	"fmt"
	"slices"
	"strings"

	"github.com/relayctl/relayctl/internal/lazyre"
)

// Prefix starts the marker line.
const Prefix = "relayd-capabilities: "

// The capabilities of this build, each name=protocol/version:
//   - handoff=unix/1: RELAYD_HANDOFF_SOCKET, package relay/handoff;
//   - drain=http/1: POST and DELETE /drain on the control plane;
//   - ready=fd/1: --ready-fd N, a line "READY" on fd N once the relay
//     relays (a service manager without sd_notify waits on it);
//   - fdstore=systemd/1: under systemd with a file-descriptor store
//     (FileDescriptorStoreMax= 3 or more, FDSTORE set), it takes its UDP
//     socket (FDNAME relayd-udp) and its lobby table (relayd-state-a or
//     -b, relay/fdstore) from the store at start and keeps both there, so
//     systemctl restart keeps the socket and the players (package fdstore).
//     A release without it binds a socket of its own, which fails while
//     the store holds the port.
//   - join=cookie/1: wire version 2, a player joins with the return
//     routability handshake (relay/wire); a binary without it speaks wire
//     version 1, where any datagram joins.
const (
	Handoff = "handoff=unix/1"
	Drain   = "drain=http/1"
	Ready   = "ready=fd/1"
	FDStore = "fdstore=systemd/1"
	Join    = "join=cookie/1"
)

// Marker is the line in the binary: the prefix, the capabilities separated
// by spaces, a newline. A variable, not a constant, so its bytes are one
// string in the binary's data that no compiler folding can split.
var Marker = Prefix + Drain + " " + FDStore + " " + Handoff + " " + Join + " " + Ready + "\n"

// maxLine bounds the marker line, so a hostile artifact cannot make the
// scan hold on to much of it.
const maxLine = 256

var token = lazyre.New(`^[a-z][a-z0-9_-]{0,31}=[a-z0-9][a-z0-9._/-]{0,31}$`)

// Capabilities returns the capabilities an artifact's marker lists, sorted;
// none when it has no marker (an older relayd, or another program). Text
// after the prefix that is not a well-formed line (a newline within 256
// bytes, tokens name=protocol/version) is not a marker. Two markers that
// disagree are an error: the artifact is not one relayd build.
func Capabilities(artifact []byte) ([]string, error) {
	var found []string
	pre := []byte(Prefix)
	for rest := artifact; ; {
		i := bytes.Index(rest, pre)
		if i < 0 {
			break
		}
		rest = rest[i+len(pre):]
		line := rest[:min(len(rest), maxLine)]
		end := bytes.IndexByte(line, '\n')
		if end < 0 {
			continue
		}
		caps, ok := parse(string(line[:end]))
		if !ok {
			continue
		}
		if found != nil && !slices.Equal(found, caps) {
			return nil, fmt.Errorf("read capabilities: two markers disagree: %q and %q", strings.Join(found, " "), strings.Join(caps, " "))
		}
		found = caps
	}
	return found, nil
}

func parse(line string) ([]string, bool) {
	f := strings.Fields(line)
	if len(f) == 0 || strings.Join(f, " ") != line {
		return nil, false
	}
	for _, t := range f {
		if !token.MatchString(t) {
			return nil, false
		}
	}
	slices.Sort(f)
	return slices.Compact(f), true
}

// Has reports whether caps lists capability c (name=protocol/version).
func Has(caps []string, c string) bool { return slices.Contains(caps, c) }
