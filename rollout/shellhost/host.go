// Package shellhost is relayctl's real host: rollout.Host over a command
// runner (SSH, in production). Each session runs relayctl's host agent
// (package agent, carried by agentbin and started by boot.sh:
// bootstrap.go), which reads the host's facts, holds the host lock for
// the length of an apply and carries out the primitives relayctl sends it
// (rollout/primitive.go lists them). Nothing from a spec or a plan reaches
// the host as code: values travel as data, validated first.
package shellhost

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/relayctl/relayctl/agentbin"
	"github.com/relayctl/relayctl/rollout"
	"github.com/relayctl/relayctl/rollout/hostfacts"
	"github.com/relayctl/relayctl/uplink"
)

// Host is a rollout.Host over a connection: the agent read-only for facts
// (a session of its own), and one long-lived agent session that holds the
// host lock and runs primitives for the whole apply.
type Host struct {
	name   string
	conn   Conn
	state  string
	agents agentbin.Set
	cache  *uplink.Cache // agents shipped, the bases of patches (nil: none)
	count  countingRunner

	mu      sync.Mutex
	agent   *session
	batches int // batches sent to the agent (each one round trip)
}

var _ rollout.Host = (*Host)(nil)

// New wraps a connection to the host a spec calls name; state is the
// host's state folder (plans.StateDir), agents the host agent relayctl
// ships, cache where relayctl keeps the agents it shipped (nil for none).
func New(name string, c Conn, state string, agents agentbin.Set, cache *uplink.Cache) *Host {
	return &Host{name: name, conn: c, state: state, agents: agents, cache: cache, count: countingRunner{Runner: c}}
}

// Hosts makes a rollout.HostDialer of a transport Dialer.
func Hosts(d Dialer, state string, agents agentbin.Set, cache *uplink.Cache) rollout.HostDialer {
	return dialer{d, state, agents, cache}
}

type dialer struct {
	d      Dialer
	state  string
	agents agentbin.Set
	cache  *uplink.Cache
}

func (s dialer) DialHost(ctx context.Context, name string) (rollout.Host, error) {
	c, err := s.d.Dial(ctx, name)
	if err != nil {
		return nil, err
	}
	return New(name, c, s.state, s.agents, s.cache), nil
}

// Address is what was dialled.
func (h *Host) Address() string { return h.conn.Address() }

// User is the remote user.
func (h *Host) User() string { return h.conn.User() }

// Identity is the connection's keys.
func (h *Host) Identity() rollout.SSHIdentity { return h.conn.Identity() }

// RoundTrips counts commands run on the host and batches sent its agent.
func (h *Host) RoundTrips() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.count.count() + h.batches
}

// Close ends the agent (if any) and the connection.
func (h *Host) Close() error {
	h.mu.Lock()
	a := h.agent
	h.agent = nil
	h.mu.Unlock()
	if a != nil {
		a.close()
	}
	return h.conn.Close()
}

// Run carries out ops on the host (rollout.Host). A lone observe without a
// session is a session of the agent of its own; a lock starts the agent's
// session, and everything after it goes to that session in batches.
func (h *Host) Run(ctx context.Context, ops []rollout.Op, each func(i int, r rollout.Result) error) error {
	if len(ops) == 0 {
		return nil
	}
	if err := rollout.ValidateRun(ops); err != nil {
		return err
	}
	h.mu.Lock()
	a := h.agent
	h.mu.Unlock()
	switch {
	case a == nil && ops[0].Kind == "lock":
		return h.withAgent(ctx, "", func() error { return h.lockAndRun(ctx, ops, each) })
	case a == nil && len(ops) == 1 && ops[0].Kind == "observe":
		return h.withAgent(ctx, "observe", func() error { return h.observeAlone(ctx, ops[0], each) })
	case a == nil && len(ops) == 1 && ops[0].Kind == "receipts":
		return h.withAgent(ctx, "read receipts", func() error { return h.receiptsAlone(ctx, ops[0], each) })
	case a == nil:
		return errors.New("run on host: the host is not locked")
	case ops[0].Kind == "lock":
		return errors.New("run on host: the host is locked already")
	}
	return h.send(ctx, a, ops, 0, each, nil)
}

