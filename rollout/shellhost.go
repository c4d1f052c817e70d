package rollout

import (
	"bufio"
	"bytes"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/relayctl/relayctl/plans"
)

//go:embed agent.sh
var agentScript string

// ShellHost is a Host over a transport connection: observe.sh for facts,
// and one long-lived agent.sh session that holds the host lock and runs
// primitives for the whole apply.
type ShellHost struct {
	name  string
	conn  Conn
	state string
	count countingRunner

	mu    sync.Mutex
	agent *agentSession
}

var _ Host = (*ShellHost)(nil)

// NewShellHost wraps a connection to the host a spec calls name; state is
// the host's state folder (plans.StateDir).
func NewShellHost(name string, c Conn, state string) *ShellHost {
	return &ShellHost{name: name, conn: c, state: state, count: countingRunner{Runner: c}}
}

// ShellHosts makes a HostDialer of a transport Dialer.
func ShellHosts(d Dialer, state string) HostDialer { return shellDialer{d, state} }

type shellDialer struct {
	d     Dialer
	state string
}

func (s shellDialer) DialHost(ctx context.Context, name string) (Host, error) {
	c, err := s.d.Dial(ctx, name)
	if err != nil {
		return nil, err
	}
	return NewShellHost(name, c, s.state), nil
}

// Address is what was dialled.
func (h *ShellHost) Address() string { return h.conn.Address() }

// User is the remote user.
func (h *ShellHost) User() string { return h.conn.User() }

// RoundTrips counts commands run on the host.
func (h *ShellHost) RoundTrips() int { return h.count.count() }

// Close ends the agent (if any) and the connection.
func (h *ShellHost) Close() error {
	h.mu.Lock()
	a := h.agent
	h.agent = nil
	h.mu.Unlock()
	if a != nil {
		a.close()
	}
	return h.conn.Close()
}

// Observe runs observe.sh: in the agent's session while the host is locked
// (no SSH session of its own), on its own otherwise (plan, verify).
func (h *ShellHost) Observe(ctx context.Context, q Query) (*plans.Facts, error) {
	h.mu.Lock()
	locked := h.agent != nil
	h.mu.Unlock()
	if !locked {
		return Observe(ctx, &h.count, h.name, h.conn.Address(), h.conn.User(), q)
	}
	return Observe(ctx, agentRunner{h}, h.name, h.conn.Address(), h.conn.User(), q)
}

// agentRunner runs observe.sh through the agent: the "observe" primitive
// takes the boundary in its request (stdin, never a command line) and the
// script's arguments as lines.
type agentRunner struct{ h *ShellHost }

func (r agentRunner) Run(ctx context.Context, cmd string, stdin io.Reader, stdout, stderr io.Writer) error {
	return errors.New("the agent runs observe.sh only")
}

func (r agentRunner) runObserve(ctx context.Context, args []string, boundary string, stdout io.Writer) error {
	o := op("observe", boundary, strconv.Itoa(len(args)))
	o.Argv = args
	return r.h.Run(ctx, []Op{o}, func(_ int, res Result) error {
		_, err := io.WriteString(stdout, res.Value)
		return err
	})
}

// agentSession is agent.sh running on the host: requests go to its stdin,
// answers come from its stdout, one line each.
type agentSession struct {
	in   *io.PipeWriter
	out  *bufio.Reader
	done chan error
	once sync.Once
}

func (a *agentSession) close() {
	a.once.Do(func() {
		a.in.Close()
		select {
		case <-a.done:
		case <-time.After(10 * time.Second):
		}
	})
}

