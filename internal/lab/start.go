package lab

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/relayctl/relayctl/tune"
)

// Tools a lab needs on the machine.
var prerequisites = []string{sshdBinary, "ssh", "ssh-keygen", "ip", "unshare", "nsenter", "ss", "setsid", "nohup"}

// CheckPrerequisites reports the first missing prerequisite, wrapped in
// ErrPrerequisite.
func CheckPrerequisites() error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("%w: lab hosts need root (mount and network namespaces, sshd)", ErrPrerequisite)
	}
	for _, p := range prerequisites {
		if _, err := exec.LookPath(p); err != nil {
			return fmt.Errorf("%w: %s not found (Debian packages: openssh-server, openssh-client, iproute2, util-linux)", ErrPrerequisite, p)
		}
	}
	return nil
}

// emptyDirs are private to each host and start empty.
var emptyDirs = []string{"/opt/relay", "/etc/relay", "/var/lib/relayctl", "/root"}

const sysctlConf = "/etc/sysctl.conf"

// privatePaths lists the paths bind-mounted privately into each host. A
// sysctl directory reached through a symlinked parent (/lib -> usr/lib on
// Debian) is the same directory and is listed once.
func privatePaths() []string {
	seen := map[string]bool{}
	var ps []string
	for _, d := range tune.SysctlDirs {
		real := d
		if parent, err := filepath.EvalSymlinks(filepath.Dir(d)); err == nil {
			real = filepath.Join(parent, filepath.Base(d))
		}
		if seen[real] {
			continue
		}
		seen[real] = true
		ps = append(ps, real)
	}
	if _, err := os.Stat(sysctlConf); err == nil {
		ps = append(ps, sysctlConf)
	}
	return append(ps, emptyDirs...)
}

// sshdBinary is Debian's OpenSSH server.
const sshdBinary = "/usr/sbin/sshd"

// mountScript runs as the first process of a host's mount namespace: it
// binds each source over its target (the private trees; on a busybox host
// then its userland), in order, then becomes the sshd. Paths travel as
// arguments, so nothing is spliced into the script.
const mountScript = `set -eu
cfg=$1
shift
while [ $# -gt 0 ]; do
	mount --bind "$1" "$2"
	shift 2
done
exec ` + sshdBinary + ` -D -e -f "$cfg"
`

