package inventory

import (
	"fmt"
	"sort"
	"strings"
)

// builder makes an Inventory the way Ansible's InventoryData does
// (add_group, add_host, add_child, reconcile_inventory), so both parsers
// share one model and one set of checks.
type builder struct {
	inv   *Inventory
	file  string // named in errors
	errs  []*Error
	abort bool // too many problems or past a limit: stop reading
}

func newBuilder(file string, f Format) *builder {
	inv := &Inventory{File: file, Format: f, hostIndex: map[string]*host{}, groupIndex: map[string]*group{}}
	b := &builder{inv: inv, file: file}
	inv.all = b.group("all", 0)
	inv.ungrouped = b.group("ungrouped", 0)
	b.addChild(inv.all, inv.ungrouped, 0)
	return b
}

// fail records a problem; reading goes on so that every problem is
// reported at once, up to maxErrors.
func (b *builder) fail(line int, format string, a ...any) {
	if len(b.errs) == maxErrors {
		b.errs = append(b.errs, &Error{File: b.file, Line: line, Msg: "too many problems; fix these first"})
		b.abort = true
		return
	}
	if len(b.errs) < maxErrors {
		b.errs = append(b.errs, &Error{File: b.file, Line: line, Msg: fmt.Sprintf(format, a...)})
	}
}

func (b *builder) warn(line int, format string, a ...any) {
	b.inv.Warnings = append(b.inv.Warnings, &Error{File: b.file, Line: line, Msg: fmt.Sprintf(format, a...)})
}

// group returns the group of that name, making it when it is new.
func (b *builder) group(name string, line int) *group {
	if g := b.inv.groupIndex[name]; g != nil {
		return g
	}
	if len(b.inv.groups) == MaxGroups {
		b.fail(line, "more than %d groups; relayctl reads at most %d", MaxGroups, MaxGroups)
		b.abort = true
		return b.inv.ungrouped
	}
	g := &group{name: name, line: line, order: len(b.inv.groups), priority: 1,
		hostSet: map[*host]bool{}, vars: map[string]Value{}}
	b.inv.groups = append(b.inv.groups, g)
	b.inv.groupIndex[name] = g
	return g
}

// host returns the host of that name, making it when it is new. As in
// Ansible, a port given with the name (relay-1:2222) is the host's
// ansible_port when the host is first defined, and ignored after.
func (b *builder) host(name string, line, port int) *host {
	if h := b.inv.hostIndex[name]; h != nil {
		if port != 0 {
			if v, ok := h.vars["ansible_port"]; !ok || v.Text != fmt.Sprint(port) {
				b.warn(line, "%s:%d: the port is ignored: Ansible takes a host's port from where it is first defined (line %d); set ansible_port instead", name, port, h.line)
			}
		}
		return h
	}
	if len(b.inv.hosts) == MaxHosts {
		b.fail(line, "more than %d hosts; relayctl reads at most %d", MaxHosts, MaxHosts)
		b.abort = true
		return nil
	}
	h := &host{name: name, line: line, order: len(b.inv.hosts), vars: map[string]Value{}}
	if port != 0 {
		h.vars["ansible_port"] = Value{Kind: Int, Text: fmt.Sprint(port), Line: line}
	}
	b.inv.hosts = append(b.inv.hosts, h)
	b.inv.hostIndex[name] = h
	return h
}

func (b *builder) addHost(g *group, h *host) {
	if h == nil || g.hostSet[h] {
		return
	}
	g.hostSet[h] = true
	g.hosts = append(g.hosts, h)
	h.direct = append(h.direct, g)
}

// addChild makes child a child group of parent. A loop is refused, as
// Ansible refuses it.
func (b *builder) addChild(parent, child *group, line int) {
	if child == b.inv.all {
		b.fail(line, "all cannot be a child of %s: every group is already in all", parent.name)
		return
	}
	if parent == child {
		b.fail(line, "group %s cannot be a child of itself", child.name)
		return
	}
	for _, c := range parent.children {
		if c == child {
			return
		}
	}
	if path := pathUp(parent, child); path != nil {
		for i, j := 0, len(path)-1; i < j; i, j = i+1, j-1 {
			path[i], path[j] = path[j], path[i]
		}
		b.fail(line, "making %s a child of %s creates a loop: %s is already under %s (%s); remove one of these children entries",
			child.name, parent.name, parent.name, child.name, strings.Join(path, " → "))
		return
	}
	parent.children = append(parent.children, child)
	child.parents = append(child.parents, parent)
}

// pathUp is the chain of parents from g up to target, or nil when target
// is not above g.
func pathUp(g, target *group) []string {
	seen := map[*group]bool{}
	var walk func(x *group) []string
	walk = func(x *group) []string {
		if x == target {
			return []string{x.name}
		}
		if seen[x] {
			return nil
		}
		seen[x] = true
		for _, p := range x.parents {
			if up := walk(p); up != nil {
				return append([]string{x.name}, up...)
			}
		}
		return nil
	}
	return walk(g)
}

// setGroupVar sets a group variable; ansible_group_priority is not a
// variable but the group's priority, as in Ansible.
func (b *builder) setGroupVar(g *group, key string, v Value) {
	if key == "ansible_group_priority" {
		n, ok := intOf(v)
		if !ok {
			b.fail(v.Line, "ansible_group_priority of %s: want an integer, got %s", g.name, describe(v))
			return
		}
		g.priority = n
		return
	}
	g.vars[key] = v
}

