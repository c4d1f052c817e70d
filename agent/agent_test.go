package agent

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestMain lets the test binary stand in for relayctl-agent where a
// session starts a process of the agent (a window's): os.Executable is
// this binary.
func TestMain(m *testing.M) {
	if len(os.Args) > 2 && (os.Args[1] == "window" || os.Args[1] == "spawn" || os.Args[1] == "serve" || os.Args[1] == "install") {
		os.Exit(Main(os.Args, os.Stdin, os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// stateDir is a state folder only root can write, in a folder only root
// can write, as the agent demands (t.TempDir is under /tmp, which anyone
// can write).
func stateDir(t testing.TB) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("the agent checks its folders are root's: run the tests as root")
	}
	d, err := os.MkdirTemp("/run", "relayctl-agent-test-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(d, 0o755)
	t.Cleanup(func() { os.RemoveAll(d) })
	return filepath.Join(d, "state")
}

// runSession runs one session in this process: input is everything relayctl
// sends, the answer what it would read back.
func runSession(t testing.TB, state, input string) string {
	t.Helper()
	var out bytes.Buffer
	s := newSession(pathsOf(state), strings.NewReader(input), &out)
	s.start()
	s.out.Flush()
	return out.String()
}

// locked is a session that takes the lock, then sends reqs and a sync.
func locked(t testing.TB, state string, reqs ...string) []string {
	t.Helper()
	out := runSession(t, state, "lock\ttest\n"+strings.Join(reqs, "")+"sync\t0\t0\t0\n")
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) == 0 || !strings.HasPrefix(lines[0], "LOCKED") {
		t.Fatalf("lock: %q", out)
	}
	return lines[1 : len(lines)-1]
}

func TestLockAndUnlock(t *testing.T) {
	state := stateDir(t)
	out := runSession(t, state, "lock\tme\n"+req("unlock", 0, nil, nil))
	if out != "LOCKED\nOK\n" {
		t.Fatalf("got %q", out)
	}
	if _, err := os.Stat(state + "/lock.owner"); !os.IsNotExist(err) {
		t.Errorf("the owner file stays after unlock: %v", err)
	}
	// A run that dies leaves its owner file: the next lock names it.
	os.WriteFile(state+"/lock.owner", []byte("relayctl dead run\n"), 0o644)
	if out := runSession(t, state, "lock\tme\n"); out != "LOCKED relayctl dead run\n" {
		t.Errorf("got %q, want the dead run named", out)
	}
}

// An unlock skipped after a failure ends its batch as a sync would: the
// next batch (relayctl's rollback, after a window that failed) runs. It
// was answered SKIP whole, the rollback's verdict first.
func TestSkippedUnlockEndsItsBatch(t *testing.T) {
	state := stateDir(t)
	out := runSession(t, state, "lock\tme\n"+
		req("verdict", 0, nil, nil, "keep")+req("unlock", 0, nil, nil)+
		req("verdict", 0, nil, nil, "keep")+"sync\t0\t0\t0\n")
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 5 || !strings.HasPrefix(lines[1], "ERR ") || lines[2] != "SKIP" || !strings.HasPrefix(lines[3], "ERR ") || lines[4] != "OK" {
		t.Fatalf("got %q; want the first batch's ERR and a skipped unlock, then the next batch's verdict run (ERR: no window) and its sync", lines)
	}
}

func TestUnsafeStateFolder(t *testing.T) {
	state := stateDir(t)
	parent := filepath.Dir(state)
	os.Chmod(parent, 0o777)
	out := runSession(t, state, "lock\tme\n")
	if want := "UNSAFE " + parent + " is not owned by root or is writable by its group or others\n"; out != want {
		t.Errorf("got %q, want %q", out, want)
	}
}

func TestABatchStopsAtItsFirstFailure(t *testing.T) {
	state := stateDir(t)
	got := locked(t, state,
		req("file-ok", 0, nil, nil, "/etc/hostname"),
		req("link-ok", 0, nil, nil, "/etc/hostname"),
		req("dir", 0, nil, nil, state+"/x"),
	)
	want := []string{"OK", "ERR /etc/hostname exists and is not a symlink", "SKIP"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("got %q, want %q", got, want)
	}
	j, _ := os.ReadFile(state + "/journal")
	if !strings.Contains(string(j), " fail /etc/hostname exists and is not a symlink\n") {
		t.Errorf("journal: %q", j)
	}
}

// Every primitive of relayctl's table has a handler here (the Sim's test
// holds the Sim to the same table).
func TestAHandlerForEveryPrimitive(t *testing.T) {
	for _, k := range primitiveKinds(t) {
		if _, ok := primitives[k]; !ok {
			t.Errorf("no handler for %s", k)
		}
	}
}