// Start starts the lab's hosts in parallel and returns once every sshd
// answers with an SSH banner. ctx bounds the start only; the hosts run until
// Close, even after this process exits. On error (ctx ending included),
// whatever was started is stopped, and Dir/lab.json removed once it is.
//
// A Dir that holds lab.json holds a lab that was not stopped (relaylab
// down stops it): Start refuses it. Each host's directory (Dir/lab-N) is
// made afresh, so nothing an earlier lab left there (its private trees,
// keys, logs) is merged into the new host's.
//
// On the machine itself Start only adds what mounts need: the empty
// mountpoints it lacks (/run/sshd, /run/sysctl.d, /usr/local/lib/sysctl.d,
// /opt/relay, /etc/relay, /var/lib/relayctl), /run/netns as a shared mount
// (as ip netns add does), and the allocation lock /tmp/relaylab.lock.
func Start(ctx context.Context, o Options) (*Lab, error) {
	if testing.Testing() && testing.Short() {
		return nil, errors.New("start lab: under go test -short, which runs no lab test: the test must call lab.Require (or StartT) first")
	}
	if err := CheckPrerequisites(); err != nil {
		return nil, err
	}
	if len(o.Hosts) == 0 {
		return nil, errors.New("start lab: no hosts")
	}
	if slices.ContainsFunc(o.Hosts, func(h HostOptions) bool { return h.Systemd }) {
		if err := CheckSystemdPrerequisites(); err != nil {
			return nil, err
		}
	}
	if slices.ContainsFunc(o.Hosts, func(h HostOptions) bool { return h.Busybox }) {
		if err := CheckBusyboxPrerequisites(); err != nil {
			return nil, err
		}
	}
	for i, ho := range o.Hosts {
		if ho.Busybox && ho.Systemd {
			return nil, fmt.Errorf("start lab: host %d: a busybox host has no systemd (Busybox and Systemd both set)", i+1)
		}
		if err := validServices(ho.Services, ho.Systemd); err != nil {
			return nil, fmt.Errorf("start lab: host %d: %w", i+1, err)
		}
		for _, s := range ho.Services {
			if err := CheckServicePrerequisites(s.Unit); err != nil {
				return nil, err
			}
		}
	}
	if o.BasePort == 0 {
		o.BasePort = DefaultBasePort
	}
	dir, err := filepath.Abs(o.Dir)
	if err != nil || o.Dir == "" {
		return nil, fmt.Errorf("start lab: bad directory %q", o.Dir)
	}
	// sshd_config and ssh_config take paths as bare words.
	if strings.ContainsAny(dir, " \t\n\"'#\\") {
		return nil, fmt.Errorf("start lab: directory %q: whitespace, quotes, # and \\ are not supported", dir)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("start lab: %w", err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "lab.json")); err == nil {
		return nil, fmt.Errorf("start lab: %s holds a lab that was not stopped (lab.json): stop it first (relaylab down --dir %s)", dir, dir)
	}
	l := &Lab{
		Dir:        dir,
		SSHConfig:  filepath.Join(dir, "ssh_config"),
		KnownHosts: filepath.Join(dir, "known_hosts"),
		Identity:   filepath.Join(dir, "id_ed25519"),
	}
	for i := range o.Hosts {
		name := fmt.Sprintf("lab-%d", i+1)
		h := &Host{Name: name, dir: filepath.Join(dir, name), Root: filepath.Join(dir, name, "root"), Port: o.BasePort}
		if o.Hosts[i].Systemd {
			// Its root is an overlay inside its own mount namespace: Path
			// reaches it through /proc/INIT/root.
			h.Kind, h.Root = KindSystemd, ""
			h.noNetnsDropIn = o.Hosts[i].NoRelayNetns
			h.logind = o.Hosts[i].Logind
		}
		if o.Hosts[i].Busybox {
			h.Kind = KindBusybox
		}
		h.services = o.Hosts[i].Services
		for _, s := range h.services {
			h.Services = append(h.Services, s.Unit)
		}
		l.Hosts = append(l.Hosts, h)
	}
	if err := l.start(ctx, o); err != nil {
		if cerr := l.Close(); cerr != nil {
			// lab.json stays: relaylab down tries again from it.
			return nil, errors.Join(err, fmt.Errorf("clean up: %w", cerr))
		}
		if rerr := os.Remove(filepath.Join(dir, "lab.json")); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
			err = errors.Join(err, fmt.Errorf("clean up: %w", rerr))
		}
		return nil, err
	}
	return l, nil
}

func (l *Lab) start(ctx context.Context, o Options) error {
	if err := keygen(ctx, l.Identity, "relaylab client"); err != nil {
		return err
	}
	pub, err := os.ReadFile(l.Identity + ".pub")
	if err != nil {
		return fmt.Errorf("read client key: %w", err)
	}
	if err := os.WriteFile(filepath.Join(l.Dir, "authorized_keys"), pub, 0o600); err != nil {
		return fmt.Errorf("write authorized_keys: %w", err)
	}
	if err := machineMountpoints(); err != nil {
		return err
	}
	for _, h := range l.Hosts {
		if err := os.RemoveAll(h.dir); err != nil {
			return fmt.Errorf("%s: remove what an earlier lab left: %w", h.Name, err)
		}
	}
	// Files first, in parallel: nothing here needs an address.
	if err := parallel(len(l.Hosts), 8, func(i int) error {
		if l.Hosts[i].Kind == KindSystemd {
			return l.Hosts[i].prepareSystemd(ctx, l)
		}
		return l.Hosts[i].prepare(ctx)
	}); err != nil {
		return err
	}

	// Addresses, namespace names and ports are machine-wide: hold the lock
	// from choosing them until every sshd has bound its own.
	unlock, err := lockMachine()
	if err != nil {
		return err
	}
	err = l.allocate(o)
	if err == nil {
		err = ensureSharedNetnsDir()
	}
	for i := 0; err == nil && i < len(l.Hosts); i++ {
		err = l.Hosts[i].netns()
	}
	if err == nil {
		err = parallel(len(l.Hosts), 8, func(i int) error {
			if l.Hosts[i].Kind == KindSystemd {
				return l.Hosts[i].startSystemd(ctx, l)
			}
			return l.Hosts[i].startSSHD(ctx, l)
		})
	}
	unlock()
	if err != nil {
		return err
	}

	if err := l.writeClientFiles(); err != nil {
		return err
	}
	if err := l.save(); err != nil {
		return err
	}
	return parallel(len(l.Hosts), 8, func(i int) error {
		r := o.Hosts[i].Relay
		if r == nil {
			return nil
		}
		return l.Hosts[i].InstallRelay(ctx, *r)
	})
}

