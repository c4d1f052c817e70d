// Package plans turns a spec and the facts observed on each host into a plan
// and its review artifacts. It is pure: no SSH, no clock, no filesystem
// beyond the bytes it is handed, so identical inputs give identical plans.
package plans

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/relayctl/relayctl/internal/nearest"

	"go.yaml.in/yaml/v3"

	"github.com/relayctl/relayctl/internal/lazyre"
	"github.com/relayctl/relayctl/tune"
)

// Spec is what a person writes and reviews: which hosts, which sysctls, which
// relay release, and how to restart it. See docs/spec.md.
type Spec struct {
	File   string // the file it was read from, for messages
	Source []byte // the file's bytes: a plan records them, and apply parses them again
	Name   string
	// Hosts names the hosts, in order: the list as written, or the hosts
	// an inventory selects (Inventory, filled in by SelectHosts).
	Hosts []string
	// Inventory is where the hosts come from when the spec names an
	// inventory instead of listing them (spec_hosts.go); nil for a list.
	Inventory *InventoryRef
	// Targets is where a host is reached when that is not its name (an
	// inventory host's [user@]address[:port]); Labels are each host's
	// labels; InventoryRecord is what a plan records of the inventory.
	// All three are SelectHosts's, for an inventory spec.
	Targets         map[string]string
	Labels          map[string]map[string]string
	InventoryRecord *InventoryRecord
	Sysctl          []SysctlSetting // in the order written
	Relay           RelaySpec
	Window          *Window
	Paths           HostPaths
	// Rollout is the optional rollout section (rollout.go): waves and
	// failure budgets.
	Rollout *Rollout
	// Capacity is what the region promises to carry, when the spec says:
	// the plan checks each host's planned rb against it. CapacityBy is a
	// promise per value of a label instead (capacity.by, capacity_labels.go).
	Capacity   *tune.Promise
	CapacityBy *LabelCapacity
	// Drain, when given, holds each host's window until its players are
	// gone (or few enough), up to a deadline.
	Drain *Drain
	// Unsafe is what the spec allows in so many words (spec_unsafe.go).
	Unsafe Unsafe
}

// Drain is the gate before a host's window: wait until the relay reports
// at most MaxPlayers players, polling every Poll, for at most Deadline;
// then OnDeadline says what happens. With NoNewLobbies the relay is asked
// (POST /drain on its control plane) to refuse new lobbies meanwhile.
type Drain struct {
	MaxPlayers   int           `json:"max_players"`
	Deadline     time.Duration `json:"deadline_ns"`
	Poll         time.Duration `json:"poll_ns"`
	OnDeadline   string        `json:"on_deadline"` // abort, skip or force
	NoNewLobbies bool          `json:"no_new_lobbies"`
}

// What the drain gate does at its deadline.
const (
	DrainAbort = "abort" // the host is refused, nothing changed
	DrainSkip  = "skip"  // the host is left for a later run
	DrainForce = "force" // restart anyway; the receipt says how many players were cut
)

// SysctlSetting is one key the spec wants, with where it was written.
type SysctlSetting struct {
	Key   string
	Value string
	Line  int
}

// Window bounds when apply may restart the relay.
type Window struct {
	NotBefore time.Time
	NotAfter  time.Time
}

// HostPaths are the host conventions (docs/spec.md), each overridable but
// the state folder.
type HostPaths struct {
	SysctlFile  string
	Releases    string
	Current     string
	RelayConfig string
	StateDir    string // always StateDir: see there
}

// StateDir holds relayctl's host lock, the journal of an apply in
// progress, staged files and receipts. It is the same on every host and in
// every plan, so two plans for one host always see each other's lock and
// journal.
const StateDir = "/var/lib/relayctl"

// DefaultPaths are the host conventions (docs/spec.md).
var DefaultPaths = HostPaths{
	SysctlFile:  "/etc/sysctl.d/90-relayctl.conf",
	Releases:    "/opt/relay/releases",
	Current:     "/opt/relay/current",
	RelayConfig: "/etc/relay/relayd.env",
	StateDir:    StateDir,
}

// Spec defaults, documented in docs/spec.md.
const (
	DefaultPort    = 7788
	DefaultControl = "127.0.0.1:7789"
)

// SpecError points at the file, line and field of a problem in a spec.
type SpecError struct {
	File  string
	Line  int
	Field string
	Msg   string
}

func (e *SpecError) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	if e.Field != "" {
		b.WriteString(": " + e.Field)
	}
	b.WriteString(": " + e.Msg)
	return b.String()
}

