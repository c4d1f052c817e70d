package lab

import (
	"bufio"
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/relayctl/relayctl/relay/dist"
)

// KindSystemd is Host.Kind of a host booted with a real systemd.
const KindSystemd = "systemd"

// RelayUnit is the relay's unit on a systemd host: relay/dist/relayd.service,
// installed under its own name.
const RelayUnit = dist.UnitName

//go:embed systemd-boot.sh
var systemdBootScript []byte

// systemdBinary is the systemd that boots the host; systemdSysctl is what
// RunSystemdSysctl runs (both the machine's own, seen through the overlay).
const (
	systemdBinary = "/lib/systemd/systemd"
	systemdSysctl = "/lib/systemd/systemd-sysctl"
)

// maskedUnits never run on a systemd host: each would touch the machine
// (its sysctls, binfmt, modules, clock, entropy, devices, mounts of the
// kernel's file systems) or wait for hardware that is not there. The list
// is what a boot of Debian 12's systemd 252 here pulls in by default.
// systemd-sysctl above all: a host boots with the machine's /etc/sysctl.d
// and would apply all of it to the machine. Host.RunSystemdSysctl runs it
// once, for chosen keys, under the caller's control.
var maskedUnits = []string{
	"systemd-sysctl.service",
	"systemd-binfmt.service", "proc-sys-fs-binfmt_misc.automount", "proc-sys-fs-binfmt_misc.mount",
	"systemd-modules-load.service", "kmod-static-nodes.service",
	"systemd-tmpfiles-clean.timer",
	"systemd-journald-audit.socket",
	"getty.target", "console-getty.service", "container-getty@.service", "getty@.service",
	"systemd-random-seed.service", "systemd-pstore.service", "systemd-firstboot.service",
	"systemd-machine-id-commit.service", "systemd-repart.service",
	"systemd-pcrphase-sysinit.service", "systemd-pcrphase.service",
	"dev-hugepages.mount", "dev-mqueue.mount",
	"sys-kernel-config.mount", "sys-kernel-debug.mount", "sys-kernel-tracing.mount", "sys-fs-fuse-connections.mount",
	"systemd-hwdb-update.service",
	"systemd-udevd.service", "systemd-udev-trigger.service", "systemd-udev-settle.service",
	"systemd-timesyncd.service", "systemd-remount-fs.service",
	"networking.service", "systemd-networkd.service", "systemd-resolved.service",
}

// generatorDirs hold the generators systemd runs at boot and reload; every
// one found is masked (fstab, sysv scripts, gettys, the machine's own
// services such as postgresql's would otherwise make units here).
var generatorDirs = []string{"/lib/systemd/system-generators", "/usr/lib/systemd/system-generators"}

// Systemd host paths.
const (
	sshdHostKey        = "/etc/ssh/relaylab_host_ed25519_key"
	sshdAuthorizedKeys = "/etc/ssh/relaylab_authorized_keys"
)

// sigPoweroff is SIGRTMIN+4 as glibc and systemd number it (34+4): a clean
// poweroff. SIGTERM would make systemd re-execute itself.
const sigPoweroff = syscall.Signal(38)

// BootTimes are a systemd host's start-up, from starting unshare.
type BootTimes struct {
	SSHReady time.Duration `json:"ssh_ready"` // its sshd greets a client
	Running  time.Duration `json:"running"`   // systemctl is-system-running says running
}

// CheckSystemdPrerequisites reports the first thing a systemd host needs
// that the machine lacks.
func CheckSystemdPrerequisites() error {
	for _, p := range []string{systemdBinary, systemdSysctl, "/lib/systemd/system/ssh.service"} {
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("%w: %s not found (Debian packages: systemd, openssh-server)", ErrPrerequisite, p)
		}
	}
	for _, p := range []string{"setpriv", "pivot_root", "unshare", "nsenter", "ip"} {
		if _, err := exec.LookPath(p); err != nil {
			return fmt.Errorf("%w: %s not found (Debian packages: util-linux, iproute2)", ErrPrerequisite, p)
		}
	}
	if _, err := cgroup2Mount(); err != nil {
		return fmt.Errorf("%w: %v", ErrPrerequisite, err)
	}
	b, err := os.ReadFile("/proc/filesystems")
	if err != nil || !strings.Contains(string(b), "\toverlay\n") {
		return fmt.Errorf("%w: the kernel has no overlay file system", ErrPrerequisite)
	}
	return nil
}

