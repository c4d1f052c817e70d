package agent

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// unit-log's invocation id comes from the host's own observe output, so a
// hostile host chooses it: only a hex id reaches journalctl, as one word
// of a match (INVOCATION_ID=…), never as an option or through a shell.
func TestUnitLogTakesOnlyAHexInvocation(t *testing.T) {
	state := stateDir(t)
	dir := t.TempDir()
	calls := filepath.Join(dir, "calls")
	// journalctl records each call's words, one a line, and answers the
	// wait for systemd's exit message at once.
	fake := "#!/bin/sh\nfor w in \"$@\"; do printf '%s\\n' \"$w\"; done >>" + calls + "\necho ---- >>" + calls + "\n" +
		"case \"$*\" in *MESSAGE_ID=*) echo 'relayd.service: Main process exited' ;; *) echo 'relayd[7]: its last words' ;; esac\n"
	if err := os.WriteFile(filepath.Join(dir, "journalctl"), []byte(fake), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir)
	run := func(invocation string) (out, words string) {
		t.Helper()
		os.Remove(calls)
		got := runSession(t, state, "lock\tx\n"+req("unit-log", 0, nil, nil, "relayd", "1796149875000000000", invocation))
		w, _ := os.ReadFile(calls)
		return got, string(w)
	}
	good := "7476053e4ee447e1a7512f6697feb2de"
	out, words := run(good)
	if !strings.Contains(words, "\nINVOCATION_ID="+good+"\n") || !strings.Contains(words, "\n--sync\n") || !strings.Contains(out, "its last words") {
		t.Errorf("a hex invocation: journalctl was called with\n%s\nand answered %q", words, out)
	}
	if !strings.Contains(words, "\n--since\n@1796149875\n") {
		t.Errorf("journalctl's --since: %s", words)
	}
	for _, hostile := range []string{"-f", "--since=@0", "abc def", "$(touch pwned)", "7476053e4ee447e1a7512f6697feb2dE", "../x"} {
		_, words := run(hostile)
		if strings.Contains(words, "INVOCATION_ID") || strings.Contains(words, hostile+"\n") || strings.Contains(words, "--sync") {
			t.Errorf("invocation %q reached journalctl:\n%s", hostile, words)
		}
	}
}

// The command manager's words run as they are, no shell: a word with
// shell syntax in it is one argument, and an empty word refuses the
// command (without a shell it would vanish).
func TestServiceWordsRunWithoutAShell(t *testing.T) {
	state := stateDir(t)
	marker := filepath.Join(filepath.Dir(state), "pwned")
	got := locked(t, state, req("stop", 1, nil, []string{"/bin/echo", "$(touch " + marker + ")"}, "command", "2"))
	if len(got) != 1 || !strings.HasPrefix(got[0], "VAL ") {
		t.Fatalf("stop: %q", got)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("a shell ran a command word")
	}
	got = locked(t, state, req("restart", 1, nil, []string{"/bin/true", "", "/bin/true"}, "command", "2", "1"))
	if len(got) != 1 || !strings.Contains(got[0], "a command word is empty") {
		t.Errorf("an empty word: %q", got)
	}
	got = locked(t, state, req("restart", 1, nil, []string{"/bin/true", "/bin/false"}, "command", "1", "1"))
	if len(got) != 1 || got[0] != "ERR start: " {
		t.Errorf("a start that fails: %q", got)
	}
}

// Two unfinished runs archived in the same second are two archives: the
// second does not land in (or fail on) the first.
func TestClearTwiceInOneSecond(t *testing.T) {
	state := stateDir(t)
	for i := 0; i < 2; i++ {
		got := locked(t, state, req("begin", 0, nil, nil, "p", "sha256:x"), req("clear", 0, nil, nil))
		if len(got) != 2 || got[0] != "OK" || !strings.HasPrefix(got[1], "VAL "+state+"/receipts/abandoned-") {
			t.Fatalf("run %d: %q", i, got)
		}
	}
	stages, _ := filepath.Glob(state + "/receipts/abandoned-*.stage")
	journals, _ := filepath.Glob(state + "/receipts/abandoned-*.journal")
	if len(stages) != 2 || len(journals) != 2 {
		t.Errorf("archives: %v %v, want two of each", stages, journals)
	}
}