// machineMountpoints creates the machine-side mountpoints that Debian does
// not ship (empty directories), and sshd's privilege separation directory.
func machineMountpoints() error {
	for _, p := range append([]string{"/run/sshd"}, privatePaths()...) {
		if p == sysctlConf {
			continue
		}
		if err := os.MkdirAll(p, 0o755); err != nil {
			return fmt.Errorf("create mountpoint: %w", err)
		}
	}
	return nil
}

// prepare lays out the host's directory: private trees (sysctl ones seeded
// from the machine), host key, relay-service.
func (h *Host) prepare(ctx context.Context) error {
	for _, p := range privatePaths() {
		dst := filepath.Join(h.Root, p)
		var err error
		switch {
		case p == sysctlConf:
			err = copyFile(p, dst, 0o644)
		case strings.Contains(p, "sysctl.d"):
			err = copyTree(p, dst)
		case p == "/root":
			err = os.MkdirAll(dst, 0o700)
		default:
			err = os.MkdirAll(dst, 0o755)
		}
		if err != nil {
			return fmt.Errorf("%s: seed %s: %w", h.Name, p, err)
		}
	}
	for _, d := range []string{"opt/relay/bin", "opt/relay/releases", "opt/relay/run", "opt/relay/log"} {
		if err := os.MkdirAll(filepath.Join(h.Root, d), 0o755); err != nil {
			return fmt.Errorf("%s: %w", h.Name, err)
		}
	}
	if err := os.WriteFile(filepath.Join(h.Root, ServiceScript), serviceScript, 0o755); err != nil {
		return fmt.Errorf("%s: install relay-service: %w", h.Name, err)
	}
	if h.Kind == KindBusybox {
		if err := h.prepareBusybox(); err != nil {
			return err
		}
	}
	return keygen(ctx, filepath.Join(h.dir, "ssh_host_ed25519_key"), h.Name)
}

func keygen(ctx context.Context, path, comment string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("generate key: %w", err)
	}
	os.Remove(path)
	os.Remove(path + ".pub")
	out, err := exec.CommandContext(ctx, "ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", path).CombinedOutput()
	if err != nil {
		return fmt.Errorf("generate key %s: %w: %s", path, err, strings.TrimSpace(string(out)))
	}
	return nil
}

const lockPath = "/tmp/relaylab.lock"

