package shellhost

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/relayctl/relayctl/plans"
	"github.com/relayctl/relayctl/rollout"
)

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
	b, err := newBoundary()
	if err != nil {
		return nil, err
	}
	return &sampleCall{boundary: b, args: o.Args, pid: pid, port: port}, nil
}

func (c *sampleCall) words() ([]string, []string) {
	return append([]string{c.boundary}, c.args...), nil
}

func (c *sampleCall) parse(out []byte, r *rollout.Result) error {
	frames, err := ParseFrames(out, c.boundary)
	if err != nil {
		return fmt.Errorf("sample: %w", err)
	}
	d, err := DropsFromFrames(frames, c.pid, c.port)
	if err != nil {
		return fmt.Errorf("sample: %w", err)
	}
	r.Drops = d
	return nil
}

// DropsFromFrames reads a sample's sections: the host clock, ss, the
// namespace's /proc/net/udp and snmp, and the relay's /status when it was
// asked, of relay process pid on port. A socket ss does not show has inode
// 0 (the soak reads that as a relay gone); a /status of another process
// or socket is left out (its counters are not this relay's); output that
// does not parse is an error.
func DropsFromFrames(frames []Frame, pid, port int) (*plans.DropCounters, error) {
	by := frameSet{}
	for _, fr := range frames {
		by[fr.Name] = fr
	}
	clock, ok := by.text("clock")
	if !ok {
		return nil, fmt.Errorf("%w: no clock", errFrame)
	}
	f := &plans.Facts{}
	var err error
	if f.ClockNanos, err = strconv.ParseInt(clock, 10, 64); err != nil || f.ClockNanos <= 0 {
		return nil, fmt.Errorf("%w: bad clock %q", errFrame, clip(clock))
	}
	// Every bound socket on the port in the relay's namespace (ss without
	// -p, which would read every process's descriptors): the soak checks
	// the relay's own socket is among them, and a socket of another
	// program shows as counters that disagree.
	if err := by.socket(f, port); err != nil {
		return nil, err
	}
	f.Service = plans.ServiceFact{Running: true, PID: pid}
	if fr, ok := by["relay-status"]; ok {
		f.RelayStatus = parseStatus(fr)
	}
	if st := f.RelayStatus; st != nil && st.Read && (st.PID != pid || st.SocketInode != 0 && st.SocketInode != f.Socket.Inode) {
		f.RelayStatus = nil
	}
	c := plans.DropCountersOf(f)
	return &c, nil
}
