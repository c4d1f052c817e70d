package shellhost

import (
	"bufio"
	"context"
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

// dozeFuncs are the agent's doze and wake with what they use.
func dozeFuncs(t *testing.T) string {
	return agentFunc(t, "start_of") + agentFunc(t, "alive") + agentFunc(t, "doze") + agentFunc(t, "wake")
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

// A wake reaches only the process its file names by pid and start time:
// not a pid reused by another process, and never a process group or every
// process (a file's "-PGID" or "-1", which kill would take as those). The
// process here is a doze's stand-in that ends when woken.
func TestWakeReachesOnlyTheProcessItsFileNames(t *testing.T) {
	victim := exec.Command("sh", "-c", `trap 'exit 0' WINCH; while :; do sleep 0.05; done`)
	victim.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := victim.Start(); err != nil {
		t.Fatal(err)
	}
	defer victim.Process.Kill()
	done := make(chan struct{})
	go func() { victim.Wait(); close(done) }()
	pid := victim.Process.Pid
	file := filepath.Join(t.TempDir(), "doze.session")
	wake := func(content string) {
		t.Helper()
		os.WriteFile(file, []byte(content), 0o600)
		if out, err := exec.Command("sh", "-c", dozeFuncs(t)+`wake "$1"`, "sh", file).CombinedOutput(); err != nil {
			t.Fatalf("wake: %v %s", err, out)
		}
	}
	for _, content := range []string{
		fmt.Sprintf("%d 1\n", pid),                      // another process's start: the pid was reused
		fmt.Sprintf("-%d %s\n", pid, startTime(t, pid)), // the victim's process group
		"-1 " + startTime(t, pid) + "\n",                // every process
		"",                                              // a doze not yet named
	} {
		wake(content)
		select {
		case <-done:
			t.Fatalf("a doze file of %q woke the process", content)
		case <-time.After(100 * time.Millisecond):
		}
	}
	wake(fmt.Sprintf("%d %s\n", pid, startTime(t, pid)))
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the process the doze file names was not woken")
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
// session is killed outright and runs nothing.
func TestTheWindowsWaitEndsWithItsSession(t *testing.T) {
	funcs := dozeFuncs(t) + agentFunc(t, "uptime_ms") + agentFunc(t, "now_ms") + agentFunc(t, "await_word") + agentFunc(t, "session_gone")
	for _, tt := range []struct {
		name, tick string
		end        func(session *exec.Cmd, stdin io.Closer)
	}{
		{"its connection closed", "60", func(_ *exec.Cmd, stdin io.Closer) { stdin.Close() }},
		{"killed outright", "0.2", func(session *exec.Cmd, _ io.Closer) { session.Process.Kill() }},
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
			defer func() { session.Process.Kill(); session.Wait() }()
			pid := session.Process.Pid
			os.WriteFile(filepath.Join(win, "session"), []byte(fmt.Sprintf("%d %s\n", pid, startTime(t, pid))), 0o600)

			window := exec.CommandContext(ctx, "sh", "-c", funcs+`win=$1 session_tick=$2 w_await=600000; await_word; echo "word $word"`, "sh", win, tt.tick)
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
		})
	}
}
