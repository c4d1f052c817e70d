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

	mu      sync.Mutex
	agent   *agentSession
	batches int // batches of primitives sent to the agent (each one round trip)
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

// RoundTrips counts commands run on the host and batches sent its agent.
func (h *ShellHost) RoundTrips() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.count.count() + h.batches
}

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

func (r agentRunner) runObserve(ctx context.Context, o Op) (string, error) {
	var out string
	err := r.h.Run(ctx, []Op{o}, func(_ int, res Result) error {
		out = res.Value
		return nil
	})
	return out, err
}

// ObserveOp is an observe as a primitive, to send in a batch with others
// (the read-back right after the window's last step); read parses its
// answer.
func (h *ShellHost) ObserveOp(q Query) (o Op, read func(Result) (*plans.Facts, error), err error) {
	c, o, err := newObserveCall(q, h.name, h.conn.Address(), h.conn.User())
	if err != nil {
		return Op{}, nil, err
	}
	return o, func(r Result) (*plans.Facts, error) { return c.facts([]byte(r.Value)) }, nil
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
	return h.lock(ctx, owner, breakLock, nil, nil)
}

// LockObserve takes the host lock and observes the host in one round
// trip: the observe primitive goes right behind the lock request, and the
// agent reads it only once it holds the lock (it exits otherwise). It
// returns when the lock answer came, the facts, and the lock's error or
// the observe's.
func (h *ShellHost) LockObserve(ctx context.Context, owner string, breakLock bool, q Query) (locked time.Time, f *plans.Facts, lockErr, err error) {
	o, read, err := h.ObserveOp(q)
	if err != nil {
		return time.Time{}, nil, nil, err
	}
	var answer Result
	lockErr = h.lock(ctx, owner, breakLock, []Op{o}, func(time.Time) { locked = time.Now() })
	if lockErr != nil {
		return locked, nil, lockErr, nil
	}
	h.mu.Lock()
	a := h.agent
	h.mu.Unlock()
	if _, err := h.answers(a, []Op{o}, 0, false, true, func(_ int, r Result) error {
		answer = r
		return nil
	}); err != nil {
		return locked, nil, nil, fmt.Errorf("observe: %w", err)
	}
	f, err = read(answer)
	return locked, f, nil, err
}

