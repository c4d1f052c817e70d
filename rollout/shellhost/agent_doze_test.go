package shellhost

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// dozeFuncs are the agent's doze and wake with what they use, in a shell
// with test -ef (as the agent finds dash, bash and busybox).
func dozeFuncs(t *testing.T) string {
	return "ef_ok=1\n" + agentFunc(t, "start_of") + agentFunc(t, "alive") + agentFunc(t, "keeps_open") + agentFunc(t, "my_pid") +
		agentFunc(t, "doze") + agentFunc(t, "wake") + agentFunc(t, "window_alive")
}

// The agent finds -ef in the shells it runs under here, so its waits name
// a process by the file it holds open.
func TestTheAgentsShellHasTestEf(t *testing.T) {
	if !strings.Contains(agentScript, "\nif [ / -ef / ] 2>/dev/null; then ef_ok=1; else ef_ok=; fi\n") {
		t.Fatal("agent.sh no longer probes for test -ef as this test expects")
	}
	for _, sh := range []string{"sh", "dash", "bash", "busybox"} {
		path, err := exec.LookPath(sh)
		if err != nil {
			continue
		}
		args := []string{"-c", "if [ / -ef / ] 2>/dev/null; then echo yes; fi"}
		if sh == "busybox" {
			args = append([]string{"sh"}, args...)
		}
		if out, _ := exec.Command(path, args...).Output(); string(out) != "yes\n" {
			t.Errorf("%s has no test -ef: its waits would name processes by start time", sh)
		}
	}
}

// startTime is field 22 of /proc/PID/stat: what names one process with
// its pid.
func startTime(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	return f[19]
}

// A wake reaches only the process that dozes on its file: the one holding
// it open on descriptor 7 (or, in a shell without test -ef, the one of the
// pid and start time it names), not another process or a pid reused by
// one, not a doze on an earlier file of the same name, and never a
// process group or every process (a file's "-PGID" or "-1", which kill
// would take as those). The processes here are a doze's stand-ins that
// end when woken.
func TestWakeReachesOnlyTheProcessItsFileNames(t *testing.T) {
	for _, tt := range []struct {
		name, efOK string
	}{{"by the file it holds", "1"}, {"by pid and start time", ""}} {
		t.Run(tt.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "doze.session")
			os.WriteFile(file, nil, 0o600)
			start := func(holdsFile bool) (*exec.Cmd, chan struct{}) {
				script := `trap 'exit 0' WINCH; while :; do sleep 0.05; done`
				if holdsFile {
					script = `exec 7>>"$1"; ` + script
				}
				c := exec.Command("sh", "-c", script, "sh", file)
				c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
				if err := c.Start(); err != nil {
					t.Fatal(err)
				}
				done := make(chan struct{})
				go func() { c.Wait(); close(done) }()
				t.Cleanup(func() { c.Process.Kill(); <-done })
				return c, done
			}
			victim, done := start(true)
			other, otherDone := start(false)
			pid, otherPid := victim.Process.Pid, other.Process.Pid
			for ctx := 0; ctx < 200; ctx++ { // until the victim holds the file
				if _, err := os.Stat(fmt.Sprintf("/proc/%d/fd/7", pid)); err == nil {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			wake := func(content string) {
				t.Helper()
				os.WriteFile(file, []byte(content), 0o600)
				if out, err := exec.Command("sh", "-c", dozeFuncs(t)+`ef_ok=$2; wake "$1"`, "sh", file, tt.efOK).CombinedOutput(); err != nil {
					t.Fatalf("wake: %v %s", err, out)
				}
			}
			named := fmt.Sprintf("%d\n", pid)
			if tt.efOK == "" {
				named = fmt.Sprintf("%d %s\n", pid, startTime(t, pid))
			}
			cases := []string{
				fmt.Sprintf("-%d %s\n", pid, startTime(t, pid)), // the victim's process group
				"-1 " + startTime(t, pid) + "\n",                // every process
				"",                                              // a doze not yet named
			}
			if tt.efOK == "" {
				cases = append(cases, fmt.Sprintf("%d 1\n", pid)) // another process's start: the pid was reused
			} else {
				cases = append(cases, fmt.Sprintf("%d\n", otherPid)) // a process that does not hold the file
			}
			for _, content := range cases {
				wake(content)
				select {
				case <-done:
					t.Fatalf("a doze file of %q woke the process", content)
				case <-otherDone:
					t.Fatalf("a doze file of %q woke another process", content)
				case <-time.After(100 * time.Millisecond):
				}
			}
			if tt.efOK != "" {
				// A new file of the same name: the victim dozes on the old one.
				os.Remove(file)
				wake(named)
				select {
				case <-done:
					t.Fatal("a wake on a new file of the doze's name woke the process")
				case <-time.After(100 * time.Millisecond):
				}
				// Back to the file it holds, by its path in /proc.
				file = fmt.Sprintf("/proc/%d/fd/7", pid)
			}
			wake(named)
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("the process the doze file names was not woken")
			}
		})
	}
}

