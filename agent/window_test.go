package agent

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/relayctl/relayctl/rollout"
)

// The host's own checks, against readings as observe frames them: each
// kind holds on what it should and names what it finds otherwise.
func TestHostChecks(t *testing.T) {
	root := filepath.Dir(stateDir(t))
	rel := filepath.Join(root, "releases", "1.8.0")
	os.MkdirAll(rel, 0o755)
	const B = "@@relayctl-0123456789abcdef"
	frame := func(name, body string) string { return B + " " + name + "\n" + body + "\n\n" + B + " end 0\n" }
	reading := frame("sysctl net.core.rmem_max", "8388608") + frame("current-link", rel) + B + " service\n4242\n" + B + " end 0\n" +
		B + " relay-exe\n" + rel + "/relayd\n" + B + " end 0\n" +
		frame("ss", "UNCONN 0 0 0.0.0.0:7788 0.0.0.0:* users:((\"relayd\",pid=4242,fd=3)) ino:7 sk:1 skmem:(r0,rb8388608,t0,tb212992,f0,w0,o0,bl0,d0)\n"+
			"ESTAB 0 0 10.0.0.1:7788 10.0.0.2:5 users:((\"relayd\",pid=4242,fd=9)) ino:8 sk:2 skmem:(r0,rb212992,t0,tb212992,f0,w0,o0,bl0,d0)")
	tests := []struct{ checks, fails string }{
		{"sysctl\tnet.core.rmem_max\t8388608\nlink\t" + rel + "\npid\t100\t" + rel + "\nrb\t8388608\n", ""},
		{"sysctl\tnet.core.rmem_max\t4194304\n", "sysctl net.core.rmem_max: got 8388608, want 4194304"},
		{"link\t/opt/relay/releases/1.7.0\n", "release link: got " + rel + ", want /opt/relay/releases/1.7.0"},
		{"pid\t4242\t-\n", "relay restarted: got the same pid 4242, want a new one"},
		{"pid\t-\t/opt/relay/releases/1.7.0\n", "relay runs the release in /opt/relay/releases/1.7.0: got " + rel + "/relayd"},
		{"rb\t4194304\n", "ss rb: got rb8388608, want rb4194304"},
		{"rubbish\tx\n", "unknown check rubbish"},
	}
	for _, tt := range tests {
		fails, pid := hostChecks([]byte(reading), B, []byte(tt.checks))
		if fails != tt.fails || pid != "4242" {
			t.Errorf("checks %q: got %q (pid %q), want %q (pid 4242)", tt.checks, fails, pid, tt.fails)
		}
	}
	if fails, pid := hostChecks([]byte(frame("service", "")), B, []byte("pid\t-\t-\nrb\t1\n")); pid != "" || fails != "relay running: got false, want true; ss rb: no socket of the relay on its port" {
		t.Errorf("no relay: got %q (pid %q)", fails, pid)
	}
}

// A window's process reads only the program relayctl sent: one whose
// sha256 is not the one it was started with is not run at all, nor one
// started without the host lock.
func TestAWindowRunsOnlyWhatWasSent(t *testing.T) {
	state := stateDir(t)
	if out := runSession(t, state, "lock\tx\n"); !strings.HasPrefix(out, "LOCKED") {
		t.Fatal(out)
	}
	p := pathsOf(state)
	id := "0123456789abcdef"
	dir := p.windows + "/window-" + id
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.MkdirAll(dir, 0o700)
	marker := filepath.Join(filepath.Dir(state), "ran")
	prog := "relayctl-window 1\nkind rollback\nawait 0\njudge 0\nstable 0\nchecks 0\nobserve 0\nundo-at\nwindow " +
		strconv.Itoa(len(req("dir", 0, nil, nil, marker))) + "\n" + req("dir", 0, nil, nil, marker)
	os.WriteFile(dir+"/program", []byte(prog), 0o600)
	lock, _ := os.OpenFile(state+"/lock", os.O_RDWR, 0)
	defer lock.Close()
	other, _ := os.CreateTemp("", "not-the-lock")
	defer os.Remove(other.Name())
	run := func(sum string, fd3 *os.File) string {
		self, _ := os.Executable()
		var stderr bytes.Buffer
		c := exec.Command(self, "window", state, id, sum)
		c.ExtraFiles = []*os.File{fd3, other}
		c.Stderr = &stderr
		c.Run()
		return stderr.String()
	}
	if got := run(strings.Repeat("0", 64), lock); !strings.Contains(got, "not the one relayctl sent") {
		t.Errorf("a program not sent: %q", got)
	}
	if got := run(sha256Hex([]byte(prog)), other); !strings.Contains(got, "does not hold the host lock") {
		t.Errorf("without the lock: %q", got)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("a program that was not the one sent ran")
	}
}

