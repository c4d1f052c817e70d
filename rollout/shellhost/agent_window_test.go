package shellhost

// The window's process (agent.sh): the real script, as root, locally. A
// window outlives the session that started it (killed, process tree and
// all), holds the host lock until it has ended, ends by itself when the
// session is gone, and waits for relayctl's word while it is not.

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/relayctl/relayctl/plans"
	"github.com/relayctl/relayctl/rollout"
)

// windowRig is a state folder, a release link and a query that reads it.
type windowRig struct {
	root, state, link, release, marker string
	q                                  Query
}

func newWindowRig(t *testing.T) *windowRig {
	root := rootDir(t)
	w := &windowRig{root: root, state: filepath.Join(root, "state"), link: filepath.Join(root, "current"),
		release: filepath.Join(root, "releases", "1.8.0"), marker: filepath.Join(root, "started")}
	os.MkdirAll(w.release, 0o755)
	paths := plans.PlanPaths(plans.DefaultPaths)
	paths.Current, paths.Releases, paths.StateDir = w.link, filepath.Join(root, "releases"), w.state
	w.q = Query{Port: 7788, Paths: paths, Service: plans.PlanService{Manager: "none"}}
	return w
}

// window is a detach whose ops switch the link and restart with a slow
// stop (stopFor) and a start that leaves the marker, then read back; its
// only check is the link, and its rollback points the link back.
func (w *windowRig) window(stopFor string, await time.Duration) []Op {
	touch, _ := exec.LookPath("touch")
	restart := restartOp(plans.PlanService{Manager: "command", Stop: []string{"/bin/sh", "-c", "sleep " + stopFor}, Start: []string{touch, w.marker}})
	ops := []Op{op("step", "start window"), op("link", w.link, w.release), restart, {Kind: "observe", Query: &w.q}}
	undo := []Op{op("step", "start rollback"), op("remove", w.link)}
	win := &rollout.Window{ID: "0123456789abcdef", Await: await, Judge: 2 * time.Second, Observe: &w.q,
		Checks: []rollout.HostCheck{{Kind: "link", Args: []string{w.release}}}, Undo: [][]Op{undo}, UndoAt: []int{0, 1, 1, 1, 1}}
	return append([]Op{{Kind: "detach", Args: []string{win.ID}, Window: win}}, ops...)
}

func (w *windowRig) journal() string {
	b, _ := os.ReadFile(filepath.Join(w.state, "journal"))
	return string(b)
}

// waitJournal waits (bounded) until the journal holds want.
func (w *windowRig) waitJournal(t *testing.T, want string) {
	t.Helper()
	for deadline := time.Now().Add(15 * time.Second); !strings.Contains(w.journal(), want); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the journal never said %q:\n%s", want, w.journal())
		}
	}
}

// lockFree says whether the host lock is free.
func (w *windowRig) lockFree() bool {
	f, err := os.OpenFile(filepath.Join(w.state, "lock"), os.O_RDWR, 0)
	if err != nil {
		return false
	}
	defer f.Close()
	if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
		return false
	}
	syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	return true
}

// killSessions kills every agent session of state, and every process
// under each (as a session teardown would), but no window's process.
func killSessions(t *testing.T, state string) {
	t.Helper()
	for range 5 {
		for _, pid := range sessionTree(state) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// sessionTree are the agent sessions of state and their descendants.
func sessionTree(state string) []int {
	parent := map[int]int{}
	var roots []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, _ := os.ReadFile("/proc/" + e.Name() + "/stat")
		f := strings.Fields(string(st[strings.LastIndexByte(string(st), ')')+1:]))
		if len(f) > 1 {
			parent[pid], _ = strconv.Atoi(f[1])
		}
		cmd, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if strings.Contains(string(cmd), "\x00serve\x00"+state+"\x00") {
			roots = append(roots, pid)
		}
	}
	tree := append([]int(nil), roots...)
	for grew := true; grew; {
		grew = false
		for pid, pp := range parent {
			if hasPID(tree, pp) && !hasPID(tree, pid) {
				tree, grew = append(tree, pid), true
			}
		}
	}
	return tree
}

func hasPID(s []int, n int) bool {
	for _, x := range s {
		if x == n {
			return true
		}
	}
	return false
}

// A window whose session is killed while its relay is stopped goes on: the
// start runs, the window reads itself back, keeps it, and the lock is free
// only once it has ended.
func TestAgentWindowOutlivesItsSession(t *testing.T) {
	w := newWindowRig(t)
	h := lockedAgent(t, w.state)
	if _, err := runOps(h, op("begin", "p", "sha256:x")); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := runOps(h, w.window("1", time.Minute)...); done <- err }()
	w.waitJournal(t, "start window")
	killSessions(t, w.state)
	if err := <-done; !rollout.IsConnLost(err) {
		t.Fatalf("the window's batch: %v, want the connection lost", err)
	}
	if w.lockFree() {
		t.Error("the lock was free while the window was still running")
	}
	w.waitJournal(t, "window kept by=host")
	if _, err := os.Stat(w.marker); err != nil {
		t.Errorf("the relay's start did not run after the session died: %v", err)
	}
	for deadline := time.Now().Add(5 * time.Second); !w.lockFree(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the lock is still held after the window ended")
		}
	}
}

