package walkthrough

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/relayctl/relayctl/internal/kerneltest"
	"github.com/relayctl/relayctl/internal/lab"
	"github.com/relayctl/relayctl/internal/repotest"
)

// step is one command of the walkthrough and the exit status it must have.
type step struct {
	line int // in README.md
	cmd  string
	exit int
	// claims are what a relayctl verify line's comment says it prints:
	// the comment's parts between "; ", each in the command's output
	// (runs of spaces taken as one).
	claims []string
}

var exitMark = regexp.MustCompile(`#\s*exit (\d+)\b`)

// walkthroughSteps returns every command of the shell blocks in the
// README's section whose heading starts "## A ten-minute walkthrough", in order. A
// trailing "# exit N" comment gives the status the command must exit with
// (0 otherwise).
func walkthroughSteps(readme string) ([]step, error) {
	var steps []step
	in, block := false, false
	for i, l := range strings.Split(readme, "\n") {
		switch {
		case strings.HasPrefix(l, "## "):
			in = strings.HasPrefix(l, "## A ten-minute walkthrough")
		case !in:
		case strings.HasPrefix(l, "```sh"):
			block = true
		case strings.HasPrefix(l, "```"):
			block = false
		case block && strings.TrimSpace(l) != "" && !strings.HasPrefix(strings.TrimSpace(l), "#"):
			s := step{line: i + 1, cmd: l}
			if m := exitMark.FindStringSubmatch(l); m != nil {
				s.exit, _ = strconv.Atoi(m[1])
			}
			if cmd, comment, ok := strings.Cut(l, "#"); ok && strings.HasPrefix(strings.TrimSpace(cmd), "relayctl verify ") {
				s.claims = strings.Split(strings.TrimSpace(comment), "; ")
			}
			steps = append(steps, s)
		}
	}
	if len(steps) == 0 {
		return nil, fmt.Errorf("no commands in a \"## A ten-minute walkthrough\" section of README.md")
	}
	return steps, nil
}

// script is the steps as one bash script, so cd and export carry over as
// they do for a person typing them: each command runs as written, and the
// script stops at the first that exits otherwise than the README says.
func script(steps []step) string {
	var b strings.Builder
	b.WriteString("set -u\n")
	for _, s := range steps {
		// Echoed as written: single-quoted, so $! or $PWD is not expanded
		// (a double-quoted echo of "… & apply=$!" failed under set -u).
		fmt.Fprintf(&b, "printf '%%s\\n' %s\n", shellQuote("$ "+s.cmd))
		fmt.Fprintf(&b, "%s\n", s.cmd)
		fmt.Fprintf(&b, "rc=$?; if [ $rc != %d ]; then echo \"walkthrough: README.md:%d exited $rc, want %d\" >&2; exit 1; fi\n", s.exit, s.line, s.exit)
	}
	return b.String()
}

// shellQuote is s as one single-quoted shell word.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// TestReadmeWalkthrough runs the README's next steps in a copy of the
// repository (make lab writes bin/ and lab/ there), holding the kernel
// lock throughout: the walkthrough changes the machine's rmem_max.
func TestReadmeWalkthrough(t *testing.T) {
	lab.Require(t)
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	steps, err := walkthroughSteps(string(readme))
	if err != nil {
		t.Fatal(err)
	}
	if steps[0].cmd != "make lab" || !strings.Contains(steps[len(steps)-1].cmd, "make lab-down") {
		t.Fatalf("the walkthrough starts with %q and ends with %q; want make lab ... make lab-down", steps[0].cmd, steps[len(steps)-1].cmd)
	}
	kerneltest.Lock(t)
	repo := repotest.Copy(t)
	t.Cleanup(func() {
		if _, err := os.Stat(filepath.Join(repo, "lab", "lab.json")); err == nil {
			out, err := command(repo, "make", "-s", "lab-down").CombinedOutput()
			if err != nil {
				t.Errorf("make lab-down after a failed walkthrough: %v\n%s", err, out)
			}
		}
	})
	cmd := command(repo, "bash", "-c", script(steps))
	out, err := cmd.CombinedOutput()
	t.Logf("walkthrough:\n%s", out)
	if err != nil {
		t.Fatalf("the README's walkthrough failed: %v", err)
	}
	for _, c := range claimsMissed(steps, string(out)) {
		t.Error(c)
	}
	for _, want := range []string{"lab-1                change", "applied:       1  lab-1", "rolled back:   1  lab-1",
		"has 1 host(s) in progress (lab-1)", "lab-1: applied, completed by the host after the connection was lost", "lab: stopped; restored"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the walkthrough's output lacks %q", want)
		}
	}
	if _, err := os.Stat(filepath.Join(repo, "lab", "lab.json")); err == nil {
		t.Error("make lab-down left the lab up")
	}
}

