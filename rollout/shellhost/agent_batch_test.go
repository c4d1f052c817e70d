package shellhost

// Batches: relayctl sends many primitives at once and reads the answers
// after. These run the real agent.sh (as root, locally) to show that
// nothing runs after a failure, that skipped primitives' data and argv
// lines never turn into requests, and that a keep's bytes go only when the
// host lacks them.

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/relayctl/relayctl/internal/agenttest"

	"github.com/relayctl/relayctl/plans"
)

// After an ERR, the rest of the batch is answered SKIP and not done, even
// primitives whose data or argv lines follow their line; the next batch
// runs normally, so the stream stayed in step.
func TestAgentBatchStopsAtTheFirstFailure(t *testing.T) {
	root := rootDir(t)
	h := lockedAgent(t, filepath.Join(root, "state"))
	dir := filepath.Join(root, "relay")
	touch, _ := exec.LookPath("touch")
	marker := filepath.Join(root, "restarted")

	payload := "link\t1\t0\t0\tx\ty\nA\n" // bytes that look like a request
	up := op("keep", filepath.Join(dir, "config"), plans.SHA256(payload), strconv.Itoa(len(payload)), "0644")
	up.Data = []byte(payload)
	restart := restartOp(plans.PlanService{Manager: "command", Stop: []string{touch, marker}, Start: []string{touch, marker}})
	q := Query{Keys: []string{"net.core.rmem_max"}, Port: 7788, Paths: plans.PlanPaths(plans.DefaultPaths), Service: plans.PlanService{Manager: "none"}}
	observe := Op{Kind: "observe", Query: &q} // its argv lines are skipped too

	trips := h.RoundTrips()
	var ran []string
	err := h.Run(context.Background(), []Op{
		op("begin", "p", "sha256:x"),
		op("dir", dir),
		op("remove", filepath.Join(root, "no-such-folder", "f")), // rm -f of a missing file succeeds
		op("rename", filepath.Join(root, "absent"), filepath.Join(dir, "moved")),
		up,
		restart,
		observe,
		op("link", filepath.Join(dir, "current"), "releases/1.8.0"),
	}, func(i int, r Result) error {
		ran = append(ran, []string{"begin", "dir", "remove", "rename", "keep", "restart", "observe", "link"}[i])
		return nil
	})
	var oe *OpError
	if !errors.As(err, &oe) || oe.Op.Kind != "rename" {
		t.Fatalf("got %v, want the rename's error", err)
	}
	if strings.Join(ran, " ") != "begin dir remove" {
		t.Errorf("answered: %v, want begin dir remove", ran)
	}
	if h.RoundTrips() != trips+1 {
		t.Errorf("one batch took %d round trips", h.RoundTrips()-trips)
	}
	for _, p := range []string{marker, filepath.Join(dir, "current")} {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("%s exists: a primitive after the failure ran", p)
		}
	}
	// The next batch is read from the right place: the skipped primitives'
	// bytes and argv lines were dropped, not taken as requests.
	if _, err := runOps(h, op("link", filepath.Join(dir, "current"), "releases/1.8.0")); err != nil {
		t.Fatalf("the batch after: %v", err)
	}
	if got, _ := os.Readlink(filepath.Join(dir, "current")); got != "releases/1.8.0" {
		t.Errorf("current -> %q", got)
	}
	// The journal notes what was done, and nothing that was skipped.
	j, _ := os.ReadFile(filepath.Join(root, "state", "journal"))
	if strings.Contains(string(j), "ok restart") || strings.Contains(string(j), "ok keep") {
		t.Errorf("the journal notes a skipped primitive:\n%s", j)
	}
}

// keep: the host says NEED when it lacks the bytes; they go in the next
// batch (keep-data) with the primitives after the keep, once. A second
// keep of the same bytes sends nothing.
func TestAgentKeepSendsBytesOnlyWhenNeeded(t *testing.T) {
	root := rootDir(t)
	h := lockedAgent(t, filepath.Join(root, "state"))
	store := filepath.Join(root, "releases", ".sha256")
	data := []byte("release bytes\n")
	sum := plans.SHA256(string(data))
	path := filepath.Join(store, sum, "relayd")
	after := filepath.Join(root, "after")

	run := func() (sent int, trips int) {
		t.Helper()
		before := h.RoundTrips()
		err := h.Run(context.Background(), []Op{
			keepOp(path, sum, data, "0755"),
			op("link", after, "x"),
		}, func(_ int, r Result) error {
			sent += r.Sent
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return sent, h.RoundTrips() - before
	}
	if sent, trips := run(); sent != len(data) || trips != 2 {
		t.Errorf("first keep: %d bytes in %d round trips, want %d in 2", sent, trips, len(data))
	}
	if b, _ := os.ReadFile(path); string(b) != string(data) {
		t.Errorf("kept %q", b)
	}
	if _, err := os.Lstat(after); err != nil {
		t.Errorf("the primitive after the keep did not run: %v", err)
	}
	if sent, trips := run(); sent != 0 || trips != 1 {
		t.Errorf("second keep: %d bytes in %d round trips, want 0 in 1", sent, trips)
	}
}

// sysctl with WANT: the agent compares the read-back itself and stops the
// batch, so a restart after a sysctl that did not take never runs.
func TestAgentSysctlWantStopsTheBatch(t *testing.T) {
	rootDir(t)
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("unshare not found")
	}
	root := rootDir(t)
	h := New("local", localConn{localRunner{netns: true}}, filepath.Join(root, "state"), agenttest.Set(t), nil)
	if err := lock(h, "x"); err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	after := filepath.Join(root, "after")
	// The kernel takes 1234; the plan wanted 4321 (a value that reads back
	// otherwise, as a clamped sysctl would).
	_, err := runOps(h, op("sysctl", "net.core.somaxconn", "1234", "4321"), op("link", after, "x"))
	if err == nil || !strings.Contains(err.Error(), "net.core.somaxconn: read back 1234, want 4321") {
		t.Errorf("got %v, want the read-back named", err)
	}
	if _, err := os.Lstat(after); err == nil {
		t.Error("the primitive after a wrong read-back ran")
	}
	// Blanks do not count: the kernel reads back tabs, the plan has spaces.
	if _, err := runOps(h, op("sysctl", "net.ipv4.tcp_rmem", "4096 131072 6291456", "4096  131072 6291456")); err != nil {
		t.Errorf("tabs against spaces: %v", err)
	}
}
