package inventory

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// jsonScanner reads JSON as Ansible's loader does (Python's json module):
// RFC 8259, plus the NaN, Infinity and -Infinity that Python's json prints
// for YAML's .nan and .inf. It keeps the line it is on, for errors, and
// reads objects in document order, which is the inventory's order.
//
// A syntax error stops the scan (it panics with a jsonSyntaxError, which
// ParseJSON recovers): after one, nothing later can be read reliably.
type jsonScanner struct {
	data      []byte
	pos       int
	line      int
	lineStart int // offset where the current line starts, for columns
	depth     int
}

// maxJSONDepth bounds how deep objects and arrays nest. Python's json gives
// up near 1,000 (its recursion limit); relayctl stops sooner.
const maxJSONDepth = 512

type jsonSyntaxError struct {
	line, col int
	msg       string
}

func (s *jsonScanner) fail(format string, a ...any) {
	panic(jsonSyntaxError{line: s.line, col: s.pos - s.lineStart + 1, msg: fmt.Sprintf(format, a...)})
}

// ws skips what Python's json counts as whitespace.
func (s *jsonScanner) ws() {
	for s.pos < len(s.data) {
		switch s.data[s.pos] {
		case ' ', '\t', '\r':
			s.pos++
		case '\n':
			s.pos++
			s.line++
			s.lineStart = s.pos
		default:
			return
		}
	}
}

// peek is the next byte after whitespace, 0 at the end.
func (s *jsonScanner) peek() byte {
	s.ws()
	if s.pos == len(s.data) {
		return 0
	}
	return s.data[s.pos]
}

func (s *jsonScanner) expect(c byte, what string) {
	if got := s.peek(); got != c {
		s.fail("want %s, got %s", what, s.near())
	}
	s.pos++
}

// near names what is at the scan position, for a syntax error.
func (s *jsonScanner) near() string {
	if s.pos >= len(s.data) {
		return "the end of the text"
	}
	r, _ := utf8.DecodeRune(s.data[s.pos:])
	if r < 0x20 || r == 0x7f {
		return fmt.Sprintf("byte %#02x", r)
	}
	return strconv.QuoteRune(r)
}

// kindAt names the kind of the value that starts at the scan position.
func (s *jsonScanner) kindAt() string {
	switch s.peek() {
	case '{':
		return "an object"
	case '[':
		return "a list"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	case 'N', 'I', '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		return "a number"
	}
	return "not a value (" + s.near() + ")"
}

// comma reads a comma between members or elements, and refuses one
// before the end, which Python's json refuses too.
func (s *jsonScanner) comma(end byte) bool {
	if s.peek() != ',' {
		return false
	}
	s.pos++
	if s.peek() == end {
		s.fail("a comma before %c; JSON has no trailing commas: remove it", end)
	}
	return true
}

// object reads an object, calling member for each key with the scanner at
// its value; member must read or skip that value. A key given twice is
// reported to dup (Python's json would keep the last) and its value skipped.
func (s *jsonScanner) object(member func(key string, line int), dup func(key string, line, first int)) {
	s.expect('{', "{")
	s.enter()
	var seen keysSeen
	if s.peek() == '}' {
		s.pos++
		s.depth--
		return
	}
	for {
		if s.peek() != '"' {
			s.fail("want a key in double quotes, got %s", s.near())
		}
		line := s.line
		key := s.str()
		s.expect(':', ": after the key")
		if first, ok := seen.add(key, line); !ok && dup != nil {
			dup(key, line, first)
			s.skip()
		} else {
			member(key, line)
		}
		if s.comma('}') {
			continue
		}
		s.expect('}', ", or } after an object's member")
		s.depth--
		return
	}
}

// keysSeen are an object's keys so far, with their lines: in place while
// few (most objects are a host's few variables), a map once many.
type keysSeen struct {
	few  [8]keyLine
	n    int
	many map[string]int
}

type keyLine struct {
	key  string
	line int
}

// add notes key at line; ok is false when it was seen, at first.
func (k *keysSeen) add(key string, line int) (first int, ok bool) {
	if k.many == nil {
		for _, x := range k.few[:k.n] {
			if x.key == key {
				return x.line, false
			}
		}
		if k.n < len(k.few) {
			k.few[k.n] = keyLine{key, line}
			k.n++
			return 0, true
		}
		k.many = make(map[string]int, 4*len(k.few))
		for _, x := range k.few {
			k.many[x.key] = x.line
		}
	}
	if first, dup := k.many[key]; dup {
		return first, false
	}
	k.many[key] = line
	return 0, true
}

// array reads a list, calling item for each element with the scanner at it.
func (s *jsonScanner) array(item func(i, line int)) {
	s.expect('[', "[")
	s.enter()
	if s.peek() == ']' {
		s.pos++
		s.depth--
		return
	}
	for i := 0; ; i++ {
		s.peek()
		item(i, s.line)
		if s.comma(']') {
			continue
		}
		s.expect(']', ", or ] after a list's element")
		s.depth--
		return
	}
}

func (s *jsonScanner) enter() {
	if s.depth++; s.depth > maxJSONDepth {
		s.fail("objects and lists nested more than %d deep; relayctl reads at most %d", maxJSONDepth, maxJSONDepth)
	}
}

// skip reads a value of any kind and forgets it.
func (s *jsonScanner) skip() {
	switch s.peek() {
	case '{':
		s.object(func(string, int) { s.skip() }, nil)
	case '[':
		s.array(func(int, int) { s.skip() })
	default:
		s.scalar()
	}
}

