package plans

import (
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/relayctl/relayctl/internal/lazyre"
	"github.com/relayctl/relayctl/plans/inventory"
)

// InventoryRef is a spec's hosts when they come from an Ansible inventory
// (docs/inventory.md), a file:
//
//	hosts:
//	  inventory: inventory/hosts.ini   # INI, YAML or ansible-inventory --list JSON, relative to the spec's folder
//	  pattern: "relays:&ash:!maintenance"
//	  labels: [region, pool]
//
// or what a program prints, the JSON of ansible-inventory --list:
//
//	hosts:
//	  inventory:
//	    program: [ansible-inventory, -i, inventory/aws_ec2.yml, --list]
//	    timeout: 2m                    # optional
//	  pattern: relays
//
// ParseSpec reads the form only (the spec parser is pure and reads no
// file); SelectHosts reads the inventory and fills in the spec's hosts.
type InventoryRef struct {
	File string // as written; "" for a program
	// Program is the argv of a program that prints the inventory, run on
	// the machine relayctl runs on, in the spec's folder, without a shell;
	// Timeout is how long it may take (0: the default).
	Program     []string
	Timeout     time.Duration
	Pattern     string   // an Ansible host pattern; "all" for every host
	Labels      []string // inventory variables each selected host carries as a label
	Line        int      // of the inventory field
	PatternLine int

	pattern *inventory.Pattern
}

// Source names where the hosts come from, as messages say it: the file,
// or "the output of PROGRAM ARGS".
func (r *InventoryRef) Source() string {
	if r.Program != nil {
		return "the output of " + ArgvText(r.Program)
	}
	return r.File
}

// outputName is the name a program's output goes by in errors, where a
// file's name would be: "PROGRAM ARGS (output):LINE: …".
func (r *InventoryRef) outputName() string { return ArgvText(r.Program) + " (output)" }

// InventoryRecord is what a plan records of the inventory it was made
// from, as it records the spec: the file's sha256 (or the program's, and
// its output's) and every vars file read with its sha256, so that apply
// sees when the fleet changed under the plan. Content is not recorded:
// inventories and vars files hold secrets.
type InventoryRecord struct {
	File      string           `json:"file,omitempty"`    // as the spec writes it
	Program   []string         `json:"program,omitempty"` // as the spec writes it
	SHA256    string           `json:"sha256"`            // of the inventory file or the program's output, "sha256:…"
	VarsFiles []VarsFileRecord `json:"vars_files"`
}

// Source names what the record is of, as InventoryRef.Source.
func (r *InventoryRecord) Source() string {
	ref := InventoryRef{File: r.File, Program: r.Program}
	return ref.Source()
}

// VarsFileRecord is one group_vars/ or host_vars/ file a plan's hosts came
// from.
type VarsFileRecord struct {
	Path   string `json:"path"` // relative to the inventory's folder
	SHA256 string `json:"sha256"`
}

// InventoryInput is what SelectHosts reads: the inventory file and its
// folder, for group_vars/ and host_vars/; or what the spec's program
// printed, read as ansible-inventory --list's JSON.
type InventoryInput struct {
	Path string // the file as opened (the spec's folder joined), for messages; unused for a program
	Data []byte
	Dir  fs.FS // the inventory file's folder; nil reads no vars folders
	// Stderr is the end of what the program printed on stderr, shown as
	// a warning (Ansible prints its warnings there).
	Stderr string
}

// MaxFleet bounds the hosts an inventory spec selects (a listed spec has
// MaxHosts).
const MaxFleet = inventory.MaxHosts

// ErrFleetChanged is an inventory plan whose inventory or vars files are
// not the ones it was made from.
var ErrFleetChanged = errors.New("the inventory changed since the plan was made")

