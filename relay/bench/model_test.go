package bench

import (
	"testing"
	"time"
)

func TestPredict(t *testing.T) {
	tests := []struct {
		name       string
		rb, packet int
		jitter     time.Duration
		gate       int
		held       int
		prediction string
	}{
		{
			name: "the incident", rb: 212992, packet: 200, held: 166,
			prediction: "model: relay rb 212992 (the relay's /status) holds 166 datagrams of 200 bytes (truesize 1280); with aligned ticks the burst is one datagram per player, so loss is predicted from 167 players",
		},
		{
			name: "the gate beyond it", rb: 212992, packet: 200, gate: 200, held: 166,
			prediction: "model: relay rb 212992 (the relay's /status) holds 166 datagrams of 200 bytes (truesize 1280); with aligned ticks the burst is one datagram per player, so loss is predicted from 167 players; the gate's burst of 200 datagrams needs rb 256000: this buffer does not hold it",
		},
		{
			name: "the gate within it", rb: 8388608, packet: 200, gate: 200, held: 6553,
			prediction: "model: relay rb 8388608 (the relay's /status) holds 6553 datagrams of 200 bytes (truesize 1280); with aligned ticks the burst is one datagram per player, so loss is predicted from 6554 players; the gate's burst of 200 datagrams needs rb 256000: this buffer holds it",
		},
		{
			name: "jitter spreads the burst", rb: 8192, packet: 200, jitter: 5 * time.Millisecond, held: 6,
			prediction: "model: relay rb 8192 (the relay's /status) holds 6 datagrams of 200 bytes (truesize 1280); with aligned ticks the burst is one datagram per player, so loss is predicted from 7 players (with jitter 5ms the burst is spread over the tick, so loss may start later)",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := Predict(tt.rb, "the relay's /status", tt.packet, tt.jitter, tt.gate)
			if m.Held != tt.held || m.Onset != tt.held+1 || m.Aligned != (tt.jitter == 0) {
				t.Errorf("got held %d, onset %d, aligned %v, want %d, %d, %v", m.Held, m.Onset, m.Aligned, tt.held, tt.held+1, tt.jitter == 0)
			}
			if m.Prediction != tt.prediction {
				t.Errorf("prediction:\n got %s\nwant %s", m.Prediction, tt.prediction)
			}
		})
	}
}

func TestModelCompare(t *testing.T) {
	benchLimit := []Step{step(40, 0, true), step(80, 0, false)}
	noRelayDrops := step(120, 2, true)
	noRelayDrops.LossInAtRelay = 0
	tests := []struct {
		name    string
		steps   []Step
		verdict string
		check   string
	}{
		{
			name:    "the incident's data point: clean at 160, drops at 200, onset 167",
			steps:   []Step{step(120, 0, true), step(160, 0, true), step(200, 3.03, true)},
			verdict: ModelAgrees,
			check:   "model: the knee at 200 players agrees with the predicted onset of 167 (last clean step 160)",
		},
		{
			name:    "the knee exactly at the onset",
			steps:   []Step{step(166, 0, true), step(167, 1, true)},
			verdict: ModelAgrees,
		},
		{
			name:    "loss before the buffer can overflow",
			steps:   []Step{step(80, 0, true), step(120, 2, true)},
			verdict: ModelEarlier,
		},
		{
			name:    "the relay carried more than the burst rule allows",
			steps:   []Step{step(160, 0, true), step(200, 0, true), step(240, 5, true)},
			verdict: ModelLater,
			check:   "model: 200 players were clean, at or above the predicted onset of 167: the relay read part of each burst while it arrived, so the model is conservative here (knee at 240)",
		},
		{
			name:    "no loss, below the onset",
			steps:   []Step{step(80, 0, true), step(160, 0, true)},
			verdict: ModelBelow,
			check:   "model: no loss up to 160 players, below the predicted onset of 167: consistent, not yet tested",
		},
		{
			name:    "no loss, above the onset",
			steps:   []Step{step(160, 0, true), step(480, 0, true)},
			verdict: ModelLater,
		},
		{
			name:    "the bench was the limit",
			steps:   benchLimit,
			verdict: ModelUntested,
			check:   "model: not tested: the bench was the limit at 80 players, before the relay's buffer could be",
		},
		{
			name:    "loss outside the relay's socket",
			steps:   []Step{step(80, 0, true), noRelayDrops, step(200, 3, true)},
			verdict: ModelEarlier,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := Predict(212992, "the relay's /status", 200, 0, 0)
			m.Compare(FindKnee(tt.steps, 0), tt.steps)
			if m.Verdict != tt.verdict {
				t.Errorf("got verdict %s, want %s (%s)", m.Verdict, tt.verdict, m.Check)
			}
			if tt.check != "" && m.Check != tt.check {
				t.Errorf("check:\n got %s\nwant %s", m.Check, tt.check)
			}
		})
	}
}
