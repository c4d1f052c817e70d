package shellhost

// agent.sh run here, as root, through ShellHost and a local runner: the
// real script against the real file system. Its lab test runs it over SSH.

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/relayctl/relayctl/internal/agenttest"

	"github.com/relayctl/relayctl/plans"
)

type localConn struct{ localRunner }

func (localConn) Close() error          { return nil }
func (localConn) Address() string       { return "local" }
func (localConn) User() string          { return "root" }
func (localConn) Identity() SSHIdentity { return SSHIdentity{User: "root"} }

// rootDir is a folder only root can write, as agent.sh demands of every
// folder it writes in (t.TempDir is under /tmp, which anyone can write).
func rootDir(t testing.TB) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("agent.sh checks folders are root's: run as root")
	}
	d, err := os.MkdirTemp("/run", "relayctl-agent-test-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(d, 0o755)
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

func lockedAgent(t *testing.T, state string) *Host {
	t.Helper()
	h := New("local", localConn{}, state, agenttest.Set(t), nil)
	if err := lock(h, "test owner"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

func runOps(h *Host, ops ...Op) ([]Result, error) {
	var out []Result
	err := h.Run(context.Background(), ops, func(i int, r Result) error {
		out = append(out, r)
		return nil
	})
	return out, err
}

func TestAgentRefusesUnsafeStateDir(t *testing.T) {
	rootDir(t)
	h := New("local", localConn{}, filepath.Join(t.TempDir(), "state"), agenttest.Set(t), nil)
	err := lock(h, "x")
	if !errors.Is(err, ErrUnsafeHost) || !strings.Contains(err.Error(), "/tmp is not owned by root or is writable by its group or others") {
		t.Errorf("got %v, want ErrUnsafeHost naming /tmp", err)
	}
}

// The state folder, or a folder in it that runs write in, reachable by
// another user (a service whose StateDirectory= was pointed at it, whose
// dynamic user then owns it): refused before the lock, so nothing is ever
// written through a symlink that user planted there.
func TestAgentRefusesStateFoldersAnotherUserOwns(t *testing.T) {
	root := rootDir(t)
	// As DynamicUser=yes with StateDirectory=relayctl makes it: the
	// service's own folder, and the state folder a symlink to it.
	private := filepath.Join(root, "private", "relayctl")
	os.MkdirAll(private, 0o755)
	os.Chown(private, 65534, 65534)
	linked := filepath.Join(root, "linked-state")
	os.Symlink(private, linked)
	err := lock(New("local", localConn{}, linked, agenttest.Set(t), nil), "x")
	if !errors.Is(err, ErrUnsafeHost) || !strings.Contains(err.Error(), private+" (through a symlink in "+linked+") is not owned by root") {
		t.Errorf("state folder a symlink to a service's own: got %v, want ErrUnsafeHost naming %s", err, private)
	}

	src := filepath.Join(root, "relayd.env")
	os.WriteFile(src, []byte("RELAYD_BATCH=8\n"), 0o644)
	tests := []struct {
		sub, plant string
		ops        []Op
	}{
		// A receipt is written as receipts/NAME.json.relayctl-new.
		{"receipts", "r1.json.relayctl-new", []Op{op("begin", "p", "c"), {Kind: "commit", Args: []string{"r1", "applied"}, Data: []byte("{}\n")}}},
		// A backup is copied to stage/NAME.
		{"stage", "backup-x", []Op{op("backup", src, "backup-x")}},
	}
	for _, tt := range tests {
		t.Run(tt.sub, func(t *testing.T) {
			victim := filepath.Join(root, "victim-"+tt.sub)
			if err := os.WriteFile(victim, []byte("root's\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			state := filepath.Join(root, "state-"+tt.sub)
			d := filepath.Join(state, tt.sub)
			os.MkdirAll(d, 0o755)
			os.Chown(d, 65534, 65534)
			// What that user would leave there for root to write through.
			os.Symlink(victim, filepath.Join(d, tt.plant))
			h := New("local", localConn{}, state, agenttest.Set(t), nil)
			err := lock(h, "x")
			if err == nil {
				runOps(h, tt.ops...)
				h.Close()
			}
			if !errors.Is(err, ErrUnsafeHost) || !strings.Contains(err.Error(), d+" is not a folder that belongs to root") {
				t.Errorf("got %v, want ErrUnsafeHost naming %s", err, d)
			}
			if b, _ := os.ReadFile(victim); string(b) != "root's\n" {
				t.Errorf("root wrote through the symlink: the victim holds %q", b)
			}
		})
	}
}

func TestAgentLock(t *testing.T) {
	state := filepath.Join(rootDir(t), "state")
	first := lockedAgent(t, state)
	second := New("local", localConn{}, state, agenttest.Set(t), nil)
	if err := lock(second, "other"); !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), "test owner") {
		t.Errorf("second lock: got %v, want ErrLocked naming the owner", err)
	}
	// The first run dies without unlocking: its owner file stays, but the
	// lock is free (flock dies with its holder), so the next run takes it
	// and is told whose it was.
	first.Close()
	var dead string
	err := second.Run(context.Background(), []Op{op("lock", "other")}, func(_ int, r Result) error {
		dead = r.Value
		return nil
	})
	if err != nil || dead != "test owner" {
		t.Errorf("after a dead run: got %v, dead owner %q; want the lock, naming the dead owner", err, dead)
	}
	unlock(second)
	if _, err := os.Stat(filepath.Join(state, "lock.owner")); !os.IsNotExist(err) {
		t.Errorf("a clean unlock left the owner file: %v", err)
	}
}

// Root never writes through a symlink planted where relayctl writes, and
// refuses a target that is one.
func TestAgentNeverWritesThroughSymlinks(t *testing.T) {
	root := rootDir(t)
	h := lockedAgent(t, filepath.Join(root, "state"))
	etc := filepath.Join(root, "etc-relay")
	os.Mkdir(etc, 0o755)
	victim := filepath.Join(root, "victim")
	os.WriteFile(victim, []byte("precious\n"), 0o644)
	target := filepath.Join(etc, "relayd.env")
	os.Symlink(victim, target+".relayctl-new") // planted beside the target
	// Staging over it is refused (check-folders refuses the host before,
	// as the lab test shows): the symlink is neither followed nor replaced.
	_, err := runOps(h, op("begin", "p", "sha256:x"), keepOp(target+".relayctl-new", plans.SHA256("A=1\nB\n"), []byte("A=1\nB\n"), "0644"))
	if err == nil || !strings.Contains(err.Error(), "is a symlink; relayctl writes no file through or over a symlink") {
		t.Errorf("keep over a planted symlink: got %v, want refused", err)
	}
	if b, _ := os.ReadFile(victim); string(b) != "precious\n" {
		t.Errorf("wrote through the planted symlink: victim now %q", b)
	}
	// restore, which writes through a temp file and a rename, replaces a
	// symlink at its target rather than following it.
	os.WriteFile(filepath.Join(root, "state", "stage", "backup-x"), []byte("A=1\n"), 0o644)
	os.Symlink(victim, filepath.Join(etc, "other.env"))
	if _, err := runOps(h, op("restore", filepath.Join(etc, "other.env"), "backup-x")); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(victim); string(b) != "precious\n" {
		t.Errorf("restore wrote through a symlink: victim now %q", b)
	}
	if fi, err := os.Lstat(filepath.Join(etc, "other.env")); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("the restored file is not a regular file: %v %v", fi, err)
	}
	// A target that is itself a symlink is refused before the window.
	os.Symlink(victim, target)
	for _, o := range []Op{op("file-ok", target), op("backup", target, "backup-config")} {
		if _, err := runOps(h, o); err == nil || !strings.Contains(err.Error(), "is a symlink") {
			t.Errorf("%s on a symlink: got %v, want refused", o.Kind, err)
		}
	}
}

func TestAgentRefusesFoldersOthersCanWrite(t *testing.T) {
	root := rootDir(t)
	h := lockedAgent(t, filepath.Join(root, "state"))
	open := filepath.Join(root, "open")
	os.Mkdir(open, 0o775)
	os.Chmod(open, 0o775)
	if _, err := runOps(h, op("dir", filepath.Join(open, "relay"))); err == nil || !strings.Contains(err.Error(), open+" is not owned by root or is writable by its group or others") {
		t.Errorf("dir under a group-writable folder: got %v", err)
	}
	prog := filepath.Join(root, "relay-service")
	os.WriteFile(prog, []byte("#!/bin/sh\n"), 0o775)
	os.Chmod(prog, 0o775)
	if _, err := runOps(h, op("exec-ok", prog)); err == nil || !strings.Contains(err.Error(), "whoever can change it would run as root") {
		t.Errorf("exec-ok on a group-writable program: got %v", err)
	}
}

// A service command's words reach the program as they are: no shell.
func TestAgentRunsArgvWithoutAShell(t *testing.T) {
	root := rootDir(t)
	h := lockedAgent(t, filepath.Join(root, "state"))
	touch, _ := exec.LookPath("touch")
	odd := filepath.Join(root, "a b $(touch pwned);`id`")
	if _, err := runOps(h, restartOp(restartFixture(touch, odd))); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(odd); err != nil {
		t.Errorf("the word did not reach touch as one argument: %v", err)
	}
	if _, err := os.Stat("pwned"); err == nil {
		os.Remove("pwned")
		t.Error("a shell ran the word")
	}
}

func TestAgentSysctlReadsBack(t *testing.T) {
	rootDir(t)
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("unshare not found")
	}
	// In a network namespace of its own, so the machine's values stay.
	h := New("local", localConn{localRunner{netns: true}}, filepath.Join(rootDir(t), "state"), agenttest.Set(t), nil)
	if err := lock(h, "x"); err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	res, err := runOps(h, op("sysctl", "net.core.somaxconn", "1234"))
	if err != nil || res[0].Value != "1234" {
		t.Errorf("got %v %v, want VAL 1234", res, err)
	}
	if _, err := runOps(h, op("sysctl", "net.core.no_such", "1")); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("a missing key: got %v", err)
	}
	// A value the kernel refuses is reported in the kernel's words, not the
	// shell's "printf: I/O error".
	_, err = runOps(h, op("sysctl", "net.core.somaxconn", "abc"))
	if err == nil || !strings.Contains(err.Error(), "the kernel refused net.core.somaxconn = abc (Invalid argument); it reads 1234") {
		t.Errorf("a refused value: got %v", err)
	}
}

