package bench

import (
	"fmt"
	"math"
	"strings"
)

// Gate is a capacity gate: the run passes only if the relay carried Players
// with loss within the threshold and every step up to it was valid. It
// comes from --gate N, or from --promise P --factor F (the operator's rule:
// "a region must carry twice what is promised"), Players = ceil(P × F).
type Gate struct {
	Players int     `json:"players"`
	Promise int     `json:"promise,omitempty"` // 0 when given as --gate
	Factor  float64 `json:"factor,omitempty"`
}

// GateFromPromise is the gate of a promise and a factor.
func GateFromPromise(promise int, factor float64) (Gate, error) {
	if promise < 1 {
		return Gate{}, fmt.Errorf("promise %d: want at least 1 player", promise)
	}
	if factor < 1 || factor > 100 || math.IsNaN(factor) {
		return Gate{}, fmt.Errorf("factor %g: want 1 to 100", factor)
	}
	n := math.Ceil(float64(promise) * factor)
	if n > maxPlayers {
		return Gate{}, fmt.Errorf("promise %d × factor %g is %.0f players: at most %d", promise, factor, n, maxPlayers)
	}
	return Gate{Players: int(n), Promise: promise, Factor: factor}, nil
}

// What the gate asks, in words: "the region carries 2 × 100 = 200 players".
func (g Gate) String() string {
	if g.Promise > 0 {
		return fmt.Sprintf("the region carries %g × %d = %d players", g.Factor, g.Promise, g.Players)
	}
	return fmt.Sprintf("the relay carries %d players", g.Players)
}

func (g Gate) validate(r Ramp) error {
	switch {
	case g.Players == 0:
		return nil
	case g.Players < 2:
		return fmt.Errorf("gate %d players: want at least 2", g.Players)
	case g.Players < r.From:
		return fmt.Errorf("gate %d players: below the ramp's first step (%d)", g.Players, r.From)
	case g.Players > r.To:
		return fmt.Errorf("gate %d players: above the ramp's last step (%d); the ramp must reach the gate", g.Players, r.To)
	}
	return nil
}

// Verdicts of a gate. Each maps to one exit status in cmd/relayctl.
const (
	GateCarried    = "carried"     // every step up to the gate valid and within the threshold
	GateRelayShort = "relay_short" // a valid step up to the gate lost more than the threshold
	GateBenchLimit = "bench_limit" // the bench fell behind (or was at its ceiling) before the gate was decided
	GateNotReached = "not_reached" // the run ended before the gate's step (interrupted)
)

// GateResult is a gate's verdict on a run.
type GateResult struct {
	Gate
	Verdict string `json:"verdict"`
	Step    int    `json:"step"` // index of the deciding step, -1 when none ran
	Summary string `json:"summary"`
}

// Passed reports whether the relay carried the gate.
func (r GateResult) Passed() bool { return r.Verdict == GateCarried }

// JudgeGate walks the steps up to the gate's player count, in order: the
// first invalid step leaves the gate undecided (the bench was the limit),
// the first step over threshold fails it (unless it ran at the bench's
// calibrated ceiling, which again leaves it undecided), and a clean, valid
// step at the gate passes it.
func JudgeGate(g Gate, steps []Step, threshold float64) GateResult {
	res := GateResult{Gate: g, Step: -1}
	q := g.String()
	for i, s := range steps {
		if s.Players > g.Players {
			break
		}
		res.Step = i
		switch {
		case !s.Valid:
			res.Verdict = GateBenchLimit
			res.Summary = fmt.Sprintf("gate: %s: undecided, the bench was the limit: at %d players the bench fell behind (%s), so that step measured the bench machine, not the relay",
				q, s.Players, strings.Join(s.Invalid, "; "))
			return res
		case s.LossPct/100 > threshold && s.NearBenchCeiling:
			res.Verdict = GateBenchLimit
			res.Summary = fmt.Sprintf("gate: %s: undecided, the bench may be the limit: at %d players %.3g%% was lost (%s) while the bench ran at its calibrated ceiling (%s)",
				q, s.Players, s.LossPct, Where(s), strings.Join(s.Notes, "; "))
			return res
		case s.LossPct/100 > threshold:
			res.Verdict = GateRelayShort
			res.Summary = fmt.Sprintf("gate: %s: no: at %d players the relay lost %.3g%% of planned deliveries (%s), above the threshold of %g%%",
				q, s.Players, s.LossPct, Where(s), 100*threshold)
			return res
		case s.Players == g.Players:
			res.Verdict = GateCarried
			res.Summary = fmt.Sprintf("gate: %s: yes: every step up to %d players valid, loss within %g%% (%.3g%% at the gate)",
				q, g.Players, 100*threshold, s.LossPct)
			return res
		}
	}
	res.Verdict = GateNotReached
	last := "no step ran"
	if res.Step >= 0 {
		last = fmt.Sprintf("the last step run had %d players", steps[res.Step].Players)
	}
	res.Summary = fmt.Sprintf("gate: %s: undecided: the run ended before the gate (%s)", q, last)
	return res
}

// withGate returns the ramp's steps with the gate's player count among
// them, so the gate is judged on a step of exactly its size.
func withGate(steps []int, gate int) []int {
	if gate == 0 {
		return steps
	}
	out := make([]int, 0, len(steps)+1)
	added := false
	for _, n := range steps {
		if !added && gate <= n {
			if gate < n {
				out = append(out, gate)
			}
			added = true
		}
		out = append(out, n)
	}
	if !added {
		out = append(out, gate)
	}
	return out
}
