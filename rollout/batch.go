package rollout

import (
	"context"
	"fmt"
	"strings"

	"github.com/relayctl/relayctl/plans"
)

// stepBatch is one phase's primitives as one batch (one round trip on a
// real host, which stops at the first failure): lead primitives (the
// journal's begin), then each step's between the journal's lines for its
// start and end (by kind and title: where a run that dies stopped), then a
// tail (the first read-back, behind the window).
type stepBatch struct {
	ops   []Op
	spans []stepSpan
	lead  int // ops[:lead] are the lead's
	done  int // spans done, once run
}

// stepSpan is one step's primitives in a batch: ops[first:end].
type stepSpan struct {
	index      int // in the host's steps
	d          plans.Step
	first, end int
}

// newStepBatch lays out phase's primitives of each step (ops says which).
func newStepBatch(phase string, st []step, ops func(step) []Op, lead []Op) *stepBatch {
	b := &stepBatch{ops: append([]Op(nil), lead...), lead: len(lead)}
	for i, s := range st {
		l := ops(s)
		if len(l) == 0 {
			continue
		}
		d := s.describe()
		if d.Phase != phase {
			// A window step's preparation, before the window: what its undo
			// will need.
			d.Title = "prepare for " + d.Title
		}
		first := len(b.ops)
		b.ops = append(b.ops, op("step", "start "+d.Kind+": "+d.Title))
		b.ops = append(b.ops, l...)
		b.ops = append(b.ops, op("step", "done "+d.Kind+": "+d.Title))
		b.spans = append(b.spans, stepSpan{index: i, d: d, first: first, end: len(b.ops)})
	}
	return b
}

// runSteps runs a phase's batch, recording each step done under its title,
// and the tail's answers to gotTail (k: which of the tail). It returns how
// many of the host's steps had started (the index after the last one that
// began), and a failure of the tail as a *tailError.
func (hr *hostRun) runSteps(ctx context.Context, phase string, b *stepBatch, tail []Op, gotTail func(k int, r Result) error) (started int, err error) {
	if len(b.spans) == 0 {
		if b.lead == 0 {
			return 0, nil
		}
		tail = nil // nothing ran for a tail to follow
	}
	ops := append(append([]Op(nil), b.ops...), tail...)
	cur, next := 0, 0 // the span the next answer belongs to; the op answered next
	begin := func() {
		if cur < len(b.spans) {
			started = b.spans[cur].index + 1
			hr.pr.step(hr.h.Host, phase, b.spans[cur].d.Title)
		}
	}
	begin()
	err = hr.host.Run(ctx, ops, func(j int, r Result) error {
		next = j + 1
		if j >= len(b.ops) { // past the steps: the tail's answer
			return gotTail(j-len(b.ops), r)
		}
		if err := hr.answered(ops[j], r); err != nil {
			return err
		}
		if cur < len(b.spans) && j == b.spans[cur].end-1 {
			hr.record(phase, b.spans[cur].d, "done", "")
			b.done++
			if cur++; cur == len(b.spans) {
				hr.cut = r.At
			}
			begin()
		}
		return nil
	})
	switch {
	case err == nil:
		return started, nil
	case next < b.lead: // a lead primitive (the journal's begin): no step started
		if isConnLost(err) {
			return 0, err
		}
		return 0, fmt.Errorf("%s: %s: %w", phase, ops[next].Kind, err)
	case cur < len(b.spans):
		d := b.spans[cur].d
		hr.record(phase, d, "failed", err.Error())
		if isConnLost(err) {
			return started, err
		}
		return started, fmt.Errorf("%s: %s: %w", phase, stepName(d), err)
	}
	// next is the op that failed: the first not answered.
	return started, &tailError{at: min(next-len(b.ops), len(tail)-1), err: err}
}

// answered takes a step's op's answer: what it uploaded, the clock when
// the relay stopped, what a listener hears, and the op's own check.
func (hr *hostRun) answered(o Op, r Result) error {
	hr.res.BytesUploaded += int64(r.Sent)
	if o.Kind == "detach" {
		hr.awaiting = true // the host runs the window, and then waits for this run's word
	}
	if o.heard != nil {
		o.heard(r.Value)
	}
	if o.upload {
		hr.uploaded(o, r)
	}
	if o.clock {
		fmt.Sscan(r.Value, &hr.stopped)
	}
	if err := o.Check(r); err != nil {
		if o.specValue {
			return &refusedValue{err}
		}
		return err
	}
	return nil
}

// tailError is a failure of a batch's tail, after its steps: at, which op
// of the tail.
type tailError struct {
	at  int
	err error
}

func (e *tailError) Error() string { return e.err.Error() }
func (e *tailError) Unwrap() error { return e.err }

// stepName is a step's title up to its details: "place release", "set sysctl".
func stepName(d plans.Step) string {
	if i := strings.IndexAny(d.Title, ":"); i > 0 {
		return d.Title[:i]
	}
	return d.Title
}
