package plans

import (
	"fmt"
	"strings"
	"testing"

	"github.com/relayctl/relayctl/relay/capability"
)

func TestSplitWaves(t *testing.T) {
	tests := []struct {
		waves string
		hosts int
		want  string
	}{
		{"", 1, "1"},
		{"", 5, "1 4"},
		{"1,100%", 100, "1 99"},
		// 25% of the 94 left after 1 and 5 is 23 (rounded down).
		{"1,5,25%,100%", 100, "1 5 23 71"},
		// The last size repeats until every host is in a wave.
		{"1,5", 17, "1 5 5 5 1"},
		{"2", 5, "2 2 1"},
		// A percentage is of the hosts left, and at least one.
		{"10%", 5, "1 1 1 1 1"},
		{"50%", 8, "4 2 1 1"},
		{"1,50%,100%", 6, "1 2 3"},
		// A wave bigger than what is left takes what is left.
		{"10,100%", 3, "3"},
		{"1", 0, ""},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s/%d", tt.waves, tt.hosts), func(t *testing.T) {
			var w []Amount
			if tt.waves != "" {
				var err error
				if w, err = ParseWaves(strings.Split(tt.waves, ",")); err != nil {
					t.Fatal(err)
				}
			}
			got := strings.Trim(fmt.Sprint(SplitWaves(w, tt.hosts)), "[]")
			if got != tt.want {
				t.Errorf("got %s, want %s", got, tt.want)
			}
		})
	}
}

// The budget's edges: exactly at it is within, one over is not; a
// percentage is of the wave's hosts, compared without rounding.
func TestAmountAllows(t *testing.T) {
	tests := []struct {
		budget      string
		count, size int
		want        bool
	}{
		{"0", 0, 5, true},
		{"0", 1, 5, false},
		{"2", 2, 5, true},
		{"2", 3, 5, false},
		{"10%", 1, 10, true},  // exactly 10%
		{"10%", 2, 10, false}, // 20%
		{"10%", 1, 5, false},  // 20%: a 10% budget of 5 hosts is 0 hosts
		{"50%", 2, 4, true},
		{"50%", 3, 4, false},
		{"100%", 4, 4, true},
		{"0%", 0, 4, true},
		{"0%", 1, 4, false},
	}
	for _, tt := range tests {
		a, err := ParseAmount(tt.budget, 0)
		if err != nil {
			t.Fatal(err)
		}
		if got := a.Allows(tt.count, tt.size); got != tt.want {
			t.Errorf("%s allows %d of %d: got %v, want %v", tt.budget, tt.count, tt.size, got, tt.want)
		}
	}
	if got := (Amount{N: 10, Percent: true}).Hosts(25); got != 2 {
		t.Errorf("10%% of 25 hosts: got %d, want 2", got)
	}
}

func TestParseAmountErrors(t *testing.T) {
	for _, s := range []string{"", "0", "-1", "+2", "101%", "0%", "1.5", "5 %", "%", "ten", "10001"} {
		if _, err := ParseAmount(s, 1); err == nil {
			t.Errorf("wave %q: got no error", s)
		}
	}
	for _, s := range []string{"0", "0%", "100%", "3"} {
		if _, err := ParseAmount(s, 0); err != nil {
			t.Errorf("budget %q: %v", s, err)
		}
	}
}

func TestRolloutSection(t *testing.T) {
	src := goodSpec + "rollout:\n  waves: [1, 5, 25%, 100%]\n  max_failures: 10%\n  max_unreachable: 2\n"
	s, err := ParseSpec("r.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(s.Rollout.Waves); got != "[1 5 25% 100%]" {
		t.Errorf("waves: got %s", got)
	}
	r, err := s.Rollout.Resolve()
	if err != nil || r.MaxFailures != (Amount{10, true}) || r.MaxUnreachable != (Amount{N: 2}) {
		t.Errorf("resolved: %+v %v", r, err)
	}

	tests := []struct{ section, want string }{
		{"rollout:\n  waves: 1,5\n", "r.yaml:23: rollout.waves: want a list of wave sizes"},
		{"rollout:\n  waves: [1, 0]\n", "r.yaml:23: rollout.waves[1]: a number of hosts from 1"},
		{"rollout:\n  waves: [1, 150%]\n", "r.yaml:23: rollout.waves[1]: a percentage from 1% to 100%"},
		{"rollout:\n  max_failures: some\n", "r.yaml:23: rollout.max_failures: want a number of hosts or a percentage"},
		{"rollout:\n  max_unreachable: -1\n", "r.yaml:23: rollout.max_unreachable:"},
		{"rollout:\n  serial: 5\n", "r.yaml:23: rollout.serial: unknown key; valid keys here: waves, max_failures, max_unreachable"},
		{"rollout: 5\n", "r.yaml:22: rollout: want a mapping"},
	}
	for _, tt := range tests {
		_, err := ParseSpec("r.yaml", []byte(goodSpec+tt.section))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: got %v, want %q", tt.section, err, tt.want)
		}
	}
}