// The commands a window runs (the relay's start above all, which lives on)
// hold neither the host lock nor the session's socket: the window's
// process marks both close-on-exec again (an inherited descriptor is not).
func TestAWindowsCommandsHoldNeitherTheLockNorTheSocket(t *testing.T) {
	state := stateDir(t)
	out := filepath.Join(filepath.Dir(state), "fds")
	win := req("stop", 1, nil, []string{"/bin/sh", "-c", "ls -l /proc/$$/fd/ > " + out}, "command", "3")
	prog := "relayctl-window 1\nkind rollback\nawait 0\njudge 0\nstable 0\nchecks 0\nobserve 0\nundo-at\nwindow " + strconv.Itoa(len(win)) + "\n" + win
	got := runSession(t, state, "lock\tx\n"+req("detach", 0, []byte(prog), nil, "0123456789abcdef", sha256Hex([]byte(prog)), "1"))
	t.Cleanup(func() { os.RemoveAll(pathsOf(state).windows + "/window-0123456789abcdef") })
	if !strings.HasPrefix(got, "LOCKED\nOK\nVAL ") {
		t.Fatalf("detach: %q", got)
	}
	fds, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(fds), state+"/lock") || strings.Contains(string(fds), "socket:") {
		t.Errorf("the window's command holds the lock or the socket:\n%s", fds)
	}
}

// cutConn is relayctl's end of a connection that is cut after its first
// write: every answer written after it fails.
type cutConn struct{ writes int }

func (c *cutConn) Write(b []byte) (int, error) {
	if c.writes++; c.writes > 1 {
		return 0, os.ErrClosed
	}
	return len(b), nil
}

// A session whose connection is cut while its window runs (the lock's and
// the detach's answers were sent) does nothing more once its window has answered: the rest of the batch (here a folder made; a keep and the
// receipt in an apply's) is not carried out, and the window decides by
// itself. It went on with the batch it had read, and the host filed the
// run's receipt while relayctl, cut off, said the host ends its window.
func TestASessionCutOffStopsAfterItsWindow(t *testing.T) {
	state := stateDir(t)
	marker := filepath.Join(filepath.Dir(state), "after-the-window")
	win := req("dir", 0, nil, nil, filepath.Join(filepath.Dir(state), "in-the-window"))
	prog := "relayctl-window 1\nkind rollback\nawait 0\njudge 0\nstable 0\nchecks 0\nobserve 0\nundo-at\nwindow " + strconv.Itoa(len(win)) + "\n" + win
	in := "lock\tx\n" + req("detach", 0, []byte(prog), nil, "0123456789abcdef", sha256Hex([]byte(prog)), "1") +
		req("dir", 0, nil, nil, marker) + "sync\t0\t0\t0\n"
	s := newSession(pathsOf(state), strings.NewReader(in), &cutConn{})
	s.start()
	t.Cleanup(func() { os.RemoveAll(pathsOf(state).windows + "/window-0123456789abcdef") })
	if _, err := os.Stat(filepath.Join(filepath.Dir(state), "in-the-window")); err != nil {
		t.Fatalf("the window did not run: %v", err)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("the session carried out the rest of its batch with nobody to answer")
	}
}

// The window's line names the relay's pid only as relayctl reads it back
// (rollout.ReadJournal is strict: a word it cannot read makes the whole
// journal unreadable), whatever a reading said.
func TestPidWordIsOneRelayctlReads(t *testing.T) {
	for pid, want := range map[string]string{
		"4242": " pid=4242", "4194304": " pid=4194304",
		"": "", "0": "", "-1": "", "012": "", "1x": "", "4194305": "", "99999999999999999999": "", "1 2": "",
	} {
		line := rollout.KeptByHost(pidOf(pid))
		if got := strings.TrimPrefix(line, "kept by=host"); got != want {
			t.Errorf("pid %q: the window line says %q, want it to end %q", pid, line, want)
		}
		j := "2026-12-06T08:00:00Z begin plan=p checksum=c\n2026-12-06T08:00:00Z start window\n2026-12-06T08:00:01Z window " + line + "\n"
		if _, err := rollout.ReadJournal(j); err != nil {
			t.Errorf("pid %q: relayctl cannot read the line: %v", pid, err)
		}
	}
}
