package kerneltest

import (
	"bufio"
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// A holder in a process of its own: the test binary again, running
// TestHelperHolder, which takes the lock at KERNELTEST_HOLD, says "held"
// and keeps it until its stdin closes.
func TestHelperHolder(t *testing.T) {
	path := os.Getenv("KERNELTEST_HOLD")
	if path == "" {
		t.Skip("a helper process of the holder tests")
	}
	h, err := Take(path, Me("helper holder"), os.Stderr, "helper")
	if err != nil {
		t.Fatal(err)
	}
	os.Stdout.WriteString("held\n")
	io.Copy(io.Discard, os.Stdin)
	h.Release()
}

// holder is another process holding the lock at path until release.
type holder struct {
	cmd     *exec.Cmd
	release io.Closer
}

// startHolder runs argv, which takes the lock and prints "held", and
// returns once it holds it.
func startHolder(t *testing.T, env []string, argv ...string) *holder {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = "../.."
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h := &holder{cmd: cmd, release: stdin}
	t.Cleanup(func() { h.stop() })
	if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "held\n" {
		t.Fatalf("the holder said %q, %v; want held", line, err)
	}
	return h
}

func (h *holder) stop() {
	h.release.Close()
	h.cmd.Wait()
}

// syncBuffer is what a waiter writes, read while it waits.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// waitFor polls until got() contains want, or fails after a minute.
func waitFor(t *testing.T, got func() string, want string) string {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !strings.Contains(got(), want); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waited a minute for %q; got %q", want, got())
		}
	}
	return got()
}

// takeAsync takes the lock at path in the background as "second".
func takeAsync(t *testing.T, path string, w io.Writer) <-chan *Held {
	ch := make(chan *Held, 1)
	go func() {
		h, err := Take(path, Me("second holder"), w, "second")
		if err != nil {
			t.Error(err)
		}
		ch <- h
	}()
	return ch
}

var sinceRE = regexp.MustCompile(` since (\S+)\n`)

// checkSince checks that the message's time is a recent RFC 3339 one.
func checkSince(t *testing.T, msg string) {
	t.Helper()
	m := sinceRE.FindStringSubmatch(msg)
	if m == nil {
		t.Fatalf("no time in %q", msg)
	}
	at, err := time.Parse(time.RFC3339, m[1])
	if err != nil || time.Since(at) > time.Minute || time.Since(at) < -time.Second {
		t.Errorf("since %q (%v): want the time the holder took the lock", m[1], err)
	}
}

// Two holders: the second waits, says who holds the lock and since when,
// and takes it (recording itself) once the first lets it go.
func TestTheSecondHolderNamesTheFirst(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lock")
	first := startHolder(t, []string{"KERNELTEST_HOLD=" + path}, os.Args[0], "-test.run=^TestHelperHolder$")
	var msg syncBuffer
	second := takeAsync(t, path, &msg)
	want := "second: waiting for the machine-wide sysctl lock held by helper holder (pid " + strconv.Itoa(first.cmd.Process.Pid) + ", user "
	checkSince(t, waitFor(t, msg.String, want))
	select {
	case <-second:
		t.Fatal("the second took the lock while the first held it")
	default:
	}
	first.stop()
	h := <-second
	if got, ok := ReadHolder(path); !ok || got.PID != os.Getpid() || got.Command != "second holder" {
		t.Errorf("the lock's record after the second took it: %+v, %v; want this process, second holder", got, ok)
	}
	h.Release()
	if got, ok := ReadHolder(path); ok {
		t.Errorf("a record after the lock was let go: %+v", got)
	}
	if n := strings.Count(msg.String(), "waiting for"); n != 1 {
		t.Errorf("the second said it waited %d times, want once:\n%s", n, msg.String())
	}
}

func requireShell(t *testing.T) {
	t.Helper()
	for _, p := range []string{"bash", "flock"} {
		if _, err := exec.LookPath(p); err != nil {
			t.Skipf("%s not installed", p)
		}
	}
}

