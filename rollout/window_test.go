package rollout

import (
	"strings"
	"testing"
	"time"

	"github.com/relayctl/relayctl/plans"
)

// A window's program reaches a host only whole and only with what a host
// can carry out with nobody to ask.
func TestValidateRunOfAWindow(t *testing.T) {
	q := &Query{Port: 7788, Paths: plans.PlanPaths(plans.DefaultPaths), Service: plans.PlanService{Manager: "none"}}
	win := func(n int) *Window {
		return &Window{ID: "0123456789abcdef", Await: time.Second, Judge: time.Second, Observe: q, UndoAt: make([]int, n+1)}
	}
	keep := op("keep", "/x", "abc", "3", "0644")
	keep.Offer, keep.Data = true, []byte("abc")
	sysctl := setSysctl{key: "net.core.rmem_max", value: "8388608"}.write("8388608")
	tests := []struct {
		name string
		ops  []Op
		want string
	}{
		{"a window", []Op{detachOp(win(2)), op("step", "start window"), sysctl}, ""},
		{"detach without its window", []Op{{Kind: "detach", Args: []string{"x"}}}, "without its window"},
		{"a bad id", []Op{detachOp(&Window{ID: "x", Rollback: true})}, "bad window id"},
		{"no rollback for each op", []Op{detachOp(win(0)), op("step", "start window")}, "a rollback for each"},
		{"bytes to ask for", []Op{detachOp(win(1)), keep}, "needs relayctl between"},
		{"the session's own", []Op{detachOp(win(1)), op("commit", "r", "applied")}, "the session's, not a window's"},
		{"a bad check", []Op{detachOp(&Window{ID: "0123456789abcdef", Rollback: true, Checks: []HostCheck{{Kind: "pid", Args: []string{"12x", "-"}}}})}, "bad pid"},
		{"an undo with a keep", []Op{verdictOp(VerdictUndo), keep}, "needs relayctl between"},
		{"a keep's ops are the session's", []Op{verdictOp(VerdictKeep), op("commit", "r", "applied"), unlockOp()}, ""},
		{"a bad word", []Op{op("verdict", "maybe")}, "want keep or undo"},
	}
	for _, tt := range tests {
		err := ValidateRun(tt.ops)
		if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("%s: got %v, want %q", tt.name, err, tt.want)
		}
	}
}

// The host judges a window it ends alone against the release this plan
// leaves the relay on: a rollback plan's is the release the undone window
// replaced, not the spec's (which is the release being rolled back). On
// the code before, every plan's pid check named the spec's release.
func TestTheHostChecksTheReleaseThePlanLeaves(t *testing.T) {
	p := &plans.Plan{Paths: plans.PlanPaths(plans.DefaultPaths)}
	p.Relay.Kind, p.Relay.Version = plans.ReleaseKindBinary, "1.8.3"
	undo := &plans.Undo{Receipt: "r", Release: &plans.UndoRelease{Was: "1.8.2", Set: "1.8.3", WasLink: "/opt/relay/releases/1.8.2"}}
	none := *p
	none.Relay.Kind = plans.ReleaseKindNone
	tests := []struct {
		name string
		p    *plans.Plan
		h    plans.HostPlan
		want string
	}{
		{"forward", p, plans.HostPlan{Release: plans.ReleaseChange{Action: plans.ReleaseUpgrade}}, "/opt/relay/releases/1.8.3"},
		{"rollback", p, plans.HostPlan{Release: plans.ReleaseChange{Action: plans.ReleaseDowngrade}, Undo: undo}, "/opt/relay/releases/1.8.2"},
		{"kept, as the link points", p, plans.HostPlan{Release: plans.ReleaseChange{Action: plans.ReleaseKeep}, Previous: plans.PreviousState{CurrentLink: "releases/1.8"}}, "/opt/relay/releases/1.8"},
		{"a rollback that keeps the release", p, plans.HostPlan{Release: plans.ReleaseChange{Action: plans.ReleaseKeep}, Undo: &plans.Undo{Receipt: "r"},
			Previous: plans.PreviousState{CurrentLink: "/opt/relay/releases/1.8.0"}}, "/opt/relay/releases/1.8.0"},
		{"no release", &none, plans.HostPlan{Release: plans.ReleaseChange{Action: plans.ReleaseKeep}}, "-"},
	}
	for _, tt := range tests {
		got := restart{planned: true}.hostChecks(&checkCtx{p: tt.p, h: &tt.h})
		if len(got) != 1 || got[0].Kind != "pid" || got[0].Args[1] != tt.want {
			t.Errorf("%s: got %v, want pid - %s", tt.name, got, tt.want)
		}
		if err := got[0].Validate(); err != nil {
			t.Errorf("%s: %v", tt.name, err)
		}
	}
}

// A window the host kept by itself names the relay process its read-back
// held for StableFor: relayctl, back after the lost connection, takes a
// reading of that same process as held, and holds any other for
// StableFor itself. On the code before, it held the host's process
// again (a cut inside a window cost the host's StableFor twice).
func TestReadBackTakesTheHostsHold(t *testing.T) {
	errRead := errString("read again")
	// A reading that matches a plan of nothing but its relay (the release
	// link at "/", rb 0).
	reading := &plans.Facts{Service: plans.ServiceFact{Running: true, PID: 42}, Socket: plans.SocketFact{Found: true}}
	reading.Release.CurrentRaw = "/"
	if c := (ReadBack{Plan: &plans.Plan{}, Host: &plans.HostPlan{}}).Checks(reading); !allOK(c) {
		t.Fatalf("the reading does not match: %+v", c)
	}
	for _, c := range []struct {
		hostHeld  int
		wantReads int
	}{{42, 0}, {43, 1}, {0, 1}} {
		reads := 0
		rb := ReadBack{Plan: &plans.Plan{}, Host: &plans.HostPlan{}, StableFor: time.Hour, Timeout: time.Second, hostHeld: c.hostHeld}
		res, err := rb.Judge(reading, func() (*plans.Facts, error) { reads++; return nil, errRead })
		if reads != c.wantReads {
			t.Errorf("host held pid %d: %d more reading(s), want %d", c.hostHeld, reads, c.wantReads)
		}
		if c.wantReads == 0 && (err != nil || !res.Held || res.After != reading) {
			t.Errorf("host held pid %d: %+v, %v; want held on the reading", c.hostHeld, res, err)
		}
	}
}
