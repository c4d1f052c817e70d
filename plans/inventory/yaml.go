package inventory

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/relayctl/relayctl/internal/lazyre"
)

// ParseYAML reads an inventory in Ansible's YAML form:
//
//	all:
//	  children:
//	    relays:
//	      children:
//	        ash:
//	          hosts:
//	            relay-[01:50].ash:
//	            relay-edge.ash:2222: {region: ash}
//	          vars:
//	            region: ash
//
// Every group is a mapping of hosts, children and vars. Where Ansible warns
// and skips (a key other than those three, a group that is not a
// mapping), this refuses, naming the line: a misspelt hosts: would
// otherwise drop its hosts without a word. Anchors, aliases and merge keys
// (<<) are followed as PyYAML follows them.
func ParseYAML(file string, data []byte) (*Inventory, error) {
	b := newBuilder(file, YAML)
	if len(data) > MaxSize {
		return nil, Errors{{File: file, Msg: fmt.Sprintf("%d bytes; relayctl reads inventories of at most %d", len(data), MaxSize)}}
	}
	root, err := decodeOne(data)
	if err != nil {
		return nil, Errors{yamlError(file, err)}
	}
	p := &yamlParser{b: b}
	p.top(root)
	return b.finish()
}

type yamlParser struct {
	b      *builder
	visits int // nodes visited, aliases included: bounds what aliases can multiply
}

// maxVisits bounds the nodes a YAML inventory may make us walk, so a
// handful of aliases cannot multiply into billions (a "billion laughs").
const maxVisits = 4 * MaxHosts

var errEmpty = errors.New("empty")

func decodeOne(data []byte) (*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errEmpty
		}
		return nil, err
	}
	var next yaml.Node
	if err := dec.Decode(&next); !errors.Is(err, io.EOF) {
		line := next.Line
		return nil, fmt.Errorf("yaml: line %d: a second YAML document (after ---); an inventory is one document", line)
	}
	if len(doc.Content) == 0 {
		return nil, errEmpty
	}
	return doc.Content[0], nil
}

var yamlLine = lazyre.New(`^yaml: line (\d+): (.*)$`)

func yamlError(file string, err error) *Error {
	if errors.Is(err, errEmpty) {
		return &Error{File: file, Msg: "empty; a YAML inventory is a mapping of groups, e.g. all: {hosts: {relay-1.ash: }}"}
	}
	if m := yamlLine.FindStringSubmatch(err.Error()); m != nil {
		n, _ := strconv.Atoi(m[1])
		return &Error{File: file, Line: n, Msg: "not valid YAML: " + m[2]}
	}
	return &Error{File: file, Msg: "not valid YAML: " + strings.TrimPrefix(err.Error(), "yaml: ")}
}

// looksLikeYAMLMapping reports whether data is one YAML document holding
// a mapping: how a file without an extension is told from INI.
func looksLikeYAMLMapping(data []byte) bool {
	n, err := decodeOne(data)
	return err == nil && deref(n).Kind == yaml.MappingNode
}

func deref(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && i < 64; i++ {
		n = n.Alias
	}
	return n
}

func (p *yamlParser) visit(n *yaml.Node) *yaml.Node {
	p.visits++
	if p.visits == maxVisits {
		p.b.fail(n.Line, "aliases expand to more than %d nodes; write the inventory out instead of repeating it with aliases", maxVisits)
		p.b.abort = true
	}
	return deref(n)
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && scalarValue(n).Kind == Null
}

type pair struct{ key, value *yaml.Node }

// pairs is a mapping's key/value pairs after merge keys (<<), as PyYAML
// constructs them: merged pairs first, so the mapping's own keys win, each
// key once, where it first appears, with its last value. A key repeated
// among the mapping's own keys is refused: PyYAML keeps the last and
// Ansible only warns, which silently drops the first.
func (p *yamlParser) pairs(n *yaml.Node, what string) []pair {
	var merged, own []pair
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := p.visit(n.Content[i]), p.visit(n.Content[i+1])
		if p.b.abort {
			return nil
		}
		if k.Kind == yaml.ScalarNode && k.Value == "<<" && k.Tag == "!!merge" {
			merged = append(merged, p.mergeFrom(v, what)...)
			continue
		}
		own = append(own, pair{k, v})
	}
	out := make([]pair, 0, len(merged)+len(own))
	index := map[string]int{}
	put := func(kv pair) {
		if kv.key.Kind != yaml.ScalarNode {
			out = append(out, kv) // refused where it is read as a name
			return
		}
		if i, ok := index[kv.key.Value]; ok {
			out[i] = kv
			return
		}
		index[kv.key.Value] = len(out)
		out = append(out, kv)
	}
	for _, kv := range merged {
		put(kv)
	}
	first := map[string]int{}
	for _, kv := range own {
		if kv.key.Kind == yaml.ScalarNode {
			if line, dup := first[kv.key.Value]; dup {
				p.b.fail(kv.key.Line, "%s %q is given twice (first on line %d); Ansible would keep only the last: merge the two", what, kv.key.Value, line)
				continue
			}
			first[kv.key.Value] = kv.key.Line
		}
		put(kv)
	}
	return out
}