// window_alive: the window's process holds its pid file open on
// descriptor 6, and a pid file naming a process that does not (another
// process, one that has ended) is not a window alive.
func TestWindowAliveByThePidFileItHolds(t *testing.T) {
	win := t.TempDir()
	pidFile := filepath.Join(win, "pid")
	alive := func() bool {
		return exec.Command("sh", "-c", dozeFuncs(t)+`win=$1; window_alive`, "sh", win).Run() == nil
	}
	w := exec.Command("sh", "-c", `printf '%s 1\n' "$$" >"$1.new" && exec 6<"$1.new" && mv -f -- "$1.new" "$1" && exec sleep 30`, "sh", pidFile)
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { w.Process.Kill(); w.Wait() }()
	for i := 0; i < 200 && !alive(); i++ {
		time.Sleep(10 * time.Millisecond)
	}
	if !alive() {
		t.Fatal("the window holding its pid file is not alive")
	}
	other := exec.Command("sleep", "30")
	other.Start()
	defer func() { other.Process.Kill(); other.Wait() }()
	os.WriteFile(pidFile+".x", []byte(fmt.Sprintf("%d 1\n", other.Process.Pid)), 0o600)
	os.Rename(pidFile+".x", pidFile)
	if alive() {
		t.Error("a pid file naming a process that does not hold it passed for a window alive")
	}
	w.Process.Kill()
	w.Wait()
	os.WriteFile(pidFile, []byte(fmt.Sprintf("%d 1\n", w.Process.Pid)), 0o600)
	if alive() {
		t.Error("a window that has ended passed for alive")
	}
}

// A doze ends when the other side wakes it, and at once when what it waits
// for holds already; it never waits longer than asked.
func TestDozeEndsWhenWoken(t *testing.T) {
	dir := t.TempDir()
	file, flag := filepath.Join(dir, "doze.window"), filepath.Join(dir, "decided")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// Woken: the doze asks for 60 s; another shell wakes it once named.
	doze := exec.CommandContext(ctx, "sh", "-c", dozeFuncs(t)+`flag=$2; doze "$1" 60 '[ -d "$flag" ]'; echo ended`, "sh", file, flag)
	out := make(chan string, 1)
	go func() { b, _ := doze.CombinedOutput(); out <- string(b) }()
	for {
		if b, _ := os.ReadFile(file); len(b) > 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	os.Mkdir(flag, 0o700)
	if b, err := exec.Command("sh", "-c", dozeFuncs(t)+`wake "$1"`, "sh", file).CombinedOutput(); err != nil {
		t.Fatalf("wake: %v %s", err, b)
	}
	if got := <-out; got != "ended\n" || ctx.Err() != nil {
		t.Fatalf("woken doze: %q, %v", got, ctx.Err())
	}
	// Already so: the doze's own sleep is ended before it waits.
	b, err := exec.CommandContext(ctx, "sh", "-c", dozeFuncs(t)+`flag=$2; doze "$1" 60 '[ -d "$flag" ]'; echo ended`, "sh", file, flag).CombinedOutput()
	if err != nil || string(b) != "ended\n" || ctx.Err() != nil {
		t.Fatalf("doze whose condition holds: %q, %v, %v", b, err, ctx.Err())
	}
}

// Wakes cut a doze short without ending its sleep, so the dozes that
// follow wait on the same sleep: one process for many answers. A wake
// that comes while the process is not dozing changes nothing: it goes on,
// and a read it was blocked in is not cut short.
func TestDozesShareOneSleepAndALateWakeIsHarmless(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "doze.session")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// Five dozes of up to 30 s, each printing the sleep it waited on; then
	// a read from stdin, which a late wake must not end.
	script := dozeFuncs(t) + `i=0
while [ $i -lt 5 ]; do
	doze "$1" 30 false
	echo "sleep $dz_tick"
	i=$((i + 1))
done
echo reading
IFS= read -r line
echo "read $? $line"`
	cmd := exec.CommandContext(ctx, "sh", "-c", script, "sh", file)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	wake := func() {
		if b, err := exec.Command("sh", "-c", dozeFuncs(t)+`wake "$1"`, "sh", file).CombinedOutput(); err != nil {
			t.Fatalf("wake: %v %s", err, b)
		}
	}
	var sleeps []string
	for len(sleeps) < 5 {
		select {
		case l := <-lines:
			sleeps = append(sleeps, l)
			continue
		case <-time.After(50 * time.Millisecond):
		}
		wake()
	}
	for _, s := range sleeps[1:] {
		if s != sleeps[0] {
			t.Errorf("the woken dozes waited on different sleeps: %q", sleeps)
			break
		}
	}
	if l := <-lines; l != "reading" {
		t.Fatalf("got %q", l)
	}
	time.Sleep(50 * time.Millisecond)
	wake() // late: the process is in a read now
	time.Sleep(50 * time.Millisecond)
	io.WriteString(stdin, "hello\n")
	if l := <-lines; l != "read 0 hello" || ctx.Err() != nil {
		t.Errorf("the read after a late wake: %q, %v", l, ctx.Err())
	}
	cmd.Wait()
}

