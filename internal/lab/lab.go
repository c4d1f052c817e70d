// Package lab starts the project's own test hosts (docs/lab.md).
//
// A lab host is a real OpenSSH sshd running as root in a mount namespace of
// its own, so the files relayctl manages are private to it: the sysctl.d
// directories and /etc/sysctl.conf (seeded with the machine's real content,
// so precedence is realistic), /opt/relay, /etc/relay, /var/lib/relayctl and
// /root (an empty home: the machine's .bashrc costs about 0.5 s per command).
// Each private path is a bind mount of a directory on the machine, under
// Host.Root, so tests can also read and seed them from outside.
//
// By default the sshd listens on a loopback address of its own (127.0.0.N) in
// the initial network namespace, where net.core.rmem_max is writable, and the
// host's relay runs in a network namespace of its own, the containerised
// case. With SSHDInNetns the sshd itself runs in a child network namespace,
// reached over a veth pair, where rmem_max is read-only.
//
// The relay is managed by relay-service (relay/dist/relay-service.sh, the
// one operators install, as /opt/relay/bin/relay-service on every such
// host), since the machine has no systemd.
//
// A busybox host (HostOptions.Busybox, busybox.go) is such a host whose
// programs are busybox's: inside its mount namespace, every folder on an
// SSH session's PATH is a folder of the lab's holding Debian's
// busybox-static, its applets, Debian's ss, ip, flock and zstd, and the
// sshd; /etc/passwd gives root busybox sh as its login shell.
//
// A host of the other kind (HostOptions.Systemd, systemd.go) boots a real
// systemd as PID 1 of its own PID, mount, UTS, IPC and cgroup namespaces,
// on an overlay of the machine's root whose writes go to RAM. Its sshd runs
// as ssh.service, and the relay is the unit this project ships
// (relay/dist/relayd.service, installed as /etc/systemd/system/relayd.service)
// with the drop-in relayd.service.d/netns.conf, which runs it in the network
// namespace /run/netns/relay that relay-netns.service makes inside the host.
// /proc/sys is read-only there except /proc/sys/net/core, which relayctl
// writes as on a real host; systemd-sysctl is masked (it would apply the
// machine's sysctl.d to the machine) and runs only when a test asks,
// through Host.RunSystemdSysctl. A systemd host may also run units of
// Debian packages installed on the machine (HostOptions.Services,
// services.go: unbound, memcached), from their own unit files, in that same
// /run/netns/relay; the packaged UDP servers a host does not ask for are
// masked there. PIDs: systemctl's MainPID and whatever an
// SSH session prints are in the host's PID namespace; Host fields ending in
// PID are the machine's; Host.MachinePID converts.
//
// Layout of Options.Dir:
//
//	id_ed25519, id_ed25519.pub  the client key
//	authorized_keys             that key, for every host
//	known_hosts                 every host's key, as [ADDR]:PORT ssh-ed25519 ...
//	ssh_config                  an alias per host (lab-1, lab-2, ...)
//	lab.json                    what Load needs to find and stop the lab
//	lab-N/                      sshd_config, host key, sshd.pid, sshd.log,
//	                            root/ (the private trees, bind-mounted);
//	                            for a busybox host: userland/ (bound over
//	                            the folders on PATH and /etc/passwd);
//	                            for a systemd host: boot.sh, boot.log, host
//	                            key, seed/ (files laid over its root at
//	                            boot), and the mountpoints fs/ and root/
//	                            (mounted only inside the host)
package lab

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/relayctl/relayctl/relay/dist"
)

// Paths on every lab host.
const (
	ServiceScript = "/opt/relay/bin/relay-service" // the generic service manager
	ServiceEnv    = "/etc/relay/service.env"       // its settings (RELAY_NETNS)
	RelayConfig   = "/etc/relay/relayd.env"        // the relay's config
	RelayPIDFile  = "/opt/relay/run/relayd.pid"
	RelayLog      = "/opt/relay/log/relayd.log"
)

