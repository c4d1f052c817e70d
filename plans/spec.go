// Package plans turns a spec and the facts observed on each host into a plan
// and its review artifacts. It is pure: no SSH, no clock, no filesystem
// beyond the bytes it is handed, so identical inputs give identical plans.
package plans

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"path"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/hashicorp/go-version"
	"go.yaml.in/yaml/v3"

	"github.com/relayctl/relayctl/tune"
)

// Spec is what a person writes and reviews: which hosts, which sysctls, which
// relay release, and how to restart it. See the README's spec reference.
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

// RelaySpec describes the relay, its release and its service.
type RelaySpec struct {
	Port          int
	Control       string // the relay's control-plane address on its host
	SORcvbuf      int    // 0: the release never calls setsockopt(SO_RCVBUF)
	SORcvbufForce bool   // SO_RCVBUFFORCE: ignores net.core.rmem_max
	// HandoffSocket is where the relay listens for its successor
	// (RELAYD_HANDOFF_SOCKET, written into the relay config): with it, and a
	// release and a running relay that both hand over, the window passes
	// the socket and its lobbies on instead of restarting.
	HandoffSocket string
	Release       Release
	Service       Service
}

// Release is the relay build to ship.
type Release struct {
	Version  string // as written, validated by go-version
	Artifact string // as written, relative to the spec file's folder
	SHA256   string // optional; when given the artifact must match it
	Line     int    // of the artifact field, for messages about the file
	// URL, when given, is where each host fetches the release itself
	// (http or https); SHA256 is then required and Artifact optional.
	URL string
}

// Service says how the relay is stopped, started and found. Only apply runs
// Start and Stop, after review: plan and verify find the relay by reading
// PIDFile (or asking systemd), so planning a spec runs nothing it names.
type Service struct {
	Manager string   // "systemd" or "command"
	Name    string   // systemd unit
	Start   []string // command manager: argv, never a shell line
	Stop    []string
	Handoff []string // command manager, optional: starts the new release beside the running one, which hands over
	PIDFile string   // command manager: where the relay's main PID is written
}

// Window bounds when apply may restart the relay.
type Window struct {
	NotBefore time.Time
	NotAfter  time.Time
}

// HostPaths are the host conventions of DESIGN.md, each overridable but
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

// DefaultPaths are the host conventions from DESIGN.md.
var DefaultPaths = HostPaths{
	SysctlFile:  "/etc/sysctl.d/90-relayctl.conf",
	Releases:    "/opt/relay/releases",
	Current:     "/opt/relay/current",
	RelayConfig: "/etc/relay/relayd.env",
	StateDir:    StateDir,
}

// Spec defaults, documented in the README.
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
	file  string
	errs  []*SpecError
	capBy *LabelCapacity // capacity.by, read by capacity
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
			p.fail(k, name, "unknown key; valid keys here: %s", strings.Join(allowed, ", "))
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

// hostPath validates a host-side path for one field (see ValidPathFor).
func (p *specParser) hostPath(n *yaml.Node, field string) (string, bool) {
	s, ok := p.str(n, field)
	if !ok {
		return "", false
	}
	if err := ValidPathFor(field, s); err != nil {
		p.fail(n, field, "%v", err)
		return "", false
	}
	return s, true
}

var safePath = regexp.MustCompile(`^/[A-Za-z0-9._/+-]*$`)

// ValidHostPath reports whether s is an acceptable absolute path on a host.
func ValidHostPath(s string) error {
	if len(s) > 256 || !safePath.MatchString(s) || path.Clean(s) != s || s == "/" {
		return fmt.Errorf("want a clean absolute path of letters, digits and ._/+- (no .., no trailing /), got %q", s)
	}
	return nil
}

// writableRoots are the top folders relayctl may write below: what an
// operator would choose for a service's files. Everything else (/tmp, /home,
// /root, /usr, /boot) is refused.
var writableRoots = []string{"/opt/", "/srv/", "/usr/local/", "/var/lib/", "/etc/"}