// lock starts agent.sh, sends the lock request and, behind it, the ops of
// then (and a sync) without waiting, and reads the lock's answer; gotLock
// hears when it came. The answers to then are the caller's to read.
func (h *ShellHost) lock(ctx context.Context, owner string, breakLock bool, then []Op, gotLock func(time.Time)) error {
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
	req := []byte(fmt.Sprintf("lock\t%s\t%s\n", owner, mode))
	for _, o := range then {
		if err := o.Validate(); err != nil {
			a.close()
			return err
		}
	}
	h.mu.Lock()
	h.batches++
	h.mu.Unlock()
	inW.Write(req)
	if len(then) > 0 {
		writeBatch(inW, then, false, true)
	}
	line, err := readLine(a.out)
	if gotLock != nil {
		gotLock(time.Now())
	}
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

// UnlocksInBatch says Run takes an unlock primitive at the end of a batch
// (after the receipt), which ends the agent.
func (h *ShellHost) UnlocksInBatch() bool { return true }

// Unlock releases the lock cleanly, which removes the owner file.
func (h *ShellHost) Unlock() error {
	h.mu.Lock()
	a := h.agent
	h.agent = nil
	h.mu.Unlock()
	if a == nil {
		return nil
	}
	h.mu.Lock()
	h.batches++
	h.mu.Unlock()
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

// Run sends ops to the agent in batches: a batch is written at once, ended
// by "sync", and its answers read after (one round trip a batch, however
// many primitives). The agent stops doing things at the first ERR of a
// batch and answers SKIP to the rest, so nothing runs after a failure.
// A batch ends early after an Op whose answer relayctl must check before
// anything else runs (expect, unless the host checks the same), and when
// the host lacks a keep's bytes (NEED): the keep is sent again with its
// bytes, and the Ops after it, in the next batch.
func (h *ShellHost) Run(ctx context.Context, ops []Op, each func(i int, r Result) error) error {
	h.mu.Lock()
	a := h.agent
	h.mu.Unlock()
	if a == nil {
		return errors.New("run on host: the host is not locked")
	}
	for _, o := range ops {
		if err := o.Validate(); err != nil {
			return err
		}
	}
	withData := false // after a NEED: the batch's keeps carry their bytes
	for start := 0; start < len(ops); {
		end := start
		for end < len(ops) {
			o := ops[end]
			end++
			if o.expect != nil && !o.hostChecked {
				break
			}
		}
		batch := ops[start:end]
		for i, o := range batch {
			if o.Kind == "unlock" && i != len(batch)-1 {
				return errors.New("run on host: unlock must end the ops")
			}
		}
		// The agent exits at unlock: nothing after it, not even a sync.
		last := batch[len(batch)-1].Kind == "unlock"
		h.mu.Lock()
		h.batches++
		h.mu.Unlock()
		// Written while the answers are read: a batch with a release in it
		// is larger than what the connection buffers, and the agent answers
		// as it goes.
		wrote := make(chan error, 1)
		go func(withData bool) { wrote <- writeBatch(a.in, batch, withData, !last) }(withData)
		need, err := h.answers(a, batch, start, withData, !last, each)
		var oos *errOutOfStep
		if err != nil && (isConnLost(err) || errors.As(err, &oos)) {
			// The session is of no more use (lost, or out of step): end
			// it, which also ends a write still under way.
			a.in.CloseWithError(err)
		}
		if werr := <-wrote; werr != nil && err == nil {
			err = &connLost{werr}
		}
		if err != nil {
			return err
		}
		if need < 0 {
			start, withData = end, false
			continue
		}
		start, withData = start+need, true
	}
	return nil
}

// answers reads a batch's answers and its sync's. It returns the index in
// the batch of a keep the host lacks the bytes of (NEED), or -1.
func (h *ShellHost) answers(a *agentSession, batch []Op, base int, withData, synced bool, each func(int, Result) error) (int, error) {
	need := -1
	var failure error
	for i, o := range batch {
		line, err := readLine(a.out)
		if err != nil {
			return -1, &connLost{err}
		}
		word, rest, _ := strings.Cut(line, " ")
		var r Result
		switch word {
		case "SKIP":
			if failure == nil && need < 0 {
				return -1, outOfStep("run on host: %s skipped with no failure before it", o.Kind)
			}
			continue
		case "NEED":
			if !o.Offer || withData || failure != nil || need >= 0 {
				return -1, outOfStep("run on host: unexpected NEED to %s", o.Kind)
			}
			need = i
			continue
		case "ERR":
			if failure == nil && need < 0 {
				failure = &OpError{Op: o, Msg: rest}
			}
			continue
		case "OK":
		case "VAL":
			r.Value = rest
		case "DATA":
			n, err := strconv.Atoi(rest)
			if err != nil || n < 0 || n > MaxObserveOutput {
				return -1, outOfStep("run on host: bad answer %q", clip(line))
			}
			buf := make([]byte, n)
			if _, err := io.ReadFull(a.out, buf); err != nil {
				return -1, &connLost{err}
			}
			r.Value = string(buf)
		default:
			return -1, outOfStep("run on host: unexpected answer %q to %s", clip(line), o.Kind)
		}
		if failure != nil || need >= 0 {
			return -1, outOfStep("run on host: %s answered %s after the batch stopped", o.Kind, word)
		}
		if !o.Offer || withData {
			r.Sent = len(o.Data) // a keep-data's bytes go whether or not the host had them
		}
		if o.Kind == "unlock" {
			h.mu.Lock()
			h.agent = nil
			h.mu.Unlock()
			a.close()
		}
		if each != nil {
			if err := each(base+i, r); err != nil {
				failure = err
			}
		}
	}
	if synced {
		line, err := readLine(a.out)
		if err != nil {
			return -1, &connLost{err}
		}
		if line != "OK" {
			return -1, outOfStep("run on host: unexpected answer %q to sync", clip(line))
		}
	}
	if failure != nil {
		return -1, failure
	}
	return need, nil
}

// errOutOfStep is an answer the agent should not have given: the session
// is out of step and of no more use.
type errOutOfStep struct{ msg string }

func (e *errOutOfStep) Error() string { return e.msg }

func outOfStep(format string, a ...any) error { return &errOutOfStep{fmt.Sprintf(format, a...)} }

// writeBatch writes a batch as agent.sh reads it: each Op's line, its argv
// lines and its data, then "sync" (unless the batch ends the agent). A
// keep goes as an offer (no bytes), or with withData as keep-data and its
// bytes. Data is written from the Op's own slice, never copied: every host
// shares the one copy of a release in memory.
func writeBatch(w io.Writer, batch []Op, withData, sync bool) error {
	var b bytes.Buffer
	for _, o := range batch {
		kind := o.Kind
		if o.Offer && withData {
			kind = "keep-data"
		}
		b.WriteString(kind)
		for _, a := range o.Args {
			b.WriteByte('\t')
			b.WriteString(a)
		}
		b.WriteByte('\n')
		for _, arg := range o.Argv {
			b.WriteString(arg)
			b.WriteByte('\n')
		}
		if len(o.Data) > 0 && (!o.Offer || withData) {
			if _, err := w.Write(b.Bytes()); err != nil {
				return err
			}
			b.Reset()
			if _, err := w.Write(o.Data); err != nil {
				return err
			}
		}
	}
	if sync {
		b.WriteString("sync\n")
	}
	if b.Len() == 0 {
		return nil
	}
	_, err := w.Write(b.Bytes())
	return err
}
