package main

// The docs are tested against the code: every format_version they name is
// the code's, every command example that pipes --json into jq runs
// against a real output, and the file modes they promise are the modes
// relayctl writes.

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/relayctl/relayctl/plans"
	"github.com/relayctl/relayctl/rollout"
	"github.com/relayctl/relayctl/rollout/rollouttest"
)

// formatOf is the code's format_version of each document the docs name.
var formatOf = map[string]int{
	"validate": ValidateFormatVersion,
	"plan":     plans.FormatVersion,
	"readings": plans.ReadingsFormatVersion,
	"receipt":  rollout.ReceiptFormatVersion,
	"ledger":   rollout.LedgerFormatVersion,
	"verify":   VerifyFormatVersion,
	"facts":    plans.FactsFormatVersion,
	"history":  HistoryFormatVersion,
}

// documentOf says which document a heading, a table row or a paragraph
// is about, by the first of these words it names ("" for none: a
// format_version claim there fails the test until it says which).
var documentWords = []struct{ word, doc string }{
	{"readings", "readings"},
	{"ledger", "ledger"},
	{"history", "history"},
	{"receipt", "receipt"},
	{"relayctl apply", "receipt"},
	{"relayctl stage", "receipt"},
	{"verify", "verify"},
	{"validate", "validate"},
	{"facts", "facts"},
	{"the plan", "plan"},
	{"relayctl plan", "plan"},
	{"relayctl show", "plan"},
}

func documentOf(text string) string {
	t := strings.ToLower(text)
	best, at := "", len(t)+1
	for _, w := range documentWords {
		if i := strings.Index(t, w.word); i >= 0 && i < at {
			best, at = w.doc, i
		}
	}
	return best
}

// A claim is "format_version N" (what a document is now); a mention is
// "format N" (what a format added, or what an older one had).
var (
	formatClaim   = regexp.MustCompile("format_version`?:?\"?:? `?([0-9]+)")
	formatMention = regexp.MustCompile(`\b[Ff]ormat ([0-9]+)\b`)
)

// docSections splits a Markdown file at its headings of level 2.
func docSections(text string) []string {
	return regexp.MustCompile(`(?m)^## `).Split(text, -1)
}

// Every format_version docs/json.md, docs/cli.md and the README name is
// the code's: in json.md's table and each document's section (its
// examples included), in each command's section of cli.md (its --help
// included), and in each paragraph of the README. A "format N" that
// tells what a format added is at most the code's.
func TestDocsFormatVersionsAreTheCode(t *testing.T) {
	check := func(where, doc, text string) {
		t.Helper()
		want, known := formatOf[doc]
		for _, m := range formatClaim.FindAllStringSubmatch(text, -1) {
			n, _ := strconv.Atoi(m[1])
			switch {
			case !known:
				t.Errorf("%s: %q, but of which document? (say it in its heading, row or paragraph)", where, m[0])
			case n != want:
				t.Errorf("%s: %q; the %s's format_version is %d", where, m[0], doc, want)
			}
		}
		for _, m := range formatMention.FindAllStringSubmatch(text, -1) {
			if n, _ := strconv.Atoi(m[1]); known && n > want {
				t.Errorf("%s: %q; the %s's format_version is %d", where, m[0], doc, want)
			}
		}
	}
	jsonMD := readDoc(t, "../../docs/json.md")
	rows := regexp.MustCompile("(?m)^\\| (.*) \\| (.*) \\| `?([0-9]+|none yet)`? \\|$").FindAllStringSubmatch(jsonMD, -1)
	if len(rows) < len(formatOf) {
		t.Errorf("docs/json.md's table has %d documents, the code %d", len(rows), len(formatOf))
	}
	for _, r := range rows {
		doc := documentOf(r[2])
		if r[3] == "none yet" {
			continue
		}
		n, _ := strconv.Atoi(r[3])
		if want, ok := formatOf[doc]; !ok || n != want {
			t.Errorf("docs/json.md's table: %s (%s): %d, the code's is %d (known %v)", r[2], doc, n, want, ok)
		}
	}
	for _, s := range docSections(jsonMD)[1:] {
		head, _, _ := strings.Cut(s, "\n")
		check("docs/json.md, ## "+head, documentOf(head), s)
	}
	for _, s := range docSections(readDoc(t, "../../docs/cli.md"))[1:] {
		head, _, _ := strings.Cut(s, "\n")
		check("docs/cli.md, ## "+head, documentOf(head), s)
	}
	for i, para := range strings.Split(readDoc(t, "../../README.md"), "\n\n") {
		check(fmt.Sprintf("README.md, paragraph %d", i+1), documentOf(para), para)
	}
}