// DefaultRelayConfig is written to RelayConfig when RelayInstall.Config is "".
const DefaultRelayConfig = "RELAYD_LISTEN=0.0.0.0:7788\nRELAYD_CONTROL=127.0.0.1:7789\n"

// BenchExempt is the relay config line of a lab relay that a bench on its
// host loads past 16 players per address: it exempts the bench's two
// loopback addresses (relay/bench.LoopbackSources) from the per-address
// counts, as an operator opts a bench host in. relayd exempts no source by
// default, and never lets one address hold every seat of a lobby.
const BenchExempt = "RELAYD_EXEMPT_SOURCES=127.0.0.1/32,127.0.0.2/32\n"

// DefaultBasePort is the sshd port when Options.BasePort is 0.
const DefaultBasePort = 2222

// serviceScript is relay/dist's relay-service, as operators install it.
var serviceScript = dist.ServiceScript

var (
	// ErrPrerequisite is a missing lab prerequisite (root, sshd, ip, unshare,
	// nsenter, ...).
	ErrPrerequisite = errors.New("lab prerequisite missing")
	// ErrRelayNotRunning is returned by RelayPID when relay-service pid exits 3.
	ErrRelayNotRunning = errors.New("relay not running")
	// ErrUnitNotRunning is returned by UnitPID for a unit with no main process.
	ErrUnitNotRunning = errors.New("unit not running")
)

// HostOptions shape one host.
type HostOptions struct {
	// NoRelayNetns runs the relay in the sshd's network namespace. By default
	// the relay gets a network namespace of its own (the containerised case),
	// read back by entering the relay process's namespace.
	NoRelayNetns bool
	// SSHDInNetns runs the sshd in a child network namespace reached over a
	// veth pair (10.231.0.0/16), where net.core.rmem_max is read-only; the
	// relay runs in that same namespace.
	SSHDInNetns bool
	// Relay installs a release at start; nil installs only relay-service
	// (or, on a systemd host, only the units).
	Relay *RelayInstall
	// Systemd boots the host with a real systemd (see the package comment);
	// SSHDInNetns does not apply. With NoRelayNetns the host has no
	// netns.conf drop-in: relayd.service runs in the host's network
	// namespace, which is the machine's, where a bench in the test
	// process reaches it (give it a port of its own: lab.FreePort).
	Systemd bool
	// Logind registers a systemd host's SSH sessions with logind (sshd's
	// UsePAM with pam_systemd, as on a stock Debian host): each session is
	// a scope unit of its own, whose cgroup a session teardown or an OOM
	// kill takes whole (Host.CutSessions). Without it the sessions run in
	// ssh.service's cgroup.
	Logind bool
	// Services are units of Debian packages installed on the machine that
	// the host runs in its relay network namespace (systemd hosts only;
	// services.go). The packaged UDP servers the lab knows (unbound,
	// memcached) are masked on a host that does not ask for them.
	Services []Service
	// Busybox gives the host a busybox userland (busybox.go, docs/lab.md):
	// every folder on an SSH session's PATH holds only busybox's applets,
	// Debian's ss, ip, flock and zstd, and the sshd; root's login shell is
	// busybox sh. Not with Systemd.
	Busybox bool
}

// RelayInstall is a relay release to install on a host.
type RelayInstall struct {
	Binary  string // relayd on this machine, copied to /opt/relay/releases/<Version>/relayd
	Version string // release directory name; /opt/relay/current points at it
	Config  string // content of /etc/relay/relayd.env; "" = DefaultRelayConfig
	Start   bool   // run relay-service start (systemd: systemctl enable --now relayd) after installing
}

// Options shape a lab.
type Options struct {
	Dir      string        // where the lab's files go, e.g. t.TempDir(); created if missing
	Hosts    []HostOptions // one entry per host
	BasePort int           // sshd port on every host; 0 = DefaultBasePort
}

