package shellhost

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/relayctl/relayctl/rollout"
	"github.com/relayctl/relayctl/rollout/hostfacts"
)

// carriesData is a framed call that sends data of its own (read-back's).
type carriesData interface{ data() []byte }

// framed is a primitive whose answer is framed output, as observe
// prints it: it goes to the host with a fresh frame boundary in place of
// its own words, and its answer is parsed here rather than passed on.
type framed interface {
	// words are the request's arguments and argv lines.
	words() (args, argv []string)
	// parse reads the framed answer into r.
	parse(out []byte, r *rollout.Result) error
}

func (c *observeCall) words() ([]string, []string) { return []string{c.boundary}, c.args }

func (c *observeCall) parse(out []byte, r *rollout.Result) error {
	f, err := c.facts(out)
	r.Facts = f
	return err
}

// sampleCall is one sample primitive: the relay's drop counters, framed
// with a fresh boundary.
type sampleCall struct {
	boundary  string
	args      []string // PID PORT CONTROL|-
	pid, port int
}

func newSampleCall(o rollout.Op) (*sampleCall, error) {
	if len(o.Args) != 3 {
		return nil, errors.New("sample: want PID PORT CONTROL")
	}
	pid, perr := strconv.Atoi(o.Args[0])
	port, err := strconv.Atoi(o.Args[1])
	if perr != nil || err != nil {
		return nil, fmt.Errorf("sample: bad pid %q or port %q", o.Args[0], o.Args[1])
	}
	b, err := hostfacts.NewBoundary()
	if err != nil {
		return nil, err
	}
	return &sampleCall{boundary: b, args: o.Args, pid: pid, port: port}, nil
}

func (c *sampleCall) words() ([]string, []string) {
	return append([]string{c.boundary}, c.args...), nil
}

func (c *sampleCall) parse(out []byte, r *rollout.Result) error {
	frames, err := hostfacts.ParseFrames(out, c.boundary)
	if err != nil {
		return fmt.Errorf("sample: %w", err)
	}
	d, err := hostfacts.DropsFromFrames(frames, c.pid, c.port)
	if err != nil {
		return fmt.Errorf("sample: %w", err)
	}
	r.Drops = d
	return nil
}
