// Package inventory reads Ansible inventories (INI, YAML, and the JSON that
// ansible-inventory --list prints) and selects hosts from them with
// Ansible's host patterns, so an operator's existing inventory can say
// which hosts a relayctl spec covers.
//
// It is pure: bytes in, typed result out. It never resolves a name, opens a
// connection or reads a clock; group_vars/ and host_vars/ directories are not
// read (the caller decides what to do about them).
//
// What it reads as Ansible does: groups, children, group vars and host vars,
// host ranges, all and ungrouped, variable precedence (host over child group
// over parent group over all, ansible_group_priority included), and the set
// of hosts a pattern selects. Where Ansible warns and goes on (an unknown key
// in a YAML group, a pattern term that matches nothing), this package refuses,
// so a typo cannot silently change which hosts are touched. docs/inventory.md
// is the user-facing account.
package inventory

import (
	"fmt"
	"path/filepath"
	"strings"
	"sync"
)

// Limits on what is read: an inventory is untrusted input.
const (
	MaxSize    = 32 << 20 // bytes of one inventory file
	MaxHosts   = 100000   // hosts in one inventory, after ranges are expanded
	MaxGroups  = 10000    // groups in one inventory
	MaxDepth   = 64       // nesting of children in a YAML inventory
	MaxPattern = 4096     // bytes of one host pattern
	MaxTerms   = 256      // terms of one host pattern
	maxErrors  = 100      // problems reported for one file before giving up
)

// Format is how an inventory file is written.
type Format uint8

const (
	INI Format = iota + 1
	YAML
	// JSON is what ansible-inventory --list and inventory scripts print
	// (ParseJSON), not a YAML inventory written as JSON (YAML reads that).
	JSON
)

func (f Format) String() string {
	switch f {
	case INI:
		return "ini"
	case YAML:
		return "yaml"
	case JSON:
		return "json"
	}
	return "unknown"
}

// Error is one problem in an inventory, pointing at its file and line.
type Error struct {
	File string
	Line int // 0 when the problem is the whole file
	Msg  string
}

func (e *Error) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg)
	}
	return e.File + ": " + e.Msg
}

// Errors is every problem found in one inventory, in line order.
type Errors []*Error

func (e Errors) Error() string {
	lines := make([]string, len(e))
	for i, x := range e {
		lines[i] = x.Error()
	}
	return strings.Join(lines, "\n")
}

// Unwrap lets errors.As find each *Error.
func (e Errors) Unwrap() []error {
	out := make([]error, len(e))
	for i, x := range e {
		out[i] = x
	}
	return out
}

// Kind is the type a variable has once Ansible has read it.
type Kind uint8

const (
	String Kind = iota + 1
	Int
	Float
	Bool
	Null
	// Complex is anything else: a list, a mapping, a date, an encrypted
	// !vault value. relayctl never needs one, so it only records the kind.
	Complex
)

func (k Kind) String() string {
	return [...]string{"?", "string", "integer", "float", "boolean", "null", "list, mapping or other value"}[k]
}

// Value is one variable as set in the inventory.
type Value struct {
	Kind Kind
	Text string // the string; the integer in decimal; "true"/"false"; empty for Null and Complex
	File string // where it was set: a group_vars/ or host_vars/ file, or "" for the inventory file
	Line int
	Path string // in a JSON inventory, the JSON path of the value, e.g. _meta.hostvars["relay-1"].ansible_host
}

// Inventory is a parsed inventory file. It is safe for concurrent use.
type Inventory struct {
	File   string
	Format Format
	// Warnings are what relayctl reads the same way as Ansible but the
	// operator may want to know (a host defined twice with different ports).
	Warnings []*Error

	hosts      []*host // in the order they first appear in the file
	hostIndex  map[string]*host
	groups     []*group // in the order they are first named
	groupIndex map[string]*group
	all        *group
	ungrouped  *group
	varsFiles  []VarsFile          // read by ReadVarsDirs
	mu         sync.Mutex          // guards the memos below and in group
	varsCache  map[string][]*group // a host's groups in precedence order, by its direct groups
}

type host struct {
	name     string
	line     int
	path     string           // in a JSON inventory, where the host is first listed, e.g. ash.hosts[0]
	order    int              // index in Inventory.hosts
	vars     map[string]Value // the host's own variables in the inventory file
	fileVars map[string]Value // from host_vars/ (ReadVarsDirs)
	direct   []*group         // groups the host is listed in, in the order it was added
	groups   map[*group]bool  // direct groups and their ancestors, as Ansible's host.get_groups()
}

type group struct {
	name     string
	line     int
	order    int
	hosts    []*host
	hostSet  map[*host]bool
	children []*group
	parents  []*group
	vars     map[string]Value // set in the inventory file
	fileVars map[string]Value // from group_vars/ (ReadVarsDirs)
	depth    int              // longest path from all, as Ansible's Group.depth
	priority int              // ansible_group_priority, 1 by default

	ancestors map[*group]bool // memo: every group above this one
	members   bitset          // memo: hosts of this group and of its descendants
}

// Parse reads an inventory, INI, YAML or JSON, by its file name as Ansible
// tells INI and YAML apart: .yaml and .yml are YAML; a .json name or one
// without an extension is ansible-inventory --list's JSON (ParseJSON) when
// it is a JSON object with a _meta key, else YAML when it parses as a YAML
// mapping (JSON is YAML), else INI; any other extension (.ini, .cfg, .txt,
// .hosts) is INI.
func Parse(file string, data []byte) (*Inventory, error) {
	switch strings.ToLower(filepath.Ext(file)) {
	case ".yaml", ".yml":
		return ParseYAML(file, data)
	case ".json":
		if looksLikeListJSON(data) {
			return ParseJSON(file, data)
		}
		return ParseYAML(file, data)
	case "":
		if looksLikeListJSON(data) {
			return ParseJSON(file, data)
		}
		if looksLikeYAMLMapping(data) {
			return ParseYAML(file, data)
		}
	}
	return ParseINI(file, data)
}

// HostCount is how many hosts the inventory defines.
func (inv *Inventory) HostCount() int { return len(inv.hosts) }

// HostNames are the inventory's hosts in the order they first appear.
func (inv *Inventory) HostNames() []string {
	out := make([]string, len(inv.hosts))
	for i, h := range inv.hosts {
		out[i] = h.name
	}
	return out
}

// GroupNames are the inventory's groups, all and ungrouped included, in the
// order they are first named.
func (inv *Inventory) GroupNames() []string {
	out := make([]string, len(inv.groups))
	for i, g := range inv.groups {
		out[i] = g.name
	}
	return out
}
