// Package plans turns a spec and the facts observed on each host into a plan
// and its review artifacts. It is pure: no SSH, no clock, no filesystem
// beyond the bytes it is handed, so identical inputs give identical plans.
package plans

import (
	"bytes"
	"fmt"
	"path"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-version"
	"go.yaml.in/yaml/v3"

	"github.com/relayctl/relayctl/tune"
)

// Spec is what a person writes and reviews: which hosts, which sysctls, which
// relay release, and how to restart it. See the README's spec reference.
type Spec struct {
	File   string // the file it was read from, for messages
	Name   string
	Hosts  []string
	Sysctl []SysctlSetting // in the order written
	Relay  RelaySpec
	Window *Window
	Paths  HostPaths
}

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
	Release       Release
	Service       Service
}

// Release is the relay build to ship.
type Release struct {
	Version  string // as written, validated by go-version
	Artifact string // as written, relative to the spec file's folder
	SHA256   string // optional; when given the artifact must match it
	Line     int    // of the artifact field, for messages about the file
}

// Service says how the relay is stopped, started and found.
type Service struct {
	Manager string   // "systemd" or "command"
	Name    string   // systemd unit
	Start   []string // command manager: argv, never a shell line
	Stop    []string
	PID     []string // prints the relay's main PID, exit 0 when running
}

// Window bounds when apply may restart the relay.
type Window struct {
	NotBefore time.Time
	NotAfter  time.Time
}

// HostPaths are the host conventions of DESIGN.md, each overridable.
type HostPaths struct {
	SysctlFile  string
	Releases    string
	Current     string
	RelayConfig string
	StateDir    string
}

// DefaultPaths are the host conventions from DESIGN.md.
var DefaultPaths = HostPaths{
	SysctlFile:  "/etc/sysctl.d/90-relayctl.conf",
	Releases:    "/opt/relay/releases",
	Current:     "/opt/relay/current",
	RelayConfig: "/etc/relay/relayd.env",
	StateDir:    "/var/lib/relayctl",
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

// ParseSpec reads a spec. file names it in errors. Checks that need the
// filesystem (the artifact exists) are the caller's: see Spec.ArtifactPath.
func ParseSpec(file string, data []byte) (*Spec, error) {
	p := &specParser{file: file}
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		return nil, p.yamlError(err)
	}
	if len(doc.Content) == 0 {
		return nil, &SpecError{File: file, Msg: "the spec is empty; start from plans/examples/ashburn-rcvbuf.yaml"}
	}
	s, err := p.spec(doc.Content[0])
	if err != nil {
		return nil, err
	}
	return s, nil
}

type specParser struct{ file string }

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

func (p *specParser) yamlError(err error) error {
	if m := yamlLine.FindStringSubmatch(err.Error()); m != nil {
		n, _ := strconv.Atoi(m[1])
		return &SpecError{File: p.file, Line: n, Msg: "not valid YAML: " + m[2]}
	}
	return &SpecError{File: p.file, Msg: "not valid YAML: " + strings.TrimPrefix(err.Error(), "yaml: ")}
}

func (p *specParser) errf(n *yaml.Node, field, format string, a ...any) error {
	line := 0
	if n != nil {
		line = n.Line
	}
	return &SpecError{File: p.file, Line: line, Field: field, Msg: fmt.Sprintf(format, a...)}
}

// fields checks that n is a mapping with only the allowed keys and returns
// the value nodes by key, plus the key nodes for line numbers.
func (p *specParser) fields(n *yaml.Node, field string, allowed ...string) (map[string]*yaml.Node, error) {
	if n.Kind != yaml.MappingNode {
		return nil, p.errf(n, field, "want a mapping of keys to values")
	}
	out := map[string]*yaml.Node{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		name := join(field, k.Value)
		ok := false
		for _, a := range allowed {
			if k.Value == a {
				ok = true
			}
		}
		if !ok {
			return nil, p.errf(k, name, "unknown key; valid keys here: %s", strings.Join(allowed, ", "))
		}
		if _, dup := out[k.Value]; dup {
			return nil, p.errf(k, name, "given twice")
		}
		out[k.Value] = v
	}
	return out, nil
}

func join(parent, key string) string {
	if parent == "" {
		return key
	}
	return parent + "." + key
}

func (p *specParser) str(n *yaml.Node, field string) (string, error) {
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		return "", p.errf(n, field, "want a single value")
	}
	return n.Value, nil
}

