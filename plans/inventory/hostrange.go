package inventory

import (
	"fmt"
	"math/big"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/relayctl/relayctl/internal/lazyre"
)

// The forms Ansible's parse_address accepts (ansible/parsing/utils/
// addresses.py), ranges allowed. They decide whether a trailing :NN is a
// port, as in Ansible; what a name may be for relayctl to reach it is
// checked later, on the hosts a pattern selects (validName).
var (
	bracketedHostPort = lazyre.New(`^\[(.+)\]:([0-9]+)$`)
	hostPort          = lazyre.New(`^((?:[^:\[\]]|\[[^\]]*\])*):([0-9]+)$`)

	numericRange = `\[[0-9]+:[0-9]+(?::[0-9]+)?\]`
	hexRange     = `\[[0-9a-f]+:[0-9a-f]+(?::[0-9]+)?\]`
	ipv4Part     = `(?:[01]?[0-9]{1,2}|2[0-4][0-9]|25[0-5]|` + numericRange + `)`
	ipv4Re       = lazyre.New(`^(?:` + ipv4Part + `\.){3}` + ipv4Part + `$`)
	ipv6Re       = lazyre.New(`(?i)^(?:` + strings.NewReplacer("{0}", `(?:[0-9a-f]{1,4}|`+hexRange+`)`, "{i4}", ipv4Part).Replace(
		`(?:{0}:){7}{0}|(?:{0}:){1,6}:|(?:{0}:)(?::{0}){1,6}|(?:{0}:){2}(?::{0}){1,5}|(?:{0}:){3}(?::{0}){1,4}|`+
			`(?:{0}:){4}(?::{0}){1,3}|(?:{0}:){5}(?::{0}){1,2}|(?:{0}:){6}(?::{0})|:(?::{0}){1,6}|{0}?::|`+
			`(?:0:){6}(?:{i4}\.){3}{i4}|::(?:ffff:)?(?:{i4}\.){3}{i4}|(?:0:){5}ffff:(?:{i4}\.){3}{i4}`) + `)$`)
	alnumRange = lazyre.New(`(?i)^\[(?:[a-z]:[a-z]|[0-9]+:[0-9]+)(?::[0-9]+)?\]`)
)

// splitHostPort is Ansible's parse_address(allow_ranges=True) as its
// inventory plugins use it: the name (or range) and the port, 0 for none.
// ok is false when Ansible does not recognise the form; it then takes the
// whole string as the name, with no port.
func splitHostPort(s string) (name, port string, ok bool) {
	if !strings.Contains(s, ":") {
		return s, "", true // no port either way; the form only matters for one
	}
	addr := s
	// As in Ansible, both forms are tried in turn, the second on what the
	// first left.
	if m := bracketedHostPort.FindStringSubmatch(addr); m != nil {
		addr, port = m[1], m[2]
	}
	if m := hostPort.FindStringSubmatch(addr); m != nil {
		addr, port = m[1], m[2]
	}
	if ipv4Re.MatchString(addr) || ipv6Re.MatchString(addr) || hostnameWithRanges(addr) {
		return addr, port, true
	}
	return s, "", false
}

// hostnameWithRanges is the hostname form of parse_address: dot-separated
// labels of word characters and dashes (not starting with a dash, not
// ending with a dash or underscore), any of which may hold a range.
func hostnameWithRanges(s string) bool {
	if s == "" {
		return false
	}
	for _, label := range splitLabels(s) {
		if label == "" {
			return false
		}
		var last rune
		for i := 0; i < len(label); {
			if label[i] == '[' {
				m := alnumRange.FindString(label[i:])
				if m == "" {
					return false
				}
				i += len(m)
				last = ']'
				continue
			}
			r, n := utf8.DecodeRuneInString(label[i:])
			word := r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r)
			if !word && (r != '-' || i == 0) {
				return false
			}
			last = r
			i += n
		}
		if last == '-' || last == '_' {
			return false
		}
	}
	return true
}

// splitLabels splits at dots outside brackets.
func splitLabels(s string) []string {
	var out []string
	depth, start := 0, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '[':
			depth++
		case ']':
			depth--
		case '.':
			if depth == 0 {
				out = append(out, s[start:i])
				start = i + 1
			}
		}
	}
	return append(out, s[start:])
}

