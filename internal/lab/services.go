package lab

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/relayctl/relayctl/relay/dist"
	"github.com/relayctl/relayctl/relay/sockstat"
)

// Service is a unit of a Debian package installed on the machine (unbound,
// memcached), which a systemd host runs from the package's own unit file,
// as an operator who ran apt-get install would, in the host's relay network
// namespace (/run/netns/relay): never in the machine's, where ports 53 and
// 11211 would clash between hosts and with the machine.
type Service struct {
	// Unit is the unit's name, e.g. "unbound.service"; the machine must
	// have it under /lib/systemd/system (CheckServicePrerequisites).
	Unit string
	// Files are laid over the host's root before it boots, host path →
	// content (mode 0644): the service's config (e.g.
	// /etc/unbound/unbound.conf.d/relaylab.conf), or an operator's drop-in
	// (/etc/systemd/system/UNIT.d/hardening.conf). A path may not be one
	// the lab seeds itself.
	Files map[string]string
	// NoStart leaves the unit stopped at boot: the test starts it. By
	// default the unit is enabled (wanted by multi-user.target), and Start
	// returns once systemd says running and the service's main process is
	// checked to be in the relay's network namespace.
	NoStart bool
}

// ServiceNetnsDropIn is the drop-in, under /etc/systemd/system/UNIT.d/,
// that runs a Service in /run/netns/relay, as relayd's netns.conf does.
const ServiceNetnsDropIn = "relaylab-netns.conf"

// packagedUDPServices are the Debian units of UDP servers the lab knows:
// each is masked on every systemd host that does not ask for it. apt
// enables them on the machine; a host boots without the machine's enabled
// units, but a disabled unit still starts on `systemctl start` or a
// dependency, and would bind in the machine's network namespace. The
// packages to install, and what each needs besides its unit, are named in
// the error a missing one gives.
var packagedUDPServices = []struct {
	unit, packages string
	needs          []string
}{
	// unbound's unit copies dns-root-data's root.key to its trust anchor
	// at start; without one, unbound exits ("error reading
	// auto-trust-anchor-file: /var/lib/unbound/root.key").
	{"unbound.service", "unbound dns-root-data", []string{"/usr/sbin/unbound", "/usr/share/dns/root.key"}},
	{"memcached.service", "memcached", []string{"/usr/bin/memcached"}},
}

// alwaysMasked are helper units of those packages that no lab host runs:
// unbound-resolvconf would point the host's resolv.conf at an unbound in
// another network namespace.
var alwaysMasked = []string{"unbound-resolvconf.service"}

// unitDirs are where Debian's packages put their units.
var unitDirs = []string{"/lib/systemd/system", "/usr/lib/systemd/system"}

// CheckServicePrerequisites reports the first of units the machine cannot
// run on a systemd host: its unit file or, for a package the lab knows, a
// file the unit needs (unbound's trust anchor from dns-root-data).
func CheckServicePrerequisites(units ...string) error {
	for _, u := range units {
		if err := validUnit(u); err != nil {
			return err
		}
		pkgs, needs := "the package that ships it", []string(nil)
		for _, p := range packagedUDPServices {
			if p.unit == u {
				pkgs, needs = p.packages, p.needs
			}
		}
		if _, ok := unitFile(u); !ok {
			return fmt.Errorf("%w: %s not found in %s (Debian packages: %s)", ErrPrerequisite, u, strings.Join(unitDirs, " or "), pkgs)
		}
		for _, n := range needs {
			if _, err := os.Stat(n); err != nil {
				return fmt.Errorf("%w: %s needs %s (Debian packages: %s)", ErrPrerequisite, u, n, pkgs)
			}
		}
	}
	return nil
}

func unitFile(unit string) (string, bool) {
	for _, d := range unitDirs {
		p := filepath.Join(d, unit)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			return p, true
		}
	}
	return "", false
}

// validUnit accepts a service unit's name as systemd spells one, and none
// of the lab's own units.
func validUnit(u string) error {
	if err := validUnitName(u); err != nil {
		return err
	}
	if slices.Contains([]string{dist.UnitName, dist.NetnsUnitName, "ssh.service", "sshd.service"}, u) {
		return fmt.Errorf("service unit %q: the lab runs it itself", u)
	}
	return nil
}

// validUnitName accepts NAME.service, NAME of letters, digits and :_.@-.
func validUnitName(u string) error {
	name, ok := strings.CutSuffix(u, ".service")
	if !ok || name == "" || len(u) > 255 {
		return fmt.Errorf("service unit %q: want NAME.service", u)
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune(":_.@-", r)) {
			return fmt.Errorf("service unit %q: only letters, digits and :_.@- may make a unit name", u)
		}
	}
	return nil
}