// A script (kernel_lock, scripts/demo-lib.sh) waiting names a holder of
// this package, and this package waiting names a script: both read and
// write the same record.
func TestScriptsAndTestsNameEachOther(t *testing.T) {
	requireShell(t)
	path := filepath.Join(t.TempDir(), "lock")

	h, err := Take(path, Me("kerneltest.test TestX"), io.Discard, "test")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", "-c", `set -eu; . scripts/demo-lib.sh; KERNEL_LOCK=$1; KERNEL_LOCK_WAIT=1 kernel_lock a-script`, "bash", path)
	cmd.Dir = "../.."
	out, err := cmd.CombinedOutput()
	want := "a-script: waiting for the machine-wide sysctl lock held by kerneltest.test TestX (pid " + strconv.Itoa(os.Getpid()) + ", user "
	if err == nil || !strings.Contains(string(out), want) || !strings.Contains(string(out), "a-script: error: could not take "+path+" in 1s") {
		t.Errorf("kernel_lock while a test held the lock: %v\n%s\nwant it to fail after 1s, naming %q", err, out, want)
	}
	checkSince(t, string(out))
	h.Release()

	script := startHolder(t, nil, "bash", "-c", `set -eu; . scripts/demo-lib.sh; KERNEL_LOCK=$1; kernel_lock a-script "make demo"; echo held; cat >/dev/null`, "bash", path)
	var msg syncBuffer
	second := takeAsync(t, path, &msg)
	checkSince(t, waitFor(t, msg.String, "second: waiting for the machine-wide sysctl lock held by make demo (pid "+strconv.Itoa(script.cmd.Process.Pid)+", user "))
	script.stop()
	(<-second).Release()
}

// A holder that records nothing (a build that predates the record, or
// flock(1) by hand), over the stale record of one that has exited, is
// "an unknown process", said once a holder has had time to write.
func TestAHolderWithoutARecord(t *testing.T) {
	requireShell(t)
	path := filepath.Join(t.TempDir(), "lock")
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(path, []byte(Holder{PID: dead.Process.Pid, User: "root", Since: time.Now(), Command: "gone"}.record()), 0o644)
	first := startHolder(t, nil, "flock", path, "sh", "-c", "echo held; cat >/dev/null")
	var msg syncBuffer
	second := takeAsync(t, path, &msg)
	got := waitFor(t, msg.String, "second: waiting for the machine-wide sysctl lock held by an unknown process (none recorded in "+path+")\n")
	if strings.Contains(got, "gone") {
		t.Errorf("a waiter named a holder that has exited: %q", got)
	}
	first.stop()
	(<-second).Release()
}

// The lock file is in /tmp, where anyone can put a symlink: neither this
// package nor kernel_lock follows one (nor creates its target), and
// neither writes into a file another user owns.
func TestTheLockFileIsNeverASymlink(t *testing.T) {
	requireShell(t)
	dir := t.TempDir()
	path, target := filepath.Join(dir, "lock"), filepath.Join(dir, "target")
	if err := os.Symlink(target, path); err != nil {
		t.Fatal(err)
	}
	if h, err := Take(path, Me("test"), io.Discard, "test"); err == nil {
		h.Release()
		t.Error("Take followed a symlink")
	}
	cmd := exec.Command("bash", "-c", `set -eu; . scripts/demo-lib.sh; KERNEL_LOCK=$1; kernel_lock a-script`, "bash", path)
	cmd.Dir = "../.."
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "a-script: error: "+path+" is a symlink: remove it") {
		t.Errorf("kernel_lock on a symlink: %v\n%s", err, out)
	}
	if _, err := os.Lstat(target); err == nil {
		t.Error("the symlink's target was created")
	}

	if os.Geteuid() != 0 {
		return
	}
	other := filepath.Join(dir, "other")
	os.WriteFile(other, nil, 0o644)
	os.Chown(other, 65534, 65534)
	if h, err := Take(other, Me("test"), io.Discard, "test"); err == nil || !strings.Contains(err.Error(), "is not root's") {
		if err == nil {
			h.Release()
		}
		t.Errorf("Take of a file nobody owns: %v, want a refusal", err)
	}
	cmd = exec.Command("bash", "-c", `set -eu; . scripts/demo-lib.sh; KERNEL_LOCK=$1; kernel_lock a-script`, "bash", other)
	cmd.Dir = "../.."
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "is not a regular file of root's") {
		t.Errorf("kernel_lock on a file nobody owns: %v\n%s", err, out)
	}
}

func TestHolderRecord(t *testing.T) {
	at := time.Date(2026, 12, 1, 21, 30, 7, 0, time.UTC)
	h := Holder{PID: 4242, User: "root", Since: at, Command: oneLine("relayctl apply\nlab.plan")}
	line := h.record()
	if line != "pid=4242 user=root since=2026-12-01T21:30:07Z command=relayctl apply lab.plan\n" {
		t.Errorf("record: %q", line)
	}
	got, ok := parseHolder(line)
	if !ok || got != h {
		t.Errorf("parse(%q) = %+v, %v; want %+v", line, got, ok, h)
	}
	if s := h.String(); s != "relayctl apply lab.plan (pid 4242, user root) since 2026-12-01T21:30:07Z" {
		t.Errorf("String: %q", s)
	}
	for _, bad := range []string{"", "\n", "pid=x user=root since=2026-12-01T21:30:07Z command=a", "pid=1 user=root since=yesterday command=a", "pid=1 user=root command=a"} {
		if got, ok := parseHolder(bad); ok {
			t.Errorf("parse(%q) = %+v, want no holder", bad, got)
		}
	}
}
