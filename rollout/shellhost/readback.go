package shellhost

import (
	"encoding/json"
	"fmt"

	"github.com/relayctl/relayctl/plans"
	"github.com/relayctl/relayctl/rollout"
	"github.com/relayctl/relayctl/rollout/hostfacts"
)

// readBackCall is a window's read-back (rollout.ReadBack, judged by the
// host agent inside the window): its request carries the read-back and
// the query as data, under a fresh frame boundary; its answer is the
// host's verdict and the reading it ended on, framed as observe frames
// one, which relayctl reads itself (facts), as it reads any observe.
type readBackCall struct {
	observe *observeCall
	req     []byte
}

func newReadBackCall(o rollout.Op, host, address, user string) (*readBackCall, error) {
	c, err := newObserveCall(*o.Query, host, address, user)
	if err != nil {
		return nil, err
	}
	req, err := json.Marshal(rollout.ReadBackRequest{ReadBack: *o.Judge, Query: *o.Query})
	if err != nil {
		return nil, fmt.Errorf("read-back: %w", err)
	}
	return &readBackCall{observe: c, req: req}, nil
}

func (c *readBackCall) words() ([]string, []string) { return []string{c.observe.boundary}, nil }

func (c *readBackCall) data() []byte { return c.req }

func (c *readBackCall) parse(out []byte, r *rollout.Result) error {
	if len(out) > hostfacts.MaxObserveOutput {
		return fmt.Errorf("read-back: the host printed more than %d bytes", hostfacts.MaxObserveOutput)
	}
	var a rollout.ReadBackAnswer
	if err := json.Unmarshal(out, &a); err != nil {
		return fmt.Errorf("read-back: the host's answer does not decode: %w", err)
	}
	f, err := c.observe.facts(a.Frames)
	if err != nil {
		return fmt.Errorf("read-back: %w", err)
	}
	r.Facts = f
	r.ReadBack = &rollout.ReadBackResult{Held: a.Held, Why: plans.Visible(a.Why)}
	return nil
}