// The plan records the rollout; its review shows the waves with the
// plan's own counts; an edited rollout is an edited plan.
func TestPlanRecordsRollout(t *testing.T) {
	spec := incidentSpec(t, func(s string) string {
		return strings.Replace(s, "  - relay-ash-1\n", "  - relay-ash-1\n  - relay-ash-2\n  - relay-ash-3\n  - relay-ash-4\n", 1) +
			"rollout:\n  waves: [1, 50%]\n  max_failures: 1\n"
	})
	var facts []*Facts
	for _, h := range spec.Hosts {
		f := incidentFacts()
		f.Host = h
		facts = append(facts, f)
	}
	p, err := Make(Input{Spec: spec, Facts: facts, Artifact: Artifact{SHA256: strings.Repeat("a", 64), Size: 3, VersionFrom: capability.FromMarker}, Steps: testSteps})
	if err != nil {
		t.Fatal(err)
	}
	if p.Rollout == nil || fmt.Sprint(p.Rollout.Waves) != "[1 50%]" || p.Rollout.MaxFailures != "1" {
		t.Fatalf("plan rollout: %+v", p.Rollout)
	}
	md := string(p.Markdown("x.plan"))
	for _, want := range []string{"waves 1, 50% (from the spec) → 1 + 1 + 1 + 1 host(s)", "at most 1 failed, rolled back or refused and 0 unreachable",
		"  - wave 1: 1 host(s), relay-ash-1\n", "  - wave 4: 1 host(s), relay-ash-4\n"} {
		if !strings.Contains(md, want) {
			t.Errorf("review lacks %q:\n%s", want, md)
		}
	}
	if err := Validate(p); err != nil {
		t.Fatal(err)
	}
	p.Rollout.MaxFailures = "100%"
	if err := Validate(p); err == nil || !strings.Contains(err.Error(), "rollout.max_failures is \"100%\", its spec gives \"1\"") {
		t.Errorf("edited budget: got %v", err)
	}
}

func TestReleaseURL(t *testing.T) {
	sha := strings.Repeat("a", 64)
	withURL := func(release string) string {
		return strings.Replace(goodSpec, "    version: 1.8.0\n    artifact: ../bin/relayd\n", release, 1)
	}
	s, err := ParseSpec("u.yaml", []byte(withURL("    version: 1.8.0\n    url: https://releases.example.net/relayd-1.8.0?x=1\n    sha256: "+sha+"\n")))
	if err != nil {
		t.Fatal(err)
	}
	if s.Relay.Release.URL != "https://releases.example.net/relayd-1.8.0?x=1" || s.Relay.Release.Artifact != "" {
		t.Errorf("release: %+v", s.Relay.Release)
	}
	if _, err := ParseSpec("u.yaml", []byte(withURL("    version: 1.8.0\n    url: http://[::1]:8080/relayd\n    sha256: "+sha+"\n"))); err != nil {
		t.Errorf("an IPv6 host in brackets: %v", err)
	}
	tests := []struct{ release, want string }{
		{"    version: 1.8.0\n    url: https://example.net/relayd\n", "u.yaml:13: relay.release.sha256: missing; a release fetched from a url needs its sha256"},
		{"    version: 1.8.0\n", "relay.release: needs version, and artifact"},
		{"    version: 1.8.0\n    url: ftp://example.net/relayd\n    sha256: " + sha + "\n", "u.yaml:13: relay.release.url: want an http:// or https:// url"},
		{"    version: 1.8.0\n    url: file:///etc/passwd\n    sha256: " + sha + "\n", "relay.release.url: want an http:// or https:// url"},
		{"    version: 1.8.0\n    url: \"https://example.net/a b\"\n    sha256: " + sha + "\n", "want a url of printable ASCII without spaces"},
		{"    version: 1.8.0\n    url: \"https://example.net/a'$(reboot)'\"\n    sha256: " + sha + "\n", "without spaces, quotes or backslashes"},
		{"    version: 1.8.0\n    url: \"https://example.net/a\\tb\"\n    sha256: " + sha + "\n", "without spaces, quotes"},
		{"    version: 1.8.0\n    url: https://user:pw@example.net/relayd\n    sha256: " + sha + "\n", "a url with credentials would show in the review"},
		{"    version: 1.8.0\n    url: https:///relayd\n    sha256: " + sha + "\n", "want a url with a host"},
		{"    version: 1.8.0\n    url: https://example.net/relayd{a,b}[1-50000]\n    sha256: " + sha + "\n", "would be a glob of many urls to curl"},
		{"    version: 1.8.0\n    url: https://example.net/relayd[1-9]\n    sha256: " + sha + "\n", "would be a glob of many urls to curl"},
		{"    version: 1.8.0\n    url: https://example.net/relayd?v={x}\n    sha256: " + sha + "\n", "would be a glob of many urls to curl"},
		{"    version: 1.8.0\n    url: https://example.net/" + strings.Repeat("x", MaxURL) + "\n    sha256: " + sha + "\n", "at most 2048"},
	}
	for _, tt := range tests {
		_, err := ParseSpec("u.yaml", []byte(withURL(tt.release)))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: got %v, want %q", tt.release, err, tt.want)
		}
	}
}

// The review shows the waves apply will run: the hosts that change go
// first, so the canary is one of them; a region where nothing changes says
// it has no canary; a host not read is in no wave.
func TestReviewCanaryIsAHostThatChanges(t *testing.T) {
	hosts := hostsLabelled("ash1 ash2 ash3 fra1 fra2")
	for _, h := range hosts {
		h.Action = ActionNone
	}
	hosts[1].Action = ActionChange
	hosts[2].Action = ActionUnreachable
	p := &Plan{Hosts: hosts}
	if got, want := rolloutMarkdown(p), "  - wave 1: 1 host(s), ash2\n  - wave 2: 3 host(s), ash1 fra1 fra2\n"; !strings.Contains(got, want) {
		t.Errorf("review:\n%s\nwant\n%s", got, want)
	}
	p.Rollout = &Rollout{By: "region"}
	got := rolloutMarkdown(p)
	for _, want := range []string{"  - region=ash: 2 host(s) in waves 1–2 (1 + 1), ash2 ash1;", "  - region=fra: 2 host(s) in waves 3–4 (1 + 1), fra1 … fra2 (none changes: no canary);"} {
		if !strings.Contains(got, want) {
			t.Errorf("review by region:\n%s\nwant %q", got, want)
		}
	}
}