// scalar reads a string, number, boolean or null as the Value Ansible
// makes of it.
func (s *jsonScanner) scalar() Value {
	v := Value{Line: s.line}
	switch c := s.peek(); {
	case c == '"':
		v.Kind, v.Text = String, s.str()
	case s.word("true"):
		v.Kind, v.Text = Bool, "true"
	case s.word("false"):
		v.Kind, v.Text = Bool, "false"
	case s.word("null"):
		v.Kind = Null
	case s.word("NaN"):
		v.Kind, v.Text = Float, "NaN"
	case s.word("Infinity"):
		v.Kind, v.Text = Float, "+Inf"
	case s.word("-Infinity"):
		v.Kind, v.Text = Float, "-Inf"
	case c == '-' || c >= '0' && c <= '9':
		v.Kind, v.Text = s.number()
	default:
		s.fail("want a value (an object, list, string, number, true, false or null), got %s", s.near())
	}
	return v
}

// word reads w when the text goes on with it.
func (s *jsonScanner) word(w string) bool {
	if len(s.data)-s.pos < len(w) || string(s.data[s.pos:s.pos+len(w)]) != w {
		return false
	}
	s.pos += len(w)
	return true
}

// number reads a JSON number: an integer (Python's int, exact) or a float.
func (s *jsonScanner) number() (Kind, string) {
	start := s.pos
	if s.data[s.pos] == '-' {
		s.pos++
	}
	digits := func() int {
		n := 0
		for s.pos < len(s.data) && s.data[s.pos] >= '0' && s.data[s.pos] <= '9' {
			s.pos++
			n++
		}
		return n
	}
	switch {
	case s.pos < len(s.data) && s.data[s.pos] == '0':
		s.pos++
	case digits() == 0:
		s.fail("want a digit after -, got %s", s.near())
	}
	isFloat := false
	if s.pos < len(s.data) && s.data[s.pos] == '.' {
		s.pos++
		if digits() == 0 {
			s.fail("want a digit after the decimal point, got %s", s.near())
		}
		isFloat = true
	}
	if s.pos < len(s.data) && (s.data[s.pos] == 'e' || s.data[s.pos] == 'E') {
		s.pos++
		if s.pos < len(s.data) && (s.data[s.pos] == '+' || s.data[s.pos] == '-') {
			s.pos++
		}
		if digits() == 0 {
			s.fail("want a digit in the exponent, got %s", s.near())
		}
		isFloat = true
	}
	text := string(s.data[start:s.pos])
	if !isFloat {
		if text == "-0" {
			text = "0"
		}
		return Int, text
	}
	f, _ := strconv.ParseFloat(text, 64) // out of range is ±Inf, as in Python
	return Float, strconv.FormatFloat(f, 'g', -1, 64)
}

// str reads a string in double quotes, its escapes decoded. The text was
// checked to be UTF-8 before the scan began.
func (s *jsonScanner) str() string {
	s.pos++ // the opening quote
	start := s.pos
	for s.pos < len(s.data) {
		switch c := s.data[s.pos]; {
		case c == '"':
			out := string(s.data[start:s.pos])
			s.pos++
			return out
		case c == '\\':
			return s.escaped(start)
		case c < 0x20:
			s.fail("a control character (%#02x) inside a string; write it as an escape (\\n, \\t, \\u00XX)", c)
		default:
			s.pos++
		}
	}
	s.fail("a string that is not closed; end it with \"")
	return ""
}

// jsonEscapes are the one-letter escapes, by their letter.
var jsonEscapes = [256]byte{'"': '"', '\\': '\\', '/': '/', 'b': '\b', 'f': '\f', 'n': '\n', 'r': '\r', 't': '\t'}

// escaped finishes a string that holds escapes, from its start.
func (s *jsonScanner) escaped(start int) string {
	var b strings.Builder
	b.Write(s.data[start:s.pos])
	for s.pos < len(s.data) {
		c := s.data[s.pos]
		switch {
		case c == '"':
			s.pos++
			return b.String()
		case c < 0x20:
			s.fail("a control character (%#02x) inside a string; write it as an escape (\\n, \\t, \\u00XX)", c)
		case c != '\\':
			b.WriteByte(c)
			s.pos++
			continue
		}
		s.pos++
		if s.pos == len(s.data) {
			break
		}
		e := s.data[s.pos]
		s.pos++
		if r := jsonEscapes[e]; r != 0 {
			b.WriteByte(r)
			continue
		}
		if e != 'u' {
			s.pos--
			s.fail("\\%c is not an escape; JSON has \\\" \\\\ \\/ \\b \\f \\n \\r \\t and \\uXXXX", e)
		}
		b.WriteRune(s.unicodeEscape())
	}
	s.fail("a string that is not closed; end it with \"")
	return ""
}

// unicodeEscape reads the XXXX of \uXXXX, and the low half that must
// follow a high surrogate.
func (s *jsonScanner) unicodeEscape() rune {
	r := s.hex4()
	if !utf16.IsSurrogate(r) {
		return r
	}
	if r < 0xdc00 && s.word(`\u`) {
		if lo := s.hex4(); lo >= 0xdc00 && lo <= 0xdfff {
			return utf16.DecodeRune(r, lo)
		}
	}
	s.fail("\\u%04x is half of a UTF-16 surrogate pair without its other half; it is no character", r)
	return 0
}

func (s *jsonScanner) hex4() rune {
	if s.pos+4 > len(s.data) {
		s.fail("\\u wants four hex digits")
	}
	n, err := strconv.ParseUint(string(s.data[s.pos:s.pos+4]), 16, 16)
	if err != nil {
		s.fail("\\u wants four hex digits, got %q", s.data[s.pos:s.pos+4])
	}
	s.pos += 4
	return rune(n)
}
