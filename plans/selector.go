package plans

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/relayctl/relayctl/internal/lazyre"
)

// Selector is apply's --only: the hosts whose labels match every term,
// each term a label and the values it may have ("region=ash,fra").
type Selector struct {
	Terms []SelectorTerm
}

// SelectorTerm is one KEY=VALUE[,VALUE…] of a selector.
type SelectorTerm struct {
	Key    string
	Values []string
}

// SelectAll is the selector word for every host: --only all.
const SelectAll = "all"

// ParseSelector reads --only's items, each KEY=VALUE[,VALUE…]; a key
// given twice is one term of both lists' values. "all" alone selects
// every host: nil, no error.
func ParseSelector(items []string) (*Selector, error) {
	if len(items) == 1 && items[0] == SelectAll {
		return nil, nil
	}
	if len(items) == 0 {
		return nil, fmt.Errorf("want KEY=VALUE, e.g. region=ash")
	}
	s := &Selector{}
	at := map[string]int{}
	for _, item := range items {
		k, vs, ok := strings.Cut(item, "=")
		if !ok || k == "" || vs == "" {
			return nil, fmt.Errorf("%q: want KEY=VALUE[,VALUE…], e.g. region=ash or region=ash,fra (or all for every host)", item)
		}
		if !labelKeyRe.MatchString(k) {
			return nil, fmt.Errorf("%q: %s is not a label name (letters, digits, _)", item, k)
		}
		i, seen := at[k]
		if !seen {
			i = len(s.Terms)
			at[k] = i
			s.Terms = append(s.Terms, SelectorTerm{Key: k})
		}
		for _, v := range strings.Split(vs, ",") {
			if !labelValueRe.MatchString(v) {
				return nil, fmt.Errorf("%q: %q is not a label value (letters, digits and ._-, at most 63)", item, v)
			}
			if !slices.Contains(s.Terms[i].Values, v) {
				s.Terms[i].Values = append(s.Terms[i].Values, v)
			}
		}
	}
	return s, nil
}

var labelKeyRe = lazyre.New(`^[A-Za-z_][A-Za-z0-9_]{0,63}$`)

// Matches reports whether labels match every term (nil matches all).
func (s *Selector) Matches(labels map[string]string) bool {
	if s == nil {
		return true
	}
	for _, t := range s.Terms {
		if !slices.Contains(t.Values, labels[t.Key]) {
			return false
		}
	}
	return true
}

// Items are the selector as --only's items, for the ledger; nil for all.
func (s *Selector) Items() []string {
	if s == nil {
		return nil
	}
	out := make([]string, len(s.Terms))
	for i, t := range s.Terms {
		out[i] = t.Key + "=" + strings.Join(t.Values, ",")
	}
	return out
}

// String is the selector as one would write it after --only.
func (s *Selector) String() string {
	if s == nil {
		return SelectAll
	}
	return strings.Join(s.Items(), " ")
}

// Check refuses a selector that could not select what its writer meant:
// a key that is not one of the plan's labels, a value no host has.
func (s *Selector) Check(p *Plan) error {
	if s == nil {
		return nil
	}
	if len(p.Hosts) == 0 || len(p.Hosts[0].Labels) == 0 {
		return fmt.Errorf("%s: the plan's hosts carry no labels (labels come from the spec's inventory, hosts.labels)", s)
	}
	for _, t := range s.Terms {
		have := map[string]int{}
		for _, h := range p.Hosts {
			if v, ok := h.Labels[t.Key]; ok {
				have[v]++
			}
		}
		if len(have) == 0 {
			return fmt.Errorf("%s: %s is not a label of the plan's hosts (they carry %s)", s, t.Key, strings.Join(slices.Sorted(maps.Keys(p.Hosts[0].Labels)), ", "))
		}
		for _, v := range t.Values {
			if have[v] == 0 {
				return fmt.Errorf("%s: no host of the plan has %s=%s; the plan's values of %s: %s", s, t.Key, v, t.Key, valueList(have))
			}
		}
	}
	return nil
}
