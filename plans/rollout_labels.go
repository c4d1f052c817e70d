package plans

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/relayctl/relayctl/plans/inventory"
)

// Rollouts by label (rollout.by): the hosts are grouped by the value of a
// label, the groups go one after another (rollout.order's first, then in
// the order each value first appears in the plan), and each group is cut
// into waves by rollout.waves on its own, so each region starts with its
// own canary. rollout.budgets gives a value's waves budgets of their own.
// Whatever stops the rollout in one group stops it before the next.

// Budget is one label value's wave budgets, as the spec writes them; an
// empty field keeps the rollout's.
type Budget struct {
	MaxFailures    string `json:"max_failures,omitempty"`
	MaxUnreachable string `json:"max_unreachable,omitempty"`
}

// ResolvedBudget is a Budget parsed; nil keeps the rollout's.
type ResolvedBudget struct {
	MaxFailures, MaxUnreachable *Amount
}

// Wave is one wave of a run: its hosts (indexes into the plan's hosts,
// in plan order), the label value it belongs to, and its budgets.
type Wave struct {
	Group          string // "region=ash" when the rollout is by label, else ""
	Hosts          []int
	MaxFailures    Amount
	MaxUnreachable Amount
}

// Layout cuts the hosts idx (indexes into hosts, in plan order) into the
// run's waves. Without r.By they are cut by r.Waves as they come; with it,
// grouped by their value of the label first (see the top of this file).
// Either way the hosts that change go first (changesFirst), so each
// wave's canary, its first host, is one whose window proves something.
func (r Resolved) Layout(hosts []*HostPlan, idx []int) []Wave {
	idx = changesFirst(hosts, idx)
	if r.By == "" {
		return r.cut("", "", idx)
	}
	groups := map[string][]int{}
	for _, i := range idx {
		v := hosts[i].Labels[r.By]
		groups[v] = append(groups[v], i)
	}
	var out []Wave
	for _, v := range r.GroupOrder(hosts) {
		if g := groups[v]; len(g) > 0 {
			out = append(out, r.cut(r.By+"="+v, v, g)...)
		}
	}
	return out
}

// changesFirst is idx with the hosts the plan changes first, then the
// others, each in plan order. A wave's first host goes ahead of the rest
// and is the one a soak watches: a host left unchanged (or refused) there
// would vouch for a release it never ran, and the host that does change
// would go without a canary ahead of it. A group whose hosts all stay as
// they are has no canary to speak of, and needs none.
func changesFirst(hosts []*HostPlan, idx []int) []int {
	out := make([]int, 0, len(idx))
	for _, i := range idx {
		if hosts[i].Action == ActionChange {
			out = append(out, i)
		}
	}
	for _, i := range idx {
		if hosts[i].Action != ActionChange {
			out = append(out, i)
		}
	}
	return out
}

