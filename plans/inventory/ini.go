package inventory

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/relayctl/relayctl/internal/lazyre"
)

// The section and group-name forms of Ansible's INI plugin
// (ansible/plugins/inventory/ini.py).
var (
	iniSection   = lazyre.New(`^\[([^:\]\s]+)(?::(\w+))?\]\s*(?:#.*)?$`)
	iniGroupName = lazyre.New(`^([^:\]\s]+)\s*(?:#.*)?$`)
)

// ParseINI reads an inventory in Ansible's INI form:
//
//	relay-solo ansible_host=10.0.0.9     # before any section: ungrouped
//	[ash]
//	relay-[01:50].ash ansible_user=relay  # a range: 50 hosts
//	relay-edge.ash:2222 region=ash        # a port, and a host variable
//	[ash:vars]
//	region=ash
//	[relays:children]
//	ash
//
// It reports every problem at once, each with its line and how to fix it.
func ParseINI(file string, data []byte) (*Inventory, error) {
	b := newBuilder(file, INI)
	if len(data) > MaxSize {
		return nil, Errors{{File: file, Msg: fmt.Sprintf("%d bytes; relayctl reads inventories of at most %d", len(data), MaxSize)}}
	}
	p := &iniParser{b: b, group: b.inv.ungrouped, state: "hosts", pending: map[string]*iniPending{}}
	for n, line := range pyLines(string(data)) {
		if b.abort {
			break
		}
		p.line(n+1, line)
	}
	p.checkPending()
	return b.finish()
}

type iniParser struct {
	b       *builder
	group   *group
	state   string // hosts, children, vars; "" after a bad section header
	pending map[string]*iniPending
	order   []string // pending names in the order first seen
}

// iniPending is a group named before it is declared: as a child
// ([relays:children] ash, before [ash]) or by its vars ([ash:vars]).
// Ansible accepts both when the group is declared later in the file.
type iniPending struct {
	line    int
	state   string
	parents []*group
}

func (p *iniParser) line(n int, raw string) {
	b := p.b
	line := strings.TrimSpace(raw)
	if line == "" || line[0] == '#' || line[0] == ';' {
		return
	}
	if !utf8.ValidString(line) {
		b.fail(n, "not UTF-8; an inventory is UTF-8 text (only comment lines may hold other bytes)")
		return
	}
	if strings.ContainsFunc(line, isControl) {
		b.fail(n, "a control character; remove it")
		return
	}
	if line[0] == '[' {
		if m := iniSection.FindStringSubmatch(line); m != nil {
			p.section(n, m[1], m[2])
			return
		}
	}
	if line[0] == '[' && line[len(line)-1] == ']' {
		b.fail(n, "%s is not a section: write [group], [group:vars] or [group:children], with no spaces inside the brackets", line)
		p.state = ""
		return
	}
	switch p.state {
	case "hosts":
		p.hostLine(n, line)
	case "vars":
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			b.fail(n, "want key=value in [%s:vars], got %q", p.group.name, line)
			return
		}
		b.setGroupVar(p.group, strings.TrimSpace(k), pyValue(strings.TrimSpace(v), n))
	case "children":
		m := iniGroupName.FindStringSubmatch(line)
		if m == nil {
			b.fail(n, "want a group name in [%s:children], got %q", p.group.name, line)
			return
		}
		p.child(n, m[1])
	}
}

func (p *iniParser) section(n int, name, kind string) {
	b := p.b
	if kind == "" {
		kind = "hosts"
	}
	if kind != "hosts" && kind != "children" && kind != "vars" {
		b.fail(n, "[%s:%s]: unknown section type %s; write [%s], [%s:vars] or [%s:children]", name, kind, kind, name, name, name)
		p.state = ""
		return
	}
	_, known := b.inv.groupIndex[name]
	g := b.group(name, n)
	p.group, p.state = g, kind
	if !known && kind == "vars" {
		if _, ok := p.pending[name]; !ok {
			p.addPending(name, &iniPending{line: n, state: "vars"})
		}
	}
	if kind == "vars" {
		return
	}
	if pd := p.pending[name]; pd != nil {
		if pd.state == "children" {
			p.resolveChildren(name)
		} else {
			delete(p.pending, name)
		}
	}
}

func (p *iniParser) addPending(name string, pd *iniPending) {
	p.pending[name] = pd
	p.order = append(p.order, name)
}

// resolveChildren adds a group named as a child before it was declared,
// and any group that was waiting on it, as Ansible's _add_pending_children.
func (p *iniParser) resolveChildren(name string) {
	pd := p.pending[name]
	delete(p.pending, name)
	g := p.b.inv.groupIndex[name]
	for _, parent := range pd.parents {
		p.b.addChild(parent, g, pd.line)
		if up := p.pending[parent.name]; up != nil && up.state == "children" {
			p.resolveChildren(parent.name)
		}
	}
}

