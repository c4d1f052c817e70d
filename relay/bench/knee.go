package bench

import (
	"fmt"
	"strings"
)

// Knee is where the ramp stopped being clean.
type Knee struct {
	Found     bool    `json:"found"`
	Step      int     `json:"step"` // index into the steps, -1 when not found
	Players   int     `json:"players"`
	LossPct   float64 `json:"loss_pct"`
	LastClean int     `json:"last_clean_players"` // players of the last valid step without loss, 0 if none
	// BenchLimit is set when the bench, not the relay, stopped the ramp:
	// a step went invalid before any loss, or the knee sits at the bench's
	// measured ceiling.
	BenchLimit bool   `json:"bench_limit"`
	Where      string `json:"where"` // where the knee step's loss was counted
	Summary    string `json:"summary"`
}

// FindKnee returns the first step whose loss exceeds threshold (a fraction).
// An invalid step before it ends the search: beyond it the bench, not the
// relay, sets the numbers.
func FindKnee(steps []Step, threshold float64) Knee {
	k := Knee{Step: -1}
	restarted := ""
	for i, s := range steps {
		lossy := s.LossPct/100 > threshold
		if len(s.Restarts) > 0 && s.Valid && lossy {
			// Its loss is the restart's, not the relay's capacity: neither
			// the knee nor a clean step.
			restarted += fmt.Sprintf("; the step of %d players is left out, its loss is the restart's: %s", s.Players, s.Restarts[0])
			continue
		}
		if !s.Valid {
			k.BenchLimit = true
			k.Step = i
			k.Players = s.Players
			k.LossPct = s.LossPct
			k.Where = Where(s)
			k.Summary = fmt.Sprintf("no knee: at %d players the bench fell behind (%s), so the bench machine, not the relay, set that step's numbers; %s", s.Players, strings.Join(s.Invalid, "; "), lastClean(k.LastClean))
			return k
		}
		if lossy {
			k.Found = true
			k.Step = i
			k.Players = s.Players
			k.LossPct = s.LossPct
			k.Where = Where(s)
			k.Summary = fmt.Sprintf("knee at %d players: %.3g%% of planned deliveries lost (%s); %s", s.Players, s.LossPct, k.Where, lastClean(k.LastClean)) + restarted
			if s.NearBenchCeiling {
				k.BenchLimit = true
				k.Summary += "; this step is at the bench's calibrated ceiling, so the bench, not the relay, may be the limit"
			}
			return k
		}
		k.LastClean = s.Players
	}
	if k.LastClean == 0 && restarted != "" {
		k.Summary = "no knee" + restarted
		return k
	}
	k.Summary = fmt.Sprintf("no loss up to %d players", k.LastClean) + restarted
	return k
}

func lastClean(n int) string {
	if n == 0 {
		return "no step was clean"
	}
	return fmt.Sprintf("last clean step %d players", n)
}

// Where says in which direction a step's loss was counted, and by whom.
func Where(s Step) string {
	if !s.RelayKnown && s.Census {
		return fmt.Sprintf("%d lost; by the bench's own count player→relay %d datagrams, relay→players %d copies (the relay's counters are not usable)", s.Loss, s.LostIn, s.LostOut)
	}
	if !s.RelayKnown {
		return fmt.Sprintf("%d lost; the relay's counters were not readable, so the direction is unknown", s.Loss)
	}
	var parts []string
	if s.LossIn > 0 {
		p := fmt.Sprintf("player→relay %d", s.LossIn)
		if s.LossInAtRelay > 0 {
			p += fmt.Sprintf(", %d of them dropped in the relay's socket buffer (rx_drops)", s.LossInAtRelay)
		}
		if s.Kernel != nil {
			p += ", " + s.Kernel.Agreement(s.RelayDrop)
		}
		parts = append(parts, p)
	}
	if s.LossOut > 0 {
		p := fmt.Sprintf("relay→players %d", s.LossOut)
		if s.LossOutAtBench > 0 {
			p += fmt.Sprintf(", %d of them dropped on the bench's own sockets", s.LossOutAtBench)
		}
		if s.Late > 0 {
			p += fmt.Sprintf(", %d arrived after the step closed (late)", min(s.Late, s.LossOut))
		}
		parts = append(parts, p)
	}
	// What the relay read but did not send on: planned fan-out of what it
	// received, minus what it sent. Only exact when every lobby is full.
	if len(parts) == 0 && s.Loss > 0 {
		if s.Unsent > 0 {
			parts = append(parts, fmt.Sprintf("%d never sent by the bench", s.Unsent))
		} else {
			parts = append(parts, fmt.Sprintf("inside the relay: it read %d datagrams and sent %d copies", s.RelayRx, s.RelayTx))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, "; ")
}