// Lock starts agent.sh and takes the host lock.
func (h *ShellHost) Lock(ctx context.Context, owner string, breakLock bool) error {
	owner = strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f {
			return ' '
		}
		return r
	}, owner)
	if len(owner) > 1000 {
		owner = owner[:1000]
	}
	mode := "keep"
	if breakLock {
		mode = "break"
	}
	cmd := Command("sh", "-c", agentScript, "relayctl-agent", h.state, observeScript)
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	var stderr bytes.Buffer
	a := &agentSession{in: inW, out: bufio.NewReader(outR), done: make(chan error, 1)}
	// The agent lives as long as the apply: no per-command timeout, and an
	// interrupt of the apply does not cut a host off inside its window.
	actx := WithoutCommandTimeout(context.WithoutCancel(ctx))
	go func() {
		err := h.count.Run(actx, cmd, inR, outW, &stderr)
		outW.CloseWithError(err)
		inR.Close()
		a.done <- err
	}()
	fmt.Fprintf(inW, "lock\t%s\t%s\n", owner, mode)
	line, err := readLine(a.out)
	if err != nil {
		a.close()
		return fmt.Errorf("take host lock: %v %s", err, strings.TrimSpace(stderr.String()))
	}
	word, rest, _ := strings.Cut(line, " ")
	switch word {
	case "LOCKED":
		h.mu.Lock()
		h.agent = a
		h.mu.Unlock()
		return nil
	case "BUSY":
		a.close()
		if rest == "" {
			rest = "an unknown owner"
		}
		return fmt.Errorf("%w: %s (%s/lock)", ErrLocked, rest, h.state)
	case "STALE":
		a.close()
		who, journal, _ := strings.Cut(rest, "\tJOURNAL ")
		if journal != "" {
			return fmt.Errorf("%w: %s; its journal (%s/journal) ends with: %s; check the host (relayctl verify PLAN), then apply with --clear-journal", ErrStaleLock, who, h.state, journal)
		}
		return fmt.Errorf("%w: %s; check the host (relayctl verify PLAN), then apply with --break-lock", ErrStaleLock, who)
	case "UNSAFE":
		a.close()
		return fmt.Errorf("%w: %s: make it owned by root and writable by root alone", ErrUnsafeHost, rest)
	}
	a.close()
	return fmt.Errorf("take host lock: unexpected answer %q", clip(line))
}

// Unlock releases the lock cleanly, which removes the owner file.
func (h *ShellHost) Unlock() error {
	h.mu.Lock()
	a := h.agent
	h.agent = nil
	h.mu.Unlock()
	if a == nil {
		return nil
	}
	io.WriteString(a.in, "unlock\n")
	_, err := readLine(a.out)
	a.close()
	return err
}

// maxLine bounds one answer line of the agent.
const maxLine = 8192

func readLine(r *bufio.Reader) (string, error) {
	var b []byte
	for {
		chunk, isPrefix, err := r.ReadLine()
		if err != nil {
			return "", err
		}
		b = append(b, chunk...)
		if len(b) > maxLine {
			return "", fmt.Errorf("an answer line longer than %d bytes", maxLine)
		}
		if !isPrefix {
			return string(b), nil
		}
	}
}

// Run sends ops one at a time and reads each answer before the next, so
// the engine decides after each (a sysctl that reads back wrong stops the
// window before the restart).
func (h *ShellHost) Run(ctx context.Context, ops []Op, each func(i int, r Result) error) error {
	h.mu.Lock()
	a := h.agent
	h.mu.Unlock()
	if a == nil {
		return errors.New("run on host: the host is not locked")
	}
	for i, o := range ops {
		if err := o.Validate(); err != nil {
			return err
		}
		if _, err := a.in.Write(encodeOp(o)); err != nil {
			return &connLost{err}
		}
		line, err := readLine(a.out)
		if err != nil {
			return &connLost{err}
		}
		var r Result
		if !o.Offer {
			r.Sent = len(o.Data)
		} else if line == "SEND" {
			// The host does not have these bytes yet.
			if _, err := a.in.Write(o.Data); err != nil {
				return &connLost{err}
			}
			r.Sent = len(o.Data)
			if line, err = readLine(a.out); err != nil {
				return &connLost{err}
			}
		}
		word, rest, _ := strings.Cut(line, " ")
		switch word {
		case "OK":
		case "VAL":
			r.Value = rest
		case "ERR":
			return &OpError{Op: o, Msg: rest}
		case "DATA":
			n, err := strconv.Atoi(rest)
			if err != nil || n < 0 || n > MaxObserveOutput {
				return fmt.Errorf("run on host: bad answer %q", clip(line))
			}
			buf := make([]byte, n)
			if _, err := io.ReadFull(a.out, buf); err != nil {
				return &connLost{err}
			}
			r.Value = string(buf)
		default:
			return fmt.Errorf("run on host: unexpected answer %q to %s", clip(line), o.Kind)
		}
		if each != nil {
			if err := each(i, r); err != nil {
				return err
			}
		}
	}
	return nil
}

// encodeOp is the line (and data) agent.sh reads for one Op.
func encodeOp(o Op) []byte {
	var b bytes.Buffer
	b.WriteString(o.Kind)
	for _, a := range o.Args {
		b.WriteByte('\t')
		b.WriteString(a)
	}
	b.WriteByte('\n')
	for _, w := range o.Argv {
		b.WriteString(w)
		b.WriteByte('\n')
	}
	if !o.Offer {
		b.Write(o.Data)
	}
	return b.Bytes()
}
