package rollout

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/relayctl/relayctl/plans"
)

// ReadBack judges a host after its window: its readings against the plan,
// held for StableFor by the same relay process, within Timeout. The one
// function both sides run: relayctl's read-back phase, and the host agent,
// which reads itself back inside the window (the read-back primitive) and
// files the run's receipt in the same batch when it holds.
type ReadBack struct {
	Plan *plans.Plan     `json:"plan"` // the plan, with this host's plan alone among its hosts
	Host *plans.HostPlan `json:"host"` // what runs on the host (derived from it as observed)
	// Before is the host as read before the window, nil when unknown (a
	// dead run's switch).
	Before    *plans.Facts  `json:"before,omitempty"`
	StableFor time.Duration `json:"stable_for"`
	Timeout   time.Duration `json:"timeout"`
	// hostHeld is the relay process the host's own read-back held for
	// StableFor when it kept its window alone (its journal's window line):
	// a reading of that process as planned holds at once, it was held
	// already. relayctl's read-back after it lost its connection inside
	// its own window sets it.
	hostHeld int
}

// ReadBackResult is a read-back's verdict: the reading it ends on (the
// first that matched, when one held), its checks, and what did not hold.
type ReadBackResult struct {
	After  *plans.Facts `json:"after"`
	Checks []Check      `json:"checks"`
	Held   bool         `json:"held"`
	Why    string       `json:"why,omitempty"`
}

// Err is the read-back's failure as an error (nil when it held).
func (r ReadBackResult) Err() error {
	if r.Held {
		return nil
	}
	return errors.New("read-back: " + r.Why)
}

// Checks are the plan's checks of one reading.
func (rb ReadBack) Checks(after *plans.Facts) []Check {
	target := steps(rb.Plan, rb.Host, stepInput{}, true)
	return checksOf(target, &checkCtx{p: rb.Plan, h: rb.Host, before: rb.Before, after: after})
}

// Judge reads the host (read; first, when not nil, is a reading made
// already) until it matches the plan and has for StableFor with the same
// relay process: Timeout to match, StableFor more to hold. It stops
// sooner where waiting cannot help: a systemd unit failing, or a relay
// that read back as planned and then is gone. An error is a reading that
// could not be made.
func (rb ReadBack) Judge(first *plans.Facts, read func() (*plans.Facts, error)) (ReadBackResult, error) {
	deadline := time.Now().Add(rb.Timeout + rb.StableFor)
	var held *plans.Facts // the first matching reading of the process seen now
	var since time.Time
	for {
		after := first
		first = nil
		if after == nil {
			var err error
			if after, err = read(); err != nil {
				return ReadBackResult{}, err
			}
		}
		checks := rb.Checks(after)
		if why := unitFailing(rb.Plan, after); why != "" && !allOK(checks) {
			return ReadBackResult{After: after, Checks: checks, Why: why}, nil
		}
		if held != nil && !after.Service.Running {
			// It read back as planned, then exited: a relay that died after
			// it started does not come back by waiting.
			why := fmt.Sprintf("the relay read back as planned (pid %d), then exited within %s of it", held.Service.PID, time.Since(since).Round(100*time.Millisecond))
			return ReadBackResult{After: after, Checks: checks, Why: why}, nil
		}
		switch {
		case !allOK(checks):
			held = nil
		case held == nil || !sameProcess(held, after):
			held, since = after, time.Now()
			if rb.hostHeld != 0 && after.Service.PID == rb.hostHeld {
				since = since.Add(-rb.StableFor)
			}
		}
		stable := held != nil && time.Since(since) >= rb.StableFor
		if stable || time.Now().After(deadline) {
			return rb.verdict(after, held, checks, stable), nil
		}
		time.Sleep(readBackPause(held != nil, rb.StableFor-time.Since(since)))
	}
}

// readBackPause is the time between two readings: 200 ms until the host
// reads back as planned, then, while it must hold, a reading a second (up
// to what is left of StableFor): enough to see a relay die, at a fifth of
// the readings (each an observe: ss in the relay's namespace, its /status).
func readBackPause(holding bool, left time.Duration) time.Duration {
	const pause = 200 * time.Millisecond
	if !holding {
		return pause
	}
	return max(pause, min(time.Second, left))
}

// verdict is the read-back's end: held on the first matching reading of a
// process that stayed, or not, and why.
func (rb ReadBack) verdict(after, held *plans.Facts, checks []Check, stable bool) ReadBackResult {
	if bad := failed(checks); bad != "" {
		return ReadBackResult{After: after, Checks: checks, Why: bad}
	}
	if !stable {
		return ReadBackResult{After: after, Checks: checks, Why: fmt.Sprintf("the relay read back as planned but did not stay up for %s (pid %d)", rb.StableFor, after.Service.PID)}
	}
	return ReadBackResult{After: held, Checks: checks, Held: true}
}

// readBackOp is a window's last op when the host judges the window
// itself: it reads itself back by rb, observing as q says.
func readBackOp(rb ReadBack, q Query) Op { return Op{Kind: "read-back", Query: &q, Judge: &rb} }

// ReadBackRequest is a read-back op's data as it travels to the host.
type ReadBackRequest struct {
	ReadBack ReadBack `json:"read_back"`
	Query    Query    `json:"query"`
}

// ReadBackAnswer is the host's answer to a read-back: its verdict, and the
// reading it ended on as observe framed it (relayctl reads that itself).
type ReadBackAnswer struct {
	Held   bool   `json:"held"`
	Why    string `json:"why,omitempty"`
	Frames []byte `json:"frames"`
}

// HostReadBack is what a host that judged its window filed its receipt
// with: the verdict, and the keys the receipt summarises.
type HostReadBack struct {
	Result ReadBackResult `json:"result"`
	Keys   []string       `json:"keys"`
}

// CompleteHostReceipt is a host's receipt, filed in its window's batch,
// completed with the window's own read-back: its checks and the host as
// read after the window (the summary readingsOf keeps). The rest is what
// relayctl knew when it sent it; the local receipt has the whole run.
func CompleteHostReceipt(receipt []byte, rb HostReadBack) ([]byte, error) {
	var hr HostReceipt
	if err := json.Unmarshal(receipt, &hr); err != nil {
		return nil, fmt.Errorf("the receipt to complete: %w", err)
	}
	hr.Verify = rb.Result.Checks
	afterReadings(&hr.HostReadings, rb.Result.After, rb.Keys)
	return json.MarshalIndent(hr, "", "  ")
}
