package rollout

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/relayctl/relayctl/plans"
)

// The soak (docs/soak.md) is two phases of a host that soaks: its
// baseline before the window, and the soak itself after the read-back.
// Both read the relay's drop counters with the sample primitive, through
// the session that holds the host lock: a light observe (ss, two /proc
// files and /status), so sampling every few seconds costs the host little.

// baselinePhase samples the relay's drop counters before the window, for
// the soak's baseline (at least two samples): the rate the soak compares
// with. It runs before the drain gate, while the relay still has its
// players. Samples only, as the soak's: a sample and an observe count the
// port's sockets differently when another program shares it. A host whose
// relay is not running has no baseline, nor a soak with baseline 0.
type baselinePhase struct{}

func (baselinePhase) title() string { return "baseline" }
func (baselinePhase) runs(hr *hostRun) bool {
	return hr.soak != nil && hr.soak.Baseline > 0 && hr.rec == nil && hr.res.Before.Service.Running && hr.res.Before.Socket.Found
}

func (baselinePhase) run(ctx context.Context, hr *hostRun) *ending {
	cfg := hr.soak
	w := hr.waiter()
	defer w.done()
	var first *plans.DropCounters
	for {
		c, err := hr.sample(ctx, hr.res.Before.Service.PID)
		if err != nil {
			hr.pr.say(hr.h.Host, "soak: baseline: %v; the soak will judge without one", err)
			hr.baseline = nil
			return nil
		}
		hr.baseline = append(hr.baseline, c)
		if first == nil {
			first = &c
		}
		left := cfg.Baseline - time.Duration(c.ClockNanos-first.ClockNanos)
		if left <= 0 {
			break
		}
		if !w.wait(ctx, min(cfg.Interval, left)) {
			return end(NotStarted, StateAsWas, "interrupted while sampling the soak's baseline, before its window (nothing in force changed)")
		}
	}
	if b := BaselineOf(hr.baseline); b != nil {
		hr.pr.say(hr.h.Host, "soak: baseline %.1f drops/s, %.0f datagrams/s over %s", b.DropRate, b.Traffic, seconds(b.Seconds))
	}
	return nil
}

// soakPhase watches the relay for the soak's duration after its read-back
// and judges it against the baseline. A regression (or too little
// traffic, as the soak's policy says) rolls the host back: the rollback
// phase runs after it. The fleet stops on anything but a pass.
type soakPhase struct{}

func (soakPhase) title() string { return "soak" }
func (soakPhase) runs(hr *hostRun) bool {
	return hr.soak != nil && hr.rec == nil && hr.failure == nil && hr.res.After != nil
}

func (soakPhase) run(ctx context.Context, hr *hostRun) *ending {
	r := hr.watch(ctx)
	hr.res.Soak = r
	d := plans.Step{Phase: "soak", Kind: "soak", Title: fmt.Sprintf("soak: %v after the read-back", hr.soak.Duration)}
	status := "done"
	if r.Verdict != SoakPass {
		status = "failed"
	}
	hr.record("soak", d, status, r.Verdict+": "+r.Why)
	hr.pr.say(hr.h.Host, "soak: %s: %s", r.Verdict, r.Why)
	if r.rollsBack() {
		hr.failure = &soakFailed{r}
	}
	return nil
}

// soakFailed is a soak whose verdict rolls the host back.
type soakFailed struct{ r *SoakResult }

func (e *soakFailed) Error() string { return "soak: " + e.r.Verdict + ": " + e.r.Why }

// watch samples the relay every interval for the soak's duration (less
// when a regression is already certain), and judges it.
func (hr *hostRun) watch(ctx context.Context) *SoakResult {
	cfg := *hr.soak
	r := &SoakResult{Role: hr.soakRole, Settings: cfg, Planned: cfg.Duration.Seconds()}
	r.Before = BaselineOf(hr.baseline)
	allowed := allowedRate(cfg, r.Before)
	after := hr.res.After
	w := hr.waiter()
	defer w.done()
	var first, last *plans.DropCounters
	for {
		c, err := hr.sample(context.WithoutCancel(ctx), after.Service.PID)
		if err != nil {
			r.Verdict, r.Why = sampleLost(err)
			return r
		}
		r.Samples++
		if !c.Holds(after.Socket.Inode) {
			if first != nil {
				if r.After, _ = Span(*first, *last); r.After != nil {
					r.Seconds = r.After.Seconds
				}
			}
			r.Verdict, r.Why = SoakRegression, fmt.Sprintf("the relay's socket changed during the soak (inode %d after the read-back, %d now): the relay restarted", after.Socket.Inode, c.SocketInode)
			return r
		}
		r.follow(last, c)
		if first == nil {
			first = &c
			hr.pr.say(hr.h.Host, "soak: sampling the relay's drop counters for %v, every %v", cfg.Duration, cfg.Interval)
		}
		last = &c
		elapsed := time.Duration(c.ClockNanos - first.ClockNanos)
		// Drops so far over the whole duration: a regression already certain.
		certain := rise(first.SSDrops, last.SSDrops) > uint64(allowed*cfg.Duration.Seconds())
		if elapsed >= cfg.Duration || certain && elapsed > 0 {
			break
		}
		if !w.wait(ctx, min(cfg.Interval, cfg.Duration-elapsed)) {
			break // interrupted: judged on what was sampled
		}
	}
	r.After, _ = Span(*first, *last)
	if r.After != nil {
		r.Seconds = r.After.Seconds
	}
	r.judge()
	if r.Verdict == SoakPass && r.cut() {
		r.Verdict, r.Why = SoakUnknown, fmt.Sprintf("interrupted after %s of the %s soak (%s)", seconds(r.Seconds), seconds(r.Planned), r.Summary())
	}
	return r
}

// sampleLost is the verdict when a sample failed: the relay gone is a
// regression; a host that cannot be read is unknown.
func sampleLost(err error) (string, string) {
	var oe *OpError
	if errors.As(err, &oe) {
		return SoakRegression, "the relay is gone during the soak: " + oe.Msg
	}
	return SoakUnknown, "could not sample the relay: " + err.Error()
}

// sample reads the relay's drop counters through the host's session.
func (hr *hostRun) sample(ctx context.Context, pid int) (plans.DropCounters, error) {
	var c *plans.DropCounters
	err := hr.host.Run(ctx, []Op{sampleOp(pid, hr.p.Relay.Port, hr.p.Relay.Control)}, func(_ int, r Result) error {
		c = r.Drops
		return nil
	})
	switch {
	case err != nil:
		return plans.DropCounters{}, err
	case c == nil:
		return plans.DropCounters{}, errors.New("sample: the host answered no counters")
	}
	return *c, nil
}

// waiter waits between samples, giving the host's parallel slot to other
// hosts of its wave meanwhile (as the drain gate does): a soaking host
// does not hold up ready ones.
type waiter struct {
	hr     *hostRun
	resume func()
}

func (hr *hostRun) waiter() *waiter { return &waiter{hr: hr} }

// wait waits d, false when ctx ends first.
func (w *waiter) wait(ctx context.Context, d time.Duration) bool {
	if w.resume == nil && w.hr.yield != nil {
		w.resume = w.hr.yield()
	}
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

// done takes a parallel slot back.
func (w *waiter) done() {
	if w.resume != nil {
		w.resume()
		w.resume = nil
	}
}
