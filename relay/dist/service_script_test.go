package dist_test

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/relayctl/relayctl/relay/dist"
)

// scriptFunc is one function of relay-service.sh, as written there.
func scriptFunc(t *testing.T, name string) string {
	t.Helper()
	s := string(dist.ServiceScript)
	start := strings.Index(s, "\n"+name+"() {")
	if start < 0 {
		t.Fatalf("relay-service.sh defines no %s", name)
	}
	body := s[start+1:]
	return body[:strings.Index(body, "\n}\n")+3]
}

// listening finds a process's UDP socket by its descriptors' types and
// inodes, and a file whose name holds a line like "socket:[INODE]" (of a
// socket that is another process's) does not pass for one.
func TestListeningFindsTheSocketAndNoNameForOne(t *testing.T) {
	testListening(t, machineShell)
}

func testListening(t *testing.T, sh shell) {
	conn, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	port := conn.LocalAddr().(*net.UDPAddr).Port
	listening := func(pid, port int) error {
		return sh(scriptFunc(t, "listening")+`listening "$1" "$2"`, strconv.Itoa(pid), strconv.Itoa(port)).Run()
	}
	if err := listening(os.Getpid(), port); err != nil {
		t.Errorf("the socket on port %d is not found: %v", port, err)
	}
	if err := listening(os.Getpid(), port+1); err == nil {
		t.Errorf("found a socket on port %d, which this process does not have", port+1)
	}

	// Another process, with no socket, holding a file named after this
	// process's socket on a line of its own.
	f, err := conn.(*net.UDPConn).File()
	if err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	f.Close()
	name := filepath.Join(t.TempDir(), "x\nsocket:["+strconv.FormatUint(st.Ino, 10)+"]")
	decoy, err := os.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	defer decoy.Close()
	other := exec.Command("sleep", "30")
	other.ExtraFiles = []*os.File{decoy}
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { other.Process.Kill(); other.Wait() }()
	if err := listening(other.Process.Pid, port); err == nil {
		t.Errorf("a process holding only a file named %q passed for listening on port %d", name, port)
	}
}

// private_above holds every folder above a path, as written and as
// resolved, to the rule (the caller's or root's, writable by no one else
// unless sticky or a symlink), with one stat for all of them, and names
// the folder that breaks it, or one it cannot stat.
func TestPrivateAboveNamesTheFolderThatBreaksTheRule(t *testing.T) {
	testPrivateAbove(t, machineShell)
}

func testPrivateAbove(t *testing.T, sh shell) {
	dir := t.TempDir()
	mk := func(name string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		os.Mkdir(p, 0o700)
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	own, sticky, open := mk("own", 0o755), mk("sticky", os.ModeSticky|0o777), mk("open", 0o777)
	os.Mkdir(filepath.Join(own, "sub"), 0o755)
	os.Mkdir(filepath.Join(open, "sub"), 0o755)
	link := filepath.Join(own, "link")
	os.Symlink(filepath.Join(open, "sub"), link)
	for _, p := range []string{filepath.Join(own, "sub", "f"), filepath.Join(sticky, "f"), filepath.Join(open, "sub", "f")} {
		os.WriteFile(p, nil, 0o644)
	}
	me := strconv.Itoa(os.Getuid())
	script := "me=" + me + "\nerr() { printf '%s\\n' \"$*\" >&2; }\n" +
		scriptFunc(t, "prefixes") + scriptFunc(t, "above_both") + scriptFunc(t, "folder_fault") + scriptFunc(t, "private_above") +
		`private_above "$1" "settings file"`
	for _, tt := range []struct {
		path, want string // want: "" passes, else the words on stderr
	}{
		{filepath.Join(own, "sub", "f"), ""},
		{filepath.Join(sticky, "f"), ""},
		{filepath.Join(open, "sub", "f"), open + " above it is group- or world-writable (mode 777): chmod go-w it"},
		// Written through a symlink of the caller's: the folders it resolves
		// to are checked too.
		{filepath.Join(link, "f"), open + " above it is group- or world-writable (mode 777)"},
		{filepath.Join(dir, "missing", "f"), "cannot resolve it"},
	} {
		out, err := sh(script, tt.path).CombinedOutput()
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s: refused: %s", tt.path, out)
		case tt.want != "" && (err == nil || !strings.Contains(string(out), tt.want)):
			t.Errorf("%s: %v %q, want refused with %q", tt.path, err, out, tt.want)
		}
	}
}

