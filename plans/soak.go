package plans

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/relayctl/relayctl/internal/nearest"

	"go.yaml.in/yaml/v3"
)

// Soak is the watch after a host's window (rollout.soak in the spec,
// docs/soak.md): relayctl samples the relay's drop counters through the
// session it holds, compares the rate with a baseline sampled before the
// window, and judges the release under real traffic. The spec parser fills
// in every default, so the plan records the soak as it will run.
type Soak struct {
	// Duration is how long the soak samples after the read-back; Interval
	// how often; Baseline how long before the window the baseline spans
	// at least (0: no baseline; max_drop_rate alone judges).
	Duration time.Duration `json:"duration_ns"`
	Interval time.Duration `json:"interval_ns"`
	Baseline time.Duration `json:"baseline_ns"`
	// Hosts is which hosts soak: SoakCanary (the first host of each wave)
	// or SoakAll.
	Hosts string `json:"hosts"`
	// A regression: more drops per second than MaxDropRate and than
	// MaxDropFactor times the baseline's rate, or more than MaxPlayersLost
	// percent of the soak's peak players gone by its end.
	MaxDropRate    float64 `json:"max_drop_rate"`
	MaxDropFactor  float64 `json:"max_drop_factor"`
	MaxPlayersLost int     `json:"max_players_lost_pct"`
	// MinTraffic is the datagrams per second the relay socket must receive
	// during the soak for any verdict but "insufficient traffic".
	MinTraffic float64 `json:"min_traffic"`
	// OnRegression: SoakRollback or SoakKeep. NoTraffic, what insufficient
	// traffic does: SoakStop, SoakContinue or SoakRollback.
	OnRegression string `json:"on_regression"`
	NoTraffic    string `json:"no_traffic"`
}

// Which hosts soak, and what a verdict does.
const (
	SoakCanary   = "canary"   // the first host of each wave
	SoakAll      = "all"      // every host
	SoakRollback = "rollback" // roll the host back; the rollout stops
	SoakKeep     = "keep"     // keep the release on the host; the rollout stops
	SoakStop     = "stop"     // keep the host as it is; the rollout stops
	SoakContinue = "continue" // keep the host as it is; the rollout goes on
)

// DefaultSoak is the soak with every default (docs/soak.md says why each).
var DefaultSoak = Soak{
	Duration: 60 * time.Second, Interval: 5 * time.Second, Baseline: 60 * time.Second, Hosts: SoakCanary,
	MaxDropRate: 1, MaxDropFactor: 2, MaxPlayersLost: 50, MinTraffic: 100,
	OnRegression: SoakRollback, NoTraffic: SoakStop,
}

// Bounds of the soak's settings.
const (
	MaxSoakDuration = time.Hour
	MinSoakInterval = 100 * time.Millisecond
)

// Check reports a soak's settings that no spec could give (an edited plan,
// or flags).
func (s *Soak) Check() error {
	switch {
	case s.Duration < time.Second || s.Duration > MaxSoakDuration:
		return fmt.Errorf("duration %v: want 1s to %v", s.Duration, MaxSoakDuration)
	case s.Interval < MinSoakInterval || s.Interval > s.Duration:
		return fmt.Errorf("interval %v: want %v to the duration (%v)", s.Interval, MinSoakInterval, s.Duration)
	case s.Baseline < 0 || s.Baseline > MaxSoakDuration:
		return fmt.Errorf("baseline %v: want 0 to %v", s.Baseline, MaxSoakDuration)
	case s.Hosts != SoakCanary && s.Hosts != SoakAll:
		return fmt.Errorf("hosts %q: want canary or all", s.Hosts)
	case !(s.MaxDropRate >= 0 && s.MaxDropRate <= 1e9) || !(s.MaxDropFactor >= 1 && s.MaxDropFactor <= 1e6) || !(s.MinTraffic >= 0 && s.MinTraffic <= 1e9):
		return fmt.Errorf("a threshold out of range")
	case s.MaxPlayersLost < 0 || s.MaxPlayersLost > 100:
		return fmt.Errorf("max_players_lost %d%%: want 0%% to 100%%", s.MaxPlayersLost)
	case s.OnRegression != SoakRollback && s.OnRegression != SoakKeep:
		return fmt.Errorf("on_regression %q: want rollback or keep", s.OnRegression)
	case s.NoTraffic != SoakStop && s.NoTraffic != SoakContinue && s.NoTraffic != SoakRollback:
		return fmt.Errorf("no_traffic %q: want stop, continue or rollback", s.NoTraffic)
	}
	return nil
}

// soakKeys are the keys of rollout.soak, in the order docs/spec.md lists them.
var soakKeys = []string{"duration", "interval", "baseline", "hosts", "max_drop_rate", "max_drop_factor", "max_players_lost", "min_traffic", "on_regression", "no_traffic"}