// Lab is a set of running hosts and the client files to reach them.
type Lab struct {
	Dir        string  `json:"dir"`
	SSHConfig  string  `json:"ssh_config"`  // ssh -F SSHConfig lab-1
	KnownHosts string  `json:"known_hosts"` // every host's key
	Identity   string  `json:"identity"`    // client private key (ed25519, OpenSSH format)
	ID         string  `json:"id"`          // names this lab's namespaces: lab-<ID>-...
	Hosts      []*Host `json:"hosts"`

	mu     sync.Mutex
	closed bool
}

// Host is one lab host.
type Host struct {
	Name       string `json:"name"`        // ssh_config alias: lab-1, lab-2, ...
	Kind       string `json:"kind"`        // "" (sshd in a mount namespace), KindBusybox (the same, with a busybox userland) or KindSystemd
	Addr       string `json:"addr"`        // where its sshd listens: 127.0.0.2:2222
	HostName   string `json:"host_name"`   // Addr's host part
	Port       int    `json:"port"`        // Addr's port
	Root       string `json:"root"`        // machine-side directory holding the host's private trees ("" for systemd: see Path)
	SSHDPID    int    `json:"sshd_pid"`    // the listening sshd (the machine's PID)
	SSHDNetns  string `json:"sshd_netns"`  // the sshd's network namespace; "" = the initial one
	RelayNetns string `json:"relay_netns"` // where the relay runs, under /run/netns; "" = the sshd's namespace (systemd: /run/netns/relay inside the host)
	Veth       string `json:"veth"`        // initial-namespace end of the veth pair (SSHDInNetns)
	MountNS    string `json:"mount_ns"`    // the sshd's /proc/PID/ns/mnt, so Close never kills a reused pid
	// SSHDStopped says relaylab stop stopped the host's sshd (StopSSHD);
	// KeeperPID holds its mount namespace meanwhile (hoststop.go).
	SSHDStopped bool `json:"sshd_stopped,omitempty"`
	KeeperPID   int  `json:"keeper_pid,omitempty"`

	// Systemd hosts only.
	InitPID    int        `json:"init_pid,omitempty"`    // the host's systemd, PID 1 inside (the machine's PID)
	StarterPID int        `json:"starter_pid,omitempty"` // the unshare that waits for it
	PIDNS      string     `json:"pid_ns,omitempty"`      // its /proc/PID/ns/pid, so Close never signals a reused pid
	Cgroup     string     `json:"cgroup,omitempty"`      // the host's cgroup2 directory on the machine
	Boot       *BootTimes `json:"boot,omitempty"`        // how long its start took
	Services   []string   `json:"services,omitempty"`    // the units of HostOptions.Services

	dir           string        // lab-N directory
	noNetnsDropIn bool          // systemd host: relayd in the host's (the machine's) network namespace
	logind        bool          // systemd host: SSH sessions in logind's session scopes
	vethBlock     int           // its /30 in 10.231.0.0/16 (SSHDInNetns)
	services      []Service     // HostOptions.Services
	sshdv         *exec.Cmd     // nil for a loaded lab
	done          chan struct{} // closed when sshdv has been reaped
	mountPin      *os.File      // the sshd's mount namespace, held open until stop (procTracker)
	userland      userland      // busybox host: what is bound over the machine's programs
}

// Host returns the host with the given alias, or nil.
func (l *Lab) Host(name string) *Host {
	for _, h := range l.Hosts {
		if h.Name == name {
			return h
		}
	}
	return nil
}

