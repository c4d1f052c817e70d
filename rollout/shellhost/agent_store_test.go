package shellhost

// agent.sh's keep, fetch and place-release, run here as root through
// ShellHost: the release store by content, data sent only on request, and
// fetches by the host itself with curl against a local HTTP server.

import (
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/relayctl/relayctl/plans"
)

func TestAgentKeepSendsOnce(t *testing.T) {
	root := rootDir(t)
	h := lockedAgent(t, filepath.Join(root, "state"))
	data := []byte("relayd bytes\n")
	sha := plans.SHA256(string(data))
	file := filepath.Join(root, "releases", ".sha256", sha, "relayd")
	res, err := runOps(h, keepOp(file, sha, data, "0755"))
	if err != nil || res[0].Sent != len(data) || res[0].Value != "sent 13" {
		t.Fatalf("first keep: %+v %v, want the bytes sent", res, err)
	}
	if fi, err := os.Stat(file); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("stored file: %v %v", fi, err)
	}
	res, err = runOps(h, keepOp(file, sha, data, "0755"))
	if err != nil || res[0].Sent != 0 || res[0].Value != "kept" {
		t.Errorf("second keep: %+v %v, want kept and nothing sent", res, err)
	}
	// The same file changed on the host is sent again, not trusted.
	os.WriteFile(file, []byte("tampered\n"), 0o755)
	if res, err := runOps(h, keepOp(file, sha, data, "0755")); err != nil || res[0].Sent != len(data) {
		t.Errorf("keep over a changed file: %+v %v", res, err)
	}
	// Bytes that do not hash to what they claim are not kept.
	bad := filepath.Join(root, "releases", ".sha256", strings.Repeat("0", 64), "relayd")
	if _, err := runOps(h, keepOp(bad, strings.Repeat("0", 64), data, "0755")); err == nil || !strings.Contains(err.Error(), "have sha256 "+sha) {
		t.Errorf("mismatched bytes: got %v", err)
	}
	if _, err := os.Stat(bad); !os.IsNotExist(err) {
		t.Errorf("mismatched bytes were kept: %v", err)
	}
	// A planted symlink is refused, and what it points at stays.
	victim := filepath.Join(root, "victim")
	os.WriteFile(victim, []byte("precious\n"), 0o644)
	link := filepath.Join(root, "releases", "x.relayctl-new")
	os.Symlink(victim, link)
	if _, err := runOps(h, keepOp(link, sha, data, "0644")); err == nil || !strings.Contains(err.Error(), "is a symlink") {
		t.Errorf("keep over a symlink: got %v", err)
	}
	if b, _ := os.ReadFile(victim); string(b) != "precious\n" {
		t.Errorf("wrote through a symlink: %q", b)
	}
	// The connection goes on after a refused keep: the protocol is in step.
	if res, err := runOps(h, op("clock")); err != nil || res[0].Value == "" {
		t.Errorf("after a refused keep: %v %v", res, err)
	}
	// place-release makes the version folder from the store.
	dir := filepath.Join(root, "releases", "1.8.0")
	if _, err := runOps(h, op("place-release", dir, file, sha, "relayd", "-")); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "relayd")); string(b) != string(data) {
		t.Errorf("placed release: %q", b)
	}
}

