package rollouttest

import (
	"bytes"
	"os"

	"github.com/relayctl/relayctl/relay/capability"
)

// TwoReleases are a program's bytes and the next build of it, for tests
// of uploads packed as patches (package wire): size bytes of the running
// test binary (a Go program, as relayd is), then some inserted, some
// removed and one changed, as a new build shifts and changes code. The
// markers relayd's capabilities and version are read from are taken out
// (a test binary holds them as test data: a release has one of each).
func TwoReleases(size int) (old, new []byte, err error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, nil, err
	}
	b, err := os.ReadFile(exe)
	if err != nil {
		return nil, nil, err
	}
	size = min(size, len(b))
	old = bytes.Clone(b[len(b)-size:])
	for _, m := range []string{capability.Prefix, capability.VersionPrefix} {
		old = bytes.ReplaceAll(old, []byte(m), bytes.Repeat([]byte{'-'}, len(m)))
	}
	new = append(bytes.Clone(old[:size/3]), []byte("a new function's bytes")...)
	new = append(new, old[size/3:size/2]...)
	new = append(new, old[size/2+100:]...)
	new[len(new)*3/4] ^= 1
	return old, new, nil
}