// expandRange is Ansible's expand_hostname_range: relay-[01:50].ash is
// relay-01.ash … relay-50.ash, [a:c] is a, b, c, a third number is a step,
// and several ranges multiply. limit bounds the names it may make; an
// error says how to fix the range.
func expandRange(pattern string, limit int) ([]string, error) {
	if !strings.Contains(pattern, "[") {
		return []string{pattern}, nil
	}
	type piece struct {
		head string
		seq  []string
	}
	var pieces []piece
	rest, total := pattern, 1
	for strings.Contains(rest, "[") {
		open, close := strings.IndexByte(rest, '['), strings.IndexByte(rest, ']')
		if close < open || strings.Contains(rest, "|") {
			return nil, fmt.Errorf("host range %q: want name[begin:end]name, e.g. relay-[01:50].ash", pattern)
		}
		seq, err := rangeSeq(rest[open+1:close], limit/total)
		if err != nil {
			return nil, fmt.Errorf("host range %q: %w", pattern, err)
		}
		if len(seq) == 0 {
			return nil, fmt.Errorf("host range %q: [%s] makes no host (Ansible would define none); write begin:end with begin ≤ end and a positive step", pattern, rest[open+1:close])
		}
		total *= len(seq)
		pieces = append(pieces, piece{rest[:open], seq})
		rest = rest[close+1:]
	}
	names := []string{""}
	for _, p := range pieces {
		next := make([]string, 0, len(names)*len(p.seq))
		for _, n := range names {
			for _, x := range p.seq {
				next = append(next, n+p.head+x)
			}
		}
		names = next
	}
	for i := range names {
		names[i] += rest
	}
	return names, nil
}

const asciiLetters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"

// rangeSeq is the names one [begin:end:step] makes, at most limit of them.
func rangeSeq(nrange string, limit int) ([]string, error) {
	bounds := strings.Split(nrange, ":")
	if len(bounds) != 2 && len(bounds) != 3 {
		return nil, fmt.Errorf("want [begin:end] or [begin:end:step]")
	}
	beg, end, step := bounds[0], bounds[1], "1"
	if len(bounds) == 3 {
		step = bounds[2]
	}
	if beg == "" {
		beg = "0"
	}
	if end == "" {
		return nil, fmt.Errorf("[%s] has no end; write [%s:END]", nrange, beg)
	}
	st, ok := pyInt(step)
	if !ok {
		return nil, fmt.Errorf("step %q is not an integer", step)
	}
	width := 0
	if beg[0] == '0' && len(beg) > 1 {
		width = len(beg)
		if len(end) != width {
			return nil, fmt.Errorf("zero-padded %s and %s differ in width; write both with %d digits", beg, end, width)
		}
	}
	if ib, ie := strings.Index(asciiLetters, beg), strings.Index(asciiLetters, end); ib >= 0 && ie >= 0 && st.Sign() != 0 {
		if ib > ie {
			return nil, fmt.Errorf("%s comes after %s; write the range from first to last", beg, end)
		}
		var out []string
		for i := int64(ib); st.Sign() > 0 && i <= int64(ie); i += st.Int64() {
			if len(out) == limit {
				return nil, fmt.Errorf("more than %d hosts; relayctl reads at most %d", MaxHosts, MaxHosts)
			}
			out = append(out, asciiLetters[i:i+1])
			if !st.IsInt64() {
				break
			}
		}
		return out, nil
	}
	b, ok1 := pyInt(beg)
	e, ok2 := pyInt(end)
	if !ok1 || !ok2 {
		return nil, fmt.Errorf("[%s] is neither a number range nor a letter range", nrange)
	}
	if st.Sign() == 0 {
		return nil, fmt.Errorf("step 0; write a step of at least 1")
	}
	if st.Sign() < 0 || b.Cmp(e) > 0 {
		return nil, nil
	}
	count := new(big.Int).Sub(e, b)
	count.Div(count, st).Add(count, big.NewInt(1))
	if !count.IsInt64() || count.Int64() > int64(limit) {
		return nil, fmt.Errorf("[%s] makes %s hosts; relayctl reads at most %d in one inventory", nrange, count, MaxHosts)
	}
	out := make([]string, 0, count.Int64())
	for x := new(big.Int).Set(b); x.Cmp(e) <= 0; x.Add(x, st) {
		s := x.String()
		if width > 0 {
			s = zfill(s, width)
		}
		out = append(out, s)
	}
	return out, nil
}

// zfill is Python's str.zfill.
func zfill(s string, width int) string {
	if len(s) >= width {
		return s
	}
	sign := ""
	if s[0] == '-' || s[0] == '+' {
		sign, s = s[:1], s[1:]
	}
	return sign + strings.Repeat("0", width-len(sign)-len(s)) + s
}

// pyInt is Python's int(str): surrounding spaces, a sign, and digits with
// single underscores between them.
func pyInt(s string) (*big.Int, bool) {
	s = strings.TrimSpace(s)
	body := strings.TrimLeft(s, "+-")
	if len(s)-len(body) > 1 || body == "" || body[0] == '_' || body[len(body)-1] == '_' || strings.Contains(body, "__") {
		return nil, false
	}
	n, ok := new(big.Int).SetString(strings.ReplaceAll(body, "_", ""), 10)
	if !ok {
		return nil, false
	}
	if s[0] == '-' {
		n.Neg(n)
	}
	return n, true
}

// intOf reads an integer setting: an integer, or a string of one (Ansible
// converts both). ok is false for anything else or what overflows an int.
func intOf(v Value) (int, bool) {
	switch v.Kind {
	case Int:
		n, err := strconv.Atoi(v.Text)
		return n, err == nil
	case String:
		n, ok := pyInt(v.Text)
		if !ok || !n.IsInt64() {
			return 0, false
		}
		return int(n.Int64()), true
	}
	return 0, false
}