// mergeFrom is the pairs a << merges: one mapping, or a list of mappings
// where an earlier one wins.
func (p *yamlParser) mergeFrom(v *yaml.Node, what string) []pair {
	switch v.Kind {
	case yaml.MappingNode:
		return p.pairs(v, what)
	case yaml.SequenceNode:
		var out []pair
		for i := len(v.Content) - 1; i >= 0; i-- {
			m := p.visit(v.Content[i])
			if m.Kind != yaml.MappingNode {
				p.b.fail(m.Line, "<< merges mappings; this is not one")
				return nil
			}
			out = append(out, p.pairs(m, what)...)
		}
		return out
	}
	p.b.fail(v.Line, "<< merges a mapping or a list of mappings; this is neither")
	return nil
}

// name reads a group or host name: YAML must make it a string, as Ansible
// requires.
func (p *yamlParser) name(k *yaml.Node, what string) (string, bool) {
	if k.Kind != yaml.ScalarNode {
		p.b.fail(k.Line, "a %s name must be a string; this is a %s", what, kindOfNode(k))
		return "", false
	}
	v := scalarValue(k)
	if v.Kind != String {
		p.b.fail(k.Line, "%s name %s is read as %s, not a string; quote it: %q", what, k.Value, withArticle(v.Kind.String()), k.Value)
		return "", false
	}
	if v.Text == "" {
		p.b.fail(k.Line, "a %s with an empty name", what)
		return "", false
	}
	if strings.ContainsFunc(v.Text, isControl) {
		p.b.fail(k.Line, "%s name %q holds a control character", what, v.Text)
		return "", false
	}
	return v.Text, true
}

// exampleEntries is what a list under hosts: or children: should have
// been, for the error that says so.
func exampleEntries(n *yaml.Node, section string) string {
	var names []string
	for _, c := range n.Content {
		if c.Kind == yaml.ScalarNode && len(names) < 3 {
			names = append(names, c.Value+": ")
		}
	}
	if len(names) == 0 {
		names = []string{map[string]string{"hosts": "relay-1.ash", "children": "ash", "vars": "region"}[section] + ": "}
	}
	return strings.Join(names, ", ")
}

func withArticle(s string) string {
	if strings.ContainsRune("aeiou", rune(s[0])) {
		return "an " + s
	}
	return "a " + s
}

func kindOfNode(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "mapping"
	case yaml.SequenceNode:
		return "list"
	}
	return "scalar"
}

func (p *yamlParser) top(root *yaml.Node) {
	root = p.visit(root)
	if root.Kind != yaml.MappingNode {
		p.b.fail(root.Line, "a YAML inventory is a mapping of groups, e.g. all: {hosts: {relay-1.ash: }}; this is a %s", kindOfNode(root))
		return
	}
	kvs := p.pairs(root, "group")
	for _, kv := range kvs {
		if kv.key.Value == "plugin" {
			p.b.fail(kv.key.Line, "plugin: makes this an inventory plugin's configuration, which relayctl does not run; export the hosts with ansible-inventory --list -y --output FILE and point relayctl at FILE")
			return
		}
	}
	for _, kv := range kvs {
		p.group(kv.key, kv.value, 0)
		if p.b.abort {
			return
		}
	}
}

