package plans

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
)

// A review is what a person trusts, so every string in it that came from a
// host or a spec is escaped: no Markdown it carries can hide a table or a
// step, and no control character (an ANSI escape, a carriage return, a
// bidirectional override) reaches a terminal or a renderer.

// Visible replaces control and format characters with a visible escape
// (\x1b, \u202e) and newlines with ⏎, so s prints as one honest line.
func Visible(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r == '\n':
			b.WriteString("⏎")
		case r == unicode.ReplacementChar:
			b.WriteString(`\ufffd`)
		case r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0):
			fmt.Fprintf(&b, `\x%02x`, r)
		case unicode.Is(unicode.Cf, r): // zero-width, bidi overrides
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// mdSpecial are the characters that can start Markdown (and GFM) syntax in
// the middle of a line: code, emphasis, links, HTML, tables, strikethrough,
// entities. Line-start syntax (#, -, 1.) cannot arise: MDText is never put
// at the start of a line, and newlines are made visible.
const mdSpecial = "\\`*_[]<>|~&"

// MDText is s as literal Markdown text, on one line.
func MDText(s string) string {
	s = Visible(s)
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(mdSpecial, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// MDCode is s as a Markdown code span, on one line: the fence is one
// backtick longer than the longest run of backticks in s, so s cannot close
// it early. In a table cell use MDCell around it.
func MDCode(s string) string {
	s = Visible(s)
	if s == "" {
		return "(empty)"
	}
	longest, run := 0, 0
	for _, r := range s {
		if r == '`' {
			run++
			longest = max(longest, run)
		} else {
			run = 0
		}
	}
	fence := strings.Repeat("`", longest+1)
	if strings.HasPrefix(s, "`") || strings.HasSuffix(s, "`") {
		s = " " + s + " "
	}
	return fence + s + fence
}

// MDCell makes Markdown safe inside a table cell: a pipe splits a cell even
// inside a code span unless it is escaped.
func MDCell(md string) string {
	return strings.ReplaceAll(md, "|", `\|`)
}

// Argv shows a command as the list of words it is, each quoted, so word
// boundaries cannot vanish in the review: ["/opt/relay/bin/relay-service" "start"].
func Argv(argv []string) string {
	q := make([]string, len(argv))
	for i, w := range argv {
		q[i] = strconv.Quote(w)
	}
	return "[" + strings.Join(q, " ") + "]"
}
