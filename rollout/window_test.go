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
