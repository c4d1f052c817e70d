package rollout_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"github.com/relayctl/relayctl/rollout"
)

// file is a ledger file in memory: written in full, then patched in place.
type file struct {
	mu      sync.Mutex
	b       []byte
	full    int
	patches int
	most    int // the most bytes one patch wrote
	valid   []string
}

func (f *file) save(b []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.b = append([]byte(nil), b...)
	f.full++
	return nil
}

func (f *file) patch(p []byte, off int64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	copy(f.b[off:], p)
	f.patches++
	f.most = max(f.most, len(p))
	var l rollout.Ledger
	if err := json.Unmarshal(f.b, &l); err != nil {
		f.valid = append(f.valid, err.Error())
	}
	return nil
}

// Between the run's first and last save, a host that starts or ends
// rewrites its own line and the header in place, one slot each, whatever
// the fleet's size; the file is a ledger after every one of them, and it
// ends as the whole-file save of the same state.
func TestLedgerPatchedInPlace(t *testing.T) {
	for _, n := range []int{3, 40} {
		d, p, sims := fleet(t, n, "rollout: {waves: [1, 100%], max_failures: 100%}\n")
		sims[1].IgnoreRB = true
		sims[1].FailMsg = strings.Repeat("a long message from the host ", 40)
		sims[1].FailOp = "restart"
		var f file
		var whole ledgers
		applyWith(t, context.Background(), d, p, rollout.ApplyOptions{Parallel: 4, SaveLedger: f.save, PatchLedger: f.patch})
		d2, p2, sims2 := fleet(t, n, "rollout: {waves: [1, 100%], max_failures: 100%}\n")
		sims2[1].FailMsg, sims2[1].FailOp = sims[1].FailMsg, "restart"
		applyWith(t, context.Background(), d2, p2, rollout.ApplyOptions{Parallel: 4, SaveLedger: whole.save})
		if f.full != 2 || f.patches != 4*n || f.most != 512 {
			t.Errorf("%d hosts: %d whole saves, %d patches of at most %d bytes; want 2, %d, 512", n, f.full, f.patches, f.most, 4*n)
		}
		if len(f.valid) > 0 {
			t.Errorf("%d hosts: the file was not a ledger after a patch: %s", n, f.valid[0])
		}
		l := whole.last(t, p2)
		var got rollout.Ledger
		if err := json.Unmarshal(f.b, &got); err != nil {
			t.Fatal(err)
		}
		if a, b := ledgerOutcomes(&got), ledgerOutcomes(l); a != b {
			t.Errorf("%d hosts: patched ledger %s, whole %s", n, a, b)
		}
		if r := got.Hosts[1].Reason; len(r) > 400 || !strings.HasSuffix(r, "…") {
			t.Errorf("a reason longer than the line is cut to fit: %d bytes %q", len(r), r)
		}
		if lines := strings.Split(strings.TrimSuffix(string(f.b), "\n"), "\n"); len(lines) != n+9 {
			t.Errorf("%d hosts: %d lines, want one a host and nine more", n, len(lines))
		}
	}
}

// A host whose reason and state are both long fits its line: the reason
// is cut first, then the state (a reason cut to nothing was once cut
// again, and again, and the run never ended).
func TestLedgerLineWithLongReasonAndState(t *testing.T) {
	l := &rollout.Ledger{FormatVersion: rollout.LedgerFormatVersion, Plan: "p", Checksum: "sha256:x", Run: 1,
		Hosts: []rollout.LedgerHost{{Host: "h1", Outcome: string(rollout.Failed), State: "in between: " + strings.Repeat("release link: got x, want y; ", 30),
			Reason: strings.Repeat("window: read-back: ss rb on udp/7788: got 212992, want 8388608; ", 30), Next: rollout.NextUndo}}}
	b, err := l.JSON()
	if err != nil {
		t.Fatal(err)
	}
	var back rollout.Ledger
	if err := json.Unmarshal(b, &back); err != nil || !strings.HasSuffix(back.Hosts[0].State, "…") || back.Hosts[0].Next != rollout.NextUndo {
		t.Fatalf("got %v, %+v", err, back.Hosts)
	}
}