// SpecErrors is every problem found in one spec, sorted by line, so a
// spec with seven mistakes takes one run to fix, not seven.
type SpecErrors []*SpecError

func (e SpecErrors) Error() string {
	lines := make([]string, len(e))
	for i, x := range e {
		lines[i] = x.Error()
	}
	return strings.Join(lines, "\n")
}

// Unwrap lets errors.As find each *SpecError.
func (e SpecErrors) Unwrap() []error {
	out := make([]error, len(e))
	for i, x := range e {
		out[i] = x
	}
	return out
}

// ParseSpec reads a spec and reports every problem it finds at once, as
// SpecErrors. file names it in errors. Checks that need the filesystem (the
// artifact exists) are the caller's (relayctl reads it). The same parser
// checks the spec recorded in a plan, so a plan can hold nothing a spec
// could not.
func ParseSpec(file string, data []byte) (*Spec, error) {
	s, errs := ParseSpecAll(file, data)
	if len(errs) > 0 {
		return nil, errs
	}
	return s, nil
}

// ParseSpecAll is ParseSpec for checking a spec (relayctl validate, and
// plan before it connects): besides every problem, it returns what it could
// read of a spec that has problems (nil when it is not even YAML), so the
// caller can check the rest, such as the artifact, in the same run. A spec
// with problems is never planned.
func ParseSpecAll(file string, data []byte) (*Spec, SpecErrors) {
	p := &specParser{file: file}
	if len(data) > MaxSpecSize {
		return nil, SpecErrors{{File: file, Msg: fmt.Sprintf("the spec is %d bytes, more than the %d a spec may have", len(data), MaxSpecSize)}}
	}
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, SpecErrors{{File: file, Msg: "the spec is empty; start from plans/examples/ashburn-rcvbuf.yaml"}}
		}
		return nil, SpecErrors{yamlSyntaxError(file, data, err)}
	}
	if len(doc.Content) == 0 {
		return nil, SpecErrors{{File: file, Msg: "the spec is empty; start from plans/examples/ashburn-rcvbuf.yaml"}}
	}
	var next yaml.Node
	if err := dec.Decode(&next); !errors.Is(err, io.EOF) {
		line := 0
		if err == nil {
			line = next.Line
		}
		p.errs = append(p.errs, &SpecError{File: file, Line: line, Msg: "a second YAML document (after ---): a spec is one document; put each spec in its own file"})
	}
	s := p.spec(doc.Content[0])
	s.Source = data
	if len(p.errs) > 0 {
		SortSpecErrors(p.errs)
		return s, SpecErrors(p.errs)
	}
	return s, nil
}

// SortSpecErrors sorts problems by line, keeping the order of those on one
// line.
func SortSpecErrors(errs []*SpecError) {
	sort.SliceStable(errs, func(i, j int) bool { return errs[i].Line < errs[j].Line })
}

// MaxSpecSize bounds a spec file: a spec is a page of YAML.
const MaxSpecSize = 1 << 20

type specParser struct {
	file    string
	errs    []*SpecError
	written []specPath     // host paths the spec wrote, for checkServicePaths
	capBy   *LabelCapacity // capacity.by, read by capacity
}

// fail records a problem and parsing goes on, so every problem is reported.
func (p *specParser) fail(n *yaml.Node, field, format string, a ...any) {
	line := 0
	if n != nil {
		line = n.Line
	}
	p.errs = append(p.errs, &SpecError{File: p.file, Line: line, Field: field, Msg: fmt.Sprintf(format, a...)})
}

// failLine is fail at a line rather than a node.
func (p *specParser) failLine(line int, field, format string, a ...any) {
	p.errs = append(p.errs, &SpecError{File: p.file, Line: line, Field: field, Msg: fmt.Sprintf(format, a...)})
}

// fields checks that n is a mapping with only the allowed keys and returns
// the value nodes by key. Unknown and repeated keys are recorded and
// skipped; ok is false when n is not a mapping at all.
func (p *specParser) fields(n *yaml.Node, field string, allowed ...string) (map[string]*yaml.Node, bool) {
	out := map[string]*yaml.Node{}
	if n.Kind != yaml.MappingNode {
		p.fail(n, field, "want a mapping of keys to values")
		return out, false
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		name := join(field, k.Value)
		if !slices.Contains(allowed, k.Value) {
			if hint, ok := removedKeys[name]; ok {
				p.fail(k, name, "%s", hint)
				continue
			}
			msg := "unknown key; valid keys here: " + strings.Join(allowed, ", ")
			if near := nearest.Word(k.Value, allowed); near != "" {
				msg += "; did you mean " + near + "?"
			}
			p.fail(k, name, "%s", msg)
			continue
		}
		if _, dup := out[k.Value]; dup {
			p.fail(k, name, "given twice")
			continue
		}
		out[k.Value] = v
	}
	return out, true
}

