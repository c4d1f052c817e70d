package plans

import (
	"fmt"
	"path"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/relayctl/relayctl/internal/lazyre"
)

// hostPath validates a host-side path for one field (see ValidPathFor),
// and notes it for the rule that every path names the service
// (checkServicePaths), which needs the whole spec.
func (p *specParser) hostPath(n *yaml.Node, field string) (string, bool) {
	s, ok := p.str(n, field)
	if !ok {
		return "", false
	}
	if err := ValidPathFor(field, s); err != nil {
		p.fail(n, field, "%v", err)
		return "", false
	}
	if field != "host.sysctl_file" { // relayctl's own drop-in, named as such
		p.written = append(p.written, specPath{field: field, path: s, node: n})
	}
	return s, true
}

// specPath is a host path as the spec wrote it.
type specPath struct {
	field, path string
	node        *yaml.Node
}

var safePath = lazyre.New(`^/[A-Za-z0-9._/+-]*$`)

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

// systemPaths are what the system and root's own programs rely on, below
// the writable roots: files and folders whose content decides who may log
// in or become root, what root runs (cron, init scripts, hooks, shell
// start-up files, other units, programs on root's PATH, libraries the
// loader finds) or how the host boots. relayctl never writes in them,
// whatever the spec names; a folder is given with its trailing /, and a
// name without one covers every path that starts with it (/etc/cron covers
// /etc/crontab and /etc/cron.d/).
var systemPaths = []string{
	"/etc/passwd", "/etc/shadow", "/etc/group", "/etc/gshadow", "/etc/subuid", "/etc/subgid",
	"/etc/sudoers", "/etc/sudo.conf", "/etc/doas.conf", "/etc/login.defs", "/etc/securetty", "/etc/shells",
	"/etc/pam.conf", "/etc/pam.d/", "/etc/security/", "/etc/ssh/", "/etc/ssl/", "/etc/ca-certificates",
	"/etc/cron", "/etc/anacrontab", "/etc/at.", "/etc/systemd/", "/etc/init.d/", "/etc/init/", "/etc/inittab",
	"/etc/rc", "/etc/profile", "/etc/environment", "/etc/bash.bashrc", "/etc/bash_completion", "/etc/zsh",
	"/etc/csh.", "/etc/skel/", "/etc/ld.so.", "/etc/modprobe.d/", "/etc/modules", "/etc/sysctl.conf",
	"/etc/sysctl.d/", "/etc/tmpfiles.d/", "/etc/binfmt.d/", "/etc/udev/", "/etc/apt/", "/etc/dpkg/",
	"/etc/alternatives/", "/etc/logrotate", "/etc/update-motd.d/", "/etc/network/", "/etc/NetworkManager/",
	"/etc/netplan/", "/etc/dhcp/", "/etc/ppp/", "/etc/hosts", "/etc/resolv.conf", "/etc/nsswitch.conf",
	"/etc/fstab", "/etc/crypttab", "/etc/kernel/", "/etc/initramfs-tools/", "/etc/default/grub",
	"/etc/grub.d/", "/etc/polkit-1/", "/etc/dbus-1/", "/etc/xinetd", "/etc/selinux/", "/etc/apparmor",
	"/etc/audit/", "/etc/aliases", "/etc/machine-id", "/etc/X11/", "/etc/relayctl/",
	"/usr/local/bin/", "/usr/local/sbin/", "/usr/local/lib/lib", "/usr/local/lib64/",
	"/var/lib/dpkg/", "/var/lib/apt/", "/var/lib/systemd/", "/var/lib/sudo/", "/var/lib/polkit-1/",
	StateDir,
}

// ValidPathFor checks a host path that relayctl writes as root (or, for a
// pid file, trusts; for the service's log, reads and quotes), for the spec
// field that sets it. Besides
// ValidHostPath: the sysctl drop-in is a .conf directly in /etc/sysctl.d or
// /run/sysctl.d; the other paths are below one of the writable roots and
// outside systemPaths, so a slip or a hostile spec cannot point relayctl
// at the system's files (/etc/passwd, sudoers, cron, sshd_config, another
// unit, a program on root's PATH). checkServicePaths adds that each names
// the service.
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
	switch field {
	case "relay.handoff_socket", "relay.service.pid_file":
		roots = append([]string{"/run/"}, roots...)
	case "relay.service.log": // read, and quoted in receipts: the service's own log
		roots = append([]string{"/var/log/"}, roots...)
	}
	if !slices.ContainsFunc(roots, func(r string) bool { return strings.HasPrefix(s, r) }) {
		return fmt.Errorf("want a path below %s, got %q", strings.Join(roots, ", "), s)
	}
	for _, sys := range systemPaths {
		if s == strings.TrimSuffix(sys, "/") || strings.HasPrefix(s, sys) {
			return fmt.Errorf("%s is among the system's own files (%s): relayctl writes only the service's own files, e.g. %s", s, sys, defaultFor(field))
		}
	}
	return nil
}

// serviceNames are the names a path relayctl writes may hold to count as
// the service's own (checkServicePaths): the unit's and the program's,
// each of at least three letters.
func serviceNames(r RelaySpec) []string {
	var out []string
	add := func(n string) {
		n = strings.ToLower(n)
		if len(n) >= 3 && !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	unit := strings.TrimSuffix(r.Service.Name, ".service")
	unit, _, _ = strings.Cut(unit, "@")
	add(unit)
	add(path.Base(r.Release.Program))
	return out
}

// namesService reports whether a path segment names one of the service's
// names: holds it (unbound.conf.d for unbound), or is its stem of four
// letters or more (relay for relayd).
func namesService(seg string, names []string) bool {
	seg = strings.ToLower(seg)
	for _, n := range names {
		if strings.Contains(seg, n) || len(seg) >= 4 && strings.HasPrefix(n, seg) {
			return true
		}
	}
	return false
}

// checkServicePaths: every host path the spec writes names the service in
// a folder below its root or in its own name (/etc/unbound/unbound.conf.d/…
// for unbound, /opt/relay/… for relayd, /etc/memcached.conf), so a slip
// cannot make relayctl write another program's files. The defaults name
// relayd's.
func (p *specParser) checkServicePaths(r RelaySpec) {
	names := serviceNames(r)
	if len(names) == 0 {
		return
	}
	for _, sp := range p.written {
		root := ""
		for _, w := range append([]string{"/run/", "/var/log/"}, writableRoots...) {
			if strings.HasPrefix(sp.path, w) {
				root = w
			}
		}
		segs := strings.Split(strings.TrimPrefix(sp.path, root), "/")
		if slices.ContainsFunc(segs, func(seg string) bool { return namesService(seg, names) }) {
			continue
		}
		p.fail(sp.node, sp.field, "want a path of the service's own, with %s in a folder or file name below %s, got %q: relayctl writes as root only the files of the service the spec names (relay.service.name, relay.release.program)",
			strings.Join(names, " or "), strings.TrimSuffix(root, "/"), sp.path)
	}
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
	case "relay.service.log":
		return "/opt/relay/log/relayd.log"
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
