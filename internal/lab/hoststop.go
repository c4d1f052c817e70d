package lab

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// A host's sshd stopped and started again (relaylab stop HOST, relaylab
// start HOST): a host relayctl cannot reach, as one whose SSH server is
// down, while its relay goes on serving its players.
//
// The sshd is the first process of the host's mount namespace, where the
// host's private trees are bound: before it goes, a keeper (a sleep,
// started in that namespace with nsenter) holds the namespace, so that the
// sshd started again is the same host, with the same files, the same
// address and host key. The keeper is recorded in lab.json (KeeperPID) and
// stopped once the sshd runs again; Close stops it with the rest.

// ErrSSHDStopped is a host whose sshd relaylab stop has stopped.
var ErrSSHDStopped = errors.New("its sshd is stopped (relaylab start starts it)")

// keeperArgv is what the keeper runs inside the host: a sleep of 68 years,
// which busybox's sleep takes as coreutils' does.
var keeperArgv = []string{"/bin/sleep", "2147483647"}

// StopSSHD stops the sshd of host name and every SSH session on it; its
// relay and every other process of the host go on. Connections to its
// address are refused until StartSSHD. A systemd host's sshd is its
// ssh.service (and ssh.socket), stopped with systemctl.
func (l *Lab) StopSSHD(name string) error {
	h, err := l.hostToChange(name)
	if err != nil {
		return err
	}
	if h.SSHDStopped {
		return fmt.Errorf("%s: %w already", h.Name, ErrSSHDStopped)
	}
	if !h.running() {
		return fmt.Errorf("%s: stop sshd: the host is not running (relaylab status)", h.Name)
	}
	if h.Kind == KindSystemd {
		if _, err := h.Exec(context.Background(), "systemctl", "stop", "ssh.socket", "ssh.service"); err != nil {
			return fmt.Errorf("stop sshd: %w", err)
		}
	} else if err := h.stopSSHD(); err != nil {
		return err
	}
	h.SSHDStopped = true
	return l.save()
}

// stopSSHD starts the keeper, then ends the sessions and the listening
// sshd of a host that is not a systemd host.
func (h *Host) stopSSHD() error {
	keeper, err := h.startKeeper()
	if err != nil {
		return err
	}
	h.KeeperPID = keeper
	if _, err := h.CutSessions(); err != nil {
		return fmt.Errorf("stop sshd: %w", err)
	}
	pid := h.SSHDPID
	syscall.Kill(pid, syscall.SIGTERM)
	if !waitGone(func() []int { return alivePIDs(pid) }, 5*time.Second) {
		syscall.Kill(pid, syscall.SIGKILL)
		if !waitGone(func() []int { return alivePIDs(pid) }, 5*time.Second) {
			return fmt.Errorf("%s: stop sshd: pid %d survived SIGKILL", h.Name, pid)
		}
	}
	if banner(h.Addr) {
		return fmt.Errorf("%s: stop sshd: %s still answers", h.Name, h.Addr)
	}
	return nil
}

// startKeeper starts the process that holds the host's mount namespace
// while its sshd is stopped, in its mount and network namespaces (what
// Command enters meanwhile), and returns its pid (the machine's).
func (h *Host) startKeeper() (int, error) {
	argv := append([]string{"-t", strconv.Itoa(h.SSHDPID), "-m", "-n", "--"}, keeperArgv...)
	cmd := exec.Command("nsenter", argv...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true} // no terminal signals; outlives relaylab
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("%s: stop sshd: start the keeper of its namespace: %w", h.Name, err)
	}
	go cmd.Wait() // reaped here while relaylab runs, by init after
	pid := cmd.Process.Pid
	// nsenter execs the sleep once it has entered: until then it is in
	// the machine's namespace.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", pid)); err == nil && ns == h.MountNS {
			return pid, nil
		}
		if !alive(pid) || time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL)
			return 0, fmt.Errorf("%s: stop sshd: the keeper of its namespace did not enter it", h.Name)
		}
	}
}

// StartSSHD starts the sshd of host name again, after StopSSHD: in the
// host's namespaces, with its config and host key, at its address; it
// returns once the sshd sends its banner.
func (l *Lab) StartSSHD(ctx context.Context, name string) error {
	h, err := l.hostToChange(name)
	if err != nil {
		return err
	}
	if !h.SSHDStopped {
		return fmt.Errorf("%s: start sshd: it runs (relaylab stop %s stops it)", h.Name, h.Name)
	}
	if h.Kind == KindSystemd {
		if _, err := h.Exec(ctx, "systemctl", "start", "ssh.service"); err != nil {
			return fmt.Errorf("start sshd: %w", err)
		}
	} else if err := h.restartSSHD(ctx); err != nil {
		return err
	}
	h.SSHDStopped = false
	if err := waitFor(ctx, func() bool { return banner(h.Addr) }); err != nil {
		return fmt.Errorf("%s: start sshd: no banner on %s: %w", h.Name, h.Addr, err)
	}
	return l.save()
}

// restartSSHD starts the sshd in the keeper's namespace (and the sshd's
// own network namespace, if it has one), then stops the keeper.
func (h *Host) restartSSHD(ctx context.Context) error {
	if ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", h.KeeperPID)); err != nil || ns != h.MountNS {
		return fmt.Errorf("%s: start sshd: the keeper of its namespace (pid %d) is gone; relaylab down stops the lab", h.Name, h.KeeperPID)
	}
	argv := []string{"-t", strconv.Itoa(h.KeeperPID), "-m"}
	if h.SSHDNetns != "" {
		argv = append(argv, "--net="+filepath.Join("/run/netns", h.SSHDNetns))
	}
	argv = append(argv, "--", sshdBinary, "-D", "-e", "-f", filepath.Join(h.dir, "sshd_config"))
	logf, err := os.OpenFile(filepath.Join(h.dir, "sshd.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("%s: open sshd log: %w", h.Name, err)
	}
	defer logf.Close()
	cmd := exec.Command("nsenter", argv...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("%s: start sshd: %w", h.Name, err)
	}
	h.sshdv, h.SSHDPID, h.done = cmd, cmd.Process.Pid, make(chan struct{})
	go func() {
		cmd.Wait()
		close(h.done)
	}()
	if err := h.waitBanner(ctx); err != nil {
		return err
	}
	syscall.Kill(h.KeeperPID, syscall.SIGKILL)
	h.KeeperPID = 0
	return nil
}

// hostToChange is host name of the lab, for StopSSHD and StartSSHD.
func (l *Lab) hostToChange(name string) (*Host, error) {
	l.mu.Lock()
	closed := l.closed
	l.mu.Unlock()
	h := l.Host(name)
	switch {
	case closed:
		return nil, fmt.Errorf("%s: the lab is stopped", name)
	case h == nil:
		return nil, fmt.Errorf("no host %q in %s", name, l.Dir)
	}
	return h, nil
}

// alivePIDs is pids that still run.
func alivePIDs(pids ...int) []int {
	var out []int
	for _, p := range pids {
		if alive(p) {
			out = append(out, p)
		}
	}
	return out
}

// waitFor polls ok until it holds or ctx ends (at most 30 s).
func waitFor(ctx context.Context, ok func() bool) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for !ok() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}