// removedKeys are keys earlier releases accepted, with what to write now.
var removedKeys = map[string]string{
	"relay.service.pid": "no longer read: relayctl does not run a command to find the relay, because plan and verify would run it as root on every host before anyone reviewed it; " +
		"give pid_file, the file where the service writes the relay's PID, e.g. pid_file: /opt/relay/run/relayd.pid",
	"host.state_dir": "no longer configurable: the host lock, the journal of an apply in progress, staged files and receipts are always in " + StateDir +
		", so two plans for one host always see each other; remove the line",
}

func join(parent, key string) string {
	if parent == "" {
		return key
	}
	return parent + "." + key
}

func (p *specParser) str(n *yaml.Node, field string) (string, bool) {
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		p.fail(n, field, "want a single value")
		return "", false
	}
	return n.Value, true
}

func (p *specParser) integer(n *yaml.Node, field string, min, max int64, example string) (int, bool) {
	if n.Kind != yaml.ScalarNode {
		p.fail(n, field, "want a whole number, e.g. %s", example)
		return 0, false
	}
	v, err := strconv.ParseInt(n.Value, 10, 64)
	if err != nil || v < min || v > max {
		p.fail(n, field, "want a whole number from %d to %d, got %q; e.g. %s", min, max, n.Value, example)
		return 0, false
	}
	return int(v), true
}

func (p *specParser) boolean(n *yaml.Node, field string) (bool, bool) {
	if n.Kind == yaml.ScalarNode {
		switch n.Value {
		case "true":
			return true, true
		case "false":
			return false, true
		}
	}
	p.fail(n, field, "want true or false, got %q", n.Value)
	return false, false
}

func (p *specParser) argv(n *yaml.Node, field string) []string {
	if n.Kind != yaml.SequenceNode || len(n.Content) == 0 {
		p.fail(n, field, "want a command as a list of words, e.g. [/opt/relay/bin/relay-service, start]; it runs without a shell")
		return nil
	}
	if len(n.Content) > MaxArgv {
		p.fail(n, field, "a command of %d words; at most %d", len(n.Content), MaxArgv)
		return nil
	}
	var out []string
	for _, w := range n.Content {
		s, ok := p.str(w, field)
		if !ok {
			return nil
		}
		if err := ValidArgWord(s); err != nil {
			p.fail(w, field, "%v", err)
			return nil
		}
		if s == "" {
			// Without a shell on the host an empty word would vanish, and
			// another command than the reviewed one would run.
			p.fail(w, field, "a command word may not be empty; leave it out")
			return nil
		}
		out = append(out, s)
	}
	if err := ValidProgram(out[0]); err != nil {
		p.fail(n.Content[0], field, "%v", err)
		return nil
	}
	return out
}

// MaxArgv bounds a service command's words.
const MaxArgv = 32

// ValidArgWord checks one word of a service command: it travels to the host
// as one line of data, so it may not hold a newline, tab or NUL.
func ValidArgWord(s string) error {
	if len(s) > 1024 {
		return fmt.Errorf("a command word of %d bytes; at most 1024", len(s))
	}
	if strings.ContainsAny(s, "\x00\n\r\t") || !utf8.ValidString(s) {
		return fmt.Errorf("a command word may not contain a newline, tab or NUL, got %q", s)
	}
	return nil
}

// ValidProgram checks the program of a service command: a clean absolute
// path of plain characters.
func ValidProgram(s string) error {
	if !safePath.MatchString(s) || path.Clean(s) != s || s == "/" {
		return fmt.Errorf("the program must be a clean absolute path of letters, digits and ._/+-, got %q", s)
	}
	return nil
}

var (
	hostRe    = lazyre.New(`^([A-Za-z0-9._-]+@)?([A-Za-z0-9._-]+|\[[0-9A-Fa-f:.]+\])(:[0-9]{1,5})?$`)
	nameRe    = lazyre.New(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)
	controlRe = lazyre.New(`^127\.[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}:[0-9]{1,5}$`)
	versionRe = lazyre.New(`^[0-9A-Za-z.+-]{1,64}$`)
	sha256Re  = lazyre.New(`^[0-9a-f]{64}$`)
)

// ValidHost checks a host as a spec names it.
func ValidHost(h string) error {
	if len(h) > 255 || !hostRe.MatchString(h) || strings.HasPrefix(h, "-") {
		return fmt.Errorf("want an ssh_config alias or [user@]host[:port], got %q", h)
	}
	return nil
}

