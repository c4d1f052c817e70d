package inventory

import (
	"fmt"
	"net/netip"
	"sort"
	"strconv"
	"strings"

	"github.com/relayctl/relayctl/internal/lazyre"
)

// Host is one selected host with what relayctl needs to reach it.
type Host struct {
	Name    string // the inventory name (Ansible's inventory_hostname)
	Address string // ansible_host, else Name
	Port    int    // ansible_port; 0 when the inventory sets none (ssh_config's, else 22)
	User    string // ansible_user; "" when the inventory sets none (ssh_config's)
	// Labels are the variables Options.Labels names, as the host resolves
	// them (host over child group over parent group over all).
	Labels map[string]string
	// Groups is every group the host is in, parents included, all
	// excluded, sorted: Ansible's group_names.
	Groups []string
	Line   int // where the host is first defined
}

// SSHTarget is the host as relayctl's spec writes one: [user@]address[:port],
// an IPv6 address in brackets.
func (h Host) SSHTarget() string {
	a := h.Address
	if strings.Contains(a, ":") {
		a = "[" + a + "]"
	}
	if h.User != "" {
		a = h.User + "@" + a
	}
	if h.Port != 0 {
		a += ":" + strconv.Itoa(h.Port)
	}
	return a
}

// Options say what a selection carries besides the hosts.
type Options struct {
	// Labels are inventory variables each selected host carries as a
	// label, e.g. region and pool. Every selected host must have each one,
	// set on the host or on one of its groups.
	Labels []string
}

// Selection is the hosts a pattern selects, in inventory order, each once.
type Selection struct {
	Hosts []Host
	// Warnings name inventory settings relayctl does not read, such as
	// ansible_ssh_private_key_file, once per variable.
	Warnings []*Error
}

// The variables that say how to reach a host. As in Ansible's ssh
// connection plugin, the older ansible_ssh_ form wins when both are set,
// wherever each is set.
var (
	addressVars = []string{"ansible_ssh_host", "ansible_host"}
	portVars    = []string{"ansible_ssh_port", "ansible_port"}
	userVars    = []string{"ansible_ssh_user", "ansible_user"}
	sshPlugins  = map[string]bool{"ssh": true, "smart": true, "paramiko": true, "paramiko_ssh": true,
		"ansible.builtin.ssh": true, "ansible.builtin.paramiko_ssh": true}
	// Connection settings relayctl does not read: it connects with
	// ssh_config, the SSH agent and as root. A selected host setting one
	// gets a warning, never its value (some are secrets).
	unreadVars = []string{"ansible_ssh_private_key_file", "ansible_private_key_file", "ansible_ssh_common_args",
		"ansible_ssh_extra_args", "ansible_ssh_args", "ansible_password", "ansible_ssh_pass", "ansible_become",
		"ansible_become_user", "ansible_become_method", "ansible_become_password", "ansible_ssh_executable"}

	labelKeyRe = lazyre.New(`^[A-Za-z_][A-Za-z0-9_]{0,63}$`)
)

// word reports whether s is 1 to max bytes of letters, digits and ._-
// whose first byte is a letter or digit, or also _ when underscore is set.
// (Regular expressions cost a third of selecting 10,000 hosts.)
func word(s string, max int, underscore bool) bool {
	if len(s) == 0 || len(s) > max {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && !(c == '_' && (i > 0 || underscore)) && !(i > 0 && (c == '.' || c == '-')) {
			return false
		}
	}
	return true
}

func validUser(s string) bool       { return word(s, 64, true) }
func validLabelValue(s string) bool { return word(s, 63, false) }

// ValidLabelKey checks a label name as a spec gives it: a variable name
// that is not one of Ansible's own (ansible_…) and does not look like a
// secret, since labels are shown in plans, reviews and receipts.
func ValidLabelKey(k string) error {
	switch up := strings.ToUpper(k); {
	case !labelKeyRe.MatchString(k):
		return fmt.Errorf("label %q: want a variable name (letters, digits, _; at most 64)", k)
	case strings.HasPrefix(k, "ansible_"):
		return fmt.Errorf("label %q: ansible_ variables are Ansible's settings, not labels", k)
	case strings.Contains(up, "TOKEN") || strings.Contains(up, "SECRET") || strings.Contains(up, "PASSWORD") || strings.Contains(up, "KEY"):
		return fmt.Errorf("label %q: its name says secret (TOKEN, SECRET, PASSWORD or KEY), and labels are shown in plans and receipts; label by something else", k)
	}
	return nil
}

