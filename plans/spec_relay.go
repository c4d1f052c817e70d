package plans

import (
	"fmt"
	"net"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/hashicorp/go-version"
	"go.yaml.in/yaml/v3"

	"github.com/relayctl/relayctl/internal/lazyre"
)

// RelaySpec describes the UDP service relayctl tunes (relayd, or any
// other: docs/any-service.md), its release and how it is run. The spec
// calls it the relay whatever it is.
type RelaySpec struct {
	Port          int
	Control       string // the relay's control-plane address on its host; "" for a service without one
	SORcvbuf      int    // 0: the service never calls setsockopt(SO_RCVBUF)
	SORcvbufForce bool   // SO_RCVBUFFORCE: ignores net.core.rmem_max
	// HandoffSocket is where the relay listens for its successor
	// (RELAYD_HANDOFF_SOCKET, written into the relay config): with it, and a
	// release and a running relay that both hand over, the window passes
	// the socket and its lobbies on instead of restarting.
	HandoffSocket string
	Release       Release
	Service       Service
	Config        ServiceConfig // how the service is told its buffer (spec_config.go)
}

// Release kinds: what a release is and how it lands on a host.
const (
	ReleaseKindBinary  = "binary"  // one program file: <releases>/<version>/<program>
	ReleaseKindTarball = "tarball" // a .tar or .tar.gz, unpacked into <releases>/<version>/
	ReleaseKindFolder  = "folder"  // a local folder, which relayctl packs into a tarball
	ReleaseKindNone    = "none"    // no release: the service as the host already has it
)

// ReleaseKinds are the kinds a spec may name, in the order the docs give.
var ReleaseKinds = []string{ReleaseKindBinary, ReleaseKindTarball, ReleaseKindFolder, ReleaseKindNone}

// Release defaults.
const (
	DefaultProgram      = "relayd" // a binary release's file name on the host
	DefaultKeepReleases = 3        // releases a host keeps, the current one and the rollback target included
	MaxKeepReleases     = 100
)

// Release is the relay build to ship.
type Release struct {
	Kind     string // one of ReleaseKinds; binary when the spec does not say
	Version  string // as written, validated by go-version
	Artifact string // as written, relative to the spec file's folder
	SHA256   string // optional; when given the artifact must match it
	Line     int    // of the artifact field, for messages about the file
	// URL, when given, is where each host fetches the release itself
	// (http or https); SHA256 is then required and Artifact optional.
	URL string
	// Program is what the service runs: for a binary release the file's
	// name in the release folder, for a tarball or folder its path inside
	// the release, for kind none the installed program's absolute path. A
	// process is read back as the relay only if it runs this program.
	Program string
	// Keep is how many releases stay on a host after a window (the
	// current one and the rollback target always among them); older ones
	// and their store entries are removed.
	Keep int
}

// Ships reports whether the release puts files on the host (every kind
// but none).
func (r Release) Ships() bool { return r.Kind != ReleaseKindNone }

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
	// Log (command manager, optional) is the file the service appends the
	// relay's output to: a read-back that finds the relay not running
	// quotes its last lines (systemd: the unit's journal).
	Log string
	// Reload is the command manager's reload command (systemd: systemctl
	// reload). ReloadKeepsSocket says the service re-applies its receive
	// buffer on reload without closing its socket, so a window that
	// changes only what a reload covers reloads instead of restarting.
	Reload            []string
	ReloadKeepsSocket bool
}

func (p *specParser) relay(n *yaml.Node) RelaySpec {
	r := RelaySpec{Port: DefaultPort}
	f, ok := p.fields(n, "relay", "port", "control", "so_rcvbuf", "so_rcvbuf_force", "handoff_socket", "release", "service", "config")
	if !ok {
		return r
	}
	if v := f["port"]; v != nil {
		r.Port, _ = p.integer(v, "relay.port", 1, 65535, "7788")
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
		p.fail(n, "relay.release", "missing; give version and artifact, or kind: none for the service as the host has it")
	} else {
		r.Release = p.release(f["release"])
	}
	if f["service"] == nil {
		p.fail(n, "relay.service", "missing; give manager (systemd or command) and how to reach the relay")
	} else {
		r.Service = p.service(f["service"])
	}
	r.Config = p.serviceConfig(f["config"], r.Service)
	r.Control = p.control(f["control"], r)
	return r
}