// GroupOrder is the values of r.By in the order their groups go: Order's
// first, then as each first appears among hosts.
func (r Resolved) GroupOrder(hosts []*HostPlan) []string {
	out := slices.Clone(r.Order)
	seen := map[string]bool{}
	for _, v := range out {
		seen[v] = true
	}
	for _, h := range hosts {
		if v := h.Labels[r.By]; !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return out
}

func (r Resolved) cut(group, value string, idx []int) []Wave {
	mf, mu := r.MaxFailures, r.MaxUnreachable
	if b, ok := r.Budgets[value]; ok && group != "" {
		if b.MaxFailures != nil {
			mf = *b.MaxFailures
		}
		if b.MaxUnreachable != nil {
			mu = *b.MaxUnreachable
		}
	}
	var out []Wave
	at := 0
	for _, n := range SplitWaves(r.Waves, len(idx)) {
		out = append(out, Wave{Group: group, Hosts: idx[at : at+n], MaxFailures: mf, MaxUnreachable: mu})
		at += n
	}
	return out
}

// resolveByLabel parses the by-label part of a rollout into out.
func (r *Rollout) resolveByLabel(out *Resolved) error {
	out.By, out.Order = r.By, r.Order
	if len(r.Budgets) == 0 {
		return nil
	}
	out.Budgets = map[string]ResolvedBudget{}
	for _, v := range slices.Sorted(maps.Keys(r.Budgets)) {
		b := r.Budgets[v]
		var rb ResolvedBudget
		for _, x := range []struct {
			field, s string
			dst      **Amount
		}{{"max_failures", b.MaxFailures, &rb.MaxFailures}, {"max_unreachable", b.MaxUnreachable, &rb.MaxUnreachable}} {
			if x.s == "" {
				continue
			}
			a, err := ParseAmount(x.s, 0)
			if err != nil {
				return fmt.Errorf("rollout.budgets.%s.%s: %w", v, x.field, err)
			}
			*x.dst = &a
		}
		out.Budgets[v] = rb
	}
	return nil
}

// byLabel parses rollout.by, order and budgets into r.
func (p *specParser) byLabel(f map[string]*yaml.Node, r *Rollout) {
	if v := f["by"]; v != nil {
		if s, ok := p.str(v, "rollout.by"); ok {
			if err := inventory.ValidLabelKey(s); err != nil {
				p.fail(v, "rollout.by", "%v", err)
			} else {
				r.By, r.byLine = s, v.Line
			}
		}
	}
	if v := f["order"]; v != nil {
		r.Order = p.labelValues(v, "rollout.order")
		r.orderLine = v.Line
	}
	if v := f["budgets"]; v != nil {
		r.Budgets = p.budgets(v)
		r.budgetsLine = v.Line
	}
	if r.By == "" && (f["order"] != nil || f["budgets"] != nil) {
		at := f["order"]
		if at == nil {
			at = f["budgets"]
		}
		p.fail(at, "rollout.by", "missing; rollout.order and rollout.budgets name values of the label given by rollout.by, e.g. by: region")
	}
}

// labelValues reads a list of label values, each once.
func (p *specParser) labelValues(v *yaml.Node, field string) []string {
	if v.Kind != yaml.SequenceNode || len(v.Content) == 0 {
		p.fail(v, field, "want a list of label values, e.g. [ash, fra]")
		return nil
	}
	var out []string
	for i, item := range v.Content {
		f := fmt.Sprintf("%s[%d]", field, i)
		s, ok := p.str(item, f)
		if !ok {
			continue
		}
		switch {
		case !labelValueRe.MatchString(s):
			p.fail(item, f, "want a label value (letters, digits and ._-, at most 63), got %q", s)
		case slices.Contains(out, s):
			p.fail(item, f, "%s is named twice", s)
		default:
			out = append(out, s)
		}
	}
	return out
}

// budgets reads rollout.budgets: per label value, max_failures and
// max_unreachable.
func (p *specParser) budgets(v *yaml.Node) map[string]Budget {
	if v.Kind != yaml.MappingNode || len(v.Content) == 0 {
		p.fail(v, "rollout.budgets", "want a mapping of label values to budgets, e.g. {fra: {max_failures: 5%%}}")
		return nil
	}
	out := map[string]Budget{}
	for i := 0; i+1 < len(v.Content); i += 2 {
		k, val := v.Content[i], v.Content[i+1]
		field := "rollout.budgets." + k.Value
		if !labelValueRe.MatchString(k.Value) {
			p.fail(k, field, "want a label value (letters, digits and ._-, at most 63), got %q", k.Value)
			continue
		}
		if _, dup := out[k.Value]; dup {
			p.fail(k, field, "given twice")
			continue
		}
		f, ok := p.fields(val, field, "max_failures", "max_unreachable")
		if !ok {
			continue
		}
		var b Budget
		for _, x := range []struct {
			key string
			dst *string
		}{{"max_failures", &b.MaxFailures}, {"max_unreachable", &b.MaxUnreachable}} {
			if n := f[x.key]; n != nil {
				if s, ok := p.str(n, field+"."+x.key); ok {
					if a, err := ParseAmount(s, 0); err != nil {
						p.fail(n, field+"."+x.key, "%v", err)
					} else {
						*x.dst = a.String()
					}
				}
			}
		}
		out[k.Value] = b
	}
	return out
}

// checkByLabel checks, once the spec's hosts are known, that rollout.by
// is one of hosts.labels.
func (p *specParser) checkByLabel(s *Spec) {
	r := s.Rollout
	if r == nil || r.By == "" {
		return
	}
	switch {
	case s.Inventory == nil:
		p.failLine(r.byLine, "rollout.by", "the hosts are a list, which carries no labels; labels come from an inventory (hosts: {inventory: FILE, pattern: P, labels: [%s]})", r.By)
	case !slices.Contains(s.Inventory.Labels, r.By):
		p.failLine(r.byLine, "rollout.by", "%s is not one of hosts.labels (%s); add it there", r.By, strings.Join(s.Inventory.Labels, ", "))
	}
}

// CheckLabelValues checks, once an inventory spec's hosts are selected,
// that every label value the spec names is one some host has (a typo in
// rollout.order would change nothing and say nothing), and that every
// value of capacity.by has a promise.
func (s *Spec) CheckLabelValues() SpecErrors {
	var errs SpecErrors
	values := func(k string) map[string]int {
		out := map[string]int{}
		for _, name := range s.Hosts {
			out[s.Labels[name][k]]++
		}
		return out
	}
	if r := s.Rollout; r != nil && r.By != "" {
		have := values(r.By)
		for _, v := range r.Order {
			if have[v] == 0 {
				errs = append(errs, &SpecError{File: s.File, Line: r.orderLine, Field: "rollout.order", Msg: fmt.Sprintf("no selected host has %s=%s; the values: %s", r.By, v, valueList(have))})
			}
		}
		for _, v := range slices.Sorted(maps.Keys(r.Budgets)) {
			if have[v] == 0 {
				errs = append(errs, &SpecError{File: s.File, Line: r.budgetsLine, Field: "rollout.budgets." + v, Msg: fmt.Sprintf("no selected host has %s=%s; the values: %s", r.By, v, valueList(have))})
			}
		}
	}
	if c := s.CapacityBy; c != nil {
		have := values(c.By)
		for _, v := range slices.Sorted(maps.Keys(have)) {
			if _, ok := c.Players[v]; !ok {
				errs = append(errs, &SpecError{File: s.File, Line: c.line, Field: "capacity.players", Msg: fmt.Sprintf("no promise for %s=%s (%s); add %s: PLAYERS", c.By, v, plural(have[v], "host"), v)})
			}
		}
		for _, v := range slices.Sorted(maps.Keys(c.Players)) {
			if have[v] == 0 {
				errs = append(errs, &SpecError{File: s.File, Line: c.line, Field: "capacity.players." + v, Msg: fmt.Sprintf("no selected host has %s=%s; the values: %s", c.By, v, valueList(have))})
			}
		}
	}
	return errs
}

func valueList(have map[string]int) string {
	vs := slices.Sorted(maps.Keys(have))
	if len(vs) > 20 {
		return strings.Join(vs[:20], ", ") + fmt.Sprintf(" and %d more", len(vs)-20)
	}
	return strings.Join(vs, ", ")
}

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}

