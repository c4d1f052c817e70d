package bench

import (
	"fmt"
	"time"

	"github.com/relayctl/relayctl/tune"
)

// Model is the sizing model's prediction for a run (tune.Truesize,
// docs/sizing.md), stated before the ramp and checked against its knee
// after it. With aligned ticks each tick delivers one datagram per player
// at once; if the relay read nothing while the burst arrives, the socket
// drops as soon as players exceed what rb holds. The relay does read
// meanwhile, so the real onset can only be at or above the prediction.
type Model struct {
	Rcvbuf     int    `json:"rb"`
	RcvbufFrom string `json:"rb_from"`
	Truesize   int    `json:"truesize"`
	Held       int    `json:"held"`          // datagrams of the run's size rb holds
	Aligned    bool   `json:"aligned_ticks"` // jitter 0: the model's burst rule applies as is
	Onset      int    `json:"predicted_onset_players"`
	Prediction string `json:"prediction"`
	// Verdict compares the knee with the prediction: agrees, later (the
	// relay carried more), earlier (loss the buffer does not explain),
	// below (the ramp stayed under the onset, clean), untested (the bench
	// was the limit first).
	Verdict string `json:"verdict,omitempty"`
	Check   string `json:"check,omitempty"`
}

// Model verdicts.
const (
	ModelAgrees   = "agrees"
	ModelLater    = "later"
	ModelEarlier  = "earlier"
	ModelBelow    = "below"
	ModelUntested = "untested"
)

// Predict states the model's onset for a relay socket of rb bytes, before
// the run. gate is 0 without a capacity gate.
func Predict(rb int, from string, packetSize int, jitter time.Duration, gate int) *Model {
	m := &Model{
		Rcvbuf:     rb,
		RcvbufFrom: from,
		Truesize:   tune.Truesize(packetSize),
		Held:       tune.DatagramsHeld(rb, packetSize),
		Aligned:    jitter == 0,
	}
	m.Onset = m.Held + 1
	m.Prediction = fmt.Sprintf("model: relay rb %d (%s) holds %d datagrams of %d bytes (truesize %d); with aligned ticks the burst is one datagram per player, so loss is predicted from %d players",
		rb, from, m.Held, packetSize, m.Truesize, m.Onset)
	if !m.Aligned {
		m.Prediction += fmt.Sprintf(" (with jitter %v the burst is spread over the tick, so loss may start later)", jitter)
	}
	if gate > 0 {
		verdict := "this buffer holds it"
		if gate >= m.Onset {
			verdict = "this buffer does not hold it"
		}
		m.Prediction += fmt.Sprintf("; the gate's burst of %d datagrams needs rb %d: %s", gate, gate*m.Truesize, verdict)
	}
	return m
}

// Compare checks the prediction against the run's knee.
func (m *Model) Compare(k Knee, steps []Step) {
	switch {
	case k.Found && !k.BenchLimit:
		s := steps[k.Step]
		cause := ""
		if s.LossInAtRelay == 0 {
			cause = "; none of that loss was in the relay's socket buffer, which the model is about"
		}
		switch {
		case k.LastClean < m.Onset && m.Onset <= k.Players:
			m.Verdict = ModelAgrees
			m.Check = fmt.Sprintf("model: the knee at %d players agrees with the predicted onset of %d (last clean step %d)%s", k.Players, m.Onset, k.LastClean, cause)
		case k.Players < m.Onset:
			m.Verdict = ModelEarlier
			m.Check = fmt.Sprintf("model: loss at %d players, below the predicted onset of %d: the buffer alone does not explain it (%s)", k.Players, m.Onset, k.Where)
		default:
			m.Verdict = ModelLater
			m.Check = fmt.Sprintf("model: %d players were clean, at or above the predicted onset of %d: the relay read part of each burst while it arrived, so the model is conservative here (knee at %d)%s", k.LastClean, m.Onset, k.Players, cause)
		}
	case k.BenchLimit:
		m.Verdict = ModelUntested
		m.Check = fmt.Sprintf("model: not tested: the bench was the limit at %d players, before the relay's buffer could be", k.Players)
	case k.LastClean < m.Onset:
		m.Verdict = ModelBelow
		m.Check = fmt.Sprintf("model: no loss up to %d players, below the predicted onset of %d: consistent, not yet tested", k.LastClean, m.Onset)
	default:
		m.Verdict = ModelLater
		m.Check = fmt.Sprintf("model: no loss up to %d players, at or above the predicted onset of %d: the relay read part of each burst while it arrived, so the model is conservative here", k.LastClean, m.Onset)
	}
}
