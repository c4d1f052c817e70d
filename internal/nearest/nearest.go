// Package nearest finds the word someone probably meant, for the "did you
// mean" of an error: a flag, a command, a spec key or choice, an inventory
// group.
package nearest

// Word is the candidate closest to typed by edit distance when it is near
// enough to be what was meant: at most two edits, and fewer than half of
// typed's letters; "" otherwise. The first of equally near candidates wins.
func Word(typed string, candidates []string) string {
	best, bestD := "", 3
	n := len([]rune(typed))
	for _, c := range candidates {
		if d := Distance(typed, c, bestD); d < bestD && 2*d < n {
			best, bestD = c, d
		}
	}
	return best
}

// Distance is the edit distance of a and b (optimal string alignment: an
// insertion, a deletion, a change or a swap of two neighbours is one edit,
// so ahs is one from ash), or limit when it is at least limit.
func Distance(a, b string, limit int) int {
	ra, rb := []rune(a), []rune(b)
	if len(ra)-len(rb) >= limit || len(rb)-len(ra) >= limit {
		return limit
	}
	d := make([][]int, len(ra)+1)
	for i := range d {
		d[i] = make([]int, len(rb)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(ra); i++ {
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return min(d[len(ra)][len(rb)], limit)
}
