package approval

// OpenSSH's pattern lists (match.c), which namespaces= holds: patterns
// separated by commas, each with * (any run of bytes) and ? (one byte) and
// nothing else special, case-sensitive here (sshsig.c does not fold case).
// A pattern that starts with ! is negated: if it matches, the whole list
// refuses, whatever else matched.

// maxSubpattern is the length at which OpenSSH gives up on a pattern
// (its 1024-byte buffer, less the NUL): the whole list then matches
// nothing, even after a positive match.
const maxSubpattern = 1023

// matchPatternList is match_pattern_list: 1 when s matches a pattern of
// list and no negated one, -1 when a negated pattern matches, 0 otherwise.
func matchPatternList(s, list string) int {
	positive := false
	for i := 0; i < len(list); {
		negated := list[i] == '!'
		if negated {
			i++
		}
		j := i
		for j < len(list) && list[j] != ',' {
			j++
		}
		sub := list[i:j]
		if len(sub) >= maxSubpattern {
			return 0
		}
		i = j
		if i < len(list) {
			i++ // the comma
		}
		if matchPattern(s, sub) {
			if negated {
				return -1
			}
			positive = true
		}
	}
	if positive {
		return 1
	}
	return 0
}

// matchPattern is match_pattern: the whole of s against one pattern of *
// and ?. OpenSSH recurses at each *; this walks both strings once,
// returning to the last * on a mismatch, which accepts the same strings in
// O(len(s)·len(p)) at worst.
func matchPattern(s, p string) bool {
	si, pi := 0, 0
	star, resume := -1, 0
	for si < len(s) {
		switch {
		case pi < len(p) && p[pi] == '*':
			star, resume = pi, si
			pi++
		case pi < len(p) && (p[pi] == '?' || p[pi] == s[si]):
			si++
			pi++
		case star >= 0:
			// Let the last * take one more byte and try again after it.
			resume++
			si, pi = resume, star+1
		default:
			return false
		}
	}
	for pi < len(p) && p[pi] == '*' {
		pi++
	}
	return pi == len(p)
}