// finish does what Ansible's reconcile_inventory does: every group without
// a parent goes under all, a host listed in no group is in ungrouped, and a
// host in any other group leaves ungrouped. Then the depths Ansible orders
// group variables by.
func (b *builder) finish() (*Inventory, error) {
	inv := b.inv
	if b.abort || len(b.errs) > 0 {
		return nil, b.errors()
	}
	for _, g := range inv.groups {
		if g != inv.all && len(g.parents) == 0 {
			b.addChild(inv.all, g, g.line)
		}
	}
	for _, h := range inv.hosts {
		h.groups = map[*group]bool{}
		for _, g := range h.direct {
			h.groups[g] = true
			for a := range g.ancestorSet() {
				h.groups[a] = true
			}
		}
		others := 0
		for g := range h.groups {
			if g != inv.all && g != inv.ungrouped {
				others++
			}
		}
		switch {
		case h.groups[inv.ungrouped] && others > 0:
			inv.ungrouped.removeHost(h)
		case !h.groups[inv.ungrouped] && others == 0:
			b.addHost(inv.ungrouped, h)
			h.groups[inv.ungrouped] = true
			h.groups[inv.all] = true
		}
	}
	memo := map[*group]int{}
	for _, g := range inv.groups {
		g.depth = depthOf(g, memo)
	}
	inv.varsCache = map[string][]*group{}
	if len(b.errs) > 0 {
		return nil, b.errors()
	}
	return inv, nil
}

func (b *builder) errors() Errors {
	sort.SliceStable(b.errs, func(i, j int) bool { return b.errs[i].Line < b.errs[j].Line })
	return Errors(b.errs)
}

// removeHost takes a host out of a group's own hosts, as Ansible does when
// a host listed before any section (so in ungrouped) is listed in a group.
func (g *group) removeHost(h *host) {
	if !g.hostSet[h] {
		return
	}
	delete(g.hostSet, h)
	g.hosts = removeFrom(g.hosts, h)
	h.direct = removeFrom(h.direct, g)
	delete(h.groups, g)
	g.members = nil
}

func removeFrom[T comparable](s []T, x T) []T {
	for i, y := range s {
		if y == x {
			return append(s[:i:i], s[i+1:]...)
		}
	}
	return s
}

// ancestorSet is every group above g (memoised; the graph has no loops).
func (g *group) ancestorSet() map[*group]bool {
	if g.ancestors != nil {
		return g.ancestors
	}
	a := map[*group]bool{}
	for _, p := range g.parents {
		a[p] = true
		for x := range p.ancestorSet() {
			a[x] = true
		}
	}
	g.ancestors = a
	return a
}

// depthOf is the length of the longest path to g from all, which is what
// Ansible's incremental Group.depth ends up as (memoised in memo).
func depthOf(g *group, memo map[*group]int) int {
	if d, ok := memo[g]; ok {
		return d
	}
	d := 0
	for _, p := range g.parents {
		d = max(d, depthOf(p, memo)+1)
	}
	memo[g] = d
	return d
}

// precedence is h's groups in the order Ansible merges their variables:
// by depth, then ansible_group_priority, then name; later ones win.
func (inv *Inventory) precedence(h *host) []*group {
	var key strings.Builder
	for _, g := range h.direct {
		fmt.Fprintf(&key, "%d,", g.order)
	}
	if gs, ok := inv.varsCache[key.String()]; ok {
		return gs
	}
	gs := make([]*group, 0, len(h.groups))
	for g := range h.groups {
		gs = append(gs, g)
	}
	sort.Slice(gs, func(i, j int) bool {
		a, b := gs[i], gs[j]
		if a.depth != b.depth {
			return a.depth < b.depth
		}
		if a.priority != b.priority {
			return a.priority < b.priority
		}
		return a.name < b.name
	})
	inv.varsCache[key.String()] = gs
	return gs
}

// lookup is h's variable name after Ansible's precedence, highest first:
// host_vars/ files, the host's own variables in the inventory, group_vars/
// files of its groups (last in precedence order first), the inventory's
// group variables (likewise).
func (inv *Inventory) lookup(h *host, gs []*group, name string) (Value, bool) {
	if v, ok := h.fileVars[name]; ok {
		return v, true
	}
	if v, ok := h.vars[name]; ok {
		return v, true
	}
	for i := len(gs) - 1; i >= 0; i-- {
		if v, ok := gs[i].fileVars[name]; ok {
			return v, true
		}
	}
	for i := len(gs) - 1; i >= 0; i-- {
		if v, ok := gs[i].vars[name]; ok {
			return v, true
		}
	}
	return Value{}, false
}

// Vars is every variable of a host after Ansible's precedence, as
// ansible-inventory --host shows them; ok is false for an unknown host.
func (inv *Inventory) Vars(name string) (vars map[string]Value, ok bool) {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	h := inv.hostIndex[name]
	if h == nil {
		return nil, false
	}
	out := map[string]Value{}
	gs := inv.precedence(h)
	for _, layer := range []func(*group) map[string]Value{
		func(g *group) map[string]Value { return g.vars },
		func(g *group) map[string]Value { return g.fileVars },
	} {
		for _, g := range gs {
			for k, v := range layer(g) {
				out[k] = v
			}
		}
	}
	for _, m := range []map[string]Value{h.vars, h.fileVars} {
		for k, v := range m {
			out[k] = v
		}
	}
	return out, true
}

// HostGroups is Ansible's group_names of a host: every group it is in,
// parents included, all excluded, sorted by name.
func (inv *Inventory) HostGroups(name string) []string {
	h := inv.hostIndex[name]
	if h == nil {
		return nil
	}
	return groupNames(h, inv.all)
}

func groupNames(h *host, all *group) []string {
	out := make([]string, 0, len(h.groups))
	for g := range h.groups {
		if g != all {
			out = append(out, g.name)
		}
	}
	sort.Strings(out)
	return out
}
