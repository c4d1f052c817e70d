package plans

import (
	"strings"
	"testing"
	"time"

	"github.com/relayctl/relayctl/internal/nearest"
	"github.com/relayctl/relayctl/relay/capability"
)

func TestSoakDefaults(t *testing.T) {
	for _, tt := range []struct {
		section string
		want    func(s *Soak)
	}{
		{"rollout:\n  soak: true\n", func(s *Soak) {}},
		{"rollout:\n  soak: {}\n", func(s *Soak) {}},
		// The baseline spans what the soak spans, unless it is given.
		{"rollout:\n  soak: {duration: 30s}\n", func(s *Soak) { s.Duration, s.Baseline = 30*time.Second, 30*time.Second }},
		{"rollout:\n  soak: {duration: 30s, baseline: 0s}\n", func(s *Soak) { s.Duration, s.Baseline = 30*time.Second, 0 }},
		// A short soak is sampled a few times, not once.
		{"rollout:\n  soak: {duration: 4s}\n", func(s *Soak) { s.Duration, s.Baseline, s.Interval = 4*time.Second, 4*time.Second, time.Second }},
		{"rollout:\n  soak:\n    hosts: all\n    max_drop_rate: 0.5\n    max_drop_factor: 3\n    max_players_lost: 20%\n    min_traffic: 1000\n    on_regression: keep\n    no_traffic: continue\n",
			func(s *Soak) {
				s.Hosts, s.MaxDropRate, s.MaxDropFactor, s.MaxPlayersLost, s.MinTraffic = SoakAll, 0.5, 3, 20, 1000
				s.OnRegression, s.NoTraffic = SoakKeep, SoakContinue
			}},
	} {
		s, err := ParseSpec("s.yaml", []byte(goodSpec+tt.section))
		if err != nil {
			t.Fatalf("%q: %v", tt.section, err)
		}
		want := DefaultSoak
		tt.want(&want)
		if s.Rollout == nil || s.Rollout.Soak == nil || *s.Rollout.Soak != want {
			t.Errorf("%q: got %+v, want %+v", tt.section, s.Rollout.Soak, want)
		}
		if err := s.Rollout.Soak.Check(); err != nil {
			t.Errorf("%q: a parsed soak fails its own check: %v", tt.section, err)
		}
	}
	s, err := ParseSpec("s.yaml", []byte(goodSpec+"rollout:\n  soak: false\n"))
	if err != nil || s.Rollout.Soak != nil {
		t.Errorf("soak: false: got %+v, %v; want no soak", s.Rollout.Soak, err)
	}
}

