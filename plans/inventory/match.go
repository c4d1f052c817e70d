package inventory

import (
	"fmt"

	"github.com/relayctl/relayctl/internal/nearest"
)

// Match is the names of the hosts p selects, in inventory order (the order
// they first appear in the file). It is the same set of hosts Ansible's
// `ansible -i FILE PATTERN --list-hosts` lists; Ansible's own order
// follows its group walk instead, which for nested groups is not defined.
func (inv *Inventory) Match(p *Pattern) ([]string, error) {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	set, err := inv.match(p)
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, set.count())
	set.each(func(i int) { out = append(out, inv.hosts[i].name) })
	return out, nil
}

func (inv *Inventory) match(p *Pattern) (bitset, error) {
	set := newBitset(len(inv.hosts))
	for _, t := range p.terms {
		that, err := inv.matchTerm(t)
		if err != nil {
			return nil, fmt.Errorf("host pattern %q: %w", p.text, err)
		}
		switch t.op {
		case '&':
			set.and(that)
		case '!':
			set.andNot(that)
		default:
			set.or(that)
		}
	}
	if set.count() == 0 {
		return nil, fmt.Errorf("host pattern %q selects no host of %s", p.text, inv.File)
	}
	return set, nil
}

// matchTerm is Ansible's _match_one_pattern: the hosts of every group the
// term matches, and the hosts it matches by name when it matches no group
// or is a glob, a regex or a name with a dot. A union term that is a host's
// name is that host, before any group of the same name.
func (inv *Inventory) matchTerm(t term) (bitset, error) {
	set := newBitset(len(inv.hosts))
	if h := inv.hostIndex[t.text]; h != nil && t.op == 0 {
		set.add(h.order)
		return set, nil
	}
	groups, hosts := inv.termMatches(t)
	if len(groups) == 0 && len(hosts) == 0 {
		return nil, inv.noMatch(t)
	}
	if t.sub != nil {
		return inv.subscripted(t, groups, hosts)
	}
	for _, g := range groups {
		set.or(inv.members(g))
	}
	for _, h := range hosts {
		set.add(h.order)
	}
	return set, nil
}

func (inv *Inventory) termMatches(t term) (groups []*group, hosts []*host) {
	if t.re == nil {
		if g := inv.groupIndex[t.expr]; g != nil {
			groups = append(groups, g)
		}
	} else {
		for _, g := range inv.groups {
			if t.re.MatchString(g.name) {
				groups = append(groups, g)
			}
		}
	}
	if len(groups) > 0 && !t.special {
		return groups, nil
	}
	if t.re == nil {
		if h := inv.hostIndex[t.expr]; h != nil {
			hosts = append(hosts, h)
		}
	} else {
		for _, h := range inv.hosts {
			if t.re.MatchString(h.name) {
				hosts = append(hosts, h)
			}
		}
	}
	return groups, hosts
}

func (inv *Inventory) noMatch(t term) error {
	what := "no group and no host"
	if t.re != nil {
		what = "no group name and no host name"
	}
	msg := fmt.Sprintf("%s matches %s in %s", t.text, what, inv.File)
	if t.re == nil {
		if near := inv.nearestGroup(t.expr); near != "" {
			msg += "; did you mean " + near + "?"
		}
	}
	if t.op == '!' {
		msg += " (Ansible would ignore the term and exclude nothing; remove it if that is what you want)"
	}
	return fmt.Errorf("%s", msg)
}

// nearestGroup is the group name closest to s by edit distance, if close.
func (inv *Inventory) nearestGroup(s string) string {
	best, bestD := "", 3
	for _, g := range inv.groups {
		if d := nearest.Distance(s, g.name, bestD); d < bestD {
			best, bestD = g.name, d
		}
	}
	return best
}

// members is every host of g and of the groups below it.
func (inv *Inventory) members(g *group) bitset {
	if g.members != nil {
		return g.members
	}
	set := newBitset(len(inv.hosts))
	for _, h := range g.hosts {
		set.add(h.order)
	}
	for _, c := range g.children {
		set.or(inv.members(c))
	}
	g.members = set
	return set
}

// subscripted applies ash[0], ash[0:9], ash[-1] or ash[10:] to the hosts a
// term matches, in Ansible's order: each matched group's hosts as
// Group.get_hosts lists them, groups in the order they were first named,
// then the hosts matched by name. Like Ansible, [i:j] includes both ends,
// [i:] runs to the last host, a negative [i] counts from the end, and
// [i:0] is [i].
func (inv *Inventory) subscripted(t term, groups []*group, hosts []*host) (bitset, error) {
	var list []*host
	for _, g := range groups {
		gh, ok := ansibleOrder(g)
		if !ok {
			return nil, fmt.Errorf("%s: Ansible's order of %s's hosts depends on how Python walks its nested groups, so a position in it is not defined; select a group without nested children (e.g. %s[0]), or a group and a label", t.text, g.name, firstLeaf(g))
		}
		list = append(list, gh...)
	}
	list = append(list, hosts...)
	s := t.sub
	var picked []*host
	switch {
	case s.single || s.end == 0:
		i := s.start
		if i < 0 {
			i += len(list)
		}
		if i < 0 || i >= len(list) {
			return nil, fmt.Errorf("%s: %s matches %d hosts, so there is no host [%d] (the first is [0])", t.text, t.expr, len(list), s.start)
		}
		picked = list[i : i+1]
	default:
		end := s.end
		if end == -1 {
			end = len(list) - 1
		}
		lo, hi := min(s.start, len(list)), min(end+1, len(list))
		if lo >= hi {
			return nil, fmt.Errorf("%s: %s matches %d hosts, none of them in that range (the first is [0])", t.text, t.expr, len(list))
		}
		picked = list[lo:hi]
	}
	set := newBitset(len(inv.hosts))
	for _, h := range picked {
		set.add(h.order)
	}
	return set, nil
}

// ansibleOrder is the order of Ansible's Group.get_hosts: the group's own
// hosts, then its children's, walking down level by level. Python walks
// each level as a set, so when two groups of one level both have children
// to add, Ansible's order is not defined and ok is false.
func ansibleOrder(g *group) ([]*host, bool) {
	ordered := append([]*group{g}, g.children...)
	seen := map[*group]bool{}
	level := append([]*group{g}, g.children...)
	for len(level) > 0 {
		for _, x := range level {
			seen[x] = true
		}
		var next []*group
		contributors := 0
		inNext := map[*group]bool{}
		for _, x := range level {
			added := false
			for _, c := range x.children {
				if !inNext[c] {
					inNext[c] = true
					next = append(next, c)
				}
				if !seen[c] {
					ordered = append(ordered, c)
					added = true
				}
			}
			if added {
				contributors++
			}
		}
		if contributors > 1 {
			return nil, false
		}
		level = level[:0]
		for _, c := range next {
			if !seen[c] {
				level = append(level, c)
			}
		}
	}
	var out []*host
	got := map[*host]bool{}
	for _, x := range ordered {
		for _, h := range x.hosts {
			if !got[h] {
				got[h] = true
				out = append(out, h)
			}
		}
	}
	return out, true
}

func firstLeaf(g *group) string {
	for len(g.children) > 0 {
		g = g.children[0]
	}
	return g.name
}
