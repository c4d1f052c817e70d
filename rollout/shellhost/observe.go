package shellhost

import (
	"bytes"
	_ "embed"
	"fmt"

	"github.com/relayctl/relayctl/plans"
	"github.com/relayctl/relayctl/rollout"
	"github.com/relayctl/relayctl/rollout/hostfacts"
)

// observeCall is one observe: a fresh frame boundary, its words, and how
// to read its framed answer into facts.
type observeCall struct {
	q                   rollout.Query
	boundary            string
	args                []string
	host, address, user string
}

func newObserveCall(q rollout.Query, host, address, user string) (*observeCall, error) {
	boundary, err := hostfacts.NewBoundary()
	if err != nil {
		return nil, err
	}
	a, err := hostfacts.Args(q)
	if err != nil {
		return nil, err
	}
	return &observeCall{q: q, boundary: boundary, args: a, host: host, address: address, user: user}, nil
}

// facts parses what observe answered.
func (c *observeCall) facts(out []byte) (*plans.Facts, error) {
	if len(out) > hostfacts.MaxObserveOutput {
		return nil, fmt.Errorf("observe: the host printed more than %d bytes", hostfacts.MaxObserveOutput)
	}
	frames, err := hostfacts.ParseFrames(out, c.boundary)
	if err != nil {
		return nil, fmt.Errorf("observe: %w", err)
	}
	f, err := hostfacts.FactsFromFrames(frames, c.q)
	if err != nil {
		return nil, fmt.Errorf("observe: %w", err)
	}
	f.Host, f.Address, f.User = c.host, c.address, c.user
	if err := plans.ValidateFacts(f); err != nil {
		return nil, fmt.Errorf("observe: %w", err)
	}
	return f, nil
}

// limitedBuffer keeps at most max bytes and notes that more came.
type limitedBuffer struct {
	bytes.Buffer
	max  int
	over bool
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if room := b.max - b.Len(); len(p) > room {
		b.over = true
		if room > 0 {
			b.Buffer.Write(p[:room])
		}
		return len(p), nil
	}
	return b.Buffer.Write(p)
}
