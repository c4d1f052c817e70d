package shellhost

import (
	"context"
	"fmt"
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

// A wake ends only the process its file names by pid and start time: not
// a pid reused by another process, and never a process group or every
// process (a file's "-PGID" or "-1", which kill would take as those).
func TestWakeEndsOnlyTheProcessItsFileNames(t *testing.T) {
	victim := exec.Command("sleep", "60")
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
			t.Fatalf("a doze file of %q ended the process", content)
		case <-time.After(100 * time.Millisecond):
		}
	}
	wake(fmt.Sprintf("%d %s\n", pid, startTime(t, pid)))
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the process the doze file names is still running")
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
