package shellhost

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/relayctl/relayctl/rollout"
	"github.com/relayctl/relayctl/rollout/hostfacts"
)

// session is the agent running on the host: requests go to its stdin,
// answers come from its stdout, one line each.
type session struct {
	in     *io.PipeWriter
	out    *bufio.Reader
	stderr *bytes.Buffer
	done   chan error
	once   chan struct{}
}

func (a *session) close() {
	select {
	case <-a.once:
		return
	default:
		close(a.once)
	}
	a.in.Close()
	select {
	case <-a.done:
	case <-time.After(10 * time.Second):
	}
}

// start runs the agent on the host. It lives as long as the apply: no
// per-command timeout, and an interrupt of the apply does not cut a host
// off inside its window.
func (h *Host) start(ctx context.Context) *session {
	cmd := h.bootCommand("serve")
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	a := &session{in: inW, out: bufio.NewReader(outR), stderr: &bytes.Buffer{}, done: make(chan error, 1), once: make(chan struct{})}
	actx := WithoutCommandTimeout(context.WithoutCancel(ctx))
	go func() {
		err := h.count.Run(actx, cmd, inR, outW, a.stderr)
		outW.CloseWithError(err)
		inR.Close()
		a.done <- err
	}()
	return a
}

// lockAndRun starts the agent and sends the lock request and, behind it
// without waiting, the first batch of the rest: one round trip for the
// lock and (say) the first observe. The agent reads the rest only once it
// holds the lock, and exits otherwise.
func (h *Host) lockAndRun(ctx context.Context, ops []rollout.Op, each func(int, rollout.Result) error) error {
	lock := ops[0]
	a := h.start(ctx)
	h.mu.Lock()
	h.batches++
	h.mu.Unlock()
	line := "lock\t" + lock.Args[0]
	if len(lock.Args) > 1 {
		line += "\t" + lock.Args[1] // how long to wait for it, in seconds
	}
	if _, err := fmt.Fprintf(a.in, "%s\n", line); err != nil {
		a.close()
		return rollout.ConnLost(err)
	}
	lockAnswer := func() error {
		line, err := firstLine(a.out, h.state)
		var need *errNeedAgent
		if errors.As(err, &need) || errors.Is(err, rollout.ErrUnsafeHost) {
			a.close()
			return err
		}
		if err != nil {
			a.close()
			return fmt.Errorf("take host lock: %v %s", err, strings.TrimSpace(a.stderr.String()))
		}
		dead, err := lockAnswer(line, h.state)
		if err != nil {
			a.close()
			return err
		}
		h.mu.Lock()
		h.agent = a
		h.mu.Unlock()
		if each != nil {
			return each(0, rollout.Result{Value: dead, At: time.Now()})
		}
		return nil
	}
	if len(ops) == 1 {
		return lockAnswer()
	}
	return h.send(ctx, a, ops[1:], 1, each, lockAnswer)
}

// lockAnswer reads the agent's answer to the lock request: the owner of a
// dead run whose lock it found free and took ("" for none), or why it
// could not take it.
func lockAnswer(line, state string) (dead string, err error) {
	word, rest, _ := strings.Cut(line, " ")
	switch word {
	case "LOCKED":
		return rest, nil
	case "BUSY":
		if rest == "" {
			rest = "an unknown owner"
		}
		return "", fmt.Errorf("%w: %s (%s/lock)", rollout.ErrLocked, rest, state)
	case "UNSAFE":
		return "", fmt.Errorf("%w: %s: make it owned by root and writable by root alone", rollout.ErrUnsafeHost, rest)
	}
	return "", fmt.Errorf("take host lock: unexpected answer %q", hostfacts.Clip(line))
}