// claimsMissed checks each verify step's comment against its output in
// the script's (between its echoed command and the next's), and says
// which part of which comment the output does not bear out.
func claimsMissed(steps []step, out string) []string {
	space := regexp.MustCompile(`[ \t]+`)
	lines := strings.Split(out, "\n")
	var missed []string
	at := 0
	for i, s := range steps {
		start := index(lines, at, "$ "+s.cmd)
		if start < 0 {
			missed = append(missed, fmt.Sprintf("README.md:%d: the walkthrough's output does not show %q run", s.line, s.cmd))
			continue
		}
		end := len(lines)
		if i+1 < len(steps) {
			if e := index(lines, start+1, "$ "+steps[i+1].cmd); e >= 0 {
				end = e
			}
		}
		at = start + 1
		got := space.ReplaceAllString(strings.Join(lines[start+1:end], "\n"), " ")
		for _, c := range s.claims {
			if !strings.Contains(got, space.ReplaceAllString(c, " ")) {
				missed = append(missed, fmt.Sprintf("README.md:%d: %s says %q, which its output does not:\n%s", s.line, s.cmd, c, got))
			}
		}
	}
	return missed
}

// index is the first line from at that is l, or -1.
func index(lines []string, at int, l string) int {
	for i := at; i < len(lines); i++ {
		if lines[i] == l {
			return i
		}
	}
	return -1
}

// command runs in the copy, with the kernel lock marked as held by this
// test (the scripts would otherwise wait for it), and a record of the lab
// up of its own (make lab's LAB_OWNER), not the machine's.
func command(dir string, argv ...string) *exec.Cmd {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "RELAYCTL_KERNEL_LOCK_HELD=1", "LAB_OWNER="+filepath.Join(dir, "lab.owner"))
	return cmd
}

// The README's walkthrough parses into commands with their exit statuses.
func TestWalkthroughSteps(t *testing.T) {
	got, err := walkthroughSteps("# x\n## A ten-minute walkthrough: y\n\n```sh\nmake lab\ncd lab   # go there\nrelayctl plan a --out b  # exit 2: changes\n```\ntext\n```sh\n# a comment\nmake lab-down\n```\n## Commands\n```sh\nrelayctl nothing\n```\n")
	if err != nil {
		t.Fatal(err)
	}
	want := []step{{5, "make lab", 0, nil}, {6, "cd lab   # go there", 0, nil}, {7, "relayctl plan a --out b  # exit 2: changes", 2, nil}, {12, "make lab-down", 0, nil}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("got %v\nwant %v", got, want)
	}
}

// A verify line's comment is what it prints: each part between "; " is
// looked for in the output between its command and the next.
func TestVerifyCommentsAreItsOutput(t *testing.T) {
	steps, err := walkthroughSteps("## A ten-minute walkthrough\n```sh\nrelayctl verify a   # as planned: rb 8; lab-1: done\nrelayctl verify b  # as planned: rb 9\n```\n")
	if err != nil {
		t.Fatal(err)
	}
	out := "$ relayctl verify a   # as planned: rb 8; lab-1: done\nlab-1  as planned:  rb 8\nlab-1: done\n$ relayctl verify b  # as planned: rb 9\nlab-1  as planned: rb 8\n"
	missed := claimsMissed(steps, out)
	if len(missed) != 1 || !strings.Contains(missed[0], `README.md:4: relayctl verify b  # as planned: rb 9 says "as planned: rb 9"`) {
		t.Errorf("got %q, want b's claim alone missed", missed)
	}
}

// The script echoes each command as written and runs it: $! and quotes
// of both kinds included.
func TestScriptEchoesCommandsAsWritten(t *testing.T) {
	out, err := exec.Command("bash", "-c", script([]step{{line: 1, cmd: `true & job=$!`}, {line: 2, cmd: `wait $job; echo 'it'"s" done`}})).CombinedOutput()
	if want := "$ true & job=$!\n$ wait $job; echo 'it'\"s\" done\nits done\n"; err != nil || string(out) != want {
		t.Errorf("got %v %q, want %q", err, out, want)
	}
}