// lockMachine serialises address allocation between labs in every process.
func lockMachine() (func(), error) {
	f, err := os.OpenFile(lockPath, os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return nil, fmt.Errorf("open lab lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", lockPath, err)
	}
	return func() {
		syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}

// allocate picks the lab ID, each host's address and namespace names. It
// skips what a running (or leaked) lab holds: bound loopback ports, veth
// addresses, namespace names.
func (l *Lab) allocate(o Options) error {
	for {
		b := make([]byte, 2)
		rand.Read(b)
		l.ID = hex.EncodeToString(b)
		if m, _ := filepath.Glob("/run/netns/lab-" + l.ID + "-*"); len(m) == 0 {
			break
		}
	}
	used, err := vethAddrsInUse()
	if err != nil {
		return err
	}
	lo, block := 2, 0
	for i, h := range l.Hosts {
		ho := o.Hosts[i]
		id := fmt.Sprintf("lab-%s-%d", l.ID, i+1)
		if ho.SSHDInNetns && !ho.Systemd {
			for used[vethAddr(block, 1)] {
				block++
			}
			if block >= 1<<14 {
				return errors.New("allocate: no free /30 in 10.231.0.0/16")
			}
			used[vethAddr(block, 1)] = true
			h.HostName = vethAddr(block, 2)
			h.SSHDNetns = id + "-sshd"
			h.RelayNetns = h.SSHDNetns
			h.Veth = fmt.Sprintf("rl%s%d", l.ID, i+1)
			h.vethBlock = block
		} else {
			for ; ; lo++ {
				if lo >= 1<<16 {
					return fmt.Errorf("allocate: no free 127.0.x.y:%d", h.Port)
				}
				if lo%256 == 0 || lo%256 == 255 {
					continue
				}
				a := fmt.Sprintf("127.0.%d.%d", lo/256, lo%256)
				ln, err := net.Listen("tcp4", net.JoinHostPort(a, strconv.Itoa(h.Port)))
				if err != nil {
					continue
				}
				ln.Close()
				h.HostName = a
				lo++
				break
			}
			if !ho.NoRelayNetns && !ho.Systemd {
				h.RelayNetns = id + "-relay"
			}
		}
		h.Addr = net.JoinHostPort(h.HostName, strconv.Itoa(h.Port))
	}
	return nil
}

// vethAddr is address n (1: the machine's end, 2: the host's) of /30 block b
// of 10.231.0.0/16.
func vethAddr(b, n int) string {
	return fmt.Sprintf("10.231.%d.%d", b>>6, (b&63)*4+n)
}

func vethAddrsInUse() (map[string]bool, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, fmt.Errorf("list addresses: %w", err)
	}
	used := map[string]bool{}
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok {
			used[ipn.IP.String()] = true
		}
	}
	return used, nil
}

// ensureSharedNetnsDir makes /run/netns a shared mount, as ip netns add
// does, before any host's mount namespace is copied: only then do namespaces
// created later appear inside the hosts (their copy is a slave of it).
func ensureSharedNetnsDir() error {
	const d = "/run/netns"
	if err := os.MkdirAll(d, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", d, err)
	}
	if err := syscall.Mount("", d, "none", syscall.MS_SHARED|syscall.MS_REC, ""); err == nil {
		return nil
	} else if !errors.Is(err, syscall.EINVAL) {
		return fmt.Errorf("make %s shared: %w", d, err)
	}
	// EINVAL: not a mountpoint yet.
	if err := syscall.Mount(d, d, "none", syscall.MS_BIND|syscall.MS_REC, ""); err != nil {
		return fmt.Errorf("bind %s: %w", d, err)
	}
	if err := syscall.Mount("", d, "none", syscall.MS_SHARED|syscall.MS_REC, ""); err != nil {
		return fmt.Errorf("make %s shared: %w", d, err)
	}
	return nil
}

// netns creates the host's network namespaces, and for SSHDInNetns the veth
// pair to reach its sshd.
func (h *Host) netns() error {
	var steps [][]string
	switch {
	case h.SSHDNetns != "":
		ns := h.SSHDNetns
		steps = [][]string{
			{"netns", "add", ns},
			{"-n", ns, "link", "set", "lo", "up"},
			{"link", "add", h.Veth, "type", "veth", "peer", "name", "eth0", "netns", ns},
			{"addr", "add", vethAddr(h.vethBlock, 1) + "/30", "dev", h.Veth},
			{"link", "set", h.Veth, "up"},
			{"-n", ns, "addr", "add", vethAddr(h.vethBlock, 2) + "/30", "dev", "eth0"},
			{"-n", ns, "link", "set", "eth0", "up"},
		}
	case h.RelayNetns != "":
		steps = [][]string{
			{"netns", "add", h.RelayNetns},
			{"-n", h.RelayNetns, "link", "set", "lo", "up"},
		}
	}
	for _, s := range steps {
		if err := ipCmd(s...); err != nil {
			return fmt.Errorf("%s: create namespace: %w", h.Name, err)
		}
	}
	return nil
}