// inventoryHosts parses the hosts: {inventory, pattern, labels} form.
func (p *specParser) inventoryHosts(n *yaml.Node) *InventoryRef {
	f, ok := p.fields(n, "hosts", "inventory", "pattern", "labels")
	if !ok {
		return nil
	}
	ref := &InventoryRef{Line: n.Line}
	good := true
	if v := f["inventory"]; v == nil {
		p.fail(n, "hosts.inventory", "missing; the inventory file, relative to the spec's folder, e.g. inventory: inventory/hosts.ini, or a program that prints it, e.g. inventory: {program: [ansible-inventory, -i, inventory/aws_ec2.yml, --list]}")
		good = false
	} else if v.Kind == yaml.MappingNode {
		ref.Line = v.Line
		good = p.inventoryProgram(v, ref)
	} else if s, ok := p.str(v, "hosts.inventory"); !ok {
		good = false
	} else if s == "" || len(s) > 4096 || strings.ContainsAny(s, "\x00\n\r") {
		p.fail(v, "hosts.inventory", "want a file path, got %q", s)
		good = false
	} else {
		ref.File, ref.Line = s, v.Line
	}
	if v := f["pattern"]; v == nil {
		p.fail(n, "hosts.pattern", "missing; an Ansible host pattern saying which of the inventory's hosts this spec touches, e.g. pattern: \"relays:!maintenance\" (all for every host)")
		good = false
	} else if s, ok := p.str(v, "hosts.pattern"); !ok {
		good = false
	} else if pat, err := inventory.ParsePattern(s); err != nil {
		p.fail(v, "hosts.pattern", "%v", err)
		good = false
	} else {
		ref.Pattern, ref.PatternLine, ref.pattern = s, v.Line, pat
	}
	if v := f["labels"]; v != nil {
		ref.Labels = p.labelNames(v)
		good = good && ref.Labels != nil
	}
	if !good {
		return nil
	}
	return ref
}

// inventoryProgram reads hosts.inventory: {program: [ARGV…], timeout: D}.
func (p *specParser) inventoryProgram(n *yaml.Node, ref *InventoryRef) bool {
	f, ok := p.fields(n, "hosts.inventory", "program", "timeout")
	if !ok {
		return false
	}
	good := true
	if v := f["program"]; v == nil {
		p.fail(n, "hosts.inventory.program", "missing; the program that prints the inventory as ansible-inventory --list does, as a list of words, e.g. program: [ansible-inventory, -i, inventory/aws_ec2.yml, --list]")
		good = false
	} else {
		ref.Program = p.programArgv(v)
		good = ref.Program != nil
	}
	if t := f["timeout"]; t != nil {
		s, ok := p.str(t, "hosts.inventory.timeout")
		d, err := time.ParseDuration(s)
		if !ok || err != nil || d < time.Second || d > MaxInventoryTimeout {
			p.fail(t, "hosts.inventory.timeout", "want a duration from 1s to %v, got %q; e.g. timeout: 5m", MaxInventoryTimeout, s)
			good = false
		}
		ref.Timeout = d
	}
	return good
}

// programArgv reads hosts.inventory.program: a program (in PATH, or a
// path relative to the spec's folder) and its arguments, run without a
// shell.
func (p *specParser) programArgv(v *yaml.Node) []string {
	const field = "hosts.inventory.program"
	if v.Kind != yaml.SequenceNode || len(v.Content) == 0 || len(v.Content) > MaxArgv {
		p.fail(v, field, "want the program and its arguments as a list of 1 to %d words, e.g. [ansible-inventory, -i, inventory/aws_ec2.yml, --list]; it runs without a shell", MaxArgv)
		return nil
	}
	var argv []string
	for i, w := range v.Content {
		s, ok := p.str(w, field)
		if !ok {
			return nil
		}
		if err := ValidArgWord(s); err != nil {
			p.fail(w, field, "%v", err)
			return nil
		}
		if i == 0 && !programRe.MatchString(s) {
			p.fail(w, field, "want a program name (looked up in PATH) or path (relative to the spec's folder) of letters, digits and ._/+-, not starting with -, got %q", s)
			return nil
		}
		argv = append(argv, s)
	}
	if why := InlineCode(argv); why != "" {
		p.fail(v, field, "%s: a spec's program is words, never code in them; put the code in a script beside the spec and run that, e.g. [inventory/hosts.sh, --list], which relayctl checks as it checks any program (docs/inventory.md)", why)
		return nil
	}
	return argv
}

