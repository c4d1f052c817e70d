package tune

import (
	_ "embed"
	"strings"
	"sync"
)

//go:generate go run gen_known_sysctls.go

// knownSysctlsFile is every sysctl of one kernel, generated from its
// /proc/sys (gen_known_sysctls.go). It only feeds warnings and hints: a
// host's own /proc/sys decides at plan time whether a key exists there.
//
//go:embed known_sysctls.txt
var knownSysctlsFile string

type sysctlList struct {
	kernel   string
	keys     map[string]bool
	patterns [][]string // keys with * for a network interface, split at dots
	all      []string   // every line, patterns included, in order
}

var knownList = sync.OnceValue(func() *sysctlList { return parseSysctlList(knownSysctlsFile) })

func parseSysctlList(text string) *sysctlList {
	l := &sysctlList{keys: map[string]bool{}}
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "kernel "):
			l.kernel = strings.TrimPrefix(line, "kernel ")
		case strings.Contains(line, "*"):
			l.patterns = append(l.patterns, strings.Split(line, "."))
			l.all = append(l.all, line)
		default:
			l.keys[line] = true
			l.all = append(l.all, line)
		}
	}
	return l
}

// KnownSysctlsKernel is the kernel release the list of known sysctls was
// generated on, e.g. 6.18.44.
func KnownSysctlsKernel() string { return knownList().kernel }

// IsKnownSysctl reports whether key is a sysctl of the kernel the list was
// generated on; a per-interface key matches whatever the interface is called.
func IsKnownSysctl(key string) bool {
	l := knownList()
	if l.keys[key] {
		return true
	}
	segs := strings.Split(key, ".")
	for _, p := range l.patterns {
		if matchSegments(p, segs) {
			return true
		}
	}
	return false
}

func matchSegments(pattern, segs []string) bool {
	if len(pattern) != len(segs) {
		return false
	}
	for i, p := range pattern {
		if p != "*" && p != segs[i] {
			return false
		}
	}
	return true
}

// NearestSysctl returns the known sysctl closest to key by edit distance
// (ignoring case), for a "did you mean" hint; ok is false when nothing is
// close enough to be the key meant. A per-interface key is suggested with
// the interface key's own interface name in place of *.
func NearestSysctl(key string) (string, bool) {
	l := knownList()
	segs := strings.Split(key, ".")
	limit := max(2, len(key)/5)
	best, bestD := "", limit+1
	for _, cand := range l.all {
		if strings.Contains(cand, "*") {
			cand = fillInterface(cand, segs)
		}
		if d := editDistance(strings.ToLower(key), strings.ToLower(cand), bestD); d < bestD || d == bestD && cand < best {
			best, bestD = cand, d
		}
	}
	if best == "" || best == key {
		return "", false
	}
	return best, true
}

// fillInterface puts the segment of key where pattern has * into pattern,
// so net.ipv4.conf.eth0.rp_filtr is compared with net.ipv4.conf.eth0.rp_filter.
func fillInterface(pattern string, key []string) string {
	p := strings.Split(pattern, ".")
	for i, s := range p {
		if s == "*" && i < len(key) {
			p[i] = key[i]
		}
	}
	return strings.Join(p, ".")
}

// editDistance is the Levenshtein distance of a and b, or any value above
// limit once it is certain to exceed it.
func editDistance(a, b string, limit int) int {
	if d := len(a) - len(b); d > limit || -d > limit {
		return limit + 1
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		rowMin := cur[0]
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			rowMin = min(rowMin, cur[j])
		}
		if rowMin > limit {
			return limit + 1
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// UnknownSysctlHint is the warning for a key that is not in the list:
// which kernel the list is from, and the nearest key when one is close.
func UnknownSysctlHint(key string) string {
	msg := "not a sysctl of Linux " + KnownSysctlsKernel() + " (the list relayctl ships, tune/known_sysctls.txt)"
	if near, ok := NearestSysctl(key); ok {
		msg += "; did you mean " + near + "?"
	}
	return msg
}