// Load re-opens a lab started by another process (relaylab up) from
// DIR/lab.json, so it can be inspected or closed.
func Load(dir string) (*Lab, error) {
	b, err := os.ReadFile(filepath.Join(dir, "lab.json"))
	if err != nil {
		return nil, fmt.Errorf("load lab: %w", err)
	}
	var l Lab
	if err := json.Unmarshal(b, &l); err != nil {
		return nil, fmt.Errorf("load lab: parse %s: %w", filepath.Join(dir, "lab.json"), err)
	}
	// Close stops every process in a host's mount namespace: one that is
	// this machine's own (a lab.json edited, or written by hand) would be
	// every process on it.
	own, _ := os.Readlink("/proc/self/ns/mnt")
	for _, h := range l.Hosts {
		if h.MountNS != "" && h.MountNS == own {
			return nil, fmt.Errorf("load lab: %s: %s gives the machine's own mount namespace (%s): not a lab host's", filepath.Join(dir, "lab.json"), h.Name, own)
		}
		h.dir = filepath.Join(l.Dir, h.Name)
	}
	return &l, nil
}

func (l *Lab) save() error {
	b, err := json.MarshalIndent(l, "", "  ")
	if err != nil {
		return fmt.Errorf("save lab: %w", err)
	}
	if err := os.WriteFile(filepath.Join(l.Dir, "lab.json"), append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("save lab: %w", err)
	}
	return nil
}

// Command returns a command that runs argv the way an SSH session on the
// host would see the machine: in the sshd's mount and network namespaces,
// or, on a systemd host, in all of the host's namespaces (nsenter -a), with
// a plain environment (the machine's paths mean nothing there). On a
// busybox host the environment is that of root's SSH session there.
func (h *Host) Command(ctx context.Context, argv ...string) *exec.Cmd {
	if h.Kind == KindSystemd {
		args := append([]string{"-t", strconv.Itoa(h.InitPID), "-a", "--"}, argv...)
		cmd := exec.CommandContext(ctx, "nsenter", args...)
		cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root", "LC_ALL=C"}
		return cmd
	}
	pid := h.SSHDPID
	if h.SSHDStopped && h.KeeperPID != 0 {
		pid = h.KeeperPID // relaylab stop: the keeper is in the host's namespaces
	}
	args := append([]string{"-t", strconv.Itoa(pid), "-m", "-n", "--"}, argv...)
	cmd := exec.CommandContext(ctx, "nsenter", args...)
	cmd.Env = append(os.Environ(), "HOME=/root")
	if h.Kind == KindBusybox {
		cmd.Env = slices.Clone(sessionEnv)
	}
	return cmd
}

// Exec runs argv on the host (see Command) and returns its stdout. A command
// that fails returns an error that names the host and carries its stderr;
// errors.As finds the *exec.ExitError.
func (h *Host) Exec(ctx context.Context, argv ...string) ([]byte, error) {
	cmd := h.Command(ctx, argv...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		msg := strings.TrimSpace(stderr.String())
		if msg != "" {
			return out, fmt.Errorf("%s: run %s: %w: %s", h.Name, strings.Join(argv, " "), err, msg)
		}
		return out, fmt.Errorf("%s: run %s: %w", h.Name, strings.Join(argv, " "), err)
	}
	return out, nil
}

// RelayPID asks relay-service for the relay's PID, or on a systemd host
// systemctl for relayd's MainPID. It is the PID an SSH session on the host
// sees: the machine's for a plain host, the host's PID namespace's for a
// systemd host (MachinePID converts). It returns ErrRelayNotRunning if the
// relay is not running.
func (h *Host) RelayPID(ctx context.Context) (int, error) {
	if h.Kind == KindSystemd {
		return h.unitPID(ctx, RelayUnit, ErrRelayNotRunning)
	}
	out, err := h.Exec(ctx, ServiceScript, "pid")
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() == 3 {
		return 0, fmt.Errorf("%s: %w", h.Name, ErrRelayNotRunning)
	}
	if err != nil {
		return 0, err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		return 0, fmt.Errorf("%s: parse relay pid %q: %w", h.Name, out, err)
	}
	return pid, nil
}