// ValidPathFor checks a host path that relayctl writes as root, for the spec
// field that sets it. Besides ValidHostPath: the sysctl drop-in is a .conf
// directly in /etc/sysctl.d or /run/sysctl.d; the other paths are below one
// of the writable roots, in a folder of the relay's own (a path segment
// naming "relay"), so a slip or a hostile spec cannot point relayctl at
// another program's files (/etc/passwd, ~/.ssh/authorized_keys, sshd_config).
func ValidPathFor(field, s string) error {
	if err := ValidHostPath(s); err != nil {
		return err
	}
	if field == "host.sysctl_file" {
		if !strings.HasSuffix(s, ".conf") || !inSysctlDir(s) {
			return fmt.Errorf("want a .conf file directly in /etc/sysctl.d or /run/sysctl.d, got %q", s)
		}
		return nil
	}
	roots := writableRoots
	if field == "relay.handoff_socket" {
		roots = append([]string{"/run/"}, roots...)
	}
	root := ""
	for _, r := range roots {
		if strings.HasPrefix(s, r) {
			root = r
		}
	}
	if root == "" {
		return fmt.Errorf("want a path below %s, got %q", strings.Join(roots, ", "), s)
	}
	// The segments below the root that name the relay's own folder; for a
	// file, only its folders count.
	rest := strings.Split(strings.TrimPrefix(s, root), "/")
	if field == "host.relay_config" || field == "relay.handoff_socket" || field == "relay.service.pid_file" {
		rest = rest[:len(rest)-1]
	}
	for _, seg := range rest {
		if strings.Contains(strings.ToLower(seg), "relay") {
			return nil
		}
	}
	what := "a folder"
	if field == "host.relay_config" {
		what = "a file in a folder"
	}
	return fmt.Errorf("want %s of the relay's own, with \"relay\" in a folder name below %s (e.g. %s), got %q", what, strings.TrimSuffix(root, "/"), defaultFor(field), s)
}

func defaultFor(field string) string {
	switch field {
	case "host.releases_dir":
		return DefaultPaths.Releases
	case "host.current_link":
		return DefaultPaths.Current
	case "host.relay_config":
		return DefaultPaths.RelayConfig
	case "relay.service.pid_file":
		return "/opt/relay/run/relayd.pid"
	case "relay.handoff_socket":
		return "/opt/relay/run/handoff.sock"
	}
	return "/opt/relay"
}

var (
	hostRe    = regexp.MustCompile(`^([A-Za-z0-9._-]+@)?([A-Za-z0-9._-]+|\[[0-9A-Fa-f:.]+\])(:[0-9]{1,5})?$`)
	nameRe    = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)
	controlRe = regexp.MustCompile(`^127\.[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}:[0-9]{1,5}$`)
	versionRe = regexp.MustCompile(`^[0-9A-Za-z.+-]{1,64}$`)
	sha256Re  = regexp.MustCompile(`^[0-9a-f]{64}$`)
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
	return out
}

func (p *specParser) relay(n *yaml.Node) RelaySpec {
	r := RelaySpec{Port: DefaultPort, Control: DefaultControl}
	f, ok := p.fields(n, "relay", "port", "control", "so_rcvbuf", "so_rcvbuf_force", "handoff_socket", "release", "service")
	if !ok {
		return r
	}
	if v := f["port"]; v != nil {
		r.Port, _ = p.integer(v, "relay.port", 1, 65535, "7788")
	}
	if v := f["control"]; v != nil {
		if c, ok := p.str(v, "relay.control"); ok {
			if err := ValidControl(c); err != nil {
				p.fail(v, "relay.control", "%v", err)
			} else {
				r.Control = c
			}
		}
	}
	if v := f["so_rcvbuf"]; v != nil {
		// The kernel takes an int; half of INT_MAX keeps the doubled value in range.
		r.SORcvbuf, _ = p.integer(v, "relay.so_rcvbuf", 0, 1<<30, "4194304")
	}
	if v := f["so_rcvbuf_force"]; v != nil {
		r.SORcvbufForce, _ = p.boolean(v, "relay.so_rcvbuf_force")
	}
	if v := f["handoff_socket"]; v != nil {
		r.HandoffSocket, _ = p.hostPath(v, "relay.handoff_socket")
	}
	if f["release"] == nil {
		p.fail(n, "relay.release", "missing; give version and artifact")
	} else {
		r.Release = p.release(f["release"])
	}
	if f["service"] == nil {
		p.fail(n, "relay.service", "missing; give manager (systemd or command) and how to reach the relay")
	} else {
		r.Service = p.service(f["service"])
	}
	return r
}

