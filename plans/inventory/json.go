package inventory

import (
	"bytes"
	"fmt"
	"strconv"
	"unicode/utf8"
)

// ParseJSON reads the JSON that ansible-inventory --list prints, which is
// also what an inventory script prints for --list (Ansible's script
// plugin), so every inventory Ansible can read (a plugin such as aws_ec2 or
// netbox, a script) can be read here through it:
//
//	{
//	  "_meta": {"hostvars": {"relay-1.ash": {"ansible_host": "10.0.0.1"}}},
//	  "all": {"children": ["ungrouped", "relays"]},
//	  "relays": {"children": ["ash"], "vars": {"pool": "edge"}},
//	  "ash": {"hosts": ["relay-1.ash"]},
//	  "ungrouped": ["bastion"]
//	}
//
// Every key but _meta is a group: an object of hosts (a list of names,
// each taken as it is: no ranges, no name:port), children (a list of group
// names) and vars, or, as the script plugin also reads it, a list of host
// names. _meta.hostvars holds each host's variables (ansible-inventory
// --list has merged its groups' into them; --export keeps those in each
// group's vars instead). Strings, numbers, booleans and null read as
// Ansible's JSON loader reads them, {"__ansible_unsafe": "…"} as a string.
//
// Where Ansible goes on, this refuses, each problem at its line with the
// JSON path of the bad field: a group key other than hosts, children and
// vars; a group with none of them (the script plugin reads it as a host
// named like the group); a key given twice; variables in _meta.hostvars
// for a host no group lists (Ansible drops them); no _meta.hostvars at all
// (Ansible would run a script again with --host for each host).
func ParseJSON(file string, data []byte) (*Inventory, error) {
	if len(data) > MaxSize {
		return nil, Errors{{File: file, Msg: fmt.Sprintf("%d bytes; relayctl reads inventories of at most %d", len(data), MaxSize)}}
	}
	if e := checkJSONText(file, data); e != nil {
		return nil, Errors{e}
	}
	b := newBuilder(file, JSON)
	p := &jsonParser{b: b, s: &jsonScanner{data: data, line: 1}}
	p.run()
	return b.finish()
}

type jsonParser struct {
	b        *builder
	s        *jsonScanner
	hasMeta  bool
	hostVars []jsonHostVars // _meta.hostvars, applied once every group is read
}

// jsonHostVars is one host's entry in _meta.hostvars.
type jsonHostVars struct {
	name, path string
	line       int
	vars       []jsonVar
}

type jsonVar struct {
	key string
	v   Value
}

// jsonStop ends the scan once the builder has given up (a limit passed).
type jsonStop struct{}

var utf8BOM = []byte("\xef\xbb\xbf")

// checkJSONText refuses what Ansible's loader refuses before it parses:
// bytes that are not UTF-8, a byte order mark, nothing at all.
func checkJSONText(file string, data []byte) *Error {
	switch {
	case bytes.HasPrefix(data, utf8BOM):
		return &Error{File: file, Line: 1, Msg: "starts with a UTF-8 byte order mark, which Ansible's JSON loader refuses; remove it"}
	case !utf8.Valid(data):
		bad := 0
		for bad < len(data) {
			r, n := utf8.DecodeRune(data[bad:])
			if r == utf8.RuneError && n == 1 {
				break
			}
			bad += n
		}
		return &Error{File: file, Line: 1 + bytes.Count(data[:bad], []byte("\n")), Msg: "not UTF-8; Ansible reads inventory JSON as UTF-8 and refuses other bytes"}
	case len(bytes.TrimSpace(data)) == 0:
		return &Error{File: file, Msg: `empty; ansible-inventory --list prints an object of groups and _meta, e.g. {"_meta": {"hostvars": {}}, "all": {"children": ["ungrouped"]}}`}
	}
	return nil
}

// run reads the document; a syntax error is recorded at its line and ends
// the reading.
func (p *jsonParser) run() {
	defer func() {
		switch r := recover().(type) {
		case nil, jsonStop:
		case jsonSyntaxError:
			p.b.fail(r.line, "not valid JSON: column %d: %s", r.col, r.msg)
			p.b.abort = true
		default:
			panic(r)
		}
	}()
	p.top()
}

func (p *jsonParser) top() {
	s := p.s
	if s.peek() != '{' {
		p.b.fail(s.line, "a JSON inventory is an object of groups and _meta, as ansible-inventory --list prints (without -y, --yaml or --toml); this is %s", s.kindAt())
		return
	}
	s.object(func(key string, line int) {
		if key == "_meta" {
			p.meta()
			return
		}
		p.group(key, line)
	}, p.dup(""))
	if s.peek() != 0 {
		s.fail("more text after the JSON document (%s); an inventory is one object", s.near())
	}
	if !p.hasMeta {
		p.b.fail(0, `no _meta.hostvars: Ansible would run an inventory script once more for each host (with --host), which relayctl does not; print "_meta": {"hostvars": {…}} with every host's variables ({} when none has any), as ansible-inventory --list does`)
	}
	p.applyHostVars()
}

