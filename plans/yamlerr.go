package plans

// A YAML syntax error, said where it is and why. yaml.v3 reports a parser
// error at the line where the enclosing block starts, counted from 0 (a
// dedented key on line 10 came out as "line 1: did not find expected
// key"), and names a tab in the indentation "a character that cannot
// start any token". Its error carries only text, so the line is found by
// parsing: the problem is on the first line whose prefix of the spec fails
// the way the whole spec does. The two usual causes, a tab and a line
// indented wrongly, are then named with the fix.

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/relayctl/relayctl/internal/lazyre"
)

var yamlLineNumber = lazyre.New(`^yaml: (?:line \d+: )?`)

// yamlSyntaxError is the SpecError for err, yaml.v3's error decoding data.
func yamlSyntaxError(file string, data []byte, err error) *SpecError {
	problem := yamlLineNumber.ReplaceAllString(err.Error(), "")
	// YAML breaks lines at \r\n, \n and a lone \r alike.
	lines := strings.Split(strings.NewReplacer("\r\n", "\n", "\r", "\n").Replace(string(data)), "\n")
	at := firstFailingLine(lines, problem)
	if at == 0 {
		return &SpecError{File: file, Msg: "not valid YAML: " + problem}
	}
	src := readIndents(lines[:at])
	if t := firstTab(src); t != nil {
		return &SpecError{File: file, Line: t.n, Msg: fmt.Sprintf(
			"not valid YAML: a tab in the indentation (column %d); YAML indents with spaces only: replace the tab with spaces", t.tab+1)}
	}
	if line, why := indentCause(src); why != "" {
		return &SpecError{File: file, Line: line, Msg: fmt.Sprintf("not valid YAML: %s (yaml: %s)", why, problem)}
	}
	return &SpecError{File: file, Line: at, Msg: "not valid YAML: " + problem}
}

