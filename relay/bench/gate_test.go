package bench

import (
	"fmt"
	"testing"
)

func TestGateFromPromise(t *testing.T) {
	tests := []struct {
		promise int
		factor  float64
		want    Gate
		err     string
	}{
		{100, 2, Gate{Players: 200, Promise: 100, Factor: 2}, ""},
		{100, 1, Gate{Players: 100, Promise: 100, Factor: 1}, ""},
		{75, 1.5, Gate{Players: 113, Promise: 75, Factor: 1.5}, ""}, // 112.5 rounds up: the gate is never below the rule
		{0, 2, Gate{}, "promise 0: want at least 1 player"},
		{100, 0.5, Gate{}, "factor 0.5: want 1 to 100"},
		{100, 101, Gate{}, "factor 101: want 1 to 100"},
		{60000, 2, Gate{}, "promise 60000 × factor 2 is 120000 players: at most 100000"},
	}
	for _, tt := range tests {
		got, err := GateFromPromise(tt.promise, tt.factor)
		msg := ""
		if err != nil {
			msg = err.Error()
		}
		if got != tt.want || msg != tt.err {
			t.Errorf("GateFromPromise(%d, %g): got %+v, %q, want %+v, %q", tt.promise, tt.factor, got, msg, tt.want, tt.err)
		}
	}
}