// cgroup2Mount finds where the machine mounts cgroup2: /sys/fs/cgroup on a
// pure cgroup2 machine, /sys/fs/cgroup/unified on a mixed one like this.
func cgroup2Mount() (string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", fmt.Errorf("find cgroup2: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER
		fields := strings.Fields(sc.Text())
		i := slices.Index(fields, "-")
		if i > 4 && i+1 < len(fields) && fields[i+1] == "cgroup2" {
			return fields[4], nil
		}
	}
	return "", errors.New("find cgroup2: no cgroup2 file system mounted")
}

// prepareSystemd lays out a systemd host's directory: its seed (what is
// laid over the root at boot, except sshd_config, which needs the address)
// and the boot script.
func (h *Host) prepareSystemd(ctx context.Context, l *Lab) error {
	seed := filepath.Join(h.dir, "seed")
	for _, d := range []string{"fs", "root", "seed/etc/ssh", "seed/etc/systemd/system/multi-user.target.wants",
		"seed/etc/systemd/system/relayd.service.d", "seed/etc/systemd/system-generators",
		"seed/opt/relay/releases", "seed/root"} {
		if err := os.MkdirAll(filepath.Join(h.dir, d), 0o755); err != nil {
			return fmt.Errorf("%s: %w", h.Name, err)
		}
	}
	if err := keygen(ctx, filepath.Join(h.dir, "ssh_host_ed25519_key"), h.Name); err != nil {
		return err
	}
	id := make([]byte, 16)
	rand.Read(id)
	files := []struct {
		path string
		data []byte
		mode os.FileMode
	}{
		{"etc/hostname", []byte(h.Name + "\n"), 0o644},
		{"etc/machine-id", []byte(hex.EncodeToString(id) + "\n"), 0o444},
		{"etc/fstab", []byte("# lab host " + h.Name + ": nothing to mount\n"), 0o644},
		{"etc/systemd/system/" + dist.UnitName, dist.Unit, 0o644},
		{"etc/systemd/system/" + dist.NetnsUnitName, dist.NetnsUnit, 0o644},
	}
	if !h.noNetnsDropIn {
		files = append(files, struct {
			path string
			data []byte
			mode os.FileMode
		}{"etc/systemd/system/" + dist.NetnsDropInPath, dist.NetnsDropIn, 0o644})
	}
	for _, f := range files {
		if err := os.WriteFile(filepath.Join(seed, f.path), f.data, f.mode); err != nil {
			return fmt.Errorf("%s: seed %s: %w", h.Name, f.path, err)
		}
	}
	for _, c := range []struct{ from, to string }{
		{filepath.Join(h.dir, "ssh_host_ed25519_key"), sshdHostKey},
		{filepath.Join(h.dir, "ssh_host_ed25519_key.pub"), sshdHostKey + ".pub"},
		{filepath.Join(l.Dir, "authorized_keys"), sshdAuthorizedKeys},
	} {
		if err := copyFile(c.from, filepath.Join(seed, c.to), 0o600); err != nil {
			return fmt.Errorf("%s: seed %s: %w", h.Name, c.to, err)
		}
	}
	links := map[string]string{
		"etc/systemd/system/default.target":                      "/lib/systemd/system/multi-user.target",
		"etc/systemd/system/multi-user.target.wants/ssh.service": "/lib/systemd/system/ssh.service",
	}
	for _, u := range maskedUnits {
		links["etc/systemd/system/"+u] = "/dev/null"
	}
	maps.Copy(links, serviceLinks(h.services))
	for _, d := range generatorDirs {
		ents, _ := os.ReadDir(d)
		for _, e := range ents {
			links["etc/systemd/system-generators/"+e.Name()] = "/dev/null"
		}
	}
	for p, target := range links {
		if err := os.Symlink(target, filepath.Join(seed, p)); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("%s: seed %s: %w", h.Name, p, err)
		}
	}
	// Last: a service's files may replace nothing above.
	if err := seedServices(seed, h.services); err != nil {
		return fmt.Errorf("%s: %w", h.Name, err)
	}
	if err := os.WriteFile(filepath.Join(h.dir, "boot.sh"), systemdBootScript, 0o755); err != nil {
		return fmt.Errorf("%s: write boot script: %w", h.Name, err)
	}
	return nil
}