// rolloutByLabelMarkdown is the review's account of a rollout by label:
// a line per value, in the order they go, with its waves and budgets.
func rolloutByLabelMarkdown(p *Plan, r Resolved, from string) string {
	waves := r.Layout(p.Hosts, p.reachedIndexes())
	order := r.GroupOrder(p.Hosts)
	var b strings.Builder
	ordered := ""
	if len(r.Order) > 0 {
		ordered = fmt.Sprintf(", %s first (rollout.order)", MDText(strings.Join(r.Order, ", ")))
	}
	fmt.Fprintf(&b, "- Rollout by %s: %d values one after another%s, each in waves %s (%s) with a canary of its own → %d waves; "+
		"a wave starts when the one before has ended within its budgets, so a value that stops the rollout stops it before the next "+
		"(apply's --waves, --max-failures, --max-unreachable override; rollout.budgets does not yield to them)\n",
		MDText(r.By), len(order), ordered, WavesText(r.Waves), from, len(waves))
	at := 0
	for gi, v := range order {
		var sizes, hosts []int
		first := at + 1
		for at < len(waves) && waves[at].Group == r.By+"="+v {
			sizes = append(sizes, len(waves[at].Hosts))
			hosts = append(hosts, waves[at].Hosts...)
			at++
		}
		if gi == maxListedGroups && len(order) > maxListedGroups+1 {
			fmt.Fprintf(&b, "  - and %d more values of %s, waves %d to %d\n", len(order)-gi, MDText(r.By), first, len(waves))
			break
		}
		w := waves[first-1]
		fmt.Fprintf(&b, "  - %s=%s: %d host(s) in waves %d–%d (%s), %s%s; budgets per wave %s failed, rolled back or refused and %s unreachable\n",
			MDText(r.By), MDText(v), len(hosts), first, at, WaveCounts(sizes), MDText(spanOf(p.Hosts, hosts)), noCanary(p.Hosts, hosts), budgetText(w.MaxFailures), budgetText(w.MaxUnreachable))
	}
	return b.String()
}

// noCanary says so of a group whose hosts all stay as they are: its first
// host is no canary, since it runs nothing new.
func noCanary(hosts []*HostPlan, idx []int) string {
	for _, i := range idx {
		if hosts[i].Action == ActionChange {
			return ""
		}
	}
	return " (none changes: no canary)"
}

// maxListedGroups is how many label values the review lists one by one.
const maxListedGroups = 100