// Every mistake in rollout.soak is reported with its file, line and field,
// a misspelt key or choice with the one meant.
func TestSoakErrors(t *testing.T) {
	for _, tt := range []struct{ section, want string }{
		{"rollout:\n  soak:\n    duraton: 60s\n", "s.yaml:24: rollout.soak.duraton: unknown key; valid keys here: duration, interval"},
		{"rollout:\n  soak:\n    duraton: 60s\n", "; did you mean duration?"},
		{"rollout:\n  soak:\n    max_drop_rte: 2\n", "did you mean max_drop_rate?"},
		{"rollout:\n  soak:\n    duration: 60\n", "s.yaml:24: rollout.soak.duration: want a duration from 1s to 1h0m0s, got \"60\"; e.g. 60s"},
		{"rollout:\n  soak:\n    duration: 500ms\n", "rollout.soak.duration: want a duration from 1s"},
		{"rollout:\n  soak:\n    duration: 10s\n    interval: 20s\n", "s.yaml:25: rollout.soak.interval: 20s is longer than the soak's duration (10s)"},
		{"rollout:\n  soak:\n    interval: 10ms\n", "rollout.soak.interval: want a duration from 100ms"},
		{"rollout:\n  soak:\n    baseline: -1s\n", "rollout.soak.baseline: want a duration from 0s"},
		{"rollout:\n  soak:\n    hosts: canray\n", "s.yaml:24: rollout.soak.hosts: want canary or all, got \"canray\" (which hosts soak: the first of each wave, or every host); did you mean canary?"},
		{"rollout:\n  soak:\n    on_regression: rolback\n", "rollout.soak.on_regression: want rollback or keep, got \"rolback\""},
		{"rollout:\n  soak:\n    on_regression: rolback\n", "did you mean rollback?"},
		{"rollout:\n  soak:\n    no_traffic: pass\n", "rollout.soak.no_traffic: want stop, continue or rollback, got \"pass\""},
		{"rollout:\n  soak:\n    max_drop_rate: lots\n", "rollout.soak.max_drop_rate: want drops per second from 0 to 1e+09, got \"lots\"; e.g. 1"},
		{"rollout:\n  soak:\n    max_drop_rate: NaN\n", "rollout.soak.max_drop_rate: want drops per second"},
		{"rollout:\n  soak:\n    max_drop_rate: 0x10\n", "rollout.soak.max_drop_rate: want drops per second"},
		{"rollout:\n  soak:\n    max_drop_factor: 0.5\n", "rollout.soak.max_drop_factor: want a factor of the baseline's drop rate from 1"},
		{"rollout:\n  soak:\n    max_players_lost: 50\n", "rollout.soak.max_players_lost: want a share of the players from 0% to 100%, got \"50\"; e.g. 50%"},
		{"rollout:\n  soak:\n    max_players_lost: 150%\n", "rollout.soak.max_players_lost: want a share"},
		{"rollout:\n  soak:\n    min_traffic: -5\n", "rollout.soak.min_traffic: want datagrams per second from 0"},
		{"rollout:\n  soak: 60s\n", "s.yaml:23: rollout.soak: want a mapping of keys to values"},
		{"rollout:\n  soka: {}\n", "s.yaml:23: rollout.soka: unknown key; valid keys here: waves, max_failures, max_unreachable, recover, soak, by, order, budgets; did you mean soak?"},
	} {
		_, err := ParseSpec("s.yaml", []byte(goodSpec+tt.section))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: got %v, want %q", tt.section, err, tt.want)
		}
	}
	// Every problem at once, sorted by line.
	_, err := ParseSpec("s.yaml", []byte(goodSpec+"rollout:\n  soak:\n    hosts: some\n    duration: x\n"))
	if se, ok := err.(SpecErrors); !ok || len(se) != 2 || se[0].Line != 24 || se[1].Line != 25 {
		t.Errorf("two mistakes: got %v, want both, by line", err)
	}
}

// The plan records the soak as it will run; a plan edited to soak less
// than its spec says is an edited plan; the review says what the soak does.
func TestPlanRecordsSoak(t *testing.T) {
	spec := incidentSpec(t, func(s string) string { return s + "rollout:\n  soak: {duration: 30s, max_drop_rate: 2}\n" })
	p, err := Make(Input{Spec: spec, Facts: []*Facts{incidentFacts()}, Artifact: Artifact{SHA256: strings.Repeat("a", 64), Size: 3, VersionFrom: capability.FromMarker}, Steps: testSteps})
	if err != nil {
		t.Fatal(err)
	}
	r, err := p.Rollout.Resolve()
	if err != nil || r.Soak == nil || r.Soak.Duration != 30*time.Second || r.Soak.MaxDropRate != 2 {
		t.Fatalf("resolved soak: %+v, %v", r.Soak, err)
	}
	md := string(p.Markdown("x.plan"))
	if !strings.Contains(md, "- Soak: the first host of each wave (its canary) is sampled for 30s (every 5s) after its read-back, against a baseline of at least 30s before its window: more than 2 drops/s") {
		t.Errorf("the review does not say what the soak does:\n%s", md)
	}
	if err := Validate(p); err != nil {
		t.Fatalf("an unedited plan: %v", err)
	}
	p.Rollout.Soak.MaxDropRate = 1000
	if err := Validate(p); err == nil || !strings.Contains(err.Error(), "rollout.soak.max_drop_rate is 1000, its spec gives 2") {
		t.Errorf("a plan edited to allow more drops: got %v", err)
	}
	p.Rollout.Soak = nil
	if err := Validate(p); err == nil || !strings.Contains(err.Error(), "rollout.soak") {
		t.Errorf("a plan edited to soak nothing: got %v", err)
	}
}

func TestNearestSoakChoice(t *testing.T) {
	for _, tt := range []struct{ typed, want string }{
		{"canray", "canary"}, {"al", ""}, {"every", ""}, {"rollbak", "rollback"}, {"stop", "stop"}, {"x", ""},
	} {
		if got := nearest.Word(tt.typed, []string{SoakCanary, SoakAll, SoakRollback, SoakStop}); got != tt.want {
			t.Errorf("%q: got %q, want %q", tt.typed, got, tt.want)
		}
	}
}