// dup reports a key given twice in the object at path.
func (p *jsonParser) dup(path string) func(key string, line, first int) {
	return func(key string, line, first int) {
		p.b.fail(line, "%s: given twice (first on line %d); Ansible's JSON loader would keep only the last: merge the two", pathKey(path, key), first)
	}
}

// name checks a group or host name: a string Ansible could name it by.
func (p *jsonParser) name(name string, line int, path, what string) bool {
	switch {
	case name == "":
		p.b.fail(line, "%s: a %s with an empty name", path, what)
	case !utf8.ValidString(name) || bytes.ContainsFunc([]byte(name), isControl):
		p.b.fail(line, "%s: %s name %q holds a control character", path, what, name)
	default:
		return true
	}
	return false
}

// group reads one group: an object of hosts, children and vars, or a list
// of its hosts.
func (p *jsonParser) group(name string, line int) {
	s, path := p.s, pathKey("", name)
	if !p.name(name, line, path, "group") {
		s.skip()
		return
	}
	g := p.b.group(name, line)
	if p.b.abort {
		panic(jsonStop{})
	}
	switch s.peek() {
	case '[':
		p.hosts(g, path)
	case '{':
		p.groupObject(g, path, line)
	default:
		p.b.fail(line, `%s: want an object of hosts, children and vars, e.g. {"hosts": ["relay-1.ash"]}, or a list of host names; this is %s`, path, s.kindAt())
		s.skip()
	}
}

func (p *jsonParser) groupObject(g *group, path string, line int) {
	s := p.s
	known := false
	var unknown []jsonVar // reported only when the group is one (see below)
	s.object(func(k string, kl int) {
		switch k {
		case "hosts":
			p.hosts(g, pathKey(path, k))
		case "children":
			p.children(g, pathKey(path, k))
		case "vars":
			p.vars(pathKey(path, k), func(key string, v Value) { p.b.setGroupVar(g, key, v) })
		default:
			unknown = append(unknown, jsonVar{key: k, v: Value{Line: kl}})
			s.skip()
			return
		}
		known = true
	}, p.dup(path))
	if !known {
		p.b.fail(line, `%s: an object with none of hosts, children and vars, which Ansible reads as one host named %s with these as its variables; write {"hosts": [%q]} and the host's variables in _meta.hostvars, or leave an empty group out`, path, g.name, g.name)
		return
	}
	for _, u := range unknown {
		p.b.fail(u.v.Line, "%s: unknown key; a group holds hosts, children and vars (Ansible would ignore it)", pathKey(path, u.key))
	}
}

// hosts reads a list of host names into g.
func (p *jsonParser) hosts(g *group, path string) {
	s := p.s
	if s.peek() != '[' {
		p.b.fail(s.line, `%s: want a list of host names, e.g. ["relay-1.ash", "relay-2.ash"]; this is %s`, path, s.kindAt())
		s.skip()
		return
	}
	s.array(func(i, line int) {
		at := pathIndex(path, i)
		if s.peek() != '"' {
			p.b.fail(line, "%s: a host name is a string; this is %s", at, s.kindAt())
			s.skip()
			return
		}
		name := s.str()
		if !p.name(name, line, at, "host") {
			return
		}
		h := p.b.host(name, line, 0)
		if h == nil {
			panic(jsonStop{})
		}
		if h.path == "" {
			h.path = at
		}
		p.b.addHost(g, h)
	})
}

// children reads a list of group names, each made a child of g.
func (p *jsonParser) children(g *group, path string) {
	s := p.s
	if s.peek() != '[' {
		p.b.fail(s.line, `%s: want a list of group names, e.g. ["ash", "fra"]; this is %s`, path, s.kindAt())
		s.skip()
		return
	}
	s.array(func(i, line int) {
		at := pathIndex(path, i)
		if s.peek() != '"' {
			p.b.fail(line, "%s: a group name is a string; this is %s", at, s.kindAt())
			s.skip()
			return
		}
		name := s.str()
		if !p.name(name, line, at, "group") {
			return
		}
		child := p.b.group(name, line)
		if p.b.abort {
			panic(jsonStop{})
		}
		p.b.addChild(g, child, line)
	})
}