// soak parses rollout.soak: every key optional, defaults from DefaultSoak.
// "soak: true" is the defaults, "soak: false" none.
func (p *specParser) soak(n *yaml.Node) *Soak {
	if n.Kind == yaml.ScalarNode && (n.Value == "true" || n.Value == "false") {
		if n.Value == "false" {
			return nil
		}
		s := DefaultSoak
		return &s
	}
	f, ok := p.fields(n, "rollout.soak", soakKeys...)
	if !ok {
		return nil
	}
	s := DefaultSoak
	durationGiven := false
	dur := func(k string, dst *time.Duration, min, max time.Duration, example string) {
		v := f[k]
		if v == nil {
			return
		}
		field := "rollout.soak." + k
		str, ok := p.str(v, field)
		if !ok {
			return
		}
		d, err := time.ParseDuration(str)
		if err != nil || d < min || d > max {
			p.fail(v, field, "want a duration from %v to %v, got %q; e.g. %s", min, max, str, example)
			return
		}
		*dst = d
		durationGiven = durationGiven || k == "duration"
	}
	dur("duration", &s.Duration, time.Second, MaxSoakDuration, "60s")
	if !durationGiven || f["baseline"] != nil {
		dur("baseline", &s.Baseline, 0, MaxSoakDuration, "60s")
	} else {
		s.Baseline = s.Duration // the same span before the window as after it
	}
	dur("interval", &s.Interval, MinSoakInterval, MaxSoakDuration, "5s")
	if f["interval"] == nil && 2*s.Interval > s.Duration {
		s.Interval = max(s.Duration/4, MinSoakInterval) // a short soak is still sampled a few times
	}
	if v := f["interval"]; v != nil && s.Interval > s.Duration {
		p.fail(v, "rollout.soak.interval", "%v is longer than the soak's duration (%v); sample at least twice, e.g. interval: %v", s.Interval, s.Duration, s.Duration/4)
	}
	p.soakWords(f, &s)
	p.soakNumbers(f, &s)
	return &s
}

// soakWords are the soak's choices: which hosts, and what its verdicts do.
func (p *specParser) soakWords(f map[string]*yaml.Node, s *Soak) {
	for _, w := range []struct {
		key     string
		dst     *string
		allowed []string
		why     string
	}{
		{"hosts", &s.Hosts, []string{SoakCanary, SoakAll}, "which hosts soak: the first of each wave, or every host"},
		{"on_regression", &s.OnRegression, []string{SoakRollback, SoakKeep}, "what a regression does to the host; the rollout stops either way"},
		{"no_traffic", &s.NoTraffic, []string{SoakStop, SoakContinue, SoakRollback}, "what a soak with too little traffic to judge does"},
	} {
		v := f[w.key]
		if v == nil {
			continue
		}
		field := "rollout.soak." + w.key
		str, ok := p.str(v, field)
		if !ok {
			continue
		}
		if !contains(w.allowed, str) {
			msg := fmt.Sprintf("want %s, got %q (%s)", orList(w.allowed), str, w.why)
			if near := nearest.Word(str, w.allowed); near != "" {
				msg += "; did you mean " + near + "?"
			}
			p.fail(v, field, "%s", msg)
			continue
		}
		*w.dst = str
	}
}

// soakNumbers are the soak's thresholds.
func (p *specParser) soakNumbers(f map[string]*yaml.Node, s *Soak) {
	num := func(k string, dst *float64, min, max float64, unit, example string) {
		v := f[k]
		if v == nil {
			return
		}
		field := "rollout.soak." + k
		str, ok := p.str(v, field)
		if !ok {
			return
		}
		x, err := strconv.ParseFloat(str, 64)
		if err != nil || !(x >= min && x <= max) || strings.ContainsAny(str, "xXpPnN_") {
			p.fail(v, field, "want %s from %g to %g, got %q; e.g. %s", unit, min, max, str, example)
			return
		}
		*dst = x
	}
	num("max_drop_rate", &s.MaxDropRate, 0, 1e9, "drops per second", "1")
	num("max_drop_factor", &s.MaxDropFactor, 1, 1e6, "a factor of the baseline's drop rate", "2")
	num("min_traffic", &s.MinTraffic, 0, 1e9, "datagrams per second", "100")
	if v := f["max_players_lost"]; v != nil {
		if str, ok := p.str(v, "rollout.soak.max_players_lost"); ok {
			n, err := strconv.Atoi(strings.TrimSuffix(str, "%"))
			if err != nil || !strings.HasSuffix(str, "%") || n < 0 || n > 100 {
				p.fail(v, "rollout.soak.max_players_lost", "want a share of the players from 0%% to 100%%, got %q; e.g. 50%%", str)
			} else {
				s.MaxPlayersLost = n
			}
		}
	}
}

// orList is "a or b", "a, b or c".
func orList(w []string) string {
	if len(w) < 2 {
		return strings.Join(w, "")
	}
	return strings.Join(w[:len(w)-1], ", ") + " or " + w[len(w)-1]
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// Text is the soak in words, for the review and apply's first line.
func (s *Soak) Text() string {
	who := "the first host of each wave (its canary)"
	if s.Hosts == SoakAll {
		who = "every host"
	}
	base := fmt.Sprintf("against a baseline of at least %v before its window", s.Baseline)
	if s.Baseline == 0 {
		base = "without a baseline"
	}
	return fmt.Sprintf("%s is sampled for %v (every %v) after its read-back, %s: more than %g drops/s and more than %g × the baseline's rate, "+
		"or %d%% of its established players lost with their traffic, is a regression (on_regression: %s; the rollout stops); under %g datagrams/s forwarded for its players is insufficient traffic (no_traffic: %s)",
		who, s.Duration, s.Interval, base, s.MaxDropRate, s.MaxDropFactor, s.MaxPlayersLost, s.OnRegression, s.MinTraffic, s.NoTraffic)
}