var programRe = lazyre.New(`^[A-Za-z0-9._/+][A-Za-z0-9._/+-]*$`)

// How long an inventory program may run (hosts.inventory.timeout).
const (
	DefaultInventoryTimeout = 2 * time.Minute
	MaxInventoryTimeout     = 30 * time.Minute
)

// ArgvText is a program's argv as a person reads it: words separated by
// spaces, a word that is not plain quoted.
func ArgvText(argv []string) string {
	words := make([]string, len(argv))
	for i, w := range argv {
		if w == "" || strings.IndexFunc(w, func(r rune) bool { return !plainArgRune(r) }) >= 0 {
			w = strconv.Quote(w)
		}
		words[i] = w
	}
	return strings.Join(words, " ")
}

func plainArgRune(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("._/+-=:,@%", r)
}

// labelNames reads hosts.labels: inventory variable names, each once.
func (p *specParser) labelNames(v *yaml.Node) []string {
	if v.Kind != yaml.SequenceNode || len(v.Content) == 0 {
		p.fail(v, "hosts.labels", "want a list of inventory variables to carry as labels, e.g. [region, pool]")
		return nil
	}
	var out []string
	for i, item := range v.Content {
		field := fmt.Sprintf("hosts.labels[%d]", i)
		s, ok := p.str(item, field)
		if !ok {
			return nil
		}
		if err := inventory.ValidLabelKey(s); err != nil {
			p.fail(item, field, "%v", err)
			return nil
		}
		if slices.Contains(out, s) {
			p.fail(item, field, "%s is named twice", s)
			return nil
		}
		out = append(out, s)
	}
	return out
}

// HasLabel reports whether the spec's hosts carry label k.
func (s *Spec) HasLabel(k string) bool {
	return s.Inventory != nil && slices.Contains(s.Inventory.Labels, k)
}

// SelectHosts reads the hosts of a spec that names an inventory: the
// inventory's hosts its pattern selects, in inventory order, each with the
// SSH target the inventory gives it and its labels. It fills in s.Hosts,
// s.Targets, s.Labels and s.InventoryRecord. Every problem is reported at
// once, each at its file and line (the inventory's, a vars file's, or the
// spec's pattern line); warnings name what relayctl does not read.
func (s *Spec) SelectHosts(in InventoryInput) ([]*SpecError, SpecErrors) {
	ref := s.Inventory
	if ref == nil || ref.pattern == nil {
		return nil, SpecErrors{{File: s.File, Field: "hosts", Msg: "the spec does not name an inventory"}}
	}
	inv, warns, rerrs := s.readInventory(in)
	if rerrs != nil {
		return nil, rerrs
	}
	sel, err := inv.Select(ref.pattern, inventory.Options{Labels: ref.Labels})
	if err != nil {
		return nil, s.inventoryErrors(err, ref.PatternLine, "hosts.pattern")
	}
	for _, w := range append(append([]*inventory.Error{}, inv.Warnings...), sel.Warnings...) {
		warns = append(warns, &SpecError{File: w.File, Line: w.Line, Msg: w.Msg})
	}
	if len(sel.Hosts) > MaxFleet {
		return warns, SpecErrors{{File: s.File, Line: ref.PatternLine, Field: "hosts.pattern", Msg: fmt.Sprintf("%d hosts selected; a spec may have at most %d", len(sel.Hosts), MaxFleet)}}
	}
	s.Hosts = make([]string, 0, len(sel.Hosts))
	s.Targets, s.Labels = map[string]string{}, map[string]map[string]string{}
	var errs SpecErrors
	for _, h := range sel.Hosts {
		if err := ValidHost(h.Name); err != nil {
			errs = append(errs, &SpecError{File: inv.File, Line: h.Line, Msg: fmt.Sprintf("host %s: relayctl names a host by a name it can also dial (an IPv6 address is not one): give it a name and set ansible_host to its address", h.Name)})
			continue
		}
		s.Hosts = append(s.Hosts, h.Name)
		if t := h.SSHTarget(); t != h.Name {
			s.Targets[h.Name] = t
		}
		if len(h.Labels) > 0 {
			s.Labels[h.Name] = h.Labels
		}
	}
	s.InventoryRecord = &InventoryRecord{File: ref.File, Program: ref.Program, SHA256: "sha256:" + sha256Text(string(in.Data)), VarsFiles: []VarsFileRecord{}}
	for _, vf := range inv.VarsFiles() {
		s.InventoryRecord.VarsFiles = append(s.InventoryRecord.VarsFiles, VarsFileRecord{Path: vf.Path, SHA256: "sha256:" + sha256Text(string(vf.Data))})
	}
	return warns, errs
}

