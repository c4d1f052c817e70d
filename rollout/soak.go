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

// How a soak counted the relay's players (SoakResult.PlayersCounted).
const (
	PlayersEstablished = "established" // relayd's players_established: those that have played 5 s
	PlayersAll         = "all"         // a relay without players_established: every member, a stranger's join too
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
	// The relay's players over the soak: the most it held, and at its end,
	// as PlayersCounted says: PlayersEstablished (the players that have
	// played 5 s, relayd's players_established) or PlayersAll (a relay
	// that does not report them: anyone's join counts).
	PlayersPeak    *int   `json:"players_peak,omitempty"`
	PlayersEnd     *int   `json:"players_end,omitempty"`
	PlayersCounted string `json:"players_counted,omitempty"`
	// The players' traffic: the data datagrams per second the relay
	// forwarded over the soak's busiest interval between two samples, and
	// over its last.
	ForwardedPeak *float64 `json:"forwarded_peak_per_s,omitempty"`
	ForwardedEnd  *float64 `json:"forwarded_end_per_s,omitempty"`
	intervals     int      // the intervals ForwardedPeak is the busiest of
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
	case traffic(a) < cfg.MinTraffic:
		rate, by := a.PlayTraffic()
		r.Verdict, r.Why = SoakInsufficient, fmt.Sprintf("%.1f datagrams/s %s over the %s soak, under the %g needed to judge it (%s)",
			rate, by, seconds(a.Seconds), cfg.MinTraffic, r.Summary())
	default:
		lost, note := r.playersLost()
		if lost != "" {
			r.Verdict, r.Why = SoakRegression, lost
			return
		}
		r.Verdict, r.Why = SoakPass, r.Summary()
		if note != "" {
			r.Why += "; " + note
		}
	}
}

func traffic(s *DropSpan) float64 { rate, _ := s.PlayTraffic(); return rate }

// playersLost says how many players the relay lost over the soak when
// that is more than the soak allows, "" otherwise; note says why players
// that were gone did not count. A release that loses its players loses
// their traffic: a loss counts only when the relay's forwarded datagrams
// fell by more than the share allowed too, so players that join and
// vanish without playing (anyone can, from their own address) move
// nothing. A relay that reports its established players is judged by
// them; one that does not, by every member, and the verdict says so.
func (r *SoakResult) playersLost() (lost, note string) {
	if r.PlayersPeak == nil || r.PlayersEnd == nil || *r.PlayersPeak == 0 {
		return "", ""
	}
	peak, end, allowed := *r.PlayersPeak, *r.PlayersEnd, r.Settings.MaxPlayersLost
	share := 100 * float64(peak-end) / float64(peak)
	if share <= float64(allowed) {
		return "", ""
	}
	who := "established players (that had played 5 s)"
	if r.PlayersCounted == PlayersAll {
		who = "players (the relay reports no established players: every member, a stranger's join too)"
	}
	gone := fmt.Sprintf("%d %s at the soak's peak, %d at its end: %.0f%% gone", peak, who, end, share)
	if r.intervals < 2 || *r.ForwardedPeak <= 0 {
		return "", gone + ", not judged as lost: the relay's forwarded traffic could not be compared over two intervals of the soak"
	}
	busiest, last := *r.ForwardedPeak, *r.ForwardedEnd
	fell := 100 * (busiest - last) / busiest
	traffic := fmt.Sprintf("%.0f forwarded datagrams/s at the soak's busiest interval, %.0f over its last", busiest, last)
	if fell <= float64(allowed) {
		return "", fmt.Sprintf("%s, not counted as lost: their traffic held (%s)", gone, traffic)
	}
	return fmt.Sprintf("%s, and their traffic with them (%s: %.0f%% fell): over the %d%% allowed (%s)", gone, traffic, fell, allowed, r.Summary()), ""
}

// follow takes sample c of the soak (prev is the one before it, nil for
// the first): the players it reports, and the forwarded rate between the
// two, when both are the relay's on the same socket.
func (r *SoakResult) follow(prev *plans.DropCounters, c plans.DropCounters) {
	n, counted := sampledPlayers(c)
	if counted != "" && (r.PlayersCounted == "" || r.PlayersCounted == counted) {
		r.PlayersCounted = counted
		if r.PlayersPeak == nil || n > *r.PlayersPeak {
			r.PlayersPeak = &n
		}
		r.PlayersEnd = &n
	}
	if prev == nil || prev.RelayForwarded == nil || c.RelayForwarded == nil || !c.Holds(prev.SocketInode) ||
		*c.RelayForwarded < *prev.RelayForwarded || c.ClockNanos <= prev.ClockNanos {
		return
	}
	rate := float64(*c.RelayForwarded-*prev.RelayForwarded) / (float64(c.ClockNanos-prev.ClockNanos) / 1e9)
	if r.ForwardedPeak == nil || rate > *r.ForwardedPeak {
		r.ForwardedPeak = &rate
	}
	r.ForwardedEnd = &rate
	r.intervals++
}

// sampledPlayers is a sample's players and how they were counted ("" for none).
func sampledPlayers(c plans.DropCounters) (int, string) {
	switch {
	case c.PlayersEstablished != nil:
		return *c.PlayersEstablished, PlayersEstablished
	case c.Players != nil:
		return *c.Players, PlayersAll
	}
	return 0, ""
}

// JudgeSamples is the verdict of a soak sampled as samples (oldest first,
// every one of the relay's socket) after a baseline before, as the soak
// phase judges it: for a verdict of samples taken another way (a test's).
func JudgeSamples(cfg plans.Soak, before *DropSpan, samples []plans.DropCounters) *SoakResult {
	r := &SoakResult{Settings: cfg, Planned: cfg.Duration.Seconds(), Before: before, Samples: len(samples)}
	for i := range samples {
		var prev *plans.DropCounters
		if i > 0 {
			prev = &samples[i-1]
		}
		r.follow(prev, samples[i])
	}
	if len(samples) > 0 {
		r.After, _ = Span(samples[0], samples[len(samples)-1])
	}
	if r.After != nil {
		r.Seconds = r.After.Seconds
	}
	r.judge()
	return r
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