// Select is the hosts p selects, each with its address, port, user, labels
// and groups. Every problem with a selected host is reported at once, each
// at the inventory line that sets the value.
func (inv *Inventory) Select(p *Pattern, opt Options) (*Selection, error) {
	seen := map[string]bool{}
	for _, k := range opt.Labels {
		if err := ValidLabelKey(k); err != nil {
			return nil, err
		}
		if seen[k] {
			return nil, fmt.Errorf("label %q is named twice", k)
		}
		seen[k] = true
	}
	inv.mu.Lock()
	defer inv.mu.Unlock()
	set, err := inv.match(p)
	if err != nil {
		return nil, err
	}
	s := &selector{inv: inv, opt: opt, unread: map[string]*unread{}, dialled: map[string]hostAt{}}
	sel := &Selection{Hosts: make([]Host, 0, set.count())}
	set.each(func(i int) {
		if h, ok := s.host(inv.hosts[i]); ok && s.once(inv.hosts[i], &h) {
			sel.Hosts = append(sel.Hosts, h)
		}
	})
	if len(s.errs) > 0 {
		sort.SliceStable(s.errs, func(i, j int) bool { return s.errs[i].Line < s.errs[j].Line })
		return nil, Errors(s.errs)
	}
	for _, name := range unreadVars {
		if u := s.unread[name]; u != nil {
			file := u.at.File
			if file == "" {
				file = inv.File
			}
			sel.Warnings = append(sel.Warnings, &Error{File: file, Line: u.at.Line, Msg: fmt.Sprintf(
				"%s is set for %s and %d more of the selected hosts; relayctl does not read it: it connects with ssh_config, the SSH agent and as root",
				name, u.first, u.count-1)})
		}
	}
	return sel, nil
}

type selector struct {
	inv    *Inventory
	opt    Options
	errs   []*Error
	unread map[string]*unread
	// dialled is the selected host first seen at each address and port.
	dialled map[string]hostAt
}

// hostAt is a host's name and the line it is first defined at.
type hostAt struct {
	name string
	line int
}

// once refuses a selected host dialled at the same address and port as
// one selected before it: one machine under two names would be planned,
// counted in capacity and rollout by each name's labels (two regions),
// and given two windows. The ports compared are as the inventory sets
// them, unset the same as unset (ssh_config may give an address a port of
// its own, so unset is not taken for 22); addresses as written, an IP
// address in its canonical form, a name in lower case.
func (s *selector) once(h *host, out *Host) bool {
	addr := strings.ToLower(out.Address)
	if a, err := netip.ParseAddr(out.Address); err == nil {
		addr = a.Unmap().String()
	}
	key := addr + " " + strconv.Itoa(out.Port)
	first, dup := s.dialled[key]
	if !dup {
		s.dialled[key] = hostAt{out.Name, out.Line}
		return true
	}
	at := "port unset: ssh_config's, else 22"
	if out.Port != 0 {
		at = "port " + strconv.Itoa(out.Port)
	}
	s.failHost(h, "%s is dialled at %s (%s), as %s (line %d) is: one machine under two names would be planned, counted and restarted as two; select one of them, or give each its own ansible_host or ansible_port",
		h.name, out.Address, at, first.name, first.line)
	return false
}

// unread counts the selected hosts that set a variable relayctl ignores.
type unread struct {
	first string
	at    Value
	count int
}

// failAt records a problem where the value v was set (in a JSON
// inventory, naming its JSON path).
func (s *selector) failAt(v Value, format string, a ...any) {
	file := v.File
	if file == "" {
		file = s.inv.File
	}
	msg := fmt.Sprintf(format, a...)
	if v.Path != "" {
		msg = v.Path + ": " + msg
	}
	if len(s.errs) < maxErrors {
		s.errs = append(s.errs, &Error{File: file, Line: v.Line, Msg: msg})
	}
}

// failHost records a problem with a host itself, where it is first defined.
func (s *selector) failHost(h *host, format string, a ...any) {
	s.failAt(Value{Line: h.line, Path: h.path}, format, a...)
}

