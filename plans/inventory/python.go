package inventory

import (
	"errors"
	"math/big"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Ansible's INI plugin is Python: a host line is split with
// shlex.split(line, comments=True), and every value goes through
// ast.literal_eval, falling back to the text itself. These two functions
// do the same for what an inventory holds.

var (
	errNoClosingQuote = errors.New("no closing quotation")
	errNoEscaped      = errors.New("no escaped character")
)

// shlexSplit is Python's shlex.split(s, comments=True) in POSIX mode:
// words split at spaces, tabs and newlines; '…' keeps everything; "…"
// keeps everything but \" and \\; a backslash outside quotes escapes the
// next character; # outside quotes ends the line.
func shlexSplit(s string) ([]string, error) {
	var out []string
	var tok strings.Builder
	inWord, quoted := false, false
	emit := func() {
		if inWord || quoted {
			out = append(out, tok.String())
		}
		tok.Reset()
		inWord, quoted = false, false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\r' || c == '\n':
			emit()
		case c == '#':
			emit()
			return out, nil
		case c == '\'':
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				return nil, errNoClosingQuote
			}
			tok.WriteString(s[i+1 : i+1+j])
			i += j + 1
			inWord, quoted = true, true
		case c == '"':
			i++
			for ; i < len(s) && s[i] != '"'; i++ {
				if s[i] == '\\' {
					if i+1 == len(s) {
						return nil, errNoClosingQuote
					}
					if n := s[i+1]; n == '"' || n == '\\' {
						i++
					}
				}
				tok.WriteByte(s[i])
			}
			if i == len(s) {
				return nil, errNoClosingQuote
			}
			inWord, quoted = true, true
		case c == '\\':
			if i+1 == len(s) {
				return nil, errNoEscaped
			}
			i++
			tok.WriteByte(s[i])
			inWord = true
		default:
			tok.WriteByte(c)
			inWord = true
		}
	}
	emit()
	return out, nil
}

// pyValue is what Ansible's INI plugin makes of a value: ast.literal_eval
// of it when that succeeds, else the text itself. Strings, numbers, True,
// False and None are read exactly; a list, dict, tuple or set literal is
// Complex; a form this reader does not follow exactly (string prefixes,
// triple quotes, \N{…}) is Complex too, so it can never be mistaken for a
// host setting.
func pyValue(s string, line int) Value {
	src := strings.TrimLeft(s, " \t")
	p := &pyParser{s: src}
	v, ok := p.literal()
	p.space()
	if ok && (p.i == len(p.s) || p.s[p.i] == '#') {
		v.Line = line
		return v
	}
	if p.uncertain {
		return Value{Kind: Complex, Line: line}
	}
	return Value{Kind: String, Text: s, Line: line}
}

type pyParser struct {
	s         string
	i         int
	uncertain bool // a form Python may read as a literal that we do not follow
	depth     int
}

func (p *pyParser) space() {
	for p.i < len(p.s) && (p.s[p.i] == ' ' || p.s[p.i] == '\t') {
		p.i++
	}
}

func (p *pyParser) literal() (Value, bool) {
	p.space()
	if p.i == len(p.s) {
		return Value{}, false
	}
	switch c := p.s[p.i]; {
	case c == '\'' || c == '"':
		return p.strings()
	case c == '[' || c == '(' || c == '{':
		return p.container()
	case c == '+' || c == '-':
		p.i++
		p.space()
		v, ok := p.number()
		if ok && c == '-' && (v.Kind == Float || v.Kind == Int && v.Text != "0") {
			v.Text = "-" + v.Text
		}
		return v, ok
	case c >= '0' && c <= '9' || c == '.':
		return p.number()
	case isIdentStart(c):
		j := p.i
		for j < len(p.s) && isIdentPart(p.s[j]) {
			j++
		}
		word := p.s[p.i:j]
		if j < len(p.s) && (p.s[j] == '\'' || p.s[j] == '"') && len(word) <= 2 && strings.Trim(strings.ToLower(word), "rbuf") == "" {
			p.uncertain = true // a prefixed string, r'…' or b'…'
			return Value{}, false
		}
		p.i = j
		switch word {
		case "True":
			return Value{Kind: Bool, Text: "true"}, true
		case "False":
			return Value{Kind: Bool, Text: "false"}, true
		case "None":
			return Value{Kind: Null}, true
		}
	}
	return Value{}, false
}

