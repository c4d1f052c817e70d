package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/relayctl/relayctl/internal/lab"
)

func runCLI(t *testing.T, stdin string, args ...string) (string, string, int) {
	t.Helper()
	var out, errb strings.Builder
	code := run(append([]string{"relaylab"}, args...), strings.NewReader(stdin), &out, &errb)
	return out.String(), errb.String(), code
}

func TestUpExecDown(t *testing.T) {
	lab.Require(t)
	dir := t.TempDir()
	out, errs, code := runCLI(t, "", "up", "--dir", dir, "--hosts", "2")
	if code != 0 {
		t.Fatalf("up: exit %d: %s", code, errs)
	}
	t.Cleanup(func() {
		// If the test failed half way, still stop what up started.
		if l, err := lab.Load(dir); err == nil {
			l.Close()
		}
	})
	for _, want := range []string{"ssh_config  " + filepath.Join(dir, "ssh_config"), "known_hosts " + filepath.Join(dir, "known_hosts"), "lab-1 127.0.", "lab-2 127.0."} {
		if !strings.Contains(out, want) {
			t.Errorf("up printed %q, want it to contain %q", out, want)
		}
	}
	l, err := lab.Load(dir)
	if err != nil {
		t.Fatal(err)
	}

	// The real client reaches what up started.
	if b, err := exec.Command("ssh", "-F", l.SSHConfig, "lab-2", "cat /etc/relay/service.env").CombinedOutput(); err != nil || !strings.Contains(string(b), "RELAY_NETNS=lab-") {
		t.Errorf("ssh lab-2: %q, %v", b, err)
	}

	if out, errs, code := runCLI(t, "net.core.somaxconn = 512\n", "exec", "--dir", dir, "lab-1", "--", "sh", "-c", "cat > /etc/sysctl.d/60-cli.conf && echo done"); code != 0 || out != "done\n" {
		t.Errorf("exec writing a file: exit %d, %q %q", code, out, errs)
	}
	p, err := l.Host("lab-1").Path("/etc/sysctl.d/60-cli.conf")
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(p); err != nil || string(b) != "net.core.somaxconn = 512\n" {
		t.Errorf("file written by exec: %q, %v", b, err)
	}
	if _, _, code := runCLI(t, "", "exec", "--dir", dir, "lab-2", "--", "sh", "-c", "exit 7"); code != 7 {
		t.Errorf("exec passing exit 7: got %d", code)
	}
	if _, errs, code := runCLI(t, "", "exec", "--dir", dir, "lab-9", "--", "true"); code != 1 || !strings.Contains(errs, `no host "lab-9"`) {
		t.Errorf("exec on a missing host: exit %d, %q", code, errs)
	}

	if out, errs, code := runCLI(t, "", "status", "--dir", dir); code != 0 || !strings.Contains(out, "lab-1 "+l.Hosts[0].Addr+" running\nlab-2 ") {
		t.Errorf("status of a lab that is up: exit %d, %q %q", code, out, errs)
	}
	// A host stopped some other way: status says so, and down still
	// stops the rest.
	syscall.Kill(l.Hosts[1].SSHDPID, syscall.SIGKILL)
	for alive(l.Hosts[1].SSHDPID) {
		time.Sleep(10 * time.Millisecond)
	}
	if out, errs, code := runCLI(t, "", "status", "--dir", dir); code != 3 || !strings.Contains(out, "lab-2 "+l.Hosts[1].Addr+" stopped\n") {
		t.Errorf("status with lab-2's sshd killed: exit %d, %q %q; want 3 naming lab-2", code, out, errs)
	}

	if out, errs, code := runCLI(t, "", "down", "--dir", dir); code != 0 || out != "stopped 2 hosts\n" {
		t.Fatalf("down: exit %d, %q %q", code, out, errs)
	}
	for _, h := range l.Hosts {
		if _, err := os.Stat(filepath.Join("/run/netns", h.RelayNetns)); err == nil {
			t.Errorf("%s: namespace %s left after down", h.Name, h.RelayNetns)
		}
		if b, err := os.ReadFile("/proc/" + strconv.Itoa(h.SSHDPID) + "/stat"); err == nil && !strings.Contains(string(b), ") Z ") {
			t.Errorf("%s: sshd %d still running after down", h.Name, h.SSHDPID)
		}
	}
	if _, errs, code := runCLI(t, "", "down", "--dir", dir); code != 1 || !strings.Contains(errs, "lab.json") {
		t.Errorf("second down: exit %d, %q; want 1 naming lab.json", code, errs)
	}
}