func (p *iniParser) child(n int, name string) {
	b := p.b
	if g, ok := b.inv.groupIndex[name]; ok {
		b.addChild(p.group, g, n)
		return
	}
	if pd := p.pending[name]; pd != nil {
		pd.parents = append(pd.parents, p.group)
		return
	}
	p.addPending(name, &iniPending{line: n, state: "children", parents: []*group{p.group}})
}

// checkPending reports groups that were named but never declared.
func (p *iniParser) checkPending() {
	for _, name := range p.order {
		pd := p.pending[name]
		if pd == nil {
			continue
		}
		if pd.state == "vars" {
			p.b.fail(pd.line, "[%s:vars] for a group that is not declared; add a [%s] section (with its hosts) or a [%s:children] section", name, name, name)
		} else {
			parent := pd.parents[len(pd.parents)-1]
			p.b.fail(pd.line, "[%s:children] names %s, which is not declared; add a [%s] section with its hosts, or remove the line", parent.name, name, name)
		}
	}
}

// hostLine reads "name[:port] [key=value …]", name possibly a range.
func (p *iniParser) hostLine(n int, line string) {
	b := p.b
	tokens, err := shlexSplit(line)
	if err != nil {
		b.fail(n, "cannot split the host line: %v; close the quote or escape the character", err)
		return
	}
	if len(tokens) == 0 {
		return
	}
	names, port, ok := p.hostNames(n, tokens[0])
	if !ok {
		return
	}
	vars := make([][2]string, 0, len(tokens)-1)
	for _, t := range tokens[1:] {
		k, v, ok := strings.Cut(t, "=")
		if !ok {
			b.fail(n, "want key=value after the host name, got %q; quote a value that holds spaces: key=\"a b\"", t)
			return
		}
		vars = append(vars, [2]string{k, v})
	}
	for _, name := range names {
		h := b.host(name, n, port)
		if h == nil {
			return
		}
		b.addHost(p.group, h)
		for _, kv := range vars {
			h.vars[kv[0]] = pyValue(kv[1], n)
		}
	}
}

// hostNames is the names (and port) a host field defines, as Ansible's
// INI plugin reads it.
func (p *iniParser) hostNames(n int, field string) ([]string, int, bool) {
	names, port, err := hostField(field, MaxHosts-len(p.b.inv.hosts))
	if err == nil && port == 0 && strings.HasSuffix(strings.TrimSpace(field), ":") {
		err = fmt.Errorf("%s ends in ':', which is kept for a port; write name:PORT or drop the colon", field)
	}
	if err == nil {
		for _, name := range names {
			if strings.TrimSpace(name) == "---" {
				err = fmt.Errorf("--- is a YAML document start; name a YAML inventory .yaml or .yml")
			}
		}
	}
	if err != nil {
		p.b.fail(n, "%v", err)
		return nil, 0, false
	}
	return names, port, true
}

// hostField splits a host field (INI host line, YAML hosts key) into the
// names its range makes and its port, 0 when none is given.
func hostField(field string, limit int) ([]string, int, error) {
	name, portText, _ := splitHostPort(field)
	port := 0
	if portText != "" {
		n, ok := pyInt(portText)
		if !ok || !n.IsInt64() || n.Int64() < 1 || n.Int64() > 65535 {
			return nil, 0, fmt.Errorf("%s: port %s is not a TCP port; want 1 to 65535", field, portText)
		}
		port = int(n.Int64())
	}
	if name == "" {
		return nil, 0, fmt.Errorf("a host with no name; write a host name or address")
	}
	names, err := expandRange(name, limit)
	if err != nil {
		return nil, 0, err
	}
	for _, n := range names {
		if n == "" {
			return nil, 0, fmt.Errorf("%s makes a host with no name", field)
		}
	}
	return names, port, nil
}

// pyLines splits text into lines as Python's str.splitlines does, so line
// numbers agree with Ansible's.
func pyLines(s string) []string {
	var out []string
	start := 0
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch r {
		case '\n', '\r', '\v', '\f', 0x1c, 0x1d, 0x1e, 0x85, 0x2028, 0x2029:
			out = append(out, s[start:i])
			if r == '\r' && i+1 < len(s) && s[i+1] == '\n' {
				n++
			}
			start = i + n
		}
		i += n
	}
	if start < len(s) {
		out = append(out, s[start:])
	}
	return out
}

func isControl(r rune) bool { return r < 0x20 && r != '\t' || r == 0x7f }
