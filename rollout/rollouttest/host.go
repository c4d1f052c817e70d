// Package rollouttest has a fake of rollout's host seam for the engine's
// unit tests and the fleet simulator: Sim, a relay host in memory that
// implements rollout.Host exactly as the shell backend does (lock,
// observe and unlock are primitives like the others) and applies the
// typed primitives to its facts. It parses no shell: the real scripts are
// proven against the lab hosts.
package rollouttest

import (
	"context"
	"errors"

	"github.com/relayctl/relayctl/rollout"
)

// Dialer hands out hosts by name; a name missing from it is unreachable.
type Dialer map[string]rollout.Host

// DialHost returns the named host, once a Sim's network has connected to
// it (Net.Connect).
func (d Dialer) DialHost(ctx context.Context, name string) (rollout.Host, error) {
	h, ok := d[name]
	if !ok {
		return nil, errors.New("dial tcp " + name + ":22: connection refused")
	}
	if s, ok := h.(*Sim); ok {
		s.Net.connect(ctx)
	}
	return h, nil
}
