package plans

import (
	"fmt"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Rollout is how apply walks a fleet: in waves, each of which starts only
// when the previous one has ended within its failure budgets. The spec's
// rollout section sets it, the plan records it (as written, normalised),
// and apply's --waves, --max-failures and --max-unreachable override it.
//
// The rules, written once (docs/cli.md, "Waves and failure budgets"):
//   - A wave is N hosts, or P% of the hosts not yet in a wave (rounded
//     down, at least one). When the list runs out, its last entry repeats
//     until every host is in a wave. The default is 1, 100%: a canary, then
//     the rest.
//   - Each wave has two budgets, checked as its hosts end. Failed, rolled
//     back and refused hosts count against max_failures (the host was
//     reached and did not end as planned); unreachable hosts count against
//     max_unreachable (nothing was done to them). N is a number of hosts,
//     P% a share of the wave's hosts (the wave stops when count × 100 >
//     P × wave size). Exactly at a budget the rollout goes on; over it, no
//     other host of the wave starts and no later wave starts. Both default
//     to 0: the first problem stops the fleet, as before waves.
//   - A wave in which every host failed, rolled back, was refused or was
//     unreachable stops the rollout whatever the budgets say: nothing in it
//     worked. (A host skipped at the drain gate counts against no budget.)
type Rollout struct {
	Waves          []string `json:"waves,omitempty"`           // e.g. ["1", "5", "25%", "100%"]
	MaxFailures    string   `json:"max_failures,omitempty"`    // "0", "2", "10%"
	MaxUnreachable string   `json:"max_unreachable,omitempty"` // the same
	// Recover is what apply does with a window a dead run left unfinished
	// on a host (its journal says how far it got): RecoverComplete or
	// RecoverRollback; "" is complete.
	Recover string `json:"recover,omitempty"`
	// Soak is the watch of the drop counters after a host's window
	// (soak.go), nil for none.
	Soak *Soak `json:"soak,omitempty"`
	// By, Order and Budgets roll out by label (rollout_labels.go): waves
	// within each value of the label By, the values one after another.
	By      string            `json:"by,omitempty"`
	Order   []string          `json:"order,omitempty"`
	Budgets map[string]Budget `json:"budgets,omitempty"`

	byLine, orderLine, budgetsLine int
}

// Recovery policies: a window a dead run left unfinished is completed
// (the remaining steps, the switch if it had not happened, the read-back)
// or rolled back (every change it made undone from its backups, the old
// relay running). Complete is the default: the plan is the reviewed
// change, finishing it costs no restart the plan did not already cost (a
// rollback after the switch costs a second one), and its read-back and
// rollback guard it as in any apply.
const (
	RecoverComplete = "complete"
	RecoverRollback = "rollback"
)

// ValidRecover checks a recovery policy.
func ValidRecover(s string) error {
	if s != RecoverComplete && s != RecoverRollback {
		return fmt.Errorf("want complete or rollback, got %q", s)
	}
	return nil
}

// Amount is a number of hosts, or a percentage of some number of hosts.
type Amount struct {
	N       int
	Percent bool
}

func (a Amount) String() string {
	if a.Percent {
		return strconv.Itoa(a.N) + "%"
	}
	return strconv.Itoa(a.N)
}

// DefaultWaves is a canary of one host, then every other host at once.
var DefaultWaves = []Amount{{N: 1}, {N: 100, Percent: true}}

// MaxWaves bounds the list of wave sizes.
const MaxWaves = 100

// ParseAmount reads "N" or "P%". min is the smallest N allowed (1 for a
// wave, 0 for a budget); P is from min to 100.
func ParseAmount(s string, min int) (Amount, error) {
	v := strings.TrimSpace(s)
	pct := strings.HasSuffix(v, "%")
	v = strings.TrimSuffix(v, "%")
	n, err := strconv.Atoi(v)
	switch {
	case err != nil || v == "" || v[0] == '+' || v[0] == '-':
		return Amount{}, fmt.Errorf("want a number of hosts or a percentage such as 5 or 25%%, got %q", s)
	case pct && (n < min || n > 100):
		return Amount{}, fmt.Errorf("a percentage from %d%% to 100%%, got %q", min, s)
	case !pct && (n < min || n > MaxHosts):
		return Amount{}, fmt.Errorf("a number of hosts from %d to %d, got %q", min, MaxHosts, s)
	}
	return Amount{N: n, Percent: pct}, nil
}

// ParseWaves reads a list of wave sizes: "1,5,25%,100%" on the command
// line, or the items of the spec's rollout.waves.
func ParseWaves(items []string) ([]Amount, error) {
	if len(items) == 0 {
		return nil, fmt.Errorf("want at least one wave size, e.g. 1,5,25%%,100%%")
	}
	if len(items) > MaxWaves {
		return nil, fmt.Errorf("%d wave sizes; at most %d (the last one repeats)", len(items), MaxWaves)
	}
	out := make([]Amount, len(items))
	for i, s := range items {
		a, err := ParseAmount(s, 1)
		if err != nil {
			return nil, fmt.Errorf("wave %d: %w", i+1, err)
		}
		out[i] = a
	}
	return out, nil
}

// SplitWaves cuts n hosts into waves: the size of each, in order.
func SplitWaves(waves []Amount, n int) []int {
	if len(waves) == 0 {
		waves = DefaultWaves
	}
	var out []int
	for left, i := n, 0; left > 0; i++ {
		w := waves[min(i, len(waves)-1)]
		k := w.N
		if w.Percent {
			k = left * w.N / 100
		}
		k = max(1, min(k, left))
		out = append(out, k)
		left -= k
	}
	return out
}

// Allows reports whether count hosts of a wave of size hosts are within
// the budget: exactly at it is within.
func (a Amount) Allows(count, size int) bool {
	if a.Percent {
		return count*100 <= a.N*size
	}
	return count <= a.N
}

// Hosts is the budget in hosts for a wave of size hosts.
func (a Amount) Hosts(size int) int {
	if a.Percent {
		return a.N * size / 100
	}
	return a.N
}

// Resolved is a rollout with its sizes parsed and defaults filled in.
type Resolved struct {
	Waves          []Amount
	MaxFailures    Amount
	MaxUnreachable Amount
	Recover        string // RecoverComplete or RecoverRollback
	Soak           *Soak  // nil: no soak
	// By is the label the waves are grouped by ("" for none), Order the
	// values that go first, Budgets each value's own wave budgets.
	By      string
	Order   []string
	Budgets map[string]ResolvedBudget
}

// Resolve parses a rollout recorded in a plan (nil: the defaults).
func (r *Rollout) Resolve() (Resolved, error) {
	out := Resolved{Waves: DefaultWaves, Recover: RecoverComplete}
	if r == nil {
		return out, nil
	}
	if r.Recover != "" {
		if err := ValidRecover(r.Recover); err != nil {
			return out, fmt.Errorf("rollout.recover: %w", err)
		}
		out.Recover = r.Recover
	}
	if r.Soak != nil {
		if err := r.Soak.Check(); err != nil {
			return out, fmt.Errorf("rollout.soak: %w", err)
		}
		s := *r.Soak
		out.Soak = &s
	}
	if len(r.Waves) > 0 {
		w, err := ParseWaves(r.Waves)
		if err != nil {
			return out, fmt.Errorf("rollout.waves: %w", err)
		}
		out.Waves = w
	}
	for _, b := range []struct {
		field, v string
		dst      *Amount
	}{{"max_failures", r.MaxFailures, &out.MaxFailures}, {"max_unreachable", r.MaxUnreachable, &out.MaxUnreachable}} {
		if b.v == "" {
			continue
		}
		a, err := ParseAmount(b.v, 0)
		if err != nil {
			return out, fmt.Errorf("rollout.%s: %w", b.field, err)
		}
		*b.dst = a
	}
	if err := r.resolveByLabel(&out); err != nil {
		return out, err
	}
	return out, nil
}

// WavesText is a list of wave sizes as written: "1, 5, 25%, 100%".
func WavesText(w []Amount) string {
	s := make([]string, len(w))
	for i, a := range w {
		s[i] = a.String()
	}
	return strings.Join(s, ", ")
}

// rollout parses the spec's rollout section.
func (p *specParser) rollout(n *yaml.Node) *Rollout {
	f, ok := p.fields(n, "rollout", "waves", "max_failures", "max_unreachable", "recover", "soak", "by", "order", "budgets")
	if !ok {
		return nil
	}
	r := &Rollout{}
	if v := f["waves"]; v != nil {
		if v.Kind != yaml.SequenceNode || len(v.Content) == 0 {
			p.fail(v, "rollout.waves", "want a list of wave sizes, each a number of hosts or a percentage of the hosts left, e.g. [1, 5, 25%%, 100%%]")
		} else if len(v.Content) > MaxWaves {
			p.fail(v, "rollout.waves", "%d wave sizes; at most %d (the last one repeats)", len(v.Content), MaxWaves)
		} else {
			for i, item := range v.Content {
				field := fmt.Sprintf("rollout.waves[%d]", i)
				s, ok := p.str(item, field)
				if !ok {
					continue
				}
				a, err := ParseAmount(s, 1)
				if err != nil {
					p.fail(item, field, "%v", err)
					continue
				}
				r.Waves = append(r.Waves, a.String())
			}
		}
	}
	for _, b := range []struct {
		key string
		dst *string
	}{{"max_failures", &r.MaxFailures}, {"max_unreachable", &r.MaxUnreachable}} {
		v := f[b.key]
		if v == nil {
			continue
		}
		s, ok := p.str(v, "rollout."+b.key)
		if !ok {
			continue
		}
		a, err := ParseAmount(s, 0)
		if err != nil {
			p.fail(v, "rollout."+b.key, "%v", err)
			continue
		}
		*b.dst = a.String()
	}
	if v := f["recover"]; v != nil {
		if s, ok := p.str(v, "rollout.recover"); ok {
			if err := ValidRecover(s); err != nil {
				p.fail(v, "rollout.recover", "%v: what apply does with a window a dead run left unfinished", err)
			} else {
				r.Recover = s
			}
		}
	}
	if v := f["soak"]; v != nil {
		r.Soak = p.soak(v)
	}
	p.byLabel(f, r)
	return r
}

// rolloutMarkdown is the review's account of the rollout: the waves this
// plan's hosts fall into, with their budgets, and which hosts each holds
// (by label: a line per value, rollout_labels.go).
func rolloutMarkdown(p *Plan) string {
	r, err := p.Rollout.Resolve()
	if err != nil { // Validate parsed it; a plan that got here is fine
		return "- Rollout: " + MDText(err.Error()) + "\n"
	}
	from := "the default: a canary, then the rest"
	if p.Rollout != nil && len(p.Rollout.Waves) > 0 {
		from = "from the spec"
	}
	soak := ""
	if r.Soak != nil {
		soak = fmt.Sprintf("- Soak: %s (apply's --soak and --soak-hosts override)\n", MDText(r.Soak.Text()))
	}
	if r.By != "" {
		return rolloutByLabelMarkdown(p, r, from) + soak
	}
	return wavesMarkdown(p, r, from) + soak
}

// wavesMarkdown lists the waves of a rollout that is not by label, as
// apply will run them: the hosts it could read, those that change first.
func wavesMarkdown(p *Plan, r Resolved, from string) string {
	waves := r.Layout(p.Hosts, p.reachedIndexes())
	sizes := make([]int, len(waves))
	for i, w := range waves {
		sizes[i] = len(w.Hosts)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "- Rollout: waves %s (%s) → %s host(s); a wave starts when the one before has ended with at most %s failed, rolled back or refused and %s unreachable "+
		"(apply's --waves, --max-failures, --max-unreachable override)\n",
		WavesText(r.Waves), from, WaveCounts(sizes), budgetText(r.MaxFailures), budgetText(r.MaxUnreachable))
	for i, w := range waves {
		if i == maxListedWaves && len(waves) > maxListedWaves+1 {
			var rest []int
			for _, x := range waves[i:] {
				rest = append(rest, x.Hosts...)
			}
			fmt.Fprintf(&b, "  - waves %d to %d: %d host(s), %s\n", i+1, len(waves), len(rest), MDText(spanOf(p.Hosts, rest)))
			break
		}
		fmt.Fprintf(&b, "  - wave %d: %d host(s), %s\n", i+1, len(w.Hosts), MDText(spanOf(p.Hosts, w.Hosts)))
	}
	return b.String()
}

// reachedIndexes are the indexes of the hosts the plan could read: those
// apply lays out in waves (it leaves the others alone).
func (p *Plan) reachedIndexes() []int {
	var out []int
	for i, h := range p.Hosts {
		if h.Action != ActionUnreachable {
			out = append(out, i)
		}
	}
	return out
}

// spanOf names hosts idx: "first … last" when they follow one another in
// the plan, else a few of them by name.
func spanOf(hosts []*HostPlan, idx []int) string {
	if len(idx) == 0 {
		return "none"
	}
	hs := make([]*HostPlan, len(idx))
	names := make([]string, len(idx))
	run := true
	for k, i := range idx {
		hs[k], names[k] = hosts[i], hosts[i].Host
		run = run && (k == 0 || i == idx[k-1]+1)
	}
	if run {
		return hostSpan(hs)
	}
	return FewNames(names, 3)
}

// maxListedWaves is how many waves the review lists one by one.
const maxListedWaves = 20

// WaveCounts is wave sizes as "1 + 5 + 23 + 71", the first dozen and a
// count beyond.
func WaveCounts(sizes []int) string {
	counts := make([]string, 0, min(len(sizes), 13))
	for i, n := range sizes {
		if i == 12 && len(sizes) > 13 {
			counts = append(counts, fmt.Sprintf("… (%d waves)", len(sizes)))
			break
		}
		counts = append(counts, strconv.Itoa(n))
	}
	return strings.Join(counts, " + ")
}

// hostSpan names hosts by the first and the last.
func hostSpan(hs []*HostPlan) string {
	if len(hs) == 1 {
		return hs[0].Host
	}
	return hs[0].Host + " … " + hs[len(hs)-1].Host
}

func budgetText(a Amount) string {
	if a.Percent {
		return a.String() + " of the wave"
	}
	return a.String()
}