// group reads one group and what it holds, as Ansible's _parse_group.
func (p *yamlParser) group(k, v *yaml.Node, depth int) *group {
	name, ok := p.name(k, "group")
	if !ok {
		return nil
	}
	if depth > MaxDepth {
		p.b.fail(k.Line, "groups nested more than %d deep; relayctl reads at most %d", MaxDepth, MaxDepth)
		p.b.abort = true
		return nil
	}
	g := p.b.group(name, k.Line)
	if isNull(v) {
		return g
	}
	if v.Kind != yaml.MappingNode {
		p.b.fail(v.Line, "group %s: want a mapping of hosts, children and vars, got a %s (Ansible would skip the group)", name, kindOfNode(v))
		return g
	}
	for _, kv := range p.pairs(v, "key") {
		section := kv.key.Value
		if section != "hosts" && section != "children" && section != "vars" {
			p.b.fail(kv.key.Line, "group %s: unknown key %q; a group holds hosts, children and vars (Ansible would skip it)", name, section)
			continue
		}
		sv := kv.value
		if isNull(sv) {
			continue
		}
		if sv.Kind == yaml.ScalarNode && scalarValue(sv).Kind == String { // hosts: relay-1 is hosts: {relay-1: }
			sv = &yaml.Node{Kind: yaml.MappingNode, Line: sv.Line, Content: []*yaml.Node{sv, {Kind: yaml.ScalarNode, Tag: "!!null", Line: sv.Line}}}
		}
		if sv.Kind != yaml.MappingNode {
			p.b.fail(sv.Line, "group %s: %s is a mapping, not a %s; end each entry with a colon, e.g. %s: {%s}%s", name, section, kindOfNode(sv), section, exampleEntries(sv, section), p.listJSONHint(sv))
			continue
		}
		p.section(g, section, sv, depth)
		if p.b.abort {
			return g
		}
	}
	return g
}

// listJSONHint is what to add when a .json inventory lists hosts or
// children the way ansible-inventory --list prints them, but has no _meta,
// which is how that form is told from a YAML inventory written as JSON.
func (p *yamlParser) listJSONHint(sv *yaml.Node) string {
	if sv.Kind != yaml.SequenceNode || strings.ToLower(filepath.Ext(p.b.file)) != ".json" {
		return ""
	}
	return `; or, if this is what ansible-inventory --list or an inventory script printed, add its "_meta": {"hostvars": {…}}, by which relayctl tells that form`
}

func (p *yamlParser) section(g *group, section string, sv *yaml.Node, depth int) {
	switch section {
	case "vars":
		for _, kv := range p.pairs(sv, "variable") {
			if key, ok := p.varName(kv.key); ok {
				p.b.setGroupVar(g, key, p.value(kv.value))
			}
		}
	case "children":
		for _, kv := range p.pairs(sv, "child group") {
			if child := p.group(kv.key, kv.value, depth+1); child != nil {
				p.b.addChild(g, child, kv.key.Line)
			}
			if p.b.abort {
				return
			}
		}
	case "hosts":
		for _, kv := range p.pairs(sv, "host") {
			p.hosts(g, kv.key, kv.value)
			if p.b.abort {
				return
			}
		}
	}
}

// hosts reads one hosts entry: a name, range or name:port, and its vars.
func (p *yamlParser) hosts(g *group, k, v *yaml.Node) {
	field, ok := p.name(k, "host")
	if !ok {
		return
	}
	names, port, err := hostField(field, MaxHosts-len(p.b.inv.hosts))
	if err != nil {
		p.b.fail(k.Line, "%v", err)
		return
	}
	var vars []pair
	switch {
	case isNull(v):
	case v.Kind == yaml.MappingNode:
		vars = p.pairs(v, "variable")
	default:
		p.b.fail(v.Line, "host %s: its variables are a mapping (key: value), not a %s", field, kindOfNode(v))
		return
	}
	for _, name := range names {
		h := p.b.host(name, k.Line, port)
		if h == nil {
			return
		}
		p.b.addHost(g, h)
		for _, kv := range vars {
			if key, ok := p.varName(kv.key); ok {
				h.vars[key] = p.value(kv.value)
			}
		}
	}
}

func (p *yamlParser) varName(k *yaml.Node) (string, bool) {
	if k.Kind != yaml.ScalarNode || scalarValue(k).Kind != String {
		p.b.fail(k.Line, "a variable name must be a string; quote it")
		return "", false
	}
	return k.Value, true
}

func (p *yamlParser) value(n *yaml.Node) Value {
	if n.Kind == yaml.ScalarNode {
		return scalarValue(n)
	}
	return Value{Kind: Complex, Line: n.Line}
}