// TestUpBusybox: relaylab up --busybox gives a host whose shell is
// busybox's, with the relay under relay-service.
func TestUpBusybox(t *testing.T) {
	lab.RequireBusybox(t)
	dir := t.TempDir()
	relayd := lab.BuildRelayd(t, "1.8.0")
	out, errs, code := runCLI(t, "", "up", "--dir", dir, "--busybox", "--relayd", relayd, "--relay-version", "1.8.0")
	if code != 0 {
		t.Fatalf("up: exit %d: %s", code, errs)
	}
	t.Cleanup(func() {
		if l, err := lab.Load(dir); err == nil {
			l.Close()
		}
	})
	if !strings.Contains(out, " userland=busybox\n") {
		t.Errorf("up printed %q, want userland=busybox", out)
	}
	if out, errs, code := runCLI(t, "", "exec", "--dir", dir, "lab-1", "--", "sh", "-c", "readlink /proc/$$/exe && /opt/relay/bin/relay-service pid"); code != 0 || !strings.HasPrefix(out, "/usr/bin/busybox\n") {
		t.Errorf("exec: exit %d, %q %q; want busybox's sh and the relay's pid", code, out, errs)
	}
	if out, errs, code := runCLI(t, "", "down", "--dir", dir); code != 0 || out != "stopped 1 hosts\n" {
		t.Errorf("down: exit %d, %q %q", code, out, errs)
	}
}

func TestUsage(t *testing.T) {
	for _, args := range [][]string{{}, {"up"}, {"up", "--dir", "x", "--relayd", "bin"}, {"exec", "--dir", "x", "lab-1", "true"}, {"frob"}} {
		if _, errs, code := runCLI(t, "", args...); code != 2 || !strings.Contains(errs, "examples:") {
			t.Errorf("%q: exit %d, %q; want 2 and the usage", args, code, errs)
		}
	}
}

// TestUpSystemd starts a sshd host and a systemd host with relayd running
// as relayd.service, as `relaylab up --hosts 1 --systemd 1 --relayd ...` does.
func TestUpSystemd(t *testing.T) {
	lab.RequireSystemd(t)
	dir := t.TempDir()
	relayd := lab.BuildRelayd(t, "1.8.0")
	out, errs, code := runCLI(t, "", "up", "--dir", dir, "--hosts", "1", "--systemd", "1", "--relayd", relayd, "--relay-version", "1.8.0")
	if code != 0 {
		t.Fatalf("up: exit %d: %s", code, errs)
	}
	t.Cleanup(func() {
		if l, err := lab.Load(dir); err == nil {
			l.Close()
		}
	})
	if !strings.Contains(out, "lab-2 127.0.") || !strings.Contains(out, " systemd init_pid=") {
		t.Errorf("up printed %q, want lab-2 as a systemd host", out)
	}
	l, err := lab.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := exec.Command("ssh", "-F", l.SSHConfig, "lab-2", "systemctl is-active relayd; systemctl is-system-running").CombinedOutput(); err != nil || string(b) != "active\nrunning\n" {
		t.Errorf("ssh lab-2: %q, %v; want relayd active, system running", b, err)
	}
	if out, errs, code := runCLI(t, "", "exec", "--dir", dir, "lab-2", "--", "systemctl", "show", "-p", "Type", "--value", "relayd"); code != 0 || out != "notify\n" {
		t.Errorf("exec systemctl on lab-2: exit %d, %q %q", code, out, errs)
	}
	init := l.Host("lab-2").InitPID
	if out, errs, code := runCLI(t, "", "down", "--dir", dir); code != 0 || out != "stopped 2 hosts\n" {
		t.Fatalf("down: exit %d, %q %q", code, out, errs)
	}
	if b, err := os.ReadFile("/proc/" + strconv.Itoa(init) + "/stat"); err == nil && !strings.Contains(string(b), ") Z ") {
		t.Errorf("lab-2: systemd %d still running after down", init)
	}
	if _, err := os.Stat(l.Host("lab-2").Cgroup); err == nil {
		t.Errorf("lab-2: cgroup %s left after down", l.Host("lab-2").Cgroup)
	}
}