func (p *specParser) integer(n *yaml.Node, field string, min, max int64, example string) (int, error) {
	if n.Kind != yaml.ScalarNode {
		return 0, p.errf(n, field, "want a whole number, e.g. %s", example)
	}
	v, err := strconv.ParseInt(n.Value, 10, 64)
	if err != nil || v < min || v > max {
		return 0, p.errf(n, field, "want a whole number from %d to %d, got %q; e.g. %s", min, max, n.Value, example)
	}
	return int(v), nil
}

func (p *specParser) boolean(n *yaml.Node, field string) (bool, error) {
	if n.Kind == yaml.ScalarNode {
		switch n.Value {
		case "true":
			return true, nil
		case "false":
			return false, nil
		}
	}
	return false, p.errf(n, field, "want true or false, got %q", n.Value)
}

func (p *specParser) argv(n *yaml.Node, field string) ([]string, error) {
	if n.Kind != yaml.SequenceNode || len(n.Content) == 0 {
		return nil, p.errf(n, field, "want a command as a list of words, e.g. [/opt/relay/bin/relay-service, start]; it runs without a shell")
	}
	var out []string
	for _, w := range n.Content {
		s, err := p.str(w, field)
		if err != nil {
			return nil, err
		}
		if strings.ContainsAny(s, "\x00\n") {
			return nil, p.errf(w, field, "a command word may not contain a newline or NUL")
		}
		out = append(out, s)
	}
	if !path.IsAbs(out[0]) {
		return nil, p.errf(n.Content[0], field, "the program must be an absolute path, got %q", out[0])
	}
	return out, nil
}

// hostPath validates a host-side path: absolute, clean, and made only of
// characters that need no thought in a shell or a config file.
func (p *specParser) hostPath(n *yaml.Node, field string) (string, error) {
	s, err := p.str(n, field)
	if err != nil {
		return "", err
	}
	if err := ValidHostPath(s); err != nil {
		return "", p.errf(n, field, "%v", err)
	}
	return s, nil
}

var safePath = regexp.MustCompile(`^/[A-Za-z0-9._/+-]*$`)

// ValidHostPath reports whether s is an acceptable absolute path on a host.
func ValidHostPath(s string) error {
	if !safePath.MatchString(s) || path.Clean(s) != s || s == "/" {
		return fmt.Errorf("want a clean absolute path of letters, digits and ._/+- (no .., no trailing /), got %q", s)
	}
	return nil
}

var hostRe = regexp.MustCompile(`^([A-Za-z0-9._-]+@)?([A-Za-z0-9._-]+|\[[0-9A-Fa-f:.]+\])(:[0-9]{1,5})?$`)

