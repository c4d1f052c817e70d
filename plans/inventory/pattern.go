package inventory

import (
	"fmt"
	"math/bits"
	"net/netip"
	"regexp"
	"strconv"
	"strings"

	"github.com/relayctl/relayctl/internal/lazyre"
)

// Pattern is an Ansible host pattern (ansible/inventory/manager.py):
//
//	relays                 a group (its hosts and its children's), or a host
//	relays:ash  relays,ash union
//	relays:&ash            intersection
//	relays:!maintenance    exclusion
//	relay-*.ash            a glob (*, ?, [abc], [!abc]) over group and host names
//	~relay-0[1-5]\.ash     a regular expression (RE2), anchored at the start
//	ash[0]  ash[0:9]  ash[-1]  ash[10:]   by position in the group
//	all  *                 every host
//
// As in Ansible, terms apply in a fixed order whatever order they are
// written in: the unions first, then every &, then every !; a pattern of
// only & and ! terms starts from all. Terms are separated by : or by ,
// (not both); an IPv6 address written alone is one term.
//
// Stricter than Ansible, so that a typo cannot change which hosts are
// touched: a term that matches no group and no host is an error (Ansible
// warns and ignores it, which turns relays:!maintenence into relays), as
// is a pattern that selects nothing, [x-y] (removed from Ansible: write
// [x:y]), spaces inside a term, and a subscript where Ansible's own host
// order is not defined (see subscriptOrder).
type Pattern struct {
	text  string
	terms []term // in evaluation order
}

type term struct {
	text    string // as written, & or ! included
	op      byte   // 0 (union), '&' or '!'
	expr    string // what is matched against names
	re      *regexp.Regexp
	regex   bool // ~regex
	special bool // a glob, a regex or a name with a dot: hosts match even where groups do
	sub     *subscript
}

type subscript struct {
	start, end int
	single     bool
}

var patternSubscript = lazyre.New(`^(.+)\[(?:(-?[0-9]+)|([0-9]+)([:-])([0-9]*))\]$`)

// String is the pattern as written.
func (p *Pattern) String() string { return p.text }

// ParsePattern checks a pattern's form without an inventory, so a spec's
// pattern can be checked before its inventory is read.
func ParsePattern(s string) (*Pattern, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, fmt.Errorf("empty host pattern; write all for every host, or a group such as relays:&ash")
	}
	if len(s) > MaxPattern {
		return nil, fmt.Errorf("host pattern of %d bytes; at most %d", len(s), MaxPattern)
	}
	pieces, colons, err := splitPattern(s)
	if err != nil {
		return nil, fmt.Errorf("host pattern %q: %w", s, err)
	}
	if len(pieces) > MaxTerms {
		return nil, fmt.Errorf("host pattern %q: %d terms; at most %d", s, len(pieces), MaxTerms)
	}
	var unions, ands, nots []term
	for _, piece := range pieces {
		t, err := parseTerm(piece, colons)
		if err != nil {
			return nil, fmt.Errorf("host pattern %q: %w", s, err)
		}
		switch t.op {
		case '&':
			ands = append(ands, t)
		case '!':
			nots = append(nots, t)
		default:
			unions = append(unions, t)
		}
	}
	if len(unions) == 0 {
		unions = []term{{text: "all", expr: "all"}}
	}
	return &Pattern{text: s, terms: append(append(unions, ands...), nots...)}, nil
}

// splitPattern is Ansible's split_host_pattern: at commas when there are
// any, else at colons outside brackets. colons says which.
func splitPattern(s string) ([]string, bool, error) {
	var pieces []string
	if strings.Contains(s, ",") {
		for _, p := range strings.Split(s, ",") {
			p = strings.TrimSpace(p)
			if p == "" {
				continue
			}
			body := strings.TrimLeft(p, "&!")
			if outsideBrackets(body, ':') && !strings.HasPrefix(body, "~") && !isIP(body) {
				return nil, false, fmt.Errorf("%q mixes , and : between terms; use one of them", p)
			}
			pieces = append(pieces, p)
		}
		return pieces, false, nil
	}
	if isIP(s) {
		return []string{s}, false, nil
	}
	depth, start := 0, 0
	for i := 0; i <= len(s); i++ {
		if i < len(s) && s[i] == '[' {
			depth++
		}
		if i < len(s) && s[i] == ']' && depth > 0 {
			depth--
		}
		if i == len(s) || (s[i] == ':' && depth == 0) {
			if p := strings.TrimSpace(s[start:i]); p != "" {
				pieces = append(pieces, p)
			}
			start = i + 1
		}
	}
	if len(pieces) == 0 {
		return nil, true, fmt.Errorf("no terms; write a group, a host, or all")
	}
	return pieces, true, nil
}

func outsideBrackets(s string, c byte) bool {
	depth := 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '[':
			depth++
		case ']':
			depth = max(depth-1, 0)
		case c:
			if depth == 0 {
				return true
			}
		}
	}
	return false
}

func isIP(s string) bool {
	_, err := netip.ParseAddr(s)
	return err == nil && !strings.Contains(s, "%")
}