// sshdConfigSystemd is the host's /etc/ssh/sshd_config: the same settings
// as a plain lab host's, with the host's own paths.
func (h *Host) sshdConfigSystemd() string {
	return fmt.Sprintf(`# Lab host %s (systemd), written by internal/lab.
ListenAddress %s
HostKey %s
AuthorizedKeysFile %s
# The lab's key is also read by root for any user, so tests can log in as a
# non-root user (sudo -n).
AuthorizedKeysCommand /bin/cat %s
AuthorizedKeysCommandUser root
UsePAM %s
PermitRootLogin prohibit-password
StrictModes no
UseDNS no
PasswordAuthentication no
KbdInteractiveAuthentication no
PrintMotd no
PrintLastLog no
X11Forwarding no
MaxStartups 200:30:400
MaxSessions 64
Subsystem sftp /usr/lib/openssh/sftp-server
`, h.Name, h.Addr, sshdHostKey, sshdAuthorizedKeys, sshdAuthorizedKeys, map[bool]string{false: "no", true: "yes"}[h.logind])
}

// startSystemd boots the host: unshare runs systemd-boot.sh as PID 1 of new
// PID, mount, UTS, IPC and (inside) cgroup namespaces, which execs systemd.
// It returns once the host's sshd answers and systemd says running.
func (h *Host) startSystemd(ctx context.Context, l *Lab) error {
	cfg := filepath.Join(h.dir, "seed", "etc/ssh/sshd_config")
	if err := os.WriteFile(cfg, []byte(h.sshdConfigSystemd()), 0o644); err != nil {
		return fmt.Errorf("%s: write sshd_config: %w", h.Name, err)
	}
	mnt, err := cgroup2Mount()
	if err != nil {
		return fmt.Errorf("%s: %w", h.Name, err)
	}
	h.Cgroup = filepath.Join(mnt, "relaylab", fmt.Sprintf("%s-%s", l.ID, strings.TrimPrefix(h.Name, "lab-")))
	if err := os.MkdirAll(h.Cgroup, 0o755); err != nil {
		return fmt.Errorf("%s: create cgroup: %w", h.Name, err)
	}
	logf, err := os.OpenFile(filepath.Join(h.dir, "boot.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("%s: open boot log: %w", h.Name, err)
	}
	defer logf.Close()

	// --kill-child: if unshare is killed, so is the host's PID 1, and with
	// it the whole PID namespace.
	cmd := exec.Command("unshare", "--pid", "--fork", "--kill-child", "--mount", "--uts", "--ipc",
		"--propagation", "private", "/bin/sh", filepath.Join(h.dir, "boot.sh"), "cgroup", h.dir, h.Cgroup)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("%s: start unshare: %w", h.Name, err)
	}
	h.sshdv = cmd
	h.StarterPID = cmd.Process.Pid
	h.done = make(chan struct{})
	go func() {
		cmd.Wait()
		close(h.done)
	}()

	// The boot script's first act is to move into the host's cgroup: the
	// only process there is then its PID 1.
	for h.InitPID == 0 {
		if pids := cgroupProcs(h.Cgroup); len(pids) > 0 {
			h.InitPID = pids[0]
			break
		}
		if err := h.bootAlive(ctx); err != nil {
			return err
		}
		time.Sleep(5 * time.Millisecond)
	}
	pidns, err := nsID("pid", fmt.Sprintf("/proc/%d/ns/pid", h.InitPID))
	if err != nil {
		return fmt.Errorf("%s: %w", h.Name, err)
	}
	h.PIDNS = pidns

	for !banner(h.Addr) {
		if err := h.bootAlive(ctx); err != nil {
			return err
		}
		time.Sleep(10 * time.Millisecond)
	}
	h.Boot = &BootTimes{SSHReady: time.Since(start)}
	out, err := h.Exec(ctx, "systemctl", "is-system-running", "--wait")
	h.Boot.Running = time.Since(start)
	if state := strings.TrimSpace(string(out)); state != "running" {
		failed, _ := h.Exec(ctx, "systemctl", "--failed", "--no-legend", "--plain")
		return fmt.Errorf("%s: systemd is %q, want running (%v); failed units: %s%s", h.Name, state, err, strings.TrimSpace(string(failed)), h.failedServicesJournal(ctx))
	}
	mntns, err := nsID("mnt", fmt.Sprintf("/proc/%d/ns/mnt", h.InitPID))
	if err != nil {
		return fmt.Errorf("%s: %w", h.Name, err)
	}
	h.MountNS = mntns
	if h.SSHDPID, err = h.unitMachinePID(ctx, "ssh.service"); err != nil {
		return err
	}
	return h.checkServices(ctx)
}

