package plans

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/relayctl/relayctl/relay/config"
	"github.com/relayctl/relayctl/tune"
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
		if as := config.Assignments([]byte(l.Text)); len(as) == 1 {
			d[i].Managed = managed[as[0].Key]
		}
		if !isMasked(l.Text) {
			d[i].Text = MaskLine(l.Text)
		}
	}
	return d
}

// maskValue shows a secret as ••• with a short hash of its value.
func maskValue(v string) string {
	return "••• (sha256:" + sha256Text(v)[:12] + ")"
}

// Per-key changes of a file, as the JSON plan carries them.
const (
	KeyAdded   = "added"
	KeyRemoved = "removed"
	KeyChanged = "changed"
	KeyKept    = "kept"
)

// KeyChange is one key of a file relayctl writes, current → planned: the
// review's diff as data. A secret's values are masked as in the diff;
// Current is empty for a key added, Planned for a key removed.
type KeyChange struct {
	Key     string `json:"key"`
	Current string `json:"current,omitempty"`
	Planned string `json:"planned,omitempty"`
	Managed bool   `json:"managed"`
	Change  string `json:"change"` // added, removed, changed, kept
}

type keyValue struct{ key, value string }

// keyChanges compares the keys of two versions of a file: the keys of the
// planned file in its order, then those only the current one has. A key
// given twice counts with its last value, the one that is read.
func keyChanges(cur, planned []keyValue, managed map[string]bool, secret func(string) bool) []KeyChange {
	last := func(kv []keyValue) (map[string]string, []string) {
		m, order := map[string]string{}, []string{}
		for _, x := range kv {
			if _, ok := m[x.key]; !ok {
				order = append(order, x.key)
			}
			m[x.key] = x.value
		}
		return m, order
	}
	c, corder := last(cur)
	p, porder := last(planned)
	show := func(k, v string) string {
		if secret(k) {
			return maskValue(v)
		}
		return v
	}
	out := []KeyChange{}
	for _, k := range porder {
		kc := KeyChange{Key: k, Planned: show(k, p[k]), Managed: managed[k]}
		cv, had := c[k]
		switch {
		case !had:
			kc.Change = KeyAdded
		case cv == p[k]:
			kc.Change, kc.Current = KeyKept, show(k, cv)
		default:
			kc.Change, kc.Current = KeyChanged, show(k, cv)
		}
		out = append(out, kc)
	}
	for _, k := range corder {
		if _, ok := p[k]; !ok {
			out = append(out, KeyChange{Key: k, Current: show(k, c[k]), Managed: managed[k], Change: KeyRemoved})
		}
	}
	return out
}

// configKeys are the assignments of a relay config.
func configKeys(content string) []keyValue {
	var out []keyValue
	for _, a := range config.Assignments([]byte(content)) {
		out = append(out, keyValue{a.Key, a.Value})
	}
	return out
}

// dropInKeys are the settings of a sysctl.d file, values normalised as the
// kernel compares them; a line sysctl would refuse is left out (the diff
// still shows it).
func dropInKeys(content string) []keyValue {
	var out []keyValue
	settings, _ := tune.ParseConfLenient("", []byte(content))
	for _, s := range settings {
		out = append(out, keyValue{s.Key, tune.Normalize(s.Value)})
	}
	return out
}

func noSecret(string) bool { return false }

// DiffContext is how many unchanged lines a hunk of the review's diff
// shows around a change, as diff -u does.
const DiffContext = 3

// Hunk is one @@ block of a unified diff: where it starts in each version
// (1-based; the line before when it is empty) and its lines.
type Hunk struct {
	OldStart, OldLen int
	NewStart, NewLen int
	Lines            []DiffLine
}

// Header is the hunk's @@ line; a length of 1 is left out, as diff -u does.
func (h Hunk) Header() string {
	r := func(start, n int) string {
		if n == 1 {
			return strconv.Itoa(start)
		}
		return fmt.Sprintf("%d,%d", start, n)
	}
	return fmt.Sprintf("@@ -%s +%s @@", r(h.OldStart, h.OldLen), r(h.NewStart, h.NewLen))
}

// Hunks groups a diff into hunks with context unchanged lines around each
// change; changes closer than twice that share a hunk. A diff without a
// change has no hunks.
func Hunks(d []DiffLine, context int) []Hunk {
	// oldNo[i], newNo[i]: lines of each version before line i of the diff.
	oldNo, newNo := make([]int, len(d)+1), make([]int, len(d)+1)
	var changes []int
	for i, l := range d {
		oldNo[i+1], newNo[i+1] = oldNo[i], newNo[i]
		if l.Op != "+" {
			oldNo[i+1]++
		}
		if l.Op != "-" {
			newNo[i+1]++
		}
		if l.Op == "+" || l.Op == "-" {
			changes = append(changes, i)
		}
	}
	var out []Hunk
	for k := 0; k < len(changes); {
		from := max(0, changes[k]-context)
		end := changes[k]
		for k++; k < len(changes) && changes[k]-end <= 2*context; k++ {
			end = changes[k]
		}
		to := min(len(d), end+context+1)
		h := Hunk{
			OldStart: oldNo[from] + 1, OldLen: oldNo[to] - oldNo[from],
			NewStart: newNo[from] + 1, NewLen: newNo[to] - newNo[from],
			Lines: d[from:to],
		}
		if h.OldLen == 0 {
			h.OldStart--
		}
		if h.NewLen == 0 {
			h.NewStart--
		}
		out = append(out, h)
	}
	return out
}