func (p *specParser) spec(root *yaml.Node) (*Spec, error) {
	f, err := p.fields(root, "", "name", "hosts", "sysctl", "relay", "window", "host")
	if err != nil {
		return nil, err
	}
	s := &Spec{File: p.file, Paths: DefaultPaths}
	// Problems with what is written come first: they are more specific
	// than a missing section, which is checked last.
	if n := f["name"]; n != nil {
		if s.Name, err = p.str(n, "name"); err != nil {
			return nil, err
		}
		if !regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`).MatchString(s.Name) {
			return nil, p.errf(n, "name", "want letters, digits and ._- (at most 64), got %q", s.Name)
		}
	}
	if n := f["hosts"]; n != nil {
		if s.Hosts, err = p.hosts(n); err != nil {
			return nil, err
		}
	}
	if n := f["sysctl"]; n != nil {
		if s.Sysctl, err = p.sysctl(n); err != nil {
			return nil, err
		}
	}
	if n := f["relay"]; n != nil {
		if s.Relay, err = p.relay(n); err != nil {
			return nil, err
		}
	}
	if n := f["window"]; n != nil {
		if s.Window, err = p.window(n); err != nil {
			return nil, err
		}
	}
	if n := f["host"]; n != nil {
		if err := p.paths(n, &s.Paths); err != nil {
			return nil, err
		}
	}
	for _, req := range []string{"name", "hosts", "relay"} {
		if f[req] == nil {
			return nil, p.errf(root, req, "missing; every spec needs name, hosts and relay")
		}
	}
	return s, nil
}

func (p *specParser) hosts(hosts *yaml.Node) ([]string, error) {
	var out []string
	if hosts.Kind != yaml.SequenceNode || len(hosts.Content) == 0 {
		return nil, p.errf(hosts, "hosts", "want a list of hosts, each an ssh_config alias or [user@]host[:port]")
	}
	seen := map[string]bool{}
	for i, h := range hosts.Content {
		field := fmt.Sprintf("hosts[%d]", i)
		v, err := p.str(h, field)
		if err != nil {
			return nil, err
		}
		if !hostRe.MatchString(v) {
			return nil, p.errf(h, field, "want an ssh_config alias or [user@]host[:port], got %q", v)
		}
		if seen[v] {
			return nil, p.errf(h, field, "%s is listed twice", v)
		}
		seen[v] = true
		out = append(out, v)
	}
	return out, nil
}

func (p *specParser) sysctl(n *yaml.Node) ([]SysctlSetting, error) {
	if n.Kind != yaml.MappingNode {
		return nil, p.errf(n, "sysctl", "want a mapping of sysctl keys to values, e.g. net.core.rmem_max: 8388608")
	}
	var out []SysctlSetting
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		field := "sysctl." + k.Value
		if err := tune.ValidKey(k.Value); err != nil {
			return nil, p.errf(k, field, "%v", err)
		}
		if seen[k.Value] {
			return nil, p.errf(k, field, "given twice")
		}
		seen[k.Value] = true
		val, err := p.str(v, field)
		if err != nil {
			return nil, err
		}
		if err := tune.ValidateValue(k.Value, val); err != nil {
			return nil, p.errf(v, field, "%v", err)
		}
		out = append(out, SysctlSetting{Key: k.Value, Value: tune.Normalize(val), Line: k.Line})
	}
	return out, nil
}

func (p *specParser) relay(n *yaml.Node) (RelaySpec, error) {
	r := RelaySpec{Port: DefaultPort, Control: DefaultControl}
	f, err := p.fields(n, "relay", "port", "control", "so_rcvbuf", "so_rcvbuf_force", "release", "service")
	if err != nil {
		return r, err
	}
	if v := f["port"]; v != nil {
		if r.Port, err = p.integer(v, "relay.port", 1, 65535, "7788"); err != nil {
			return r, err
		}
	}
	if v := f["control"]; v != nil {
		if r.Control, err = p.str(v, "relay.control"); err != nil {
			return r, err
		}
		if !regexp.MustCompile(`^127\.[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}:[0-9]{1,5}$`).MatchString(r.Control) {
			return r, p.errf(v, "relay.control", "want a loopback address and port such as 127.0.0.1:7789, got %q", r.Control)
		}
	}
	if v := f["so_rcvbuf"]; v != nil {
		// The kernel takes an int; half of INT_MAX keeps the doubled value in range.
		if r.SORcvbuf, err = p.integer(v, "relay.so_rcvbuf", 0, 1<<30, "4194304"); err != nil {
			return r, err
		}
	}
	if v := f["so_rcvbuf_force"]; v != nil {
		if r.SORcvbufForce, err = p.boolean(v, "relay.so_rcvbuf_force"); err != nil {
			return r, err
		}
	}
	if f["release"] == nil {
		return r, p.errf(n, "relay.release", "missing; give version and artifact")
	}
	if r.Release, err = p.release(f["release"]); err != nil {
		return r, err
	}
	if f["service"] == nil {
		return r, p.errf(n, "relay.service", "missing; give manager (systemd or command) and how to reach the relay")
	}
	if r.Service, err = p.service(f["service"]); err != nil {
		return r, err
	}
	return r, nil
}

var sha256Re = regexp.MustCompile(`^[0-9a-f]{64}$`)

func (p *specParser) release(n *yaml.Node) (Release, error) {
	var r Release
	f, err := p.fields(n, "relay.release", "version", "artifact", "sha256")
	if err != nil {
		return r, err
	}
	if f["version"] == nil || f["artifact"] == nil {
		return r, p.errf(n, "relay.release", "needs both version and artifact")
	}
	if r.Version, err = p.str(f["version"], "relay.release.version"); err != nil {
		return r, err
	}
	if _, err := version.NewVersion(r.Version); err != nil || !regexp.MustCompile(`^[0-9A-Za-z.+-]+$`).MatchString(r.Version) {
		return r, p.errf(f["version"], "relay.release.version", "%q is not a version (want e.g. 1.8.0 or 1.8.0-rc.1)", r.Version)
	}
	if r.Artifact, err = p.str(f["artifact"], "relay.release.artifact"); err != nil {
		return r, err
	}
	r.Line = f["artifact"].Line
	if v := f["sha256"]; v != nil {
		if r.SHA256, err = p.str(v, "relay.release.sha256"); err != nil {
			return r, err
		}
		if !sha256Re.MatchString(r.SHA256) {
			return r, p.errf(v, "relay.release.sha256", "want 64 lower-case hex digits (sha256sum's output), got %q", r.SHA256)
		}
	}
	return r, nil
}

var unitRe = regexp.MustCompile(`^[A-Za-z0-9@._:-]+$`)

func (p *specParser) service(n *yaml.Node) (Service, error) {
	var s Service
	f, err := p.fields(n, "relay.service", "manager", "name", "start", "stop", "pid")
	if err != nil {
		return s, err
	}
	if f["manager"] == nil {
		return s, p.errf(n, "relay.service.manager", "missing; want systemd or command")
	}
	if s.Manager, err = p.str(f["manager"], "relay.service.manager"); err != nil {
		return s, err
	}
	switch s.Manager {
	case "systemd":
		if f["name"] == nil {
			return s, p.errf(n, "relay.service.name", "missing; the systemd unit to restart, e.g. relay")
		}
		for _, k := range []string{"start", "stop", "pid"} {
			if f[k] != nil {
				return s, p.errf(f[k], "relay.service."+k, "only for manager: command; systemd units are driven with systemctl")
			}
		}
		if s.Name, err = p.str(f["name"], "relay.service.name"); err != nil {
			return s, err
		}
		if !unitRe.MatchString(s.Name) {
			return s, p.errf(f["name"], "relay.service.name", "want a unit name of letters, digits and @._:-, got %q", s.Name)
		}
	case "command":
		if f["name"] != nil {
			return s, p.errf(f["name"], "relay.service.name", "only for manager: systemd")
		}
		for _, k := range []string{"start", "stop", "pid"} {
			if f[k] == nil {
				return s, p.errf(n, "relay.service."+k, "missing; manager: command needs start, stop and pid commands")
			}
		}
		if s.Start, err = p.argv(f["start"], "relay.service.start"); err != nil {
			return s, err
		}
		if s.Stop, err = p.argv(f["stop"], "relay.service.stop"); err != nil {
			return s, err
		}
		if s.PID, err = p.argv(f["pid"], "relay.service.pid"); err != nil {
			return s, err
		}
	default:
		return s, p.errf(f["manager"], "relay.service.manager", "want systemd or command, got %q", s.Manager)
	}
	return s, nil
}

func (p *specParser) window(n *yaml.Node) (*Window, error) {
	f, err := p.fields(n, "window", "not_before", "not_after")
	if err != nil {
		return nil, err
	}
	if f["not_before"] == nil || f["not_after"] == nil {
		return nil, p.errf(n, "window", "needs both not_before and not_after (RFC 3339, e.g. 2026-12-02T04:00:00Z)")
	}
	var w Window
	for _, k := range []string{"not_before", "not_after"} {
		v, err := p.str(f[k], "window."+k)
		if err != nil {
			return nil, err
		}
		t, err := time.Parse(time.RFC3339, v)
		if err != nil {
			return nil, p.errf(f[k], "window."+k, "want an RFC 3339 time such as 2026-12-02T04:00:00Z, got %q", v)
		}
		if k == "not_before" {
			w.NotBefore = t.UTC()
		} else {
			w.NotAfter = t.UTC()
		}
	}
	if !w.NotAfter.After(w.NotBefore) {
		return nil, p.errf(f["not_after"], "window.not_after", "the window ends (%s) before it starts (%s)", w.NotAfter.Format(time.RFC3339), w.NotBefore.Format(time.RFC3339))
	}
	return &w, nil
}

func (p *specParser) paths(n *yaml.Node, hp *HostPaths) error {
	f, err := p.fields(n, "host", "sysctl_file", "releases_dir", "current_link", "relay_config", "state_dir")
	if err != nil {
		return err
	}
	set := map[string]*string{
		"sysctl_file":  &hp.SysctlFile,
		"releases_dir": &hp.Releases,
		"current_link": &hp.Current,
		"relay_config": &hp.RelayConfig,
		"state_dir":    &hp.StateDir,
	}
	for k, dst := range set {
		if v := f[k]; v != nil {
			if *dst, err = p.hostPath(v, "host."+k); err != nil {
				return err
			}
		}
	}
	if !strings.HasSuffix(hp.SysctlFile, ".conf") || !inSysctlDir(hp.SysctlFile) {
		return p.errf(f["sysctl_file"], "host.sysctl_file", "want a .conf file directly in /etc/sysctl.d or /run/sysctl.d, got %q", hp.SysctlFile)
	}
	return nil
}

func inSysctlDir(p string) bool {
	d := path.Dir(p)
	return d == "/etc/sysctl.d" || d == "/run/sysctl.d"
}
