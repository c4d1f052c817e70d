package plans

import (
	"fmt"
	"net"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/hashicorp/go-version"
	"go.yaml.in/yaml/v3"
)

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