// The window's wait for relayctl's word ends when its session ends: at
// once, by the session's own exit (session_gone, here with a tick of a
// minute that only the wake can beat), and at the next tick when the
// session is killed outright and runs nothing. When the wait runs out
// with the session standing (silent), the window ends the session.
func TestTheWindowsWaitEndsWithItsSession(t *testing.T) {
	funcs := dozeFuncs(t) + agentFunc(t, "uptime_ms") + agentFunc(t, "now_ms") + agentFunc(t, "await_word") + agentFunc(t, "session_gone") + agentFunc(t, "end_session")
	for _, tt := range []struct {
		name, tick, await string
		end               func(session *exec.Cmd, stdin io.Closer)
	}{
		{"its connection closed", "60", "600000", func(_ *exec.Cmd, stdin io.Closer) { stdin.Close() }},
		{"killed outright", "0.2", "600000", func(session *exec.Cmd, _ io.Closer) { session.Process.Kill() }},
		{"silent through the await", "0.2", "300", func(*exec.Cmd, io.Closer) {}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			win := t.TempDir()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			// The session: reads relayctl's next request until its stdin ends.
			session := exec.Command("sh", "-c", funcs+`win=$1; trap session_gone EXIT; IFS= read -r _; exit 0`, "sh", win)
			stdin, _ := session.StdinPipe()
			if err := session.Start(); err != nil {
				t.Fatal(err)
			}
			defer session.Process.Kill()
			pid := session.Process.Pid
			os.WriteFile(filepath.Join(win, "session"), []byte(fmt.Sprintf("%d %s\n", pid, startTime(t, pid))), 0o600)

			window := exec.CommandContext(ctx, "sh", "-c", funcs+`win=$1 session_tick=$2 w_await=$3; await_word; echo "word $word"`, "sh", win, tt.tick, tt.await)
			out := make(chan string, 1)
			go func() { b, _ := window.CombinedOutput(); out <- string(b) }()
			for ctx.Err() == nil { // until the window dozes
				if b, _ := os.ReadFile(filepath.Join(win, "doze.window")); len(b) > 0 {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			tt.end(session, stdin)
			if got := <-out; got != "word judge\n" || ctx.Err() != nil {
				t.Fatalf("the window's wait: %q, %v", got, ctx.Err())
			}
			// The session is gone, however it went: the window ended a
			// silent one (TERM).
			ended := make(chan error, 1)
			go func() { ended <- session.Wait() }()
			select {
			case err := <-ended:
				var ee *exec.ExitError
				if tt.name == "silent through the await" && (!errors.As(err, &ee) || ee.ProcessState.Sys().(syscall.WaitStatus).Signal() != syscall.SIGTERM) {
					t.Errorf("the silent session ended with %v, want killed by TERM", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("the session still runs after the window's wait")
			}
		})
	}
}

// A doze whose file cannot be made (its folder gone) still waits out its
// tick and returns: the shell does not end, as a failed exec redirection
// would end it.
func TestADozeWithoutItsFileGoesOn(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "gone", "doze.session")
	out, err := exec.Command("sh", "-c", dozeFuncs(t)+`doze "$1" 0.05 false; echo "went on"`, "sh", missing).CombinedOutput()
	if err != nil || !strings.HasSuffix(string(out), "went on\n") {
		t.Fatalf("doze on %s: %v %q", missing, err, out)
	}
}

// session_gone writes its file only in a window folder that is one: a
// symlink in the folder's place (planted, or left by anything but this
// agent) is not written through.
func TestSessionGoneWritesNotThroughASymlink(t *testing.T) {
	dir := t.TempDir()
	elsewhere := filepath.Join(dir, "elsewhere")
	os.Mkdir(elsewhere, 0o700)
	link := filepath.Join(dir, "window-0123")
	if err := os.Symlink(elsewhere, link); err != nil {
		t.Fatal(err)
	}
	run := func(win string) {
		t.Helper()
		if out, err := exec.Command("sh", "-c", dozeFuncs(t)+agentFunc(t, "session_gone")+`win=$1; session_gone`, "sh", win).CombinedOutput(); err != nil {
			t.Fatalf("session_gone: %v %s", err, out)
		}
	}
	run(link)
	if _, err := os.Lstat(filepath.Join(elsewhere, "session.gone")); err == nil {
		t.Error("session_gone wrote session.gone through a symlink in the window folder's place")
	}
	real := filepath.Join(dir, "window-4567")
	os.Mkdir(real, 0o700)
	run(real)
	if _, err := os.Lstat(filepath.Join(real, "session.gone")); err != nil {
		t.Errorf("session_gone left no session.gone in its window folder: %v", err)
	}
}