func TestGateString(t *testing.T) {
	if got, want := (Gate{Players: 200, Promise: 100, Factor: 2}).String(), "the region carries 2 × 100 = 200 players"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if got, want := (Gate{Players: 200}).String(), "the relay carries 200 players"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestWithGate(t *testing.T) {
	tests := []struct {
		steps []int
		gate  int
		want  []int
	}{
		{[]int{40, 80, 120}, 0, []int{40, 80, 120}},
		{[]int{40, 80, 120}, 80, []int{40, 80, 120}},
		{[]int{40, 80, 120}, 100, []int{40, 80, 100, 120}},
		{[]int{40, 80, 120}, 40, []int{40, 80, 120}},
		{[]int{40, 80, 120}, 120, []int{40, 80, 120}},
		{[]int{8, 16, 24}, 20, []int{8, 16, 20, 24}},
	}
	for _, tt := range tests {
		got := withGate(tt.steps, tt.gate)
		if fmt.Sprint(got) != fmt.Sprint(tt.want) {
			t.Errorf("withGate(%v, %d): got %v, want %v", tt.steps, tt.gate, got, tt.want)
		}
	}
}

func TestGateValidate(t *testing.T) {
	tests := []struct {
		name string
		gate int
		ramp Ramp
		want string
	}{
		{"no gate", 0, Ramp{8, 400, 8}, ""},
		{"on the ramp", 200, Ramp{8, 400, 8}, ""},
		{"between steps", 210, Ramp{8, 400, 8}, ""},
		{"the last step", 400, Ramp{8, 400, 8}, ""},
		{"above the ramp", 480, Ramp{40, 400, 40}, "gate 480 players: above the ramp's last step (400); the ramp must reach the gate"},
		{"below the ramp", 20, Ramp{40, 400, 40}, "gate 20 players: below the ramp's first step (40)"},
		{"one player", 1, Ramp{2, 400, 2}, "gate 1 players: want at least 2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Defaults()
			c.Relay, c.Control, c.Ramp, c.Gate = "127.0.0.1:7788", "127.0.0.1:7789", tt.ramp, Gate{Players: tt.gate}
			err := c.Validate()
			got := ""
			if err != nil {
				got = err.Error()
			}
			if got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

// step is a made-up step for the gate's and the model's logic.
func step(players int, lossPct float64, valid bool) Step {
	s := Step{Players: players, LossPct: lossPct, Valid: valid, RelayKnown: true}
	if lossPct > 0 {
		s.Loss, s.LossIn, s.LossInAtRelay, s.RelayDrop = 312, 312, 312, 312
	}
	if !valid {
		s.Invalid = []string{"senders fell behind: p99 schedule lag 12ms exceeds half a tick (8.333ms)"}
	}
	return s
}

func TestJudgeGate(t *testing.T) {
	g := Gate{Players: 200, Promise: 100, Factor: 2}
	ceiling := step(200, 3.03, true)
	ceiling.NearBenchCeiling = true
	ceiling.Notes = []string{"the bench machine's CPUs were 95% busy"}
	tests := []struct {
		name      string
		steps     []Step
		threshold float64
		verdict   string
		step      int
		summary   string
	}{
		{
			name:    "carried, and a loss beyond the gate does not count",
			steps:   []Step{step(120, 0, true), step(160, 0, true), step(200, 0, true), step(240, 11, true)},
			verdict: GateCarried, step: 2,
			summary: "gate: the region carries 2 × 100 = 200 players: yes: every step up to 200 players valid, loss within 0% (0% at the gate)",
		},
		{
			name:    "the incident: loss at the gate",
			steps:   []Step{step(120, 0, true), step(160, 0, true), step(200, 3.03, true), step(240, 11, true)},
			verdict: GateRelayShort, step: 2,
			summary: "gate: the region carries 2 × 100 = 200 players: no: at 200 players the relay lost 3.03% of planned deliveries (player→relay 312, 312 of them dropped in the relay's socket buffer (rx_drops)), above the threshold of 0%",
		},
		{
			name:  "loss within the threshold passes",
			steps: []Step{step(160, 0, true), step(200, 0.5, true)}, threshold: 0.01,
			verdict: GateCarried, step: 1,
			summary: "gate: the region carries 2 × 100 = 200 players: yes: every step up to 200 players valid, loss within 1% (0.5% at the gate)",
		},
		{
			name:    "loss before the gate fails it",
			steps:   []Step{step(80, 0, true), step(120, 2, true)},
			verdict: GateRelayShort, step: 1,
		},
		{
			name:    "an invalid step before the gate: the bench was the limit",
			steps:   []Step{step(80, 0, true), step(120, 0, false)},
			verdict: GateBenchLimit, step: 1,
			summary: "gate: the region carries 2 × 100 = 200 players: undecided, the bench was the limit: at 120 players the bench fell behind (senders fell behind: p99 schedule lag 12ms exceeds half a tick (8.333ms)), so that step measured the bench machine, not the relay",
		},
		{
			name:    "an invalid lossy step is the bench's, not the relay's",
			steps:   []Step{step(80, 0, true), step(120, 40, false)},
			verdict: GateBenchLimit, step: 1,
		},
		{
			name:    "loss at the bench's ceiling is undecided",
			steps:   []Step{step(160, 0, true), ceiling},
			verdict: GateBenchLimit, step: 1,
		},
		{
			name:    "an invalid step after the gate does not count",
			steps:   []Step{step(200, 0, true), step(240, 0, false)},
			verdict: GateCarried, step: 0,
		},
		{
			name:    "interrupted before the gate",
			steps:   []Step{step(120, 0, true)},
			verdict: GateNotReached, step: 0,
			summary: "gate: the region carries 2 × 100 = 200 players: undecided: the run ended before the gate (the last step run had 120 players)",
		},
		{
			name:    "no step at all",
			verdict: GateNotReached, step: -1,
			summary: "gate: the region carries 2 × 100 = 200 players: undecided: the run ended before the gate (no step ran)",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := JudgeGate(g, tt.steps, tt.threshold)
			if got.Verdict != tt.verdict || got.Step != tt.step {
				t.Errorf("got verdict %s at step %d, want %s at %d (%s)", got.Verdict, got.Step, tt.verdict, tt.step, got.Summary)
			}
			if tt.summary != "" && got.Summary != tt.summary {
				t.Errorf("summary:\n got %s\nwant %s", got.Summary, tt.summary)
			}
			if got.Passed() != (tt.verdict == GateCarried) {
				t.Errorf("Passed() = %v for verdict %s", got.Passed(), got.Verdict)
			}
		})
	}
}