// Path returns where a host path under one of the private trees lives on
// the machine, e.g. /etc/sysctl.d/90-relayctl.conf. On a systemd host every
// absolute path is the host's own, reached as /proc/INIT/root/PATH (an
// absolute symlink met on the way resolves on the machine, not the host).
func (h *Host) Path(p string) (string, error) {
	p = filepath.Clean(p)
	if h.Kind == KindSystemd {
		if !filepath.IsAbs(p) {
			return "", fmt.Errorf("%s: %s is not an absolute path", h.Name, p)
		}
		if !h.initIsOurs() {
			return "", fmt.Errorf("%s: the host is not running", h.Name)
		}
		return filepath.Join(fmt.Sprintf("/proc/%d/root", h.InitPID), p), nil
	}
	for _, m := range privatePaths() {
		if p == m || strings.HasPrefix(p, m+"/") {
			return filepath.Join(h.Root, p), nil
		}
	}
	return "", fmt.Errorf("%s: %s is not private to the host", h.Name, p)
}

// InstallRelay installs a release on the host: the binary under
// /opt/relay/releases/<Version>/, /opt/relay/current pointing at it, and the
// config; then starts it with relay-service if r.Start.
func (h *Host) InstallRelay(ctx context.Context, r RelayInstall) error {
	if err := validVersion(r.Version); err != nil {
		return fmt.Errorf("%s: install relay: %w", h.Name, err)
	}
	root := h.Root
	if h.Kind == KindSystemd {
		var err error
		if root, err = h.Path("/"); err != nil {
			return fmt.Errorf("install relay: %w", err)
		}
	}
	rel := filepath.Join(root, "opt/relay/releases", r.Version)
	if err := os.MkdirAll(rel, 0o755); err != nil {
		return fmt.Errorf("%s: install relay: %w", h.Name, err)
	}
	if err := copyFile(r.Binary, filepath.Join(rel, "relayd"), 0o755); err != nil {
		return fmt.Errorf("%s: install relay: %w", h.Name, err)
	}
	// The symlink is relative, so it resolves inside the host's /opt/relay.
	cur := filepath.Join(root, "opt/relay/current")
	tmp := cur + ".tmp"
	os.Remove(tmp)
	if err := os.Symlink(filepath.Join("releases", r.Version), tmp); err != nil {
		return fmt.Errorf("%s: install relay: %w", h.Name, err)
	}
	if err := os.Rename(tmp, cur); err != nil {
		return fmt.Errorf("%s: install relay: %w", h.Name, err)
	}
	conf := r.Config
	if conf == "" {
		conf = DefaultRelayConfig
	}
	if err := os.WriteFile(filepath.Join(root, RelayConfig), []byte(conf), 0o644); err != nil {
		return fmt.Errorf("%s: install relay: %w", h.Name, err)
	}
	if r.Start && h.Kind == KindSystemd {
		if _, err := h.Exec(ctx, "systemctl", "enable", "--now", RelayUnit); err != nil {
			return fmt.Errorf("start relay: %w", err)
		}
		return nil
	}
	if r.Start {
		if err := h.startRelay(ctx); err != nil {
			return fmt.Errorf("start relay: %w", err)
		}
	}
	return nil
}

// startRelay runs relay-service start, again when the exec of the release
// found its file busy: while one host's binary is being copied, a fork
// for another host's command inherits the copy's open file until it
// execs (golang/go#22315), and an exec of that file meanwhile fails with
// ETXTBSY. Starting 800 hosts at once hit it (bench-fleet.sh).
func (h *Host) startRelay(ctx context.Context) error {
	var err error
	for try := 0; try < 10; try++ {
		if _, err = h.Exec(ctx, ServiceScript, "start"); err == nil || !strings.Contains(err.Error(), "Text file busy") {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(100 * time.Millisecond):
		}
	}
	return err
}

func validVersion(v string) error {
	if v == "" || v == "." || v == ".." {
		return fmt.Errorf("invalid release version %q", v)
	}
	for _, r := range v {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune(".-+_", r)) {
			return fmt.Errorf("invalid release version %q", v)
		}
	}
	return nil
}