// validServices checks a host's services before anything is written.
func validServices(svcs []Service, systemd bool) error {
	if len(svcs) > 0 && !systemd {
		return errors.New("services need a systemd host (HostOptions.Systemd)")
	}
	seen := map[string]bool{}
	for _, s := range svcs {
		if err := validUnit(s.Unit); err != nil {
			return err
		}
		if seen[s.Unit] {
			return fmt.Errorf("service unit %s: listed twice", s.Unit)
		}
		seen[s.Unit] = true
		for p := range s.Files {
			if !filepath.IsAbs(p) || filepath.Clean(p) != p || p == "/" || strings.ContainsRune(p, 0) {
				return fmt.Errorf("service %s: file %q: want a clean absolute path", s.Unit, p)
			}
		}
	}
	return nil
}

// serviceLinks are the seed's symlinks for services: each asked one enabled
// (unless NoStart), every packaged UDP service not asked masked.
func serviceLinks(svcs []Service) map[string]string {
	links := map[string]string{}
	asked := map[string]bool{}
	for _, s := range svcs {
		asked[s.Unit] = true
		if !s.NoStart {
			target, _ := unitFile(s.Unit)
			links["etc/systemd/system/multi-user.target.wants/"+s.Unit] = target
		}
	}
	for _, p := range packagedUDPServices {
		if !asked[p.unit] {
			links["etc/systemd/system/"+p.unit] = "/dev/null"
		}
	}
	for _, u := range alwaysMasked {
		links["etc/systemd/system/"+u] = "/dev/null"
	}
	return links
}

// serviceNetnsDropIn is ServiceNetnsDropIn's content.
func serviceNetnsDropIn(unit string) string {
	return fmt.Sprintf(`# Written by internal/lab: %s runs in the host's relay network namespace
# (relay-netns.service makes it), never in the machine's.
[Unit]
Requires=%s
After=%s

[Service]
NetworkNamespacePath=/run/netns/relay
`, unit, dist.NetnsUnitName, dist.NetnsUnitName)
}

// seedServices writes each service's netns drop-in and files into seed,
// after every other seed entry exists, the symlinks included: a file may
// replace none of them, and is never written through one (a masked unit's
// link points at the machine's /dev/null, an enabled one's at the
// machine's unit file).
func seedServices(seed string, svcs []Service) error {
	for _, s := range svcs {
		dropIn := filepath.Join("/etc/systemd/system", s.Unit+".d", ServiceNetnsDropIn)
		if _, ok := s.Files[dropIn]; ok {
			return fmt.Errorf("service %s: file %s: the lab writes it", s.Unit, dropIn)
		}
		if err := seedFile(seed, dropIn, serviceNetnsDropIn(s.Unit)); err != nil {
			return fmt.Errorf("service %s: %w", s.Unit, err)
		}
		paths := make([]string, 0, len(s.Files))
		for p := range s.Files {
			paths = append(paths, p)
		}
		slices.Sort(paths)
		for _, p := range paths {
			if p == "/etc/ssh/sshd_config" {
				return fmt.Errorf("service %s: file %s: the lab writes it", s.Unit, p)
			}
			if err := seedFile(seed, p, s.Files[p]); err != nil {
				return fmt.Errorf("service %s: %w", s.Unit, err)
			}
		}
	}
	return nil
}

// seedFile creates seed+p, a new regular file: every directory on the way
// is a real directory (made if missing), and the file did not exist.
func seedFile(seed, p, content string) error {
	dir := seed
	parts := strings.Split(strings.TrimPrefix(filepath.Dir(p), "/"), "/")
	for _, part := range parts {
		if part == "" {
			continue
		}
		dir = filepath.Join(dir, part)
		fi, err := os.Lstat(dir)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			if err := os.Mkdir(dir, 0o755); err != nil {
				return fmt.Errorf("seed %s: %w", p, err)
			}
		case err != nil:
			return fmt.Errorf("seed %s: %w", p, err)
		case !fi.IsDir():
			return fmt.Errorf("seed %s: %s is a file or symlink the lab seeds, not a directory", p, strings.TrimPrefix(dir, seed))
		}
	}
	f, err := os.OpenFile(filepath.Join(seed, p), os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o644)
	if errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("seed %s: the lab seeds this path itself", p)
	}
	if err != nil {
		return fmt.Errorf("seed %s: %w", p, err)
	}
	if _, err := f.WriteString(content); err != nil {
		f.Close()
		return fmt.Errorf("seed %s: %w", p, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("seed %s: %w", p, err)
	}
	return nil
}