// While its session lives, a window waits for relayctl's word: keep ends it
// kept; undo runs relayctl's rollback.
func TestAgentWindowWaitsForTheVerdict(t *testing.T) {
	for _, tt := range []struct {
		name    string
		await   time.Duration
		verdict []Op
		want    string
	}{
		{"keep", time.Minute, []Op{op("verdict", "keep")}, "window kept by=controller"},
		{"undo", time.Minute, []Op{op("verdict", "undo"), op("step", "start rollback"), op("remove", "LINK")}, "window rolled-back by=controller"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			w := newWindowRig(t)
			h := lockedAgent(t, w.state)
			if _, err := runOps(h, append([]Op{op("begin", "p", "sha256:x")}, w.window("0", tt.await)...)...); err != nil {
				t.Fatal(err)
			}
			if _, err := observeOn(h, w.q); err != nil { // the session serves while the window waits
				t.Fatalf("observe beside the waiting window: %v", err)
			}
			for i := range tt.verdict {
				if len(tt.verdict[i].Args) == 1 && tt.verdict[i].Args[0] == "LINK" {
					tt.verdict[i].Args[0] = w.link
				}
			}
			res, err := runOps(h, tt.verdict...)
			switch {
			case err != nil:
				t.Fatalf("verdict: %v", err)
			case tt.name == "keep" && res[0].Value != "kept by=controller":
				t.Errorf("keep answered %q", res[0].Value)
			}
			// The window notes its end after its last answer, which the
			// session may already have relayed: give it a moment.
			for deadline := time.Now().Add(2 * time.Second); !strings.Contains(w.journal(), tt.want) && time.Now().Before(deadline); {
				time.Sleep(10 * time.Millisecond)
			}
			if !strings.Contains(w.journal(), tt.want) {
				t.Errorf("journal lacks %q:\n%s", tt.want, w.journal())
			}
			if _, err := os.Lstat(w.link); (err == nil) != (tt.name != "undo") {
				t.Errorf("the link after %s: %v", tt.name, err)
			}
			if w.lockFree() {
				t.Error("the lock is free while the session holds it")
			}
		})
	}
}

// A session that brought no word through the whole await (relayctl gone
// quiet, or its network silent: sshd keeps such a session until its own
// ClientAlive settings or TCP notice, hours later by default) is ended by
// the window when it decides by itself, so the host lock is free once the
// window has ended; a word that comes later finds the session gone, as a
// lost connection, and relayctl reads the journal. On the code before, the
// silent session held the lock after the window had ended, and the next
// run found the host busy.
func TestAgentWindowEndsASilentSession(t *testing.T) {
	w := newWindowRig(t)
	h := lockedAgent(t, w.state)
	if _, err := runOps(h, append([]Op{op("begin", "p", "sha256:x")}, w.window("0", time.Second)...)...); err != nil {
		t.Fatal(err)
	}
	w.waitJournal(t, "window kept by=host")
	for deadline := time.Now().Add(5 * time.Second); !w.lockFree(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the lock is still held 5 s after the window ended by itself:\n%s", w.journal())
		}
	}
	if _, err := runOps(h, op("verdict", "keep")); !rollout.IsConnLost(err) {
		t.Errorf("a word after the window ended the session: %v, want a lost connection", err)
	}
}