func restartFixture(prog, word string) plans.PlanService {
	return plans.PlanService{Manager: "command", Stop: []string{"/bin/true"}, Start: []string{prog, word}}
}

// While locked, the host is observed in the agent's own session: the same
// facts as a session of its own, with no SSH session more and one round
// trip.
func TestAgentObserves(t *testing.T) {
	r := startFakeRelay(t)
	h := lockedAgent(t, filepath.Join(rootDir(t), "state"))
	trips, sessions := h.RoundTrips(), h.count.count()
	f, err := observeOn(h, r.query(""))
	if err != nil {
		t.Fatal(err)
	}
	if h.count.count() != sessions || h.RoundTrips() != trips+1 {
		t.Errorf("observe through the agent: %d sessions more, %d round trips more; want 0 and 1", h.count.count()-sessions, h.RoundTrips()-trips)
	}
	if !f.Service.Running || f.Service.PID != r.pid || f.Socket.Rcvbuf != r.rcvbuf(t) || f.Release.Current != "1.7.0" {
		t.Errorf("facts through the agent: service %+v, socket %+v, release %+v", f.Service, f.Socket, f.Release)
	}
	// And the agent still answers afterwards.
	if _, err := runOps(h, op("clock")); err != nil {
		t.Errorf("after observe: %v", err)
	}
}

