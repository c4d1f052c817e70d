package shellhost

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// unit-log's invocation id comes from the host's own observe output, so a
// hostile host chooses it: only a hex id reaches journalctl, as one word
// of a match (INVOCATION_ID=…), never as an option or through a shell.
func TestAgentUnitLogTakesOnlyAHexInvocation(t *testing.T) {
	dir := t.TempDir()
	bin := toolDir(t, filepath.Join(dir, "bin"), "tail", "wc", "sleep")
	calls := filepath.Join(dir, "calls")
	// journalctl records each call's words, one a line, and answers the
	// wait for systemd's exit message at once.
	fake := "#!/bin/sh\nfor w in \"$@\"; do printf '%s\\n' \"$w\"; done >>" + calls + "\necho ---- >>" + calls + "\n" +
		"case \"$*\" in *MESSAGE_ID=*) echo 'relayd.service: Main process exited' ;; *) echo 'relayd[7]: its last words' ;; esac\n"
	if err := os.WriteFile(filepath.Join(bin, "journalctl"), []byte(fake), 0o755); err != nil {
		t.Fatal(err)
	}
	run := func(invocation string) (out, words string) {
		t.Helper()
		os.Remove(calls)
		script := agentFunc(t, "p_unit_log") + "a=relayd b=1796149875000000000 c=\"$1\"\np_unit_log\n"
		cmd := exec.Command("/bin/sh", "-c", script, "sh", invocation)
		cmd.Env = []string{"PATH=" + bin}
		cmd.Dir = dir
		o, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%q: %v\n%s", invocation, err, o)
		}
		w, _ := os.ReadFile(calls)
		return string(o), string(w)
	}

	good := "7476053e4ee447e1a7512f6697feb2de"
	out, words := run(good)
	if !strings.Contains(words, "\nINVOCATION_ID="+good+"\n") || !strings.Contains(words, "\n--sync\n") || !strings.Contains(out, "its last words") {
		t.Errorf("a hex invocation: journalctl was called with\n%s\nand answered %q", words, out)
	}
	for _, hostile := range []string{"-f", "--since=@0", "abc def", "$(touch pwned)", "7476053e4ee447e1a7512f6697feb2dE", "../x"} {
		_, words := run(hostile)
		if strings.Contains(words, "INVOCATION_ID") || strings.Contains(words, hostile+"\n") || strings.Contains(words, "--sync") {
			t.Errorf("invocation %q reached journalctl:\n%s", hostile, words)
		}
		if _, err := os.Stat(filepath.Join(dir, "pwned")); err == nil {
			t.Fatal("a shell ran the invocation id")
		}
	}
}