// firstFailingLine is the 1-based number of the first line whose prefix of
// the spec fails with problem, or 0. A prefix cut inside a construct that
// spans lines (a flow list, a quoted string) fails another way and counts
// as parsed, so a bisection lands on the line that breaks the spec.
func firstFailingLine(lines []string, problem string) int {
	fails := func(n int) bool {
		dec := yaml.NewDecoder(strings.NewReader(strings.Join(lines[:n], "\n") + "\n"))
		var doc yaml.Node
		err := dec.Decode(&doc)
		return err != nil && !errors.Is(err, io.EOF) && yamlLineNumber.ReplaceAllString(err.Error(), "") == problem
	}
	lo, hi := 0, len(lines) // prefix lo parses, prefix hi fails
	if !fails(hi) {
		return 0
	}
	for hi-lo > 1 {
		mid := (lo + hi) / 2
		if fails(mid) {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi
}

// srcLine is a line of YAML that holds content (not blank, not a comment,
// not inside a block scalar), as indentation sees it.
type srcLine struct {
	n      int    // 1-based line number
	indent int    // leading spaces
	tab    int    // index of a tab in the leading whitespace, or -1
	text   string // the content, without indentation or a trailing comment
}

// opens reports whether the line starts a block that the next lines may
// indent under: "key:", "- key:", "-", or a block scalar's "key: |".
func (l srcLine) opens() bool {
	t := strings.TrimSpace(strings.TrimPrefix(l.text, "-"))
	return t == "" || strings.HasSuffix(t, ":") || blockScalar.MatchString(t)
}

var blockScalar = lazyre.New(`:\s+[|>][-+0-9]*$`)

// readIndents returns the content lines of lines.
func readIndents(lines []string) []srcLine {
	var out []srcLine
	scalarIndent := -1 // inside a block scalar of a key at this indent
	for i, raw := range lines {
		body := strings.TrimLeft(raw, " \t")
		ws := raw[:len(raw)-len(body)]
		l := srcLine{n: i + 1, indent: strings.IndexFunc(raw+"x", func(r rune) bool { return r != ' ' }), tab: strings.IndexByte(ws, '\t')}
		if body == "" || strings.HasPrefix(body, "#") {
			continue
		}
		if scalarIndent >= 0 && l.indent > scalarIndent && l.tab < 0 {
			continue
		}
		scalarIndent = -1
		if c := strings.Index(body, " #"); c >= 0 {
			body = body[:c]
		}
		l.text = strings.TrimRight(body, " \t\r")
		if blockScalar.MatchString(l.text) {
			scalarIndent = l.indent
		}
		out = append(out, l)
	}
	return out
}

func firstTab(src []srcLine) *srcLine {
	for i := range src {
		if src[i].tab >= 0 {
			return &src[i]
		}
	}
	return nil
}

// firstKeyTooFar is the usual cause of a dedent that lines up with no
// block when the line before it is the first key of its block: that key
// was indented too far, and the line where parsing stopped is where the
// block's keys belong ("version:" at column 6, "artifact:" below it at
// column 5, both under "release:" at column 3). yaml.v3 takes the first
// key's column for the block's, so it reports the line after the mistake.
// The line below is taken as right when it sits one indentation step (the
// file's first) right of the block's key.
func firstKeyTooFar(src []srcLine) (int, string) {
	if len(src) < 3 {
		return 0, ""
	}
	bad, first, parent := src[len(src)-1], src[len(src)-2], src[len(src)-3]
	if !parent.opens() || parent.indent >= first.indent || bad.indent != parent.indent+indentStep(src) {
		return 0, ""
	}
	return first.n, fmt.Sprintf("%q is at column %d, right of the key below it (line %d, %q, column %d); both belong to %q (line %d): indent line %d to column %d, with spaces",
		first.text, first.indent+1, bad.n, bad.text, bad.indent+1, parent.text, parent.n, first.n, bad.indent+1)
}

// indentStep is the file's indentation step: the indent of its first
// indented line (2 for most specs).
func indentStep(src []srcLine) int {
	for _, l := range src {
		if l.indent > 0 {
			return l.indent
		}
	}
	return 0
}

// indentCause looks at the last line of src, where the spec stopped
// parsing, for the usual indentation mistakes, and returns the line to fix
// and what is wrong with it ("" when the indentation looks right).
func indentCause(src []srcLine) (int, string) {
	if len(src) < 2 {
		return 0, ""
	}
	bad, prev := src[len(src)-1], src[len(src)-2]
	col := func(l srcLine) int { return l.indent + 1 }
	if bad.indent > prev.indent && !prev.opens() {
		// Under a line that holds a value. Usually that line lost its
		// indentation: it sits left of the lines on both sides of it.
		if len(src) >= 3 {
			if before := src[len(src)-3]; before.indent > prev.indent && before.indent == bad.indent {
				return prev.n, fmt.Sprintf("%q is at column %d, left of the lines around it (lines %d and %d are at column %d): indent it to column %d, with spaces",
					prev.text, col(prev), before.n, bad.n, col(bad), col(bad))
			}
		}
		return bad.n, fmt.Sprintf("%q is indented under %q (line %d), which holds a value and cannot hold keys: line it up with the keys above it, with spaces",
			bad.text, prev.text, prev.n)
	}
	if bad.indent >= prev.indent {
		return 0, ""
	}
	if line, why := firstKeyTooFar(src); why != "" {
		return line, why
	}
	// A dedent: it must return to the column of a block above.
	columns := []int{prev.indent}
	var moved *srcLine // an enclosing line that itself sits left of the line before it
	for i, depth := len(src)-2, prev.indent; i >= 0; i-- {
		l := src[i]
		if l.indent >= depth {
			continue
		}
		depth = l.indent
		columns = append(columns, l.indent)
		if l.indent == bad.indent {
			return 0, ""
		}
		if moved == nil && i > 0 && src[i-1].indent == bad.indent {
			moved = &src[i]
		}
	}
	if moved != nil {
		return moved.n, fmt.Sprintf("%q is at column %d, left of the line above it (column %d), so the keys below it end up in the wrong block and line %d (%q, column %d) lines up with none: indent line %d to column %d, with spaces",
			moved.text, col(*moved), col(bad), bad.n, bad.text, col(bad), moved.n, col(bad))
	}
	var cols []string
	for i := len(columns) - 1; i >= 0; i-- {
		cols = append(cols, fmt.Sprint(columns[i]+1))
	}
	return bad.n, fmt.Sprintf("%q is at column %d, which lines up with no key above it (they are at columns %s): keys of one block start in one column, with spaces",
		bad.text, col(bad), strings.Join(cols, ", "))
}