// MaxHosts bounds the hosts of one spec.
const MaxHosts = 10000

func (p *specParser) spec(root *yaml.Node) *Spec {
	s := &Spec{File: p.file, Paths: DefaultPaths}
	f, ok := p.fields(root, "", "name", "hosts", "sysctl", "relay", "window", "host", "capacity", "drain",
		"rollout", "unsafe")
	if !ok {
		return s
	}
	if n := f["name"]; n != nil {
		if v, ok := p.str(n, "name"); ok {
			if nameRe.MatchString(v) {
				s.Name = v
			} else {
				p.fail(n, "name", "want letters, digits and ._- (at most 64, starting with a letter or digit), got %q", v)
			}
		}
	}
	if n := f["hosts"]; n != nil && n.Kind == yaml.MappingNode {
		s.Inventory = p.inventoryHosts(n)
	} else if n != nil {
		s.Hosts = p.hosts(n)
	}
	if n := f["sysctl"]; n != nil {
		s.Sysctl = p.sysctl(n)
	}
	if n := f["relay"]; n != nil {
		s.Relay = p.relay(n)
	}
	if n := f["window"]; n != nil {
		s.Window = p.window(n)
	}
	if n := f["host"]; n != nil {
		p.paths(n, &s.Paths)
	}
	if n := f["rollout"]; n != nil {
		s.Rollout = p.rollout(n)
	}
	if n := f["capacity"]; n != nil {
		s.Capacity = p.capacity(n)
		s.CapacityBy = p.capBy
	}
	if n := f["drain"]; n != nil {
		s.Drain = p.drain(n)
	}
	if n := f["unsafe"]; n != nil {
		s.Unsafe = p.unsafe(n)
	}
	p.checkRootPrograms(s)
	p.checkServicePaths(s.Relay)
	p.checkByLabel(s)
	p.checkCapacityBy(s)
	if s.Relay.Service.Handoff != nil && s.Relay.HandoffSocket == "" {
		p.fail(f["relay"], "relay.handoff_socket", "missing; relay.service.handoff needs the socket the relay hands over on, e.g. handoff_socket: /opt/relay/run/handoff.sock")
	}
	for _, req := range []string{"name", "hosts", "relay"} {
		if f[req] == nil {
			p.fail(root, req, "missing; every spec needs name, hosts and relay")
		}
	}
	return s
}

func (p *specParser) hosts(hosts *yaml.Node) []string {
	var out []string
	if hosts.Kind != yaml.SequenceNode || len(hosts.Content) == 0 {
		p.fail(hosts, "hosts", "want a list of hosts, each an ssh_config alias or [user@]host[:port], or an inventory: {inventory: FILE, pattern: PATTERN}")
		return nil
	}
	if len(hosts.Content) > MaxHosts {
		p.fail(hosts, "hosts", "%d hosts; a spec may have at most %d", len(hosts.Content), MaxHosts)
		return nil
	}
	seen := map[string]bool{}
	for i, h := range hosts.Content {
		field := fmt.Sprintf("hosts[%d]", i)
		v, ok := p.str(h, field)
		if !ok {
			continue
		}
		if err := ValidHost(v); err != nil {
			p.fail(h, field, "%v", err)
			continue
		}
		if seen[v] {
			p.fail(h, field, "%s is listed twice", v)
			continue
		}
		seen[v] = true
		out = append(out, v)
	}
	return out
}

func (p *specParser) sysctl(n *yaml.Node) []SysctlSetting {
	if n.Kind != yaml.MappingNode {
		p.fail(n, "sysctl", "want a mapping of sysctl keys to values, e.g. net.core.rmem_max: 8388608")
		return nil
	}
	var out []SysctlSetting
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		field := "sysctl." + k.Value
		if err := tune.ValidKey(k.Value); err != nil {
			p.fail(k, field, "%v", err)
			continue
		}
		if seen[k.Value] {
			p.fail(k, field, "given twice")
			continue
		}
		seen[k.Value] = true
		val, ok := p.str(v, field)
		if !ok {
			continue
		}
		if err := tune.ValidateValue(k.Value, val); err != nil {
			p.fail(v, field, "%v", err)
			continue
		}
		out = append(out, SysctlSetting{Key: k.Value, Value: tune.Normalize(val), Line: k.Line})
	}
	values := map[string]string{}
	for _, s := range out {
		values[s.Key] = s.Value
	}
	if err := tune.CheckPairs(values); err != nil {
		p.fail(n, "sysctl", "%v", err)
	}
	return out
}