// A command with an empty word is refused on the host, whatever the plan
// says: split at tabs the word would vanish and another command would run.
// All its words are still read, so the next primitive is read as one.
func TestAgentRefusesAnEmptyArgvWord(t *testing.T) {
	root := rootDir(t)
	h := lockedAgent(t, filepath.Join(root, "state"))
	touch, _ := exec.LookPath("touch")
	made := filepath.Join(root, "made")
	_, err := runOps(h, restartOp(plans.PlanService{Manager: "command", Stop: []string{touch, "", made}, Start: []string{touch, made + ".start"}}))
	if err == nil || !strings.Contains(err.Error(), "a command word is empty") {
		t.Errorf("restart with an empty word: %v; want it refused", err)
	}
	for _, f := range []string{made, made + ".start"} {
		if _, err := os.Stat(f); err == nil {
			t.Errorf("%s exists: the command ran", f)
		}
	}
	// The agent is still in step: the next request is answered.
	if _, err := runOps(h, restartOp(restartFixture(touch, made))); err != nil {
		t.Fatalf("the next restart: %v", err)
	}
	if _, err := os.Stat(made); err != nil {
		t.Errorf("the next restart did not run: %v", err)
	}
}

// A value with a newline or a tab would be read on the host as a second
// primitive or another field: such an Op never leaves relayctl, whatever
// built it, and nothing of its batch reaches the host.
func TestHostileValuesNeverReachTheAgent(t *testing.T) {
	root := rootDir(t)
	h := lockedAgent(t, filepath.Join(root, "state"))
	victim := filepath.Join(root, "victim")
	touch, _ := exec.LookPath("touch")
	made := filepath.Join(root, "made")
	for _, tt := range []struct {
		name string
		o    Op
	}{
		{"newline in a field", op("remove", filepath.Join(root, "x")+"\nremove\t"+victim)},
		{"tab in a field", op("remove", filepath.Join(root, "x")+"\t"+victim)},
		{"newline in a command word", restartOp(restartFixture(touch, made+"\nremove\t"+victim))},
		{"NUL in a field", op("remove", victim+"\x00")},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if err := os.WriteFile(victim, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := runOps(h, op("remove", filepath.Join(root, "harmless")), tt.o)
			if err == nil || !(strings.Contains(err.Error(), "newline") || strings.Contains(err.Error(), "tab")) {
				t.Errorf("got %v; want the Op refused before it is sent", err)
			}
			if _, err := os.Stat(victim); err != nil {
				t.Errorf("the victim is gone: %v", err)
			}
			if _, err := os.Stat(made); err == nil {
				t.Error("the command ran")
			}
		})
	}
	// The agent is in step after all of it.
	if _, err := runOps(h, op("remove", victim)); err != nil {
		t.Fatalf("a clean remove after: %v", err)
	}
	if _, err := os.Stat(victim); !os.IsNotExist(err) {
		t.Errorf("the clean remove did not run: %v", err)
	}
}