func parseTerm(piece string, colons bool) (term, error) {
	t := term{text: piece}
	body := piece
	if body[0] == '&' || body[0] == '!' {
		t.op, body = body[0], body[1:]
	}
	switch {
	case body == "":
		return t, fmt.Errorf("%q: nothing after %c; write %cGROUP", piece, t.op, t.op)
	case strings.ContainsAny(body, " \t\r\n"):
		return t, fmt.Errorf("%q: a space inside a term; separate terms with : or ,", piece)
	case body[0] == '&' || body[0] == '!':
		return t, fmt.Errorf("%q: one & or ! per term", piece)
	case body[0] == '@':
		return t, fmt.Errorf("%q: @file is ansible --limit's, not a host pattern; write the groups or hosts", piece)
	}
	if body[0] == '~' {
		re, err := regexp.Compile(`^(?:` + body[1:] + `)`)
		if err != nil {
			hint := ""
			if colons {
				hint = "; a regex holding : needs , between terms"
			}
			return t, fmt.Errorf("%q: not a regular expression relayctl reads (Go RE2 syntax: no lookaround or backreferences): %v%s", piece, err, hint)
		}
		t.expr, t.re, t.regex, t.special = body, re, true, true
		return t, nil
	}
	if m := patternSubscript.FindStringSubmatch(body); m != nil {
		body = m[1]
		sub, err := parseSubscript(m)
		if err != nil {
			return t, fmt.Errorf("%q: %w", piece, err)
		}
		t.sub = sub
	}
	t.expr = body
	if strings.ContainsAny(body, "*?[") {
		re, err := globRegexp(body)
		if err != nil {
			return t, fmt.Errorf("%q: not a glob relayctl reads: %v", piece, err)
		}
		t.re, t.special = re, true
	}
	if strings.Contains(body, ".") {
		t.special = true
	}
	return t, nil
}

func parseSubscript(m []string) (*subscript, error) {
	if m[2] != "" {
		n, err := strconv.Atoi(m[2])
		if err != nil {
			return nil, fmt.Errorf("subscript %s is out of range", m[2])
		}
		return &subscript{start: n, single: true}, nil
	}
	if m[4] == "-" {
		return nil, fmt.Errorf("[%s-%s] was removed from Ansible; write [%s:%s] (both ends included)", m[3], m[5], m[3], m[5])
	}
	start, err1 := strconv.Atoi(m[3])
	end, err2 := -1, error(nil)
	if m[5] != "" {
		end, err2 = strconv.Atoi(m[5])
	}
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("subscript [%s:%s] is out of range", m[3], m[5])
	}
	return &subscript{start: start, end: end}, nil
}

// globRegexp is Python's fnmatch.translate, which Ansible matches names
// with: * is any run of characters, ? one, [abc] and [!abc] a set; a [
// without its ] is itself; matching is case-sensitive and whole-name.
func globRegexp(glob string) (*regexp.Regexp, error) {
	var b strings.Builder
	b.WriteString(`^(?s:`)
	for i := 0; i < len(glob); i++ {
		switch c := glob[i]; c {
		case '*':
			b.WriteString(`.*`)
			for i+1 < len(glob) && glob[i+1] == '*' {
				i++
			}
		case '?':
			b.WriteString(`.`)
		case '[':
			j := i + 1
			if j < len(glob) && glob[j] == '!' {
				j++
			}
			if j < len(glob) && glob[j] == ']' {
				j++
			}
			for j < len(glob) && glob[j] != ']' {
				j++
			}
			if j >= len(glob) {
				b.WriteString(`\[`)
				continue
			}
			b.WriteString(globClass(glob[i+1 : j]))
			i = j
		default:
			b.WriteString(regexp.QuoteMeta(string(c)))
		}
	}
	b.WriteString(`)$`)
	return regexp.Compile(b.String())
}

// globClass is one [...] set of a glob as an RE2 class.
func globClass(set string) string {
	neg := strings.HasPrefix(set, "!")
	if neg {
		set = set[1:]
	}
	if set == "" {
		if neg {
			return `.` // [!] is any one character in Python 3.11
		}
		return `[^\x00-\x{10FFFF}]` // [] matches nothing
	}
	var b strings.Builder
	b.WriteByte('[')
	if neg {
		b.WriteByte('^')
	}
	for i := 0; i < len(set); i++ {
		c := set[i]
		if c == '-' && i > 0 && i < len(set)-1 {
			b.WriteByte('-')
			continue
		}
		if c < 0x80 && !isIdentPart(c) {
			b.WriteByte('\\')
		}
		b.WriteByte(c)
	}
	b.WriteByte(']')
	return b.String()
}

// bitset is a set of hosts by their index in Inventory.hosts, so that
// unions, intersections and exclusions over 10,000 hosts are a few hundred
// word operations, and iterating it gives hosts in inventory order.
type bitset []uint64

func newBitset(n int) bitset { return make(bitset, (n+63)/64) }
func (s bitset) add(i int)   { s[i/64] |= 1 << (i % 64) }
func (s bitset) or(t bitset) {
	for i := range s {
		s[i] |= t[i]
	}
}
func (s bitset) and(t bitset) {
	for i := range s {
		s[i] &= t[i]
	}
}
func (s bitset) andNot(t bitset) {
	for i := range s {
		s[i] &^= t[i]
	}
}
func (s bitset) count() (n int) {
	for _, w := range s {
		n += bits.OnesCount64(w)
	}
	return n
}
func (s bitset) each(f func(i int)) {
	for wi, w := range s {
		for w != 0 {
			b := bits.TrailingZeros64(w)
			f(wi*64 + b)
			w &^= 1 << b
		}
	}
}
