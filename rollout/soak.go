package rollout

import (
	"fmt"
	"math"

	"github.com/relayctl/relayctl/plans"
)

// Soak verdicts (docs/soak.md).
const (
	SoakPass         = "pass"                 // no more drops than allowed, enough traffic to tell
	SoakRegression   = "regression"           // more drops than allowed, players lost, or the relay restarted
	SoakInsufficient = "insufficient traffic" // too little traffic to tell anything: never a pass
	SoakUnknown      = "unknown"              // the soak could not finish (interrupted, the host unreadable)
)

// Soak roles: why a host soaked.
const (
	SoakRoleCanary = "canary" // the first host of its wave
	SoakRoleHost   = "host"   // rollout.soak.hosts: all
)

// SoakResult is a host's soak: the baseline before its window, the soak
// after its read-back, and the verdict, as the receipt keeps them.
type SoakResult struct {
	Role    string `json:"role"`
	Verdict string `json:"verdict"`
	Why     string `json:"why"`
	// Action is what became of the host: "rolled back", "kept", or why
	// neither ("rollback failed").
	Action string `json:"action,omitempty"`
	// Planned is the soak's duration; Seconds what it ran on the host's
	// clock (less when a regression was certain early, or it was cut).
	Planned float64 `json:"planned_seconds"`
	Seconds float64 `json:"seconds"`
	Samples int     `json:"samples"`
	// Allowed is the drop rate the soak allowed: the larger of
	// max_drop_rate and max_drop_factor times the baseline's.
	Allowed float64   `json:"allowed_drops_per_s"`
	Before  *DropSpan `json:"before,omitempty"` // the baseline; nil when there was none
	After   *DropSpan `json:"after,omitempty"`  // the soak
	// The relay's players over the soak: the most it held, and at its end.
	PlayersPeak *int `json:"players_peak,omitempty"`
	PlayersEnd  *int `json:"players_end,omitempty"`
	// Settings is the soak as it ran.
	Settings plans.Soak `json:"settings"`
}

// allowedRate is the drop rate a soak allows, given its baseline.
func allowedRate(cfg plans.Soak, before *DropSpan) float64 {
	if before == nil {
		return cfg.MaxDropRate
	}
	return math.Max(cfg.MaxDropRate, cfg.MaxDropFactor*before.DropRate)
}

// judge sets the verdict of a soak whose spans and players are in r.
func (r *SoakResult) judge() {
	cfg := r.Settings
	r.Allowed = allowedRate(cfg, r.Before)
	a := r.After
	switch {
	case a == nil:
		r.Verdict, r.Why = SoakUnknown, "no span of the soak could be measured"
	case a.DropRate > r.Allowed:
		r.Verdict, r.Why = SoakRegression, fmt.Sprintf("%s, over the %.1f drops/s allowed", r.Summary(), r.Allowed)
	case a.Traffic < cfg.MinTraffic:
		r.Verdict, r.Why = SoakInsufficient, fmt.Sprintf("%.1f datagrams/s reached the relay over the %s soak, under the %g needed to judge it (%s)",
			a.Traffic, seconds(a.Seconds), cfg.MinTraffic, r.Summary())
	case r.playersLost() != "":
		r.Verdict, r.Why = SoakRegression, r.playersLost()
	default:
		r.Verdict, r.Why = SoakPass, r.Summary()
	}
}

// playersLost says how many players the relay lost over the soak when
// that is more than the soak allows, "" otherwise.
func (r *SoakResult) playersLost() string {
	if r.PlayersPeak == nil || r.PlayersEnd == nil || *r.PlayersPeak == 0 {
		return ""
	}
	peak, end := *r.PlayersPeak, *r.PlayersEnd
	lost := 100 * float64(peak-end) / float64(peak)
	if lost <= float64(r.Settings.MaxPlayersLost) {
		return ""
	}
	return fmt.Sprintf("%d players at the soak's peak, %d at its end: %.0f%% lost, over the %d%% allowed (%s)", peak, end, lost, r.Settings.MaxPlayersLost, r.Summary())
}

// Summary is the soak in numbers: "0.0 drops/s before, 41.7 drops/s over
// the 60 s soak (ss d +2,502, UdpRcvbufErrors +2,502, rx_drops +2,502)".
func (r *SoakResult) Summary() string {
	before := "no baseline"
	if r.Before != nil {
		before = fmt.Sprintf("%.1f drops/s before", r.Before.DropRate)
	}
	a := r.After
	if a == nil {
		return before + ", no soak measured"
	}
	over := fmt.Sprintf("the %s soak", seconds(r.Planned))
	if r.cut() {
		over = fmt.Sprintf("the first %s of the %s soak", seconds(a.Seconds), seconds(r.Planned))
	}
	return fmt.Sprintf("%s, %.1f drops/s over %s (%s)", before, a.DropRate, over, a.Counts())
}

// cut says the soak ended before its duration: a regression certain
// early, or an interrupt. (A whole soak's last sample is at or after it.)
func (r *SoakResult) cut() bool { return r.After != nil && r.After.Seconds < r.Planned }

// seconds is a span as the recap says it: "60 s", "2.5 s".
func seconds(s float64) string {
	if s >= 10 || s == math.Trunc(s) {
		return fmt.Sprintf("%.0f s", s)
	}
	return fmt.Sprintf("%.1f s", s)
}

// stops says why this soak stops the rollout ("" when it does not):
// a regression, an unknown verdict, or insufficient traffic unless the
// soak continues on it. outcome is how the host ended.
func (r *SoakResult) stops(host string) string {
	if r == nil {
		return ""
	}
	switch {
	case r.Verdict == SoakPass:
		return ""
	case r.Verdict == SoakInsufficient && r.Settings.NoTraffic == plans.SoakContinue:
		return ""
	case r.Verdict == SoakInsufficient:
		return fmt.Sprintf("%s %s: insufficient traffic in its soak (%s): %s, rollout stopped (no_traffic: %s)", r.Role, host, r.Why, r.Action, r.Settings.NoTraffic)
	case r.Verdict == SoakUnknown:
		return fmt.Sprintf("%s %s: its soak could not finish (%s): %s, rollout stopped", r.Role, host, r.Why, r.Action)
	}
	return fmt.Sprintf("%s %s: %s: %s, rollout stopped", r.Role, host, r.Why, r.Action)
}

// settle records what became of the host once its outcome is known.
func (r *SoakResult) settle(out Outcome) {
	if r == nil {
		return
	}
	switch out {
	case RolledBack:
		r.Action = "rolled back"
	case Applied:
		r.Action = "kept"
	default:
		r.Action = "rollback failed: " + string(out)
	}
}

// rollsBack says whether the verdict rolls the host back.
func (r *SoakResult) rollsBack() bool {
	switch r.Verdict {
	case SoakRegression:
		return r.Settings.OnRegression == plans.SoakRollback
	case SoakInsufficient:
		return r.Settings.NoTraffic == plans.SoakRollback
	}
	return false
}