// send sends ops to the agent in batches: a batch is written at once,
// ended by "sync", and its answers read after (one round trip a batch,
// however many primitives). The agent stops doing things at the first ERR
// of a batch and answers SKIP to the rest, so nothing runs after a
// failure. A batch ends early after an Op whose answer relayctl must check
// before anything else runs (EndsBatch), and when the host lacks a keep's
// bytes (NEED): the keep is sent again with its bytes (in the form the
// host can take: packed.go), and the Ops after it, in the next batch.
// base is the index in the caller's ops of ops[0];
// first, when set, reads an answer that comes before the first batch's
// (the lock's), once that batch is written.
func (h *Host) send(ctx context.Context, a *session, ops []rollout.Op, base int, each func(int, rollout.Result) error, first func() error) error {
	withData := false // after a NEED: the batch's keeps carry their bytes
	keeps := map[int]*keepState{}
	for start := 0; start < len(ops); {
		end := start
		for end < len(ops) {
			end++
			if ops[end-1].EndsBatch() {
				break
			}
		}
		batch := ops[start:end]
		// The agent exits at unlock: nothing after it, not even a sync.
		last := batch[len(batch)-1].Kind == "unlock"
		if first == nil {
			h.mu.Lock()
			h.batches++
			h.mu.Unlock()
		}
		calls, err := h.framedCalls(batch)
		if err != nil {
			return err
		}
		pl := payloads(batch, calls, withData, keeps, start)
		encl, err := h.enclosings(batch, calls)
		if err != nil {
			return err
		}
		// Written while the answers are read: a batch with a release in it
		// is larger than what the connection buffers, and the agent answers
		// as it goes.
		wrote := make(chan error, 1)
		go func() { wrote <- writeBatch(a.in, batch, pl, encl, !last) }()
		if first != nil {
			if err := first(); err != nil {
				<-wrote
				return err
			}
			first = nil
		}
		need, err := h.answers(a, batch, pl, calls, base+start, !last, each)
		var oos *errOutOfStep
		if err != nil && (rollout.IsConnLost(err) || errors.As(err, &oos)) {
			// The session is of no more use (lost, or out of step): end
			// it, which also ends a write still under way.
			a.in.CloseWithError(err)
		}
		if werr := <-wrote; werr != nil && err == nil {
			err = rollout.ConnLost(werr)
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

// framedCalls makes the framed calls of a batch (observe, sample), by
// index.
func (h *Host) framedCalls(batch []rollout.Op) (map[int]framed, error) {
	calls := map[int]framed{}
	for i, o := range batch {
		var c framed
		var err error
		switch o.Kind {
		case "observe":
			c, err = newObserveCall(*o.Query, h.name, h.conn.Address(), h.conn.User())
		case "read-back":
			c, err = newReadBackCall(o, h.name, h.conn.Address(), h.conn.User())
		case "sample":
			c, err = newSampleCall(o)
		default:
			continue
		}
		if err != nil {
			return nil, err
		}
		calls[i] = c
	}
	return calls, nil
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

// errOutOfStep is an answer the agent should not have given: the session
// is out of step and of no more use.
type errOutOfStep struct{ msg string }

func (e *errOutOfStep) Error() string { return e.msg }

func outOfStep(format string, a ...any) error { return &errOutOfStep{fmt.Sprintf(format, a...)} }

// answers reads a batch's answers and its sync's. It returns the index in
// the batch of a keep the host lacks the bytes of (NEED), or -1. After the
// host stopped the batch (ERR, NEED) every answer must be SKIP; after
// relayctl stopped caring (each failed, facts it cannot read) the host goes
// on and its answers are read and dropped.
func (h *Host) answers(a *session, batch []rollout.Op, pl []payload, calls map[int]framed, base int, synced bool, each func(int, rollout.Result) error) (int, error) {
	need := -1
	stopped := false // the host stopped the batch
	var failure error
	for i, o := range batch {
		word, r, err := readAnswer(a.out, o)
		if err != nil {
			return -1, err
		}
		switch word {
		case "SKIP":
			if !stopped {
				return -1, outOfStep("run on host: %s skipped with no failure before it", o.Kind)
			}
			continue
		case "NEED":
			if !o.Offer || stopped || !pl[i].needed(r.Value) {
				return -1, outOfStep("run on host: unexpected NEED to %s", o.Kind)
			}
			need, stopped = i, true
			continue
		case "ERR":
			if stopped {
				return -1, outOfStep("run on host: %s answered ERR after the batch stopped", o.Kind)
			}
			stopped = true
			if failure == nil {
				failure = &rollout.OpError{Op: o, Msg: r.Value}
			}
			continue
		}
		if stopped {
			return -1, outOfStep("run on host: %s answered %s after the batch stopped", o.Kind, word)
		}
		if o.Kind == "unlock" {
			h.mu.Lock()
			h.agent = nil
			h.mu.Unlock()
			a.close()
		}
		if failure != nil {
			continue
		}
		pl[i].took(&r) // a keep's bytes go whether or not the host had them
		if c := calls[i]; c != nil {
			if failure = c.parse([]byte(r.Value), &r); failure != nil {
				continue
			}
			r.Value = ""
		}
		if each != nil {
			failure = each(base+i, r)
		}
	}
	if synced {
		if err := readSync(a.out); err != nil {
			return -1, err
		}
	}
	if failure != nil {
		return -1, failure
	}
	return need, nil
}

// readAnswer reads the answer to o: its word, and in r.Value what came
// with it (a VAL's value, a DATA's bytes, an ERR's message, a NEED's why).
func readAnswer(out *bufio.Reader, o rollout.Op) (string, rollout.Result, error) {
	r := rollout.Result{}
	line, err := readLine(out)
	if err != nil {
		return "", r, rollout.ConnLost(err)
	}
	r.At = time.Now()
	word, rest, _ := strings.Cut(line, " ")
	switch word {
	case "SKIP", "OK":
	case "ERR", "VAL", "NEED": // a NEED may say why the form offered will not do
		r.Value = rest
	case "DATA":
		if r.Value, err = readData(out, rest); err != nil {
			return "", r, err
		}
	default:
		return "", r, outOfStep("run on host: unexpected answer %q to %s", hostfacts.Clip(line), o.Kind)
	}
	return word, r, nil
}

// readSync reads the agent's answer to a batch's sync line.
func readSync(out *bufio.Reader) error {
	line, err := readLine(out)
	if err != nil {
		return rollout.ConnLost(err)
	}
	if line != "OK" {
		return outOfStep("run on host: unexpected answer %q to sync", hostfacts.Clip(line))
	}
	return nil
}

// readData reads a DATA answer's bytes.
func readData(r *bufio.Reader, size string) (string, error) {
	n, err := strconv.Atoi(size)
	if err != nil || n < 0 || n > hostfacts.MaxObserveOutput {
		return "", outOfStep("run on host: bad answer DATA %q", hostfacts.Clip(size))
	}
	buf := make([]byte, n)
	if _, err := io.ReadFull(r, buf); err != nil {
		return "", rollout.ConnLost(err)
	}
	return string(buf), nil
}

// writeBatch writes a batch as the agent reads it: each Op's request line
// (KIND, JOURNAL, NDATA, NARGV, its arguments), then its data and its
// command words, then "sync" (unless the batch ends the agent); pl is
// what each sends (payloads: a keep's offer, or its bytes in a form).
// Data is written from its own slice, never copied: every host shares
// the one copy of a release, and of each of its forms, in memory. An
// enclosing request (a window's) holds the ops it encloses in its data
// (rollout.Enclosed); the session's own that follow are written after.
func writeBatch(w io.Writer, batch []rollout.Op, pl []payload, encl map[int]enclosing, sync bool) error {
	var b bytes.Buffer
	for i := 0; i < len(batch); i++ {
		o := batch[i]
		args, data, argv := pl[i].args, pl[i].data, pl[i].argv
		e, encloses := encl[i]
		if encloses {
			args, data = e.args, e.data
		}
		journal := "0"
		switch {
		case o.Undoing():
			journal = "2" // noted if the journal can be written: an undo is better done than not
		case o.Mutates():
			journal = "1"
		}
		fmt.Fprintf(&b, "%s\t%s\t%d\t%d", o.Kind, journal, len(data), len(argv))
		for _, a := range args {
			b.WriteByte('\t')
			b.WriteString(a)
		}
		b.WriteByte('\n')
		if len(data) > 0 {
			if _, err := w.Write(b.Bytes()); err != nil {
				return err
			}
			b.Reset()
			if _, err := w.Write(data); err != nil {
				return err
			}
		}
		for _, arg := range argv {
			b.WriteString(arg)
			b.WriteByte('\n')
		}
		if encloses {
			i = rollout.Enclosed(batch, i) - 1 // written in its data; the session's own follow
		}
	}
	if sync {
		b.WriteString("sync\t0\t0\t0\n")
	}
	if b.Len() == 0 {
		return nil
	}
	_, err := w.Write(b.Bytes())
	return err
}