// A release is trusted only when root alone can change it, all the way
// down: a folder or file of another user's, a group-writable file or a
// symlink inside refuses it even when its relayd has the planned sha256.
// Bytes in the store are never "kept" in a folder another user owns.
func TestAgentChecksReleaseOwnership(t *testing.T) {
	root := rootDir(t)
	h := lockedAgent(t, filepath.Join(root, "state"))
	rel := filepath.Join(root, "releases", "1.8.0")
	os.MkdirAll(rel, 0o755)
	body := []byte("#!/bin/sh\n")
	os.WriteFile(filepath.Join(rel, "relayd"), body, 0o755)
	sha := plans.SHA256(string(body))
	if _, err := runOps(h, op("check-release", rel, sha, "relayd", "-")); err != nil {
		t.Fatalf("a release root owns: %v", err)
	}
	nobody := 65534
	for _, c := range []struct {
		name        string
		plant, undo func()
		want        string
	}{
		{"folder of another user", func() { os.Chown(rel, nobody, 0) }, func() { os.Chown(rel, 0, 0) }, rel + " is not owned by root"},
		{"binary of another user", func() { os.Chown(filepath.Join(rel, "relayd"), nobody, 0) }, func() { os.Chown(filepath.Join(rel, "relayd"), 0, 0) },
			filepath.Join(rel, "relayd") + " is not owned by root"},
		{"group-writable file", func() {
			os.WriteFile(filepath.Join(rel, "lib.so"), body, 0o664)
			os.Chmod(filepath.Join(rel, "lib.so"), 0o664)
		},
			func() { os.Remove(filepath.Join(rel, "lib.so")) }, filepath.Join(rel, "lib.so") + " is not owned by root or is writable"},
		{"symlink inside", func() { os.Symlink("/tmp", filepath.Join(rel, "lib")) }, func() { os.Remove(filepath.Join(rel, "lib")) },
			filepath.Join(rel, "lib") + " is a symlink"},
		{"parent of another user", func() { os.Chown(filepath.Dir(rel), nobody, 0) }, func() { os.Chown(filepath.Dir(rel), 0, 0) },
			filepath.Dir(rel) + " is not owned by root"},
	} {
		c.plant()
		if _, err := runOps(h, op("check-release", rel, sha, "relayd", "-")); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want refused with %q", c.name, err, c.want)
		}
		c.undo()
	}

	store := filepath.Join(root, "releases", ".sha256", sha)
	os.MkdirAll(store, 0o755)
	os.WriteFile(filepath.Join(store, "relayd"), body, 0o755)
	os.Chown(store, nobody, 0)
	if r, err := runOps(h, keepOp(filepath.Join(store, "relayd"), sha, body, "0755")); err == nil || !strings.Contains(err.Error(), store+" is not owned by root") {
		t.Errorf("keep in a store folder of another user: got %v %v, want refused naming it", r, err)
	}
}