// observeAlone reads the host without its lock (plan, verify, facts): the
// agent answers a first request observe and exits.
func (h *Host) observeAlone(ctx context.Context, o rollout.Op, each func(int, rollout.Result) error) error {
	c, err := newObserveCall(*o.Query, h.name, h.conn.Address(), h.conn.User())
	if err != nil {
		return err
	}
	data, err := h.alone(ctx, "observe", []rollout.Op{o}, map[int]framed{0: c})
	if err != nil {
		return err
	}
	f, err := c.facts([]byte(data))
	if err != nil {
		return err
	}
	if each != nil {
		return each(0, rollout.Result{Facts: f, At: time.Now()})
	}
	return nil
}

// receiptsAlone reads the host's newest receipts without its lock
// (history --hosts): the agent answers a first request receipts and exits,
// so it runs as one command and waits on no apply. It reads them only
// where root alone could have written them, and answers UNSAFE otherwise,
// as lock does.
func (h *Host) receiptsAlone(ctx context.Context, o rollout.Op, each func(int, rollout.Result) error) error {
	data, err := h.alone(ctx, "read receipts", []rollout.Op{o}, nil, "if-state")
	if errors.Is(err, errNoState) {
		data, err = "", nil // a host relayctl never reached has no receipts
	}
	if err != nil {
		return err
	}
	if each != nil {
		return each(0, rollout.Result{Value: data, At: time.Now()})
	}
	return nil
}

// alone runs the agent for one read-only request (observe, receipts) as a
// command of its own: its DATA answer, or its ERR as an OpError.
func (h *Host) alone(ctx context.Context, what string, ops []rollout.Op, calls map[int]framed, mode ...string) (string, error) {
	var in bytes.Buffer
	if err := writeBatch(&in, ops, payloads(ops, calls, true, map[int]*keepState{}, 0), nil, false); err != nil {
		return "", err
	}
	out := &limitedBuffer{max: hostfacts.MaxObserveOutput + 64}
	var errb bytes.Buffer
	runErr := h.count.Run(ctx, h.bootCommand(append([]string{"serve"}, mode...)...), &in, out, &errb)
	if out.over {
		return "", fmt.Errorf("%s: the host printed more than %d bytes", what, hostfacts.MaxObserveOutput)
	}
	r := bufio.NewReader(bytes.NewReader(out.Bytes()))
	line, err := firstLine(r, h.state)
	var need *errNeedAgent
	switch {
	case errors.As(err, &need) || errors.Is(err, rollout.ErrUnsafeHost) || errors.Is(err, errNoState):
		return "", err
	case err != nil && runErr != nil:
		return "", fmt.Errorf("%s: %w", what, runErr)
	case err != nil:
		return "", fmt.Errorf("%s: %w", what, err)
	}
	word, size, _ := strings.Cut(line, " ")
	switch word {
	case "ERR":
		return "", &rollout.OpError{Op: ops[0], Msg: size}
	case "UNSAFE":
		return "", fmt.Errorf("%s: %w: %s: make it owned by root and writable by root alone", what, rollout.ErrUnsafeHost, size)
	}
	if word != "DATA" {
		return "", fmt.Errorf("%s: unexpected answer %q", what, hostfacts.Clip(line))
	}
	data, err := readData(r, size)
	if err != nil {
		return "", fmt.Errorf("%s: %w", what, err)
	}
	if rest, _ := io.ReadAll(r); len(rest) > 0 {
		return "", fmt.Errorf("%s: %d bytes after the answer", what, len(rest))
	}
	return data, nil
}

// countingRunner counts round trips.
type countingRunner struct {
	Runner
	n  int
	mu sync.Mutex
}

func (c *countingRunner) Run(ctx context.Context, cmd string, stdin io.Reader, stdout, stderr io.Writer) error {
	c.mu.Lock()
	c.n++
	c.mu.Unlock()
	return c.Runner.Run(ctx, cmd, stdin, stdout, stderr)
}

func (c *countingRunner) count() int { c.mu.Lock(); defer c.mu.Unlock(); return c.n }