// readInventory parses the inventory: a file by its form (and the vars
// folders beside an INI or YAML one), a program's output as
// ansible-inventory --list's JSON. ansible-inventory has merged
// group_vars/ and host_vars/ into that JSON already: they are not read
// again beside a JSON file, and one there gets a warning.
func (s *Spec) readInventory(in InventoryInput) (*inventory.Inventory, []*SpecError, SpecErrors) {
	ref := s.Inventory
	var warns []*SpecError
	if ref.Program != nil {
		if st := strings.TrimSpace(in.Stderr); st != "" {
			warns = append(warns, &SpecError{File: s.File, Line: ref.Line, Field: "hosts.inventory.program", Msg: fmt.Sprintf("%s printed on stderr: %s", ArgvText(ref.Program), st)})
		}
		inv, err := inventory.ParseJSON(ref.outputName(), in.Data)
		if err != nil {
			return nil, nil, s.inventoryErrors(err, ref.Line, "hosts.inventory.program")
		}
		return inv, warns, nil
	}
	inv, err := inventory.Parse(in.Path, in.Data)
	if err != nil {
		return nil, nil, s.inventoryErrors(err, ref.Line, "hosts.inventory")
	}
	if in.Dir == nil {
		return inv, warns, nil
	}
	if inv.Format == inventory.JSON {
		for _, d := range []string{"group_vars", "host_vars"} {
			if _, err := fs.Stat(in.Dir, d); err == nil {
				warns = append(warns, &SpecError{File: in.Path, Msg: fmt.Sprintf("%s/ beside it is not read: this is ansible-inventory --list's JSON, into which Ansible has merged group_vars/ and host_vars/ already", d)})
			}
		}
		return inv, warns, nil
	}
	if err := inv.ReadVarsDirs(in.Dir); err != nil {
		return nil, nil, s.inventoryErrors(err, ref.Line, "hosts.inventory")
	}
	return inv, warns, nil
}

// inventoryErrors turns the inventory's errors into spec errors: an
// error in a file keeps that file and line; any other belongs to the
// spec's field at line.
func (s *Spec) inventoryErrors(err error, line int, field string) SpecErrors {
	var list inventory.Errors
	if errors.As(err, &list) {
		out := make(SpecErrors, len(list))
		for i, e := range list {
			out[i] = &SpecError{File: e.File, Line: e.Line, Msg: e.Msg}
		}
		return out
	}
	var one *inventory.Error
	if errors.As(err, &one) {
		return SpecErrors{{File: one.File, Line: one.Line, Msg: one.Msg}}
	}
	return SpecErrors{{File: s.File, Line: line, Field: field, Msg: err.Error()}}
}