// A file relayctl replaces keeps its mode and owner through stage, window
// and rollback: a 0640 config of group nogroup stays 0640 nogroup, never
// the 0644 a new file gets.
func TestAgentKeepsModeAndOwner(t *testing.T) {
	root := rootDir(t)
	h := lockedAgent(t, filepath.Join(root, "state"))
	etc := filepath.Join(root, "etc-relay")
	os.Mkdir(etc, 0o755)
	target := filepath.Join(etc, "relayd.env")
	os.WriteFile(target, []byte("SECRET=1\n"), 0o640)
	os.Chmod(target, 0o640)
	os.Chown(target, 0, 65534)
	modeOf := func(p string) (os.FileMode, uint32) {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Mode().Perm(), fi.Sys().(*syscall.Stat_t).Gid
	}
	next := []byte("SECRET=2\n")
	stage := keepOp(target+".relayctl-new", plans.SHA256(string(next)), next, "0644")
	stage.Args = append(stage.Args, target)
	if _, err := runOps(h, op("begin", "p", "sha256:x"), stage); err != nil && !strings.Contains(err.Error(), "NEED") {
		// keep offers first; the bytes follow as keep-data in the same Run.
		t.Fatal(err)
	}
	if m, g := modeOf(target + ".relayctl-new"); m != 0o640 || g != 65534 {
		t.Errorf("staged file: mode %o gid %d, want 640 65534", m, g)
	}
	if _, err := runOps(h, op("backup", target, "backup-config"), op("rename", target+".relayctl-new", target)); err != nil {
		t.Fatal(err)
	}
	if m, g := modeOf(target); m != 0o640 || g != 65534 {
		t.Errorf("installed file: mode %o gid %d, want 640 65534", m, g)
	}
	os.Chmod(target, 0o644) // the window's file differs, so restore must set it back
	if _, err := runOps(h, op("restore", target, "backup-config")); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(target); string(b) != "SECRET=1\n" {
		t.Errorf("restored %q", b)
	}
	if m, g := modeOf(target); m != 0o640 || g != 65534 {
		t.Errorf("restored file: mode %o gid %d, want 640 65534", m, g)
	}
	// A new file (nothing to take after) gets 0644.
	fresh := filepath.Join(etc, "new.env")
	o := keepOp(fresh+".relayctl-new", plans.SHA256("A=1\n"), []byte("A=1\n"), "0644")
	o.Args = append(o.Args, fresh)
	if _, err := runOps(h, o); err != nil {
		t.Fatal(err)
	}
	if m, _ := modeOf(fresh + ".relayctl-new"); m != 0o644 {
		t.Errorf("a new file: mode %o, want 644", m)
	}
}