// bootAlive reports why a booting host is gone, if it is.
func (h *Host) bootAlive(ctx context.Context) error {
	select {
	case <-h.done:
		return fmt.Errorf("%s: boot ended: %s", h.Name, tail(filepath.Join(h.dir, "boot.log")))
	case <-ctx.Done():
		return fmt.Errorf("%s: boot: %w: %s", h.Name, ctx.Err(), tail(filepath.Join(h.dir, "boot.log")))
	default:
		return nil
	}
}

func tail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 5 {
		lines = lines[len(lines)-5:]
	}
	return strings.Join(lines, " | ")
}

// cgroupProcs lists the processes in a cgroup and every cgroup below it, as
// the machine numbers them.
func cgroupProcs(dir string) []int {
	var pids []int
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
			return nil
		}
		b, _ := os.ReadFile(p)
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil && alive(pid) {
				pids = append(pids, pid)
			}
		}
		return nil
	})
	return pids
}

// unitMachinePID is the machine's PID of a unit's main process.
func (h *Host) unitMachinePID(ctx context.Context, unit string) (int, error) {
	pid, err := h.unitPID(ctx, unit, ErrUnitNotRunning)
	if err != nil {
		return 0, err
	}
	return h.MachinePID(pid)
}

// unitPID is systemctl's MainPID of unit, in the host's PID namespace; a
// unit with none is notRunning.
func (h *Host) unitPID(ctx context.Context, unit string, notRunning error) (int, error) {
	out, err := h.Exec(ctx, "systemctl", "show", "-p", "MainPID", "--value", unit)
	if err != nil {
		return 0, err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		return 0, fmt.Errorf("%s: parse MainPID of %s %q: %w", h.Name, unit, out, err)
	}
	if pid == 0 {
		return 0, fmt.Errorf("%s: %s: %w", h.Name, unit, notRunning)
	}
	return pid, nil
}

// MachinePID converts a PID as the host sees it (systemctl's MainPID, $$ in
// an SSH session) to the PID of the same process on the machine: the last
// field of the NSpid line of /proc/PID/status is the PID in the innermost
// namespace. For a plain lab host both are the same.
func (h *Host) MachinePID(pid int) (int, error) {
	if h.Kind != KindSystemd {
		return pid, nil
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0, fmt.Errorf("%s: list processes: %w", h.Name, err)
	}
	want := strconv.Itoa(pid)
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		if ns, err := os.Readlink(filepath.Join("/proc", e.Name(), "ns/pid")); err != nil || ns != h.PIDNS {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "status"))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if f, ok := strings.CutPrefix(line, "NSpid:"); ok {
				if fs := strings.Fields(f); len(fs) > 0 && fs[len(fs)-1] == want {
					return strconv.Atoi(e.Name())
				}
			}
		}
	}
	return 0, fmt.Errorf("%s: no process %d in the host's PID namespace", h.Name, pid)
}