// ValidControl checks the relay's control address: loopback, in the relay's
// network namespace.
func ValidControl(c string) error {
	host, port, ok := strings.Cut(c, ":")
	n, err := strconv.Atoi(port)
	if !ok || !controlRe.MatchString(c) || err != nil || n < 1 || n > 65535 || net.ParseIP(host) == nil {
		return fmt.Errorf("want a loopback address and port such as 127.0.0.1:7789, got %q", c)
	}
	return nil
}

// ValidVersion checks a release version: go-version parses it, and it is a
// plain folder name.
func ValidVersion(v string) error {
	if _, err := version.NewVersion(v); err != nil || !versionRe.MatchString(v) || strings.Trim(v, ".") == "" || strings.HasPrefix(v, "-") {
		return fmt.Errorf("%q is not a version (want e.g. 1.8.0 or 1.8.0-rc.1)", v)
	}
	return nil
}

func (p *specParser) release(n *yaml.Node) Release {
	var r Release
	f, ok := p.fields(n, "relay.release", "version", "artifact", "sha256", "url")
	if !ok {
		return r
	}
	if f["version"] == nil || (f["artifact"] == nil && f["url"] == nil) {
		p.fail(n, "relay.release", "needs version, and artifact (a local file relayctl uploads) or url (where each host fetches it, with sha256)")
	}
	if v := f["url"]; v != nil {
		r.URL = p.releaseURL(v)
		if f["sha256"] == nil {
			p.fail(v, "relay.release.sha256", "missing; a release fetched from a url needs its sha256, which relayctl checks on each host before anything is staged")
		}
	}
	if v := f["version"]; v != nil {
		if s, ok := p.str(v, "relay.release.version"); ok {
			if err := ValidVersion(s); err != nil {
				p.fail(v, "relay.release.version", "%v", err)
			} else {
				r.Version = s
			}
		}
	}
	if v := f["artifact"]; v != nil {
		if s, ok := p.str(v, "relay.release.artifact"); ok {
			if strings.ContainsAny(s, "\x00\n\r") || len(s) > 4096 {
				p.fail(v, "relay.release.artifact", "want a file path, got %q", s)
			} else {
				r.Artifact = s
			}
		}
		r.Line = v.Line
	}
	if v := f["sha256"]; v != nil {
		if s, ok := p.str(v, "relay.release.sha256"); ok {
			if !sha256Re.MatchString(s) {
				p.fail(v, "relay.release.sha256", "want 64 lower-case hex digits (sha256sum's output), got %q", s)
			} else {
				r.SHA256 = s
			}
		}
	}
	return r
}

var unitRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9@._:-]{0,120}$`)

// ValidUnit checks a systemd unit name. It reaches systemctl as an
// argument, so it may not start with '-' (it would be read as an option);
// only service units are restarted.
func ValidUnit(u string) error {
	if !unitRe.MatchString(u) {
		return fmt.Errorf("want a unit name of letters, digits and @._:- starting with a letter or digit, got %q", u)
	}
	if i := strings.LastIndexByte(u, '.'); i >= 0 && strings.Count(u, ".") > 0 {
		if suffix := u[i+1:]; slices.Contains([]string{"socket", "target", "timer", "mount", "path", "slice", "scope", "device", "swap", "automount"}, suffix) {
			return fmt.Errorf("want a service unit (relay or relay.service), got a .%s unit %q", suffix, u)
		}
	}
	return nil
}

func (p *specParser) service(n *yaml.Node) Service {
	var s Service
	f, ok := p.fields(n, "relay.service", "manager", "name", "start", "stop", "pid_file", "handoff")
	if !ok {
		return s
	}
	if f["manager"] == nil {
		p.fail(n, "relay.service.manager", "missing; want systemd or command")
		return s
	}
	if v, ok := p.str(f["manager"], "relay.service.manager"); ok {
		s.Manager = v
	}
	switch s.Manager {
	case "systemd":
		if f["name"] == nil {
			p.fail(n, "relay.service.name", "missing; the systemd unit to restart, e.g. relayd")
		}
		for _, k := range []string{"start", "stop", "pid_file", "handoff"} {
			if f[k] != nil {
				p.fail(f[k], "relay.service."+k, "only for manager: command; systemd units are driven with systemctl")
			}
		}
		if v := f["name"]; v != nil {
			if u, ok := p.str(v, "relay.service.name"); ok {
				if err := ValidUnit(u); err != nil {
					p.fail(v, "relay.service.name", "%v", err)
				} else {
					s.Name = u
				}
			}
		}
	case "command":
		if f["name"] != nil {
			p.fail(f["name"], "relay.service.name", "only for manager: systemd")
		}
		for _, k := range []string{"start", "stop", "pid_file"} {
			if f[k] == nil {
				p.fail(n, "relay.service."+k, "missing; manager: command needs start and stop commands and a pid_file")
			}
		}
		if v := f["start"]; v != nil {
			s.Start = p.argv(v, "relay.service.start")
		}
		if v := f["stop"]; v != nil {
			s.Stop = p.argv(v, "relay.service.stop")
		}
		if v := f["pid_file"]; v != nil {
			s.PIDFile, _ = p.hostPath(v, "relay.service.pid_file")
		}
		if v := f["handoff"]; v != nil {
			s.Handoff = p.argv(v, "relay.service.handoff")
		}
	case "":
	default:
		p.fail(f["manager"], "relay.service.manager", "want systemd or command, got %q", s.Manager)
	}
	return s
}

func (p *specParser) window(n *yaml.Node) *Window {
	f, ok := p.fields(n, "window", "not_before", "not_after")
	if !ok {
		return nil
	}
	if f["not_before"] == nil || f["not_after"] == nil {
		p.fail(n, "window", "needs both not_before and not_after (RFC 3339, e.g. 2026-12-02T04:00:00Z)")
		return nil
	}
	var w Window
	good := true
	for _, k := range []string{"not_before", "not_after"} {
		v, ok := p.str(f[k], "window."+k)
		if !ok {
			good = false
			continue
		}
		t, err := ParseWindowTime(v)
		if err != nil {
			p.fail(f[k], "window."+k, "%v", err)
			good = false
			continue
		}
		if k == "not_before" {
			w.NotBefore = t
		} else {
			w.NotAfter = t
		}
	}
	if !good {
		return nil
	}
	if !w.NotAfter.After(w.NotBefore) {
		p.fail(f["not_after"], "window.not_after", "the window ends (%s) before it starts (%s)", w.NotAfter.Format(time.RFC3339), w.NotBefore.Format(time.RFC3339))
		return nil
	}
	return &w
}

// ParseWindowTime reads one end of a window: RFC 3339, kept in UTC.
func ParseWindowTime(v string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339, v)
	if err != nil || t.Year() < 2000 || t.Year() > 9999 {
		return time.Time{}, fmt.Errorf("want an RFC 3339 time such as 2026-12-02T04:00:00Z, got %q", v)
	}
	return t.UTC(), nil
}

func (p *specParser) paths(n *yaml.Node, hp *HostPaths) {
	f, ok := p.fields(n, "host", "sysctl_file", "releases_dir", "current_link", "relay_config")
	if !ok {
		return
	}
	set := []struct {
		key string
		dst *string
	}{
		{"sysctl_file", &hp.SysctlFile},
		{"releases_dir", &hp.Releases},
		{"current_link", &hp.Current},
		{"relay_config", &hp.RelayConfig},
	}
	for _, x := range set {
		if v := f[x.key]; v != nil {
			if s, ok := p.hostPath(v, "host."+x.key); ok {
				*x.dst = s
			}
		}
	}
	if path.Dir(hp.Current) == hp.Releases || strings.HasPrefix(hp.Current+"/", hp.Releases+"/") {
		p.fail(f["current_link"], "host.current_link", "%s is inside releases_dir %s; put the link beside it, e.g. %s", hp.Current, hp.Releases, DefaultPaths.Current)
	}
}

// capacity reads the promise a region makes (README "The spec"): players,
// hz and packet_size are required; lobby_size defaults to 8 and stall to 0.
func (p *specParser) capacity(n *yaml.Node) *tune.Promise {
	f, ok := p.fields(n, "capacity", "players", "lobby_size", "hz", "packet_size", "stall", "by")
	if !ok {
		return nil
	}
	by := f["by"] != nil
	c := tune.Promise{LobbySize: 8}
	good := true
	num := func(k string, dst *int, min, max int64, example string) {
		v := f[k]
		if v == nil {
			return
		}
		n, ok := p.integer(v, "capacity."+k, min, max, example)
		good = good && ok
		*dst = n
	}
	for _, k := range []string{"players", "hz", "packet_size"} {
		if f[k] == nil {
			p.fail(n, "capacity."+k, "missing; a promise needs players, hz and packet_size, e.g. {players: 200, hz: 60, packet_size: 200, stall: 50ms}")
			good = false
		}
	}
	var players map[string]int
	if by {
		players, good = p.labelPlayers(f["players"]), good && f["players"] != nil
		good = good && players != nil
	} else {
		num("players", &c.Players, 1, tune.MaxPromisePlayers, "200")
	}
	num("lobby_size", &c.LobbySize, 2, 256, "8")
	num("hz", &c.Hz, 1, tune.MaxPromiseHz, "60")
	num("packet_size", &c.PacketSize, 1, tune.MaxPacketSize, "200")
	if v := f["stall"]; v != nil {
		if s, ok := p.str(v, "capacity.stall"); ok {
			d, err := time.ParseDuration(s)
			if err != nil || d < 0 || d > tune.MaxPromiseStall {
				p.fail(v, "capacity.stall", "want a duration from 0 to %v, got %q; e.g. 50ms", tune.MaxPromiseStall, s)
				good = false
			} else {
				c.Stall = d
			}
		} else {
			good = false
		}
	}
	if by {
		p.capBy = p.capacityBy(f["by"], c, players, good)
		return nil
	}
	if !good {
		return nil
	}
	return &c
}

// drain reads the drain gate (README "The spec"): deadline is required;
// max_players defaults to 0, poll to 5s, on_deadline to abort.
func (p *specParser) drain(n *yaml.Node) *Drain {
	f, ok := p.fields(n, "drain", "max_players", "deadline", "poll", "on_deadline", "no_new_lobbies")
	if !ok {
		return nil
	}
	d := Drain{Poll: 5 * time.Second, OnDeadline: DrainAbort}
	good := true
	dur := func(k string, dst *time.Duration, min, max time.Duration) {
		v := f[k]
		if v == nil {
			return
		}
		s, ok := p.str(v, "drain."+k)
		if !ok {
			good = false
			return
		}
		x, err := time.ParseDuration(s)
		if err != nil || x < min || x > max {
			p.fail(v, "drain."+k, "want a duration from %v to %v, got %q; e.g. %s", min, max, s, map[string]string{"deadline": "10m", "poll": "5s"}[k])
			good = false
			return
		}
		*dst = x
	}
	if f["deadline"] == nil {
		p.fail(n, "drain.deadline", "missing; how long a host may wait for its players to leave, e.g. deadline: 10m")
		good = false
	}
	dur("deadline", &d.Deadline, time.Second, 24*time.Hour)
	dur("poll", &d.Poll, 100*time.Millisecond, time.Hour)
	if v := f["max_players"]; v != nil {
		var ok bool
		d.MaxPlayers, ok = p.integer(v, "drain.max_players", 0, 10_000_000, "0")
		good = good && ok
	}
	if v := f["on_deadline"]; v != nil {
		if s, ok := p.str(v, "drain.on_deadline"); ok && (s == DrainAbort || s == DrainSkip || s == DrainForce) {
			d.OnDeadline = s
		} else {
			p.fail(v, "drain.on_deadline", "want abort, skip or force, got %q", v.Value)
			good = false
		}
	}
	if v := f["no_new_lobbies"]; v != nil {
		var ok bool
		d.NoNewLobbies, ok = p.boolean(v, "drain.no_new_lobbies")
		good = good && ok
	}
	if !good {
		return nil
	}
	return &d
}

func inSysctlDir(p string) bool {
	d := path.Dir(p)
	return d == "/etc/sysctl.d" || d == "/run/sysctl.d"
}