func (s *selector) host(h *host) (Host, bool) {
	inv := s.inv
	gs := inv.precedence(h)
	out := Host{Name: h.name, Address: h.name, Line: h.line, Groups: groupNames(h, inv.all)}
	n := len(s.errs)
	if !validName(h.name) {
		s.failHost(h, "host %q: relayctl names hosts in plans, journals and receipts by letters, digits and ._- (or an IP address); rename it and set ansible_host to its address", h.name)
	}
	if v, name, ok := s.first(h, gs, addressVars); ok {
		if text, ok := s.text(h, name, v); ok {
			if validName(text) {
				out.Address = text
			} else {
				s.failAt(v, "%s: %s %q is neither a host name (letters, digits, ._-) nor an IP address", h.name, name, text)
			}
		}
	}
	if v, name, ok := s.first(h, gs, portVars); ok {
		if port, ok := intOf(v); ok && port >= 1 && port <= 65535 {
			out.Port = port
		} else {
			s.failAt(v, "%s: %s is %s; want a TCP port, 1 to 65535", h.name, name, describe(v))
		}
	}
	if v, name, ok := s.first(h, gs, userVars); ok {
		if text, ok := s.text(h, name, v); ok {
			if validUser(text) {
				out.User = text
			} else {
				s.failAt(v, "%s: %s %q is not a user name (letters, digits, ._-, not starting with - or .)", h.name, name, text)
			}
		}
	}
	if v, ok := inv.lookup(h, gs, "ansible_connection"); ok && !(v.Kind == String && sshPlugins[v.Text]) {
		s.failAt(v, "%s: ansible_connection is %s; relayctl reaches hosts over SSH only: leave the host out of the pattern or remove the setting", h.name, describe(v))
	}
	s.labels(h, gs, &out)
	for _, name := range unreadVars {
		if v, ok := inv.lookup(h, gs, name); ok {
			if s.unread[name] == nil {
				s.unread[name] = &unread{first: h.name, at: v}
			}
			s.unread[name].count++
		}
	}
	return out, len(s.errs) == n
}

func (s *selector) labels(h *host, gs []*group, out *Host) {
	if len(s.opt.Labels) == 0 {
		return
	}
	out.Labels = make(map[string]string, len(s.opt.Labels))
	for _, k := range s.opt.Labels {
		v, ok := s.inv.lookup(h, gs, k)
		if !ok {
			s.failHost(h, "%s has no %s; the spec's labels need it on every selected host: %s", h.name, k, s.whereToSet(h, k, out.Groups))
			continue
		}
		if v.Kind == Bool {
			s.failAt(v, "%s: label %s is %s; want a word such as ash (in YAML quote it: Ansible reads yes, no, on and off as booleans)", h.name, k, describe(v))
			continue
		}
		text, ok := s.text(h, k, v)
		if !ok {
			continue
		}
		if !validLabelValue(text) {
			s.failAt(v, "%s: label %s is %q; want letters, digits and ._- (at most 63, starting with a letter or digit)", h.name, k, text)
			continue
		}
		out.Labels[k] = text
	}
}

// whereToSet says where an inventory of this form sets a host's variable.
func (s *selector) whereToSet(h *host, k string, groups []string) string {
	if s.inv.Format == JSON {
		return fmt.Sprintf("set %s in _meta.hostvars[%q] or in the vars of one of its groups (%s); for a program's output, in the inventory it reads", k, h.name, strings.Join(groups, ", "))
	}
	return fmt.Sprintf("set %s=… on the host line, or in the vars of one of its groups (%s), or in group_vars/", k, strings.Join(groups, ", "))
}

// first is the first of names the host sets, by Ansible's precedence.
func (s *selector) first(h *host, gs []*group, names []string) (Value, string, bool) {
	for _, name := range names {
		if v, ok := s.inv.lookup(h, gs, name); ok {
			return v, name, true
		}
	}
	return Value{}, "", false
}

// text is a setting's text: a string or an integer, never a template.
func (s *selector) text(h *host, name string, v Value) (string, bool) {
	switch {
	case v.Kind != String && v.Kind != Int:
		s.failAt(v, "%s: %s is %s; want a plain value", h.name, name, describe(v))
		return "", false
	case strings.Contains(v.Text, "{{") || strings.Contains(v.Text, "{%"):
		s.failAt(v, "%s: %s is a Jinja template; relayctl does not evaluate templates: write the value out", h.name, name)
		return "", false
	}
	return v.Text, true
}

// describe names a value in an error without printing what may be secret
// or long: strings and numbers are quoted, other kinds named.
func describe(v Value) string {
	switch v.Kind {
	case String:
		if len(v.Text) > 64 {
			return fmt.Sprintf("a %d-byte string", len(v.Text))
		}
		return strconv.Quote(v.Text)
	case Int, Float:
		return v.Text
	case Bool:
		return "the boolean " + v.Text
	case Null:
		return "empty (null)"
	}
	return "a " + v.Kind.String()
}

// validName is a host name or address relayctl passes to ssh: letters,
// digits and ._- not starting with - or ., or an IP address without a zone.
func validName(s string) bool {
	if word(s, 253, true) && !strings.Contains(s, "..") {
		return true
	}
	a, err := netip.ParseAddr(s)
	return err == nil && a.Zone() == ""
}