func isIdentStart(c byte) bool { return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
func isIdentPart(c byte) bool  { return isIdentStart(c) || c >= '0' && c <= '9' }

// strings reads one string literal or several side by side ('a' 'b' is
// 'ab' in Python).
func (p *pyParser) strings() (Value, bool) {
	var b strings.Builder
	for {
		s, ok := p.oneString()
		if !ok {
			return Value{}, false
		}
		b.WriteString(s)
		save := p.i
		p.space()
		if p.i == len(p.s) || (p.s[p.i] != '\'' && p.s[p.i] != '"') {
			p.i = save
			return Value{Kind: String, Text: b.String()}, true
		}
	}
}

func (p *pyParser) oneString() (string, bool) {
	q := p.s[p.i]
	if strings.HasPrefix(p.s[p.i:], strings.Repeat(string(q), 3)) {
		p.uncertain = true
		return "", false
	}
	var b strings.Builder
	for i := p.i + 1; i < len(p.s); i++ {
		c := p.s[i]
		if c == q {
			p.i = i + 1
			return b.String(), utf8.ValidString(b.String())
		}
		if c != '\\' {
			b.WriteByte(c)
			continue
		}
		if i+1 == len(p.s) {
			return "", false
		}
		i++
		n, ok := p.escape(&b, i)
		if !ok {
			return "", false
		}
		i = n
	}
	return "", false
}

// escape writes the character escaped at s[i] (just after the backslash)
// and returns the index of its last byte.
func (p *pyParser) escape(b *strings.Builder, i int) (int, bool) {
	simple := map[byte]byte{'\\': '\\', '\'': '\'', '"': '"', 'a': 7, 'b': 8, 'f': 12, 'n': 10, 'r': 13, 't': 9, 'v': 11}
	c := p.s[i]
	if r, ok := simple[c]; ok {
		b.WriteByte(r)
		return i, true
	}
	hexLen := map[byte]int{'x': 2, 'u': 4, 'U': 8}[c]
	switch {
	case c >= '0' && c <= '7':
		j := i
		for j < len(p.s) && j < i+3 && p.s[j] >= '0' && p.s[j] <= '7' {
			j++
		}
		n, _ := strconv.ParseUint(p.s[i:j], 8, 32)
		b.WriteRune(rune(n))
		return j - 1, true
	case hexLen > 0:
		if i+1+hexLen > len(p.s) {
			return 0, false
		}
		n, err := strconv.ParseUint(p.s[i+1:i+1+hexLen], 16, 32)
		if err != nil || n > utf8.MaxRune || (n >= 0xD800 && n <= 0xDFFF) {
			return 0, false
		}
		b.WriteRune(rune(n))
		return i + hexLen, true
	case c == 'N':
		p.uncertain = true
		return 0, false
	}
	b.WriteByte('\\') // Python keeps an unknown escape as it is
	b.WriteByte(c)
	return i, true
}

// number reads a Python int, float or imaginary literal.
func (p *pyParser) number() (Value, bool) {
	s := p.s[p.i:]
	n := numberLen(s)
	if n == 0 {
		return Value{}, false
	}
	lit := s[:n]
	if n < len(s) && isIdentPart(s[n]) {
		return Value{}, false // 12abc, or 1j handled below
	}
	p.i += n
	clean := strings.ReplaceAll(lit, "_", "")
	low := strings.ToLower(clean)
	switch {
	case strings.HasSuffix(low, "j"):
		return Value{Kind: Complex}, true
	case len(low) > 1 && low[0] == '0' && (low[1] == 'x' || low[1] == 'o' || low[1] == 'b'):
		v, ok := new(big.Int).SetString(low[2:], map[byte]int{'x': 16, 'o': 8, 'b': 2}[low[1]])
		if !ok {
			return Value{}, false
		}
		return Value{Kind: Int, Text: v.String()}, true
	case strings.ContainsAny(low, ".e"):
		f, err := strconv.ParseFloat(clean, 64)
		if err != nil && !errors.Is(err, strconv.ErrRange) {
			return Value{}, false
		}
		return Value{Kind: Float, Text: strconv.FormatFloat(f, 'g', -1, 64)}, true
	}
	if len(clean) > 1 && clean[0] == '0' && strings.Trim(clean, "0") != "" {
		return Value{}, false // 010 is a syntax error in Python 3
	}
	v, _ := new(big.Int).SetString(clean, 10)
	return Value{Kind: Int, Text: v.String()}, true
}

// numberLen is the length of the number literal at the start of s, by
// Python's grammar (digits with single underscores between them), 0 when
// there is none.
func numberLen(s string) int {
	digits := func(i int, ok func(byte) bool) int {
		start := i
		for i < len(s) && ok(s[i]) {
			i++
			if i+1 < len(s) && s[i] == '_' && ok(s[i+1]) {
				i++
			}
		}
		if i == start {
			return -1
		}
		return i
	}
	dec := func(c byte) bool { return c >= '0' && c <= '9' }
	if len(s) > 2 && s[0] == '0' && strings.ContainsRune("xXoObB", rune(s[1])) {
		ok := map[byte]func(byte) bool{
			'x': func(c byte) bool { return dec(c) || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' },
			'o': func(c byte) bool { return c >= '0' && c <= '7' },
			'b': func(c byte) bool { return c == '0' || c == '1' },
		}[s[1]|0x20]
		i := 2
		if s[i] == '_' {
			i++
		}
		if j := digits(i, ok); j > 0 {
			return j
		}
		return 0
	}
	i := digits(0, dec)
	if i < 0 {
		i = 0
	}
	if i < len(s) && s[i] == '.' {
		if j := digits(i+1, dec); j > 0 {
			i = j
		} else if i > 0 {
			i++
		}
	}
	if i == 0 {
		return 0
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		j := i + 1
		if j < len(s) && (s[j] == '+' || s[j] == '-') {
			j++
		}
		if k := digits(j, dec); k > 0 {
			i = k
		}
	}
	if i < len(s) && (s[i] == 'j' || s[i] == 'J') {
		return i + 1
	}
	return i
}

// container checks a list, tuple, dict or set literal of literals; its
// contents are not kept.
func (p *pyParser) container() (Value, bool) {
	if p.depth > 50 {
		return Value{}, false
	}
	p.depth++
	defer func() { p.depth-- }()
	open := p.s[p.i]
	close := map[byte]byte{'[': ']', '(': ')', '{': '}'}[open]
	p.i++
	items := 0
	for {
		p.space()
		if p.i < len(p.s) && p.s[p.i] == close {
			p.i++
			// (5) is 5 in Python, not a tuple; relayctl has no use for
			// either, so both are Complex.
			return Value{Kind: Complex}, true
		}
		if items > 0 {
			if p.i == len(p.s) || p.s[p.i] != ',' {
				return Value{}, false
			}
			p.i++
			p.space()
			if p.i < len(p.s) && p.s[p.i] == close {
				continue
			}
		}
		if _, ok := p.literal(); !ok {
			return Value{}, false
		}
		if open == '{' {
			p.space()
			if p.i < len(p.s) && p.s[p.i] == ':' {
				p.i++
				if _, ok := p.literal(); !ok {
					return Value{}, false
				}
			}
		}
		items++
	}
}