func readDoc(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// jqExample is a command line of the docs that pipes relayctl's --json
// into jq.
var jqExample = regexp.MustCompile(`(?m)^\s*(?:\$ )?(relayctl [^|\n]*--json[^|\n]*\|\s*jq .*)$`)

// Every command example in the README, docs/json.md and docs/cli.md
// (whose --help blocks are the commands' own examples) that pipes --json
// into jq runs: relayctl as written, against simulated hosts in a folder
// laid out as the examples assume, and jq -e on what it printed, which
// fails on an error (a path that is not there: "Cannot iterate over
// null"), on null or false, and on no output at all.
func TestDocsJQExamplesRun(t *testing.T) {
	jq, err := exec.LookPath("jq")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("jq is needed to run the docs' examples (.ci/run installs it): %v", err)
		}
		t.Skip("no jq")
	}
	var examples []string
	seen := map[string]bool{}
	for _, doc := range []string{"../../README.md", "../../docs/json.md", "../../docs/cli.md"} {
		for _, m := range jqExample.FindAllStringSubmatch(readDoc(t, doc), -1) {
			if !seen[m[1]] {
				seen[m[1]] = true
				examples = append(examples, m[1])
			}
		}
	}
	if len(examples) == 0 {
		t.Fatal("no examples found")
	}
	world(t)
	// Commands that only read go before those that change the hosts:
	// verify finds hosts that differ from the plan; history, after an
	// apply, finds its run.
	sort.SliceStable(examples, func(i, j int) bool { return exampleRank(examples[i]) < exampleRank(examples[j]) })
	applied := false
	for _, ex := range examples {
		if exampleRank(ex) == 2 && !applied {
			if code, _, errs := runIn("apply", "ashburn.plan", "--ignore-window"); code != 0 {
				t.Fatalf("apply ashburn.plan: exit %d\n%s", code, errs)
			}
			applied = true
		}
		runJQExample(t, jq, ex)
	}
	t.Logf("ran %d examples", len(examples))
}

// exampleRank orders the examples: those that read (0), apply (1; the
// example spec's window is not now, so its hosts are refused and stay as
// they are), those that read what applies left (2).
func exampleRank(ex string) int {
	switch {
	case strings.HasPrefix(ex, "relayctl apply"):
		return 1
	case strings.HasPrefix(ex, "relayctl history"):
		return 2
	}
	return 0
}

// world is a folder as the examples assume: the repository's example
// spec and facts, a stand-in for the release make build writes, the
// spec's host simulated, and ashburn.plan planned from it.
func world(t *testing.T) {
	dir := t.TempDir()
	if err := copyExamples("../../plans/examples", filepath.Join(dir, "plans", "examples")); err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Join(dir, "bin"), 0o755)
	os.WriteFile(filepath.Join(dir, "bin", "relayd"), []byte("#!/bin/sh\necho 1.8.0\n"), 0o755)
	os.MkdirAll(filepath.Join(dir, "sim"), 0o700)
	if err := rollouttest.NewSim("relay-ash-1").Save(filepath.Join(dir, "sim", "relay-ash-1.json")); err != nil {
		t.Fatal(err)
	}
	old := testHosts
	testHosts = rollouttest.FileDialer{Dir: filepath.Join(dir, "sim")}
	t.Cleanup(func() { testHosts = old })
	t.Chdir(dir)
	if code, _, errs := runIn("plan", "plans/examples/ashburn-rcvbuf.yaml", "--out", "ashburn.plan"); code != 0 && code != 2 {
		t.Fatalf("plan: exit %d\n%s", code, errs)
	}
}

// runIn runs relayctl in-process in the current folder.
func runIn(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := run(append([]string{"relayctl"}, args...), strings.NewReader(""), &out, &errb)
	return code, out.String(), errb.String()
}

func runJQExample(t *testing.T, jq, example string) {
	t.Helper()
	left, right, _ := strings.Cut(stripComment(example), "|")
	args, err := shellWords(left)
	if err != nil {
		t.Errorf("%s: %v", example, err)
		return
	}
	code, out, errs := runIn(args[1:]...)
	// verify's 3 and plan's 2 are answers, and so is apply's 1 with a
	// receipt on stdout (a host not applied).
	if code != 0 && code != 3 && code != 2 && !(code == 1 && args[1] == "apply" && strings.HasPrefix(out, "{")) {
		t.Errorf("%s: relayctl exit %d\n%s", example, code, errs)
		return
	}
	jqArgs, err := shellWords(right)
	if err != nil || len(jqArgs) < 2 || jqArgs[0] != "jq" {
		t.Errorf("%s: not a jq command: %q %v", example, right, err)
		return
	}
	cmd := exec.Command(jq, append([]string{"-e"}, jqArgs[1:]...)...)
	cmd.Stdin = strings.NewReader(out)
	var jqOut, jqErr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &jqOut, &jqErr
	if err := cmd.Run(); err != nil {
		var ee *exec.ExitError
		why := err.Error()
		if errors.As(err, &ee) && ee.ExitCode() == 4 {
			why = "no output"
		} else if errors.As(err, &ee) && ee.ExitCode() == 1 {
			why = "null or false"
		}
		t.Errorf("%s: jq: %s %s\nrelayctl printed:\n%s", example, why, jqErr.String(), clipText(out, 2000))
	}
}

