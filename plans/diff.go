package plans

import (
	"strconv"
	"strings"

	"github.com/relayctl/relayctl/relay/config"
)

// DiffLine is one line of a file's change, current → planned, as the
// review shows it: Op is " " (kept), "-" (removed) or "+" (added).
// Managed marks a key relayctl writes; a secret's value is masked.
type DiffLine struct {
	Op      string `json:"op"`
	Text    string `json:"text"`
	Managed bool   `json:"managed,omitempty"`
}

// maxDiffLines bounds the lines a diff keeps: relay configs and drop-ins
// are small, and the review must stay readable.
const maxDiffLines = 400

// diffLines is a line diff of a into b (longest common subsequence, which
// is plenty for files of a few dozen lines).
func diffLines(a, b string) []DiffLine {
	x, y := splitLines(a), splitLines(b)
	if len(x) > maxDiffLines || len(y) > maxDiffLines {
		return []DiffLine{{Op: " ", Text: "(too long to show: " + strconv.Itoa(len(x)) + " lines → " + strconv.Itoa(len(y)) + " lines)"}}
	}
	// lcs[i][j] is the length of the common subsequence of x[i:] and y[j:].
	lcs := make([][]int, len(x)+1)
	for i := range lcs {
		lcs[i] = make([]int, len(y)+1)
	}
	for i := len(x) - 1; i >= 0; i-- {
		for j := len(y) - 1; j >= 0; j-- {
			if x[i] == y[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var out []DiffLine
	i, j := 0, 0
	for i < len(x) || j < len(y) {
		switch {
		case i < len(x) && j < len(y) && x[i] == y[j]:
			out = append(out, DiffLine{Op: " ", Text: x[i]})
			i++
			j++
		case i < len(x) && (j == len(y) || lcs[i+1][j] >= lcs[i][j+1]):
			out = append(out, DiffLine{Op: "-", Text: x[i]})
			i++
		default:
			out = append(out, DiffLine{Op: "+", Text: y[j]})
			j++
		}
	}
	return out
}

func splitLines(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(strings.TrimSuffix(s, "\n"), "\n")
}

// secretWords mark a key whose value a review must not show.
var secretWords = []string{"TOKEN", "SECRET", "PASSWORD", "KEY"}

// IsSecretKey reports whether a config key's value is masked in reviews.
func IsSecretKey(k string) bool {
	u := strings.ToUpper(k)
	for _, w := range secretWords {
		if strings.Contains(u, w) {
			return true
		}
	}
	return false
}

// maskDiff marks managed keys and masks secrets: a secret's value shows as
// ••• with a short hash, so a reviewer still sees whether it changed.
func maskDiff(d []DiffLine, managed map[string]bool) []DiffLine {
	for i, l := range d {
		as := config.Assignments([]byte(l.Text))
		if len(as) != 1 {
			continue
		}
		a := as[0]
		d[i].Managed = managed[a.Key]
		if IsSecretKey(a.Key) {
			d[i].Text = a.Key + "=••• (sha256:" + sha256Text(a.Value)[:12] + ")"
		}
	}
	return d
}