// Stopped names the lab's hosts that are no longer running (their sshd,
// or on a systemd host its systemd, has exited): none for a lab that is
// up.
func (l *Lab) Stopped() []string {
	var names []string
	for _, h := range l.Hosts {
		if !h.running() {
			names = append(names, h.Name)
		}
	}
	return names
}

// running reports whether the host's sshd (systemd: its PID 1) is still
// the process the lab started, not a pid reused since.
func (h *Host) running() bool {
	if h.Kind == KindSystemd {
		return h.initIsOurs()
	}
	if h.SSHDPID == 0 || h.MountNS == "" || !alive(h.SSHDPID) {
		return false
	}
	ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", h.SSHDPID))
	return err == nil && ns == h.MountNS
}

// Close stops every process in the lab's namespaces (relays, SSH sessions,
// the sshds) and deletes the lab's network namespaces and veth pairs. It
// removes nothing else: the files under Dir stay for inspection. Calling it
// again does nothing.
func (l *Lab) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	var errs []error
	var mu sync.Mutex
	parallel(len(l.Hosts), 8, func(i int) error {
		if err := l.Hosts[i].stop(); err != nil {
			mu.Lock()
			errs = append(errs, err)
			mu.Unlock()
		}
		return nil
	})
	return errors.Join(errs...)
}

// stop ends the host's processes: first a SIGTERM to all of them, then a
// SIGKILL to those left after a grace period.
func (h *Host) stop() error {
	if h.Kind == KindSystemd {
		return h.stopSystemd()
	}
	var errs []error
	nets := map[string]bool{}
	for _, ns := range []string{h.SSHDNetns, h.RelayNetns} {
		if ns == "" {
			continue
		}
		if id, err := nsID("net", filepath.Join("/run/netns", ns)); err == nil {
			nets[id] = true
		}
	}
	owner := h.SSHDPID
	if h.KeeperPID != 0 && !h.running() {
		owner = h.KeeperPID // the sshd is stopped: the keeper holds the namespace
	}
	tr := trackHost(h.MountNS, nets, h.mountPin, owner)
	h.mountPin = nil // the tracker's now
	defer tr.release()
	procs := func() []int {
		ps := tr.scan()
		// An sshd that never became ready has no MountNS yet. Until we reap
		// it, its pid cannot be reused: ours to stop.
		if h.done != nil && !slices.Contains(ps, h.SSHDPID) {
			select {
			case <-h.done:
			default:
				ps = append(ps, h.SSHDPID)
			}
		}
		return ps
	}
	if ps := procs(); len(ps) > 0 {
		signalAll(ps, "TERM")
		if !waitGone(procs, 5*time.Second) {
			signalAll(procs(), "KILL")
			if !waitGone(procs, 5*time.Second) {
				errs = append(errs, fmt.Errorf("%s: stop: processes %v survived SIGKILL", h.Name, procs()))
			}
		}
	}
	if h.done != nil && len(errs) == 0 {
		<-h.done // reaped, so no zombie of ours is left
	}
	if h.Veth != "" {
		if err := ipCmd("link", "del", h.Veth); err != nil && !strings.Contains(err.Error(), "Cannot find device") {
			errs = append(errs, fmt.Errorf("%s: %w", h.Name, err))
		}
	}
	for _, ns := range []string{h.SSHDNetns, h.RelayNetns} {
		if ns == "" {
			continue
		}
		if _, err := os.Stat(filepath.Join("/run/netns", ns)); errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err := ipCmd("netns", "del", ns); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", h.Name, err))
		}
	}
	return errors.Join(errs...)
}

// parallel runs f(0..n-1) with at most limit at once and joins the errors.
func parallel(n, limit int, f func(i int) error) error {
	errs := make([]error, n)
	sem := make(chan struct{}, limit)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			errs[i] = f(i)
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}