// stripComment drops a trailing shell comment, outside quotes.
func stripComment(s string) string {
	q := rune(0)
	for i, r := range s {
		switch {
		case q != 0 && r == q:
			q = 0
		case q == 0 && (r == '\'' || r == '"'):
			q = r
		case q == 0 && r == '#' && i > 0 && s[i-1] == ' ':
			return strings.TrimSpace(s[:i])
		}
	}
	return s
}

// shellWords splits a command line as sh does for the examples' words:
// blanks separate, single and double quotes group (no expansions).
func shellWords(s string) ([]string, error) {
	var words []string
	var cur strings.Builder
	in, q := false, rune(0)
	for _, r := range s {
		switch {
		case q != 0 && r == q:
			q = 0
		case q != 0:
			cur.WriteRune(r)
		case r == '\'' || r == '"':
			q, in = r, true
		case r == ' ' || r == '\t':
			if in {
				words = append(words, cur.String())
				cur.Reset()
				in = false
			}
		case r == '>' || r == '<' || r == '$' || r == '`':
			return nil, fmt.Errorf("shell syntax %q in an example the test runs", r)
		default:
			cur.WriteRune(r)
			in = true
		}
	}
	if q != 0 {
		return nil, errors.New("an unterminated quote")
	}
	if in {
		words = append(words, cur.String())
	}
	return words, nil
}

// The modes the docs promise are the modes relayctl writes: what plan,
// apply and stage leave beside the plan, each named with its mode in
// docs/cli.md as the test names it.
func TestDocsFileModesAreTheModes(t *testing.T) {
	cli := strings.Join(strings.Fields(readDoc(t, "../../docs/cli.md")), " ")
	world(t)
	if code, _, errs := runIn("apply", "ashburn.plan", "--ignore-window"); code != 0 {
		t.Fatalf("apply: exit %d\n%s", code, errs)
	}
	if code, _, errs := runIn("stage", "ashburn.plan"); code != 0 {
		t.Fatalf("stage: exit %d\n%s", code, errs)
	}
	records, _ := filepath.Glob("ashburn.plan.receipts/*")
	if len(records) != 4 {
		t.Fatalf("the record holds %q, want the apply's and the stage's JSON and Markdown", records)
	}
	for _, c := range []struct {
		files   []string
		mode    os.FileMode
		promise string // in docs/cli.md
	}{
		{[]string{"ashburn.plan"}, 0o600, "writes `PLAN` (JSON, mode 0600"},
		{[]string{"ashburn.plan.md"}, 0o600, "`PLAN.md`, the review (0600 too"},
		{[]string{"ashburn.plan.readings.json"}, 0o600, "`PLAN.readings.json` (0600)"},
		{[]string{"ashburn.plan.receipts"}, 0o700 | os.ModeDir, "`PLAN.receipts/` (0700)"},
		{records, 0o600, "each 0600"},
		{[]string{"ashburn.plan.ledger.json"}, 0o600, "`PLAN.ledger.json` (0600"},
	} {
		if !strings.Contains(cli, c.promise) {
			t.Errorf("docs/cli.md does not promise %q", c.promise)
		}
		for _, f := range c.files {
			st, err := os.Lstat(f)
			if err != nil {
				t.Error(err)
				continue
			}
			if got := st.Mode() & (os.ModePerm | os.ModeDir); got != c.mode {
				t.Errorf("%s: mode %v, docs/cli.md promises %v", f, got, c.mode)
			}
		}
	}
	// The stable names are links into the record, to the newest of each kind.
	for _, link := range []string{"ashburn.plan.receipt.json", "ashburn.plan.receipt.md", "ashburn.plan.stage.json", "ashburn.plan.stage.md"} {
		target, err := os.Readlink(link)
		if err != nil || !strings.HasPrefix(target, "ashburn.plan.receipts/") {
			t.Errorf("%s: %q, %v; want a link into ashburn.plan.receipts/", link, target, err)
		}
	}

}