func TestAgentFetch(t *testing.T) {
	root := rootDir(t)
	h := lockedAgent(t, filepath.Join(root, "state"))
	data := []byte("relayd served over http\n")
	sha := plans.SHA256(string(data))
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		switch r.URL.Path {
		case "/relayd":
			w.Write(data)
		case "/slow":
			time.Sleep(3 * time.Second)
			w.Write(data)
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	store := func(sha string) string { return filepath.Join(root, "releases", ".sha256", sha, "relayd") }
	fetch := func(url, sha, timeout string) ([]Result, error) {
		return runOps(h, op("fetch", store(sha), sha, url, "1048576", timeout))
	}
	res, err := fetch(srv.URL+"/relayd", sha, "10")
	if err != nil || res[0].Value != "fetched 24" || res[0].Sent != 0 {
		t.Fatalf("fetch: %+v %v", res, err)
	}
	if res, err := fetch(srv.URL+"/relayd", sha, "10"); err != nil || res[0].Value != "kept" || hits.Load() != 1 {
		t.Errorf("second fetch: %+v %v, %d requests; want kept without a request", res, err, hits.Load())
	}
	other := strings.Repeat("1", 64)
	tests := []struct{ url, sha, timeout, want string }{
		{srv.URL + "/relayd", other, "10", "the file fetched from " + srv.URL + "/relayd has sha256 " + sha + ", want " + other + " (nothing was written)"},
		{srv.URL + "/missing", other, "10", "fetch " + srv.URL + "/missing: the requested URL returned error: 404 (nothing was written)"},
		{srv.URL + "/slow", other, "1", "fetch " + srv.URL + "/slow: timed out after 1 seconds (nothing was written)"},
	}
	for _, tt := range tests {
		_, err := fetch(tt.url, tt.sha, tt.timeout)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: got %v, want %q", tt.url, err, tt.want)
		}
		if _, err := os.Stat(store(tt.sha)); !os.IsNotExist(err) {
			t.Errorf("%s: something was written: %v", tt.url, err)
		}
	}
	left, _ := filepath.Glob(filepath.Join(root, "releases", ".sha256", other, ".relayctl.*"))
	if len(left) > 0 {
		t.Errorf("temporary files left: %v", left)
	}
}

// A write that fails on a full disk keeps the host's own words, and the
// bytes that could not be written are still read: the next request is read
// as a request, not as the rest of the file.
func TestAgentKeepOnAFullDisk(t *testing.T) {
	root := rootDir(t)
	h := lockedAgent(t, filepath.Join(root, "state"))
	full := filepath.Join(root, "small")
	os.Mkdir(full, 0o755)
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=64k,mode=0755", "relayctl-agent-test", full).CombinedOutput(); err != nil {
		t.Skipf("mount a small tmpfs: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", full).Run() })
	data := []byte(strings.Repeat("relayd bytes\n", 40000)) // 520,000 bytes: more than fits
	sha := plans.SHA256(string(data))
	_, err := runOps(h, keepOp(filepath.Join(full, "relayd"), sha, data, "0755"))
	if err == nil || !strings.Contains(err.Error(), "No space left on device") {
		t.Fatalf("keep on a full disk: got %v, want the host's own error", err)
	}
	if left, _ := filepath.Glob(filepath.Join(full, ".relayctl.*")); len(left) > 0 {
		t.Errorf("temporary files left: %v", left)
	}
	if res, err := runOps(h, op("clock")); err != nil || res[0].Value == "" {
		t.Errorf("the next request after a failed keep: %v %v; want it answered", res, err)
	}
}

// The journal is written ahead: on a full disk, a step whose start cannot
// be noted does not start, and a change the journal cannot note is
// answered ERR (so relayctl undoes it) rather than OK.
func TestAgentJournalIsWrittenAhead(t *testing.T) {
	root := rootDir(t)
	state := filepath.Join(root, "state")
	os.Mkdir(state, 0o755)
	// Room for the agent (the session installs it there first), then
	// filled up during the run.
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=16m,mode=0755", "relayctl-journal-test", state).CombinedOutput(); err != nil {
		t.Skipf("mount a small tmpfs: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", state).Run() })
	h := lockedAgent(t, state)
	if _, err := runOps(h, op("begin", "p", "sha256:x")); err != nil {
		t.Fatal(err)
	}
	exec.Command("dd", "if=/dev/zero", "of="+filepath.Join(state, "fill"), "bs=4k").Run() // until the disk is full
	// and the journal's last page, which a short line would still fit in.
	j, err := os.OpenFile(filepath.Join(state, "journal"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	for range 4096 {
		if _, err := j.WriteString("2026-12-01T00:00:00.000000000Z fail padding\n"); err != nil {
			break
		}
	}
	j.Close()
	victim := filepath.Join(root, "victim")
	os.WriteFile(victim, []byte("x"), 0o644)
	if _, err := runOps(h, op("step", "start set-sysctl: a step"), op("remove", victim)); err == nil || !strings.Contains(err.Error(), "cannot write the journal") {
		t.Errorf("a step on a full journal: got %v, want refused", err)
	}
	if _, err := os.Stat(victim); err != nil {
		t.Errorf("the primitive after a step that could not be journalled ran: %v", err)
	}
	_, err = runOps(h, op("remove", victim))
	if err == nil || !strings.Contains(err.Error(), "remove was done, but the journal") {
		t.Errorf("a change on a full journal: got %v, want ERR saying so", err)
	}
}
