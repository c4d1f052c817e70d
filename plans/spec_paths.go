package plans

import (
	"fmt"
	"path"
	"regexp"
	"strings"

	"go.yaml.in/yaml/v3"
)

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

func inSysctlDir(p string) bool {
	d := path.Dir(p)
	return d == "/etc/sysctl.d" || d == "/run/sysctl.d"
}