// alive, is_relayd and running_pid read /proc and the pid file with the
// shell's own read, and decide as sed and $(cat) did: a zombie is dead, a
// name holding ") " or a newline does not hide the state, and only a
// process named relayd is the relay. A pid file must be one line of digits
// (with or without its newline; $(cat) also took a blank line after it).
func TestAliveAndRunningPidReadWithoutAProcess(t *testing.T) {
	testAliveAndRunningPid(t, machineShell)
}

func testAliveAndRunningPid(t *testing.T, sh shell) {
	script := scriptFunc(t, "only_line") + scriptFunc(t, "alive") + scriptFunc(t, "is_relayd") + scriptFunc(t, "running_pid") +
		`RELAY_PIDFILE=$2; case $1 in alive) alive "$3" ;; relayd) is_relayd "$3" ;; pid) running_pid ;; esac`
	run := func(what, pidfile string, pid int) (string, bool) {
		out, err := sh(script, what, pidfile, strconv.Itoa(pid)).Output()
		return strings.TrimSpace(string(out)), err == nil
	}
	start := func(name string, args ...string) *exec.Cmd {
		c := exec.Command(name, args...)
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		return c
	}

	// A shell that renames itself ("a) Z\nb": a state-like letter after a
	// ") " in its name, on a line of its own) and waits.
	odd := start("sh", "-c", `printf 'a) Z\nb' >/proc/$$/comm; sleep 30`)
	defer func() { odd.Process.Kill(); odd.Wait() }()
	for i := 0; i < 100; i++ {
		if b, _ := os.ReadFile("/proc/" + strconv.Itoa(odd.Process.Pid) + "/comm"); strings.HasPrefix(string(b), "a) Z") {
			break
		}
		exec.Command("sleep", "0.01").Run()
	}
	if _, ok := run("alive", "", odd.Process.Pid); !ok {
		t.Errorf("a process named \"a) Z\\nb\" reads as dead")
	}

	zombie := start("sleep", "30")
	zombie.Process.Kill()
	for i := 0; i < 100; i++ { // until the kernel shows it exited, not yet collected
		if b, _ := os.ReadFile("/proc/" + strconv.Itoa(zombie.Process.Pid) + "/stat"); strings.Contains(string(b), ") Z ") {
			break
		}
		exec.Command("sleep", "0.01").Run()
	}
	if _, ok := run("alive", "", zombie.Process.Pid); ok {
		t.Errorf("a zombie reads as alive")
	}
	zombie.Wait()
	if _, ok := run("alive", "", zombie.Process.Pid); ok {
		t.Errorf("a process that is gone reads as alive")
	}

	// A process named relayd: a copy of sleep by that name.
	dir := t.TempDir()
	sleepPath, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatal(err)
	}
	bin, err := os.ReadFile(sleepPath)
	if err != nil {
		t.Fatal(err)
	}
	relayd := filepath.Join(dir, "relayd")
	if err := os.WriteFile(relayd, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	r := start(relayd, "30")
	defer func() { r.Process.Kill(); r.Wait() }()
	if _, ok := run("relayd", "", r.Process.Pid); !ok {
		t.Errorf("a live process named relayd is not the relay")
	}
	if _, ok := run("relayd", "", odd.Process.Pid); ok {
		t.Errorf("a process named otherwise passed for the relay")
	}

	pidfile := filepath.Join(dir, "relayd.pid")
	p := strconv.Itoa(r.Process.Pid)
	for _, tt := range []struct {
		content string
		ok      bool
	}{
		{p + "\n", true},
		{p, true}, // no newline: $(cat) took it too
		{p + "\n" + p + "\n", false},
		{p + "\n\n", false},
		{" " + p + "\n", false},
		{"", false},
		{strconv.Itoa(odd.Process.Pid) + "\n", false}, // alive, not relayd
	} {
		os.WriteFile(pidfile, []byte(tt.content), 0o644)
		out, ok := run("pid", pidfile, 0)
		switch {
		case ok != tt.ok:
			t.Errorf("pid file %q: running_pid %v (%q), want %v", tt.content, ok, out, tt.ok)
		case ok && out != p:
			t.Errorf("pid file %q: running_pid printed %q, want %s", tt.content, out, p)
		}
	}
	os.Remove(pidfile)
	if _, ok := run("pid", pidfile, 0); ok {
		t.Errorf("no pid file: running_pid found a relay")
	}
}