// RunSystemdSysctl runs the host's real /lib/systemd/systemd-sysctl once,
// as its boot would if it were not masked, restricted to keys (each a
// net.core key: only /proc/sys/net/core is writable in the host, and those
// values are the machine's). The caller holds kerneltest.Lock, which saves
// and restores the machine's values. It returns systemd-sysctl's output.
func (h *Host) RunSystemdSysctl(ctx context.Context, keys ...string) ([]byte, error) {
	if h.Kind != KindSystemd {
		return nil, fmt.Errorf("%s: run systemd-sysctl: not a systemd host", h.Name)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("%s: run systemd-sysctl: no keys given", h.Name)
	}
	argv := []string{systemdSysctl}
	for _, k := range keys {
		rest, ok := strings.CutPrefix(k, "net.core.")
		if !ok || rest == "" || strings.ContainsAny(rest, "./ \t\n") {
			return nil, fmt.Errorf("%s: run systemd-sysctl: key %q: want net.core.NAME", h.Name, k)
		}
		argv = append(argv, "--prefix="+k)
	}
	cmd := h.Command(ctx, argv...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("%s: run systemd-sysctl: %w: %s", h.Name, err, strings.TrimSpace(string(out)))
	}
	return out, nil
}

// starterIsOurs reports whether StarterPID is still the unshare that
// started the host: its children go to the host's PID namespace.
func (h *Host) starterIsOurs() bool {
	if h.StarterPID == 0 || !alive(h.StarterPID) {
		return false
	}
	ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid_for_children", h.StarterPID))
	return err == nil && ns == h.PIDNS
}

// initIsOurs reports whether InitPID is still the host's PID 1 (not a
// reused pid).
func (h *Host) initIsOurs() bool {
	if h.InitPID == 0 || !alive(h.InitPID) {
		return false
	}
	ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", h.InitPID))
	return err == nil && ns == h.PIDNS
}

// stopSystemd powers the host off (SIGRTMIN+4: SIGTERM makes systemd
// re-execute itself), then kills what is left through its cgroup, and
// removes the cgroup. Processes that entered the host with nsenter are in
// its PID namespace: they end with its PID 1.
func (h *Host) stopSystemd() error {
	var errs []error
	procs := func() []int {
		var ps []int
		if h.Cgroup != "" {
			ps = cgroupProcs(h.Cgroup)
		}
		if h.initIsOurs() && !slices.Contains(ps, h.InitPID) {
			ps = append(ps, h.InitPID)
		}
		switch {
		case h.done != nil:
			select {
			case <-h.done:
			default:
				ps = append(ps, h.StarterPID)
			}
		case h.starterIsOurs():
			// A loaded lab: the unshare of another process (relaylab up).
			ps = append(ps, h.StarterPID)
		}
		return ps
	}
	if h.initIsOurs() {
		syscall.Kill(h.InitPID, sigPoweroff)
	}
	if !waitGone(procs, 15*time.Second) {
		if h.Cgroup != "" {
			os.WriteFile(filepath.Join(h.Cgroup, "cgroup.kill"), []byte("1"), 0o644)
		}
		signalAll(procs(), "KILL")
		if !waitGone(procs, 5*time.Second) {
			errs = append(errs, fmt.Errorf("%s: stop: processes %v survived SIGKILL", h.Name, procs()))
		}
	}
	if h.done != nil && len(errs) == 0 {
		<-h.done
	}
	if h.Cgroup != "" {
		if err := removeCgroup(h.Cgroup); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", h.Name, err))
		}
		os.Remove(filepath.Dir(h.Cgroup)) // the shared relaylab/ parent, once empty
	}
	return errors.Join(errs...)
}

// removeCgroup removes an empty cgroup tree, deepest first.
func removeCgroup(dir string) error {
	var dirs []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("remove cgroup: %w", err)
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := os.Remove(dirs[i]); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("remove cgroup: %w", err)
		}
	}
	return nil
}

// Memory sums the resident memory of every process in a systemd host's
// cgroup (systemd, journald, dbus, logind, sshd, relayd, sessions): RSS
// counts shared pages once per process, PSS splits them between the
// processes that share them (smaps_rollup). Bytes.
func (h *Host) Memory() (rss, pss int64, err error) {
	if h.Kind != KindSystemd {
		return 0, 0, fmt.Errorf("%s: memory: not a systemd host", h.Name)
	}
	for _, pid := range cgroupProcs(h.Cgroup) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
		if err != nil {
			continue // exited meanwhile
		}
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			if len(f) != 3 || f[2] != "kB" {
				continue
			}
			n, _ := strconv.ParseInt(f[1], 10, 64)
			switch f[0] {
			case "Rss:":
				rss += n * 1024
			case "Pss:":
				pss += n * 1024
			}
		}
	}
	return rss, pss, nil
}