func (h *Host) sshdConfig(l *Lab) string {
	return fmt.Sprintf(`# Lab host %s, written by internal/lab.
ListenAddress %s
HostKey %s
PidFile %s
AuthorizedKeysFile %s
# The lab's key is also read by root for any user, so tests can log in as a
# non-root user (sudo -n) although the lab directory is root's alone.
AuthorizedKeysCommand /bin/cat %s
AuthorizedKeysCommandUser root
UsePAM no
PermitRootLogin prohibit-password
StrictModes no
UseDNS no
PasswordAuthentication no
KbdInteractiveAuthentication no
PrintMotd no
PrintLastLog no
X11Forwarding no
# relayctl may open many connections and sessions at once.
MaxStartups 200:30:400
MaxSessions 64
Subsystem sftp /usr/lib/openssh/sftp-server
`, h.Name, h.Addr, filepath.Join(h.dir, "ssh_host_ed25519_key"), filepath.Join(h.dir, "sshd.pid"), filepath.Join(l.Dir, "authorized_keys"), filepath.Join(l.Dir, "authorized_keys"))
}

// startSSHD starts the host's sshd in a new mount namespace (and its network
// namespace for SSHDInNetns) and waits until it sends its SSH banner.
func (h *Host) startSSHD(ctx context.Context, l *Lab) error {
	cfg := filepath.Join(h.dir, "sshd_config")
	if err := os.WriteFile(cfg, []byte(h.sshdConfig(l)), 0o644); err != nil {
		return fmt.Errorf("%s: write sshd_config: %w", h.Name, err)
	}
	if h.SSHDNetns == "" {
		// The relay's namespace, named in the settings relay-service reads.
		env := "RELAY_NETNS=" + h.RelayNetns + "\n"
		if err := os.WriteFile(filepath.Join(h.Root, ServiceEnv), []byte(env), 0o644); err != nil {
			return fmt.Errorf("%s: write %s: %w", h.Name, ServiceEnv, err)
		}
	} else if err := os.WriteFile(filepath.Join(h.Root, ServiceEnv), []byte("# the sshd already runs in the relay's namespace\nRELAY_NETNS=\n"), 0o644); err != nil {
		return fmt.Errorf("%s: write %s: %w", h.Name, ServiceEnv, err)
	}
	logf, err := os.OpenFile(filepath.Join(h.dir, "sshd.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("%s: open sshd log: %w", h.Name, err)
	}
	defer logf.Close()

	// unshare execs without forking, so the sshd keeps the pid we start.
	// --propagation slave, not private: with private, ip netns exec inside
	// fails with "Invalid argument" (docs/kernel.md).
	argv := []string{"unshare", "-m", "--propagation", "slave", "/bin/sh", "-c", mountScript, "lab-mount", cfg}
	for _, p := range privatePaths() {
		argv = append(argv, h.Root+p, p)
	}
	if h.Kind == KindBusybox {
		argv = append(argv, h.userland.binds()...)
	}
	if h.SSHDNetns != "" {
		argv = append([]string{"nsenter", "--net=" + filepath.Join("/run/netns", h.SSHDNetns)}, argv...)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	// A *os.File, not a pipe: nothing of ours must stay attached, so the
	// sshd outlives a relaylab CLI that exits. Setsid: no terminal signals.
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("%s: start sshd: %w", h.Name, err)
	}
	h.sshdv = cmd
	h.SSHDPID = cmd.Process.Pid
	h.done = make(chan struct{})
	go func() {
		cmd.Wait()
		close(h.done)
	}()
	if err := h.waitBanner(ctx); err != nil {
		return err
	}
	id, err := nsID("mnt", fmt.Sprintf("/proc/%d/ns/mnt", h.SSHDPID))
	if err != nil {
		return fmt.Errorf("%s: %w", h.Name, err)
	}
	if self, _ := nsID("mnt", "/proc/self/ns/mnt"); id == self {
		return fmt.Errorf("%s: sshd runs in the machine's mount namespace", h.Name)
	}
	h.MountNS = id
	// Held until stop: while it is open, no other namespace takes the
	// number stop finds the host's processes by.
	if h.mountPin, err = pinMountNS(h.SSHDPID, id); err != nil {
		return fmt.Errorf("%s: %w", h.Name, err)
	}
	return nil
}

// waitBanner polls until the sshd greets a TCP client, the sshd exits, or
// ctx ends.
func (h *Host) waitBanner(ctx context.Context) error {
	for {
		select {
		case <-h.done:
			return fmt.Errorf("%s: sshd exited during start: %s", h.Name, h.logTail())
		case <-ctx.Done():
			return fmt.Errorf("%s: wait for sshd on %s: %w: %s", h.Name, h.Addr, ctx.Err(), h.logTail())
		default:
		}
		if banner(h.Addr) {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func banner(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	return err == nil && strings.HasPrefix(line, "SSH-2.0-")
}

func (h *Host) logTail() string {
	b, err := os.ReadFile(filepath.Join(h.dir, "sshd.log"))
	if err != nil {
		return "no sshd log: " + err.Error()
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 5 {
		lines = lines[len(lines)-5:]
	}
	return strings.Join(lines, " | ")
}

// writeClientFiles writes known_hosts and ssh_config for every host.
func (l *Lab) writeClientFiles() error {
	var kh, sc strings.Builder
	for _, h := range l.Hosts {
		pub, err := os.ReadFile(filepath.Join(h.dir, "ssh_host_ed25519_key.pub"))
		if err != nil {
			return fmt.Errorf("%s: read host key: %w", h.Name, err)
		}
		f := strings.Fields(string(pub))
		if len(f) < 2 {
			return fmt.Errorf("%s: malformed host key %q", h.Name, pub)
		}
		host := h.HostName
		if h.Port != 22 {
			host = fmt.Sprintf("[%s]:%d", h.HostName, h.Port)
		}
		fmt.Fprintf(&kh, "%s %s %s\n", host, f[0], f[1])
		fmt.Fprintf(&sc, `Host %s
  HostName %s
  Port %d
  User root
  IdentityFile %s
  IdentitiesOnly yes
  UserKnownHostsFile %s
  GlobalKnownHostsFile /dev/null
  StrictHostKeyChecking yes
  BatchMode yes

`, h.Name, h.HostName, h.Port, l.Identity, l.KnownHosts)
	}
	if err := os.WriteFile(l.KnownHosts, []byte(kh.String()), 0o644); err != nil {
		return fmt.Errorf("write known_hosts: %w", err)
	}
	if err := os.WriteFile(l.SSHConfig, []byte(sc.String()), 0o644); err != nil {
		return fmt.Errorf("write ssh_config: %w", err)
	}
	return nil
}

func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("copy file: %w", err)
	}
	defer in.Close()
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return fmt.Errorf("copy file: %w", err)
	}
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		return fmt.Errorf("copy file: %w", err)
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("copy file %s: %w", src, err)
	}
	if err := out.Close(); err != nil {
		return fmt.Errorf("copy file %s: %w", src, err)
	}
	return nil
}

// copyTree copies a directory, keeping symlinks as symlinks: Debian's
// /etc/sysctl.d/99-sysctl.conf -> ../sysctl.conf must resolve to the host's
// private copy. A missing source gives an empty directory.
func copyTree(src, dst string) error {
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	if _, err := os.Stat(src); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		to := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			return os.MkdirAll(to, 0o755)
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(target, to)
		case d.Type().IsRegular():
			fi, err := d.Info()
			if err != nil {
				return err
			}
			return copyFile(p, to, fi.Mode().Perm())
		}
		return nil // sockets, fifos: nothing sysctl reads
	})
}