// meta reads _meta, whose one key is hostvars.
func (p *jsonParser) meta() {
	s := p.s
	if s.peek() != '{' {
		p.b.fail(s.line, "_meta: want an object holding hostvars; this is %s", s.kindAt())
		s.skip()
		return
	}
	s.object(func(k string, line int) {
		if k != "hostvars" {
			p.b.fail(line, "%s: unknown key; _meta holds hostvars (Ansible would ignore it)", pathKey("_meta", k))
			s.skip()
			return
		}
		p.hasMeta = true
		p.readHostVars()
	}, p.dup("_meta"))
}

func (p *jsonParser) readHostVars() {
	s, path := p.s, "_meta.hostvars"
	if s.peek() != '{' {
		p.b.fail(s.line, `%s: want an object of each host's variables, e.g. {"relay-1.ash": {"ansible_host": "10.0.0.1"}}; this is %s`, path, s.kindAt())
		s.skip()
		return
	}
	s.object(func(name string, line int) {
		hv := jsonHostVars{name: name, path: pathKey(path, name), line: line}
		p.vars(hv.path, func(key string, v Value) { hv.vars = append(hv.vars, jsonVar{key, v}) })
		p.hostVars = append(p.hostVars, hv)
	}, p.dup(path))
}

// applyHostVars gives each host its _meta.hostvars entry, once every
// group (and so every host) is read.
func (p *jsonParser) applyHostVars() {
	for _, hv := range p.hostVars {
		h := p.b.inv.hostIndex[hv.name]
		if h == nil {
			p.b.fail(hv.line, "%s: %s is in no group's hosts, so Ansible leaves out the host and its variables; list it in a group's hosts (ungrouped for a host without a group), or remove the entry", hv.path, hv.name)
			continue
		}
		for _, kv := range hv.vars {
			h.vars[kv.key] = kv.v
		}
	}
}

// vars reads an object of variables, calling set for each.
func (p *jsonParser) vars(path string, set func(key string, v Value)) {
	s := p.s
	if s.peek() != '{' {
		p.b.fail(s.line, "%s: want an object of variables (name: value); this is %s", path, s.kindAt())
		s.skip()
		return
	}
	s.object(func(k string, line int) {
		at := pathKey(path, k)
		if k == ansibleUnsafe || k == ansibleVault {
			p.b.fail(line, "%s: Ansible's JSON loader reads an object holding %s as one value, not as variables; rename the key", at, k)
			s.skip()
			return
		}
		v := p.value()
		v.Path = at
		set(k, v)
	}, p.dup(path))
}

// The keys by which Ansible's JSON encoder marks a value: an untemplated
// string, a vault-encrypted one.
const (
	ansibleUnsafe = "__ansible_unsafe"
	ansibleVault  = "__ansible_vault"
)

// value reads a variable's value. A list or an object is Complex (relayctl
// never needs one), except an object holding __ansible_unsafe, which
// Ansible's JSON loader reads as that key's value, and __ansible_vault, an
// encrypted string: whichever of the two comes first.
func (p *jsonParser) value() Value {
	s := p.s
	switch s.peek() {
	case '[':
		line := s.line
		s.skip()
		return Value{Kind: Complex, Line: line}
	case '{':
		line := s.line
		v, tagged := Value{Kind: Complex}, false
		s.object(func(k string, _ int) {
			if tagged || k != ansibleUnsafe && k != ansibleVault {
				s.skip()
				return
			}
			tagged = true
			if k == ansibleUnsafe {
				v = p.value()
			} else {
				s.skip()
			}
		}, nil)
		v.Line = line
		return v
	}
	return s.scalar()
}

// looksLikeListJSON reports whether data is a JSON object with _meta among
// its keys: how the output of ansible-inventory --list (or of an inventory
// script) is told from a YAML inventory written as JSON, which has none.
// The scan stops at _meta, which ansible-inventory prints first but for
// groups whose names sort before it.
func looksLikeListJSON(data []byte) (found bool) {
	s := &jsonScanner{data: bytes.TrimPrefix(data, utf8BOM), line: 1}
	defer func() {
		switch r := recover().(type) {
		case nil, jsonSyntaxError, jsonStop:
		default:
			panic(r)
		}
	}()
	if !utf8.Valid(data) || s.peek() != '{' {
		return false
	}
	s.object(func(k string, _ int) {
		if k == "_meta" {
			found = true
			panic(jsonStop{})
		}
		s.skip()
	}, nil)
	return false
}

// pathKey is path and then an object's key, as jq writes it: .key for a
// plain name (letters, digits, _, not starting with a digit), ["key"] for
// any other.
func pathKey(path, key string) string {
	if !jsonIdent(key) {
		return path + "[" + strconv.Quote(key) + "]"
	}
	if path == "" {
		return key
	}
	return path + "." + key
}

func jsonIdent(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return s != ""
}

func pathIndex(path string, i int) string { return path + "[" + strconv.Itoa(i) + "]" }