// CheckServiceNetns checks that unit's main process runs in the host's
// relay network namespace (/run/netns/relay), not the host's own, which
// on a systemd host is the machine's. Start checks every service it
// starts; a test checks one it started itself.
func (h *Host) CheckServiceNetns(ctx context.Context, unit string) error {
	pid, err := h.UnitPID(ctx, unit)
	if err != nil {
		return err
	}
	mp, err := h.MachinePID(pid)
	if err != nil {
		return err
	}
	got, err := nsID("net", fmt.Sprintf("/proc/%d/ns/net", mp))
	if err != nil {
		return fmt.Errorf("%s: %s: %w", h.Name, unit, err)
	}
	relay, err := h.Path("/run/netns/relay")
	if err != nil {
		return err
	}
	want, err := nsID("net", relay)
	if err != nil {
		return fmt.Errorf("%s: %s: the relay's network namespace: %w", h.Name, unit, err)
	}
	if got != want {
		machine, _ := nsID("net", "/proc/self/ns/net")
		where := "another network namespace"
		if got == machine {
			where = "the machine's network namespace"
		}
		return fmt.Errorf("%s: %s (pid %d) runs in %s (%s), want /run/netns/relay (%s)", h.Name, unit, pid, where, got, want)
	}
	return nil
}

// UnitPID is systemctl's MainPID of unit, in the host's PID namespace
// (MachinePID converts); ErrUnitNotRunning if it has none.
func (h *Host) UnitPID(ctx context.Context, unit string) (int, error) {
	return h.unitPID(ctx, unit, ErrUnitNotRunning)
}

// UnitSockets reads the UDP sockets of unit's main process with ss -u -a
// -n -m -e -p, run in that process's network namespace on the host: one
// entry per socket (a socket shared by threads through several fds is one),
// with rb, its inode and the address it is bound to.
func (h *Host) UnitSockets(ctx context.Context, unit string) ([]sockstat.Socket, error) {
	pid, err := h.UnitPID(ctx, unit)
	if err != nil {
		return nil, err
	}
	out, err := h.Exec(ctx, "nsenter", "-t", fmt.Sprint(pid), "-n", "ss", "-H", "-O", "-u", "-a", "-n", "-m", "-e", "-p")
	if err != nil {
		return nil, err
	}
	all, err := sockstat.ParseSS(out)
	if err != nil {
		return nil, fmt.Errorf("%s: %s: %w", h.Name, unit, err)
	}
	var mine []sockstat.Socket
	for _, s := range all {
		if slices.Contains(s.PIDs, pid) {
			mine = append(mine, s)
		}
	}
	return mine, nil
}

// Journal returns the last n lines (all for n <= 0) that the host's
// journal holds for unit, the unit's own output and systemd's lines about
// it, as message text only (journalctl -o cat). A line the service wrote
// just now may not be there yet: journald reads its output asynchronously.
func (h *Host) Journal(ctx context.Context, unit string, n int) ([]string, error) {
	if err := validUnitName(unit); err != nil {
		return nil, fmt.Errorf("%s: journal: %w", h.Name, err)
	}
	lines := "all"
	if n > 0 {
		lines = fmt.Sprint(n)
	}
	out, err := h.Exec(ctx, "journalctl", "-u", unit, "-n", lines, "--no-pager", "-q", "-o", "cat")
	if err != nil {
		return nil, err
	}
	s := strings.TrimRight(string(out), "\n")
	if s == "" {
		return nil, nil
	}
	return strings.Split(s, "\n"), nil
}

// checkServices checks, once the host runs, that every service it started
// at boot is in the relay's network namespace.
func (h *Host) checkServices(ctx context.Context) error {
	for _, s := range h.services {
		if s.NoStart {
			continue
		}
		if err := h.CheckServiceNetns(ctx, s.Unit); err != nil {
			return err
		}
	}
	return nil
}

// failedServicesJournal is the journal's last lines of each of the host's
// services that failed, for an error message.
func (h *Host) failedServicesJournal(ctx context.Context) string {
	var b strings.Builder
	for _, s := range h.services {
		if _, err := h.Exec(ctx, "systemctl", "is-failed", "-q", s.Unit); err != nil {
			continue // not failed
		}
		lines, _ := h.Journal(ctx, s.Unit, 5)
		fmt.Fprintf(&b, "; journalctl -u %s: %s", s.Unit, strings.Join(lines, " | "))
	}
	return b.String()
}