// A run's receipt filed in its window's batch can be taken back (reopen):
// its journal and the window's backups are the run's again, the receipt
// gone; there is nothing to reopen where no receipt is, or where a journal
// is there already.
func TestReopenTakesBackAFiledRun(t *testing.T) {
	state := stateDir(t)
	src := filepath.Join(filepath.Dir(state), "relayd.env")
	os.WriteFile(src, []byte("A=1\n"), 0o644)
	got := locked(t, state,
		req("begin", 0, nil, nil, "p", "sha256:x"),
		req("backup", 0, nil, nil, src, "backup-env"),
		req("commit", 0, []byte("{}\n"), nil, "r1", "applied", "5"),
		req("reopen", 1, nil, nil, "r1"),
	)
	if strings.Join(got, "|") != "OK|OK|OK|OK" {
		t.Fatalf("got %q", got)
	}
	if b, err := os.ReadFile(state + "/stage/backup-env"); err != nil || string(b) != "A=1\n" {
		t.Errorf("the backup is not back in the stage: %q %v", b, err)
	}
	if j, _ := os.ReadFile(state + "/journal"); !strings.Contains(string(j), "begin plan=p") || !strings.Contains(string(j), "ok reopen r1") {
		t.Errorf("journal: %q", j)
	}
	if exists(state + "/receipts/r1.json") {
		t.Error("the receipt is still there")
	}
	if got := locked(t, state, req("reopen", 1, nil, nil, "r1")); len(got) != 1 || !strings.HasPrefix(got[0], "ERR ") {
		t.Errorf("a second reopen: %q", got)
	}
}

// relay-log reads the end of the relay's log only where root alone can
// have written it: a file of another user, one others may write, a
// symlink in its place (to a secret, say) or in a folder above it, or a
// folder others may write are refused, naming why; the answer is its last
// 20 lines, of its last 8000 bytes.
func TestRelayLogOnlyRootsOwnFile(t *testing.T) {
	state := stateDir(t)
	dir := filepath.Join(filepath.Dir(state), "log")
	os.Mkdir(dir, 0o755)
	log := filepath.Join(dir, "relayd.log")
	var b strings.Builder
	for i := 1; i <= 30; i++ {
		fmt.Fprintf(&b, "line %d\n", i)
	}
	b.WriteString("relayd: panic: lobby table corrupt\n")
	os.WriteFile(log, []byte(b.String()), 0o644)
	ask := func(p string) string {
		t.Helper()
		out := runSession(t, state, "lock\tx\n"+req("relay-log", 0, nil, nil, p))
		_, got, _ := strings.Cut(out, "\n")
		return strings.TrimSuffix(got, "\n")
	}
	got := ask(log)
	if !strings.HasPrefix(got, "DATA ") || !strings.Contains(got, "\nline 12\n") || strings.Contains(got, "line 11\n") || !strings.HasSuffix(got, "relayd: panic: lobby table corrupt") {
		t.Errorf("root's own log: %q", got)
	}
	// Only the end of a long log, its first line cut by the bound left out.
	os.WriteFile(log, []byte(strings.Repeat("x", 9000)+"\nlast words\n"), 0o644)
	if got := ask(log); got != "DATA 10\nlast words" {
		t.Errorf("a long log: %q", got)
	}
	secret := filepath.Join(dir, "secret")
	os.WriteFile(secret, []byte("the relay's cookie key\n"), 0o600)
	link := filepath.Join(dir, "link.log")
	os.Symlink(secret, link)
	other := filepath.Join(dir, "other.log")
	os.WriteFile(other, []byte("words of someone else\n"), 0o644)
	os.Chown(other, 65534, 65534)
	open := filepath.Join(dir, "open.log")
	os.WriteFile(open, []byte("anyone's words\n"), 0o644)
	os.Chmod(open, 0o666)
	linked := filepath.Join(filepath.Dir(state), "linked")
	os.Symlink(dir, linked)
	for _, tt := range []struct{ path, want string }{
		{link, "ERR " + link + " is a symlink"},
		{other, "ERR " + other + " is not root's alone (mode -rw-r--r--): someone else could have written it"},
		{open, "ERR " + open + " is not root's alone (mode -rw-rw-rw-): someone else could have written it"},
		{filepath.Join(linked, "relayd.log"), "ERR " + filepath.Join(linked, "relayd.log") + ": " + linked + " is a symlink, or not a folder of root's that only root can write"},
		{filepath.Join(dir, "none.log"), "ERR " + filepath.Join(dir, "none.log") + ": No such file or directory"},
		{dir + "/../log/relayd.log", "ERR " + dir + "/../log/relayd.log is not a clean absolute path"},
	} {
		if got := ask(tt.path); got != tt.want {
			t.Errorf("%s: got %q, want %q", tt.path, got, tt.want)
		}
	}
	os.Chmod(dir, 0o777)
	if got := ask(log); !strings.Contains(got, "ERR "+log+": "+dir+" is a symlink, or not a folder of root's that only root can write") {
		t.Errorf("a folder anyone can write: %q", got)
	}
}