// control reads relay.control. Without it, a service told its buffer
// through relayd's env file has relayd's control plane; any other has
// none (no /status to read, so no drain gate and no handoff).
func (p *specParser) control(n *yaml.Node, r RelaySpec) string {
	if n == nil {
		if r.Config.EnvFile && r.Release.Ships() {
			return DefaultControl
		}
		return ""
	}
	c, ok := p.str(n, "relay.control")
	if !ok || c == "none" {
		return ""
	}
	if err := ValidControl(c); err != nil {
		p.fail(n, "relay.control", "%v; or none for a service without a control plane", err)
		return ""
	}
	return c
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
	r := Release{Kind: ReleaseKindBinary, Keep: DefaultKeepReleases}
	f, ok := p.fields(n, "relay.release", "kind", "version", "artifact", "sha256", "url", "program", "keep")
	if !ok {
		return r
	}
	if v := f["kind"]; v != nil {
		if k, ok := p.str(v, "relay.release.kind"); ok && slices.Contains(ReleaseKinds, k) {
			r.Kind = k
		} else if ok {
			p.fail(v, "relay.release.kind", "want one of %s, got %q", strings.Join(ReleaseKinds, ", "), k)
		}
	}
	if r.Kind == ReleaseKindNone {
		for _, k := range []string{"version", "artifact", "sha256", "url", "keep"} {
			if f[k] != nil {
				p.fail(f[k], "relay.release."+k, "a release of kind none ships nothing: the window changes the sysctls and the service's config and restarts the service as the host has it; remove the line")
			}
		}
		r.Keep = 0
		r.Program = p.releaseProgram(n, f["program"], r.Kind)
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
		switch r.Kind {
		case ReleaseKindFolder:
			p.fail(v, "relay.release.url", "a folder release is packed by relayctl from the artifact folder and uploaded; serve a tarball (kind: tarball) to have hosts fetch it")
		case ReleaseKindTarball:
			if f["artifact"] == nil {
				p.fail(v, "relay.release.artifact", "missing; relayctl reads a tarball's members before any host unpacks it as root (only files and folders, no path out of the release), so a tarball fetched from a url needs the same file as artifact")
			}
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
	if v := f["keep"]; v != nil {
		r.Keep, _ = p.integer(v, "relay.release.keep", 2, MaxKeepReleases, "3")
	}
	r.Program = p.releaseProgram(n, f["program"], r.Kind)
	return r
}

var (
	programNameRe = lazyre.New(`^[A-Za-z0-9][A-Za-z0-9._+-]{0,63}$`)
	programPathRe = lazyre.New(`^[A-Za-z0-9._+-]+(/[A-Za-z0-9._+-]+)*$`)
)

// releaseProgram reads relay.release.program for a release of kind: a
// file name (binary, default relayd), a path inside the release (tarball,
// folder: required) or an installed program (none: required).
func (p *specParser) releaseProgram(release, n *yaml.Node, kind string) string {
	const field = "relay.release.program"
	if n == nil {
		switch kind {
		case ReleaseKindBinary:
			return DefaultProgram
		case ReleaseKindNone:
			p.fail(release, field, "missing; the program the service runs, e.g. program: /usr/sbin/unbound: relayctl reads a process back only if it runs it")
		default:
			p.fail(release, field, "missing; the program inside the %s the service runs, e.g. program: bin/myrelay", kind)
		}
		return ""
	}
	s, ok := p.str(n, field)
	if !ok {
		return ""
	}
	var good bool
	var want string
	switch kind {
	case ReleaseKindBinary:
		good, want = programNameRe.MatchString(s), "a file name of letters, digits and ._+- (the release folder holds it), e.g. relayd"
	case ReleaseKindNone:
		good, want = ValidProgram(s) == nil, "the absolute path of the installed program, e.g. /usr/sbin/unbound"
	default:
		good = programPathRe.MatchString(s) && path.Clean(s) == s && !slices.Contains(strings.Split(s, "/"), "..") && !strings.HasPrefix(s, "./")
		want = "a path inside the release of letters, digits and ._+- (no leading /, no ..), e.g. bin/myrelay"
	}
	if !good {
		p.fail(n, field, "want %s, got %q", want, s)
		return ""
	}
	return s
}

var unitRe = lazyre.New(`^[A-Za-z0-9][A-Za-z0-9@._:-]{0,120}$`)

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
	f, ok := p.fields(n, "relay.service", "manager", "name", "start", "stop", "pid_file", "log", "handoff", "reload", "reload_keeps_socket")
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
		for _, k := range []string{"start", "stop", "pid_file", "handoff", "reload"} {
			if f[k] != nil {
				p.fail(f[k], "relay.service."+k, "only for manager: command; systemd units are driven with systemctl")
			}
		}
		if f["log"] != nil {
			p.fail(f["log"], "relay.service.log", "only for manager: command; under systemd relayctl reads the unit's journal")
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
		if v := f["log"]; v != nil {
			s.Log, _ = p.hostPath(v, "relay.service.log")
		}
		if v := f["handoff"]; v != nil {
			s.Handoff = p.argv(v, "relay.service.handoff")
		}
		if v := f["reload"]; v != nil {
			s.Reload = p.argv(v, "relay.service.reload")
		}
	case "":
	default:
		p.fail(f["manager"], "relay.service.manager", "want systemd or command, got %q", s.Manager)
	}
	if v := f["reload_keeps_socket"]; v != nil {
		s.ReloadKeepsSocket, _ = p.boolean(v, "relay.service.reload_keeps_socket")
		if s.ReloadKeepsSocket && s.Manager == "command" && f["reload"] == nil {
			p.fail(v, "relay.service.reload", "missing; reload_keeps_socket under manager: command needs the reload command, e.g. reload: [/bin/kill, -HUP, ...] as a program of root's")
		}
	}
	return s
}

// Programs are the programs relayctl runs as root for this service
// (start, stop, handoff, reload: each command's first word), each once.
// Whoever can change one of them is root on the host, so apply vets every
// one (rollout's check-folders) before it writes or runs anything.
func (s PlanService) Programs() []string {
	var out []string
	for _, argv := range [][]string{s.Start, s.Stop, s.Handoff, s.Reload} {
		if len(argv) > 0 && !slices.Contains(out, argv[0]) {
			out = append(out, argv[0])
		}
	}
	return out
}
