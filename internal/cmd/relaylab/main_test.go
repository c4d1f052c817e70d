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

// TestMain removes the relayd builds the tests made (lab.BuildRelayd).
func TestMain(m *testing.M) { os.Exit(lab.RunRemovingBuilds(m)) }

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
	if out, errs, code := runCLI(t, "", "status", "--dir", dir); code != 3 || !strings.Contains(out, "lab-2 "+l.Hosts[1].Addr+" down\n") {
		t.Errorf("status with lab-2's sshd killed: exit %d, %q %q; want 3 naming lab-2 down", code, out, errs)
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

// relaylab stop HOST stops that host's sshd and its sessions: connections
// to it are refused, as to a host whose SSH server is down, while its
// relay goes on; relaylab start HOST starts the same host again (its
// files, address and host key); down stops a lab with a host stopped,
// leaving nothing.
func TestStopStartOneHost(t *testing.T) {
	lab.Require(t)
	dir := t.TempDir()
	relayd := lab.BuildRelayd(t, "1.7.0")
	if _, errs, code := runCLI(t, "", "up", "--dir", dir, "--hosts", "2", "--relayd", relayd, "--relay-version", "1.7.0"); code != 0 {
		t.Fatalf("up: exit %d: %s", code, errs)
	}
	t.Cleanup(func() {
		if l, err := lab.Load(dir); err == nil {
			l.Close()
		}
	})
	ssh := func(host string, cmd ...string) (string, error) {
		b, err := exec.Command("ssh", append([]string{"-F", filepath.Join(dir, "ssh_config"), "-o", "ConnectTimeout=5", host}, cmd...)...).CombinedOutput()
		return string(b), err
	}
	relay, err := ssh("lab-2", "/opt/relay/bin/relay-service", "pid")
	if err != nil {
		t.Fatalf("lab-2's relay: %v %s", err, relay)
	}
	if out, errs, code := runCLI(t, "", "stop", "--dir", dir, "lab-2"); code != 0 || !strings.Contains(out, "lab-2: sshd stopped") {
		t.Fatalf("stop lab-2: exit %d, %q %q", code, out, errs)
	}
	if out, err := ssh("lab-2", "true"); err == nil || !strings.Contains(out, "Connection refused") {
		t.Errorf("ssh lab-2 after stop: %v %q, want the connection refused", err, out)
	}
	if out, err := ssh("lab-1", "true"); err != nil {
		t.Errorf("ssh lab-1 while lab-2 is stopped: %v %q", err, out)
	}
	up, err := lab.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := "lab-1 " + up.Hosts[0].Addr + " running\nlab-2 " + up.Hosts[1].Addr + " stopped\n"
	if out, _, code := runCLI(t, "", "status", "--dir", dir); code != 3 || out != want {
		t.Errorf("status with lab-2 stopped: exit %d, %q; want 3 and %q", code, out, want)
	}
	// The relay goes on, and the host is still there for exec.
	if out, errs, code := runCLI(t, "", "exec", "--dir", dir, "lab-2", "--", "sh", "-c", "/opt/relay/bin/relay-service pid && echo kept > /etc/relay/while-stopped"); code != 0 || out != relay {
		t.Errorf("exec on lab-2 while stopped: exit %d, %q %q; want the relay's pid %q", code, out, errs, relay)
	}
	if _, errs, code := runCLI(t, "", "stop", "--dir", dir, "lab-2"); code != 1 || !strings.Contains(errs, "already") {
		t.Errorf("stop lab-2 twice: exit %d, %q", code, errs)
	}
	if out, errs, code := runCLI(t, "", "start", "--dir", dir, "lab-2"); code != 0 || out != "lab-2: sshd started\n" {
		t.Fatalf("start lab-2: exit %d, %q %q", code, out, errs)
	}
	if out, err := ssh("lab-2", "cat /etc/relay/while-stopped && /opt/relay/bin/relay-service pid"); err != nil || out != "kept\n"+relay {
		t.Errorf("ssh lab-2 after start: %v %q, want the same host: its file and relay", err, out)
	}
	if _, errs, code := runCLI(t, "", "start", "--dir", dir, "lab-1"); code != 1 || !strings.Contains(errs, "it runs") {
		t.Errorf("start of a running host: exit %d, %q", code, errs)
	}
	if _, errs, code := runCLI(t, "", "stop", "--dir", dir, "lab-9"); code != 1 || !strings.Contains(errs, `no host "lab-9"`) {
		t.Errorf("stop of no host: exit %d, %q", code, errs)
	}

	// Down with lab-1 stopped leaves no process: its keeper goes too.
	runCLI(t, "", "stop", "--dir", dir, "lab-1")
	l, err := lab.Load(dir)
	if err != nil || l.Hosts[0].KeeperPID == 0 {
		t.Fatalf("lab-1 stopped has no keeper in lab.json: %v", err)
	}
	if out, errs, code := runCLI(t, "", "down", "--dir", dir); code != 0 || out != "stopped 2 hosts\n" {
		t.Fatalf("down: exit %d, %q %q", code, out, errs)
	}
	if alive(l.Hosts[0].KeeperPID) {
		t.Errorf("lab-1's keeper %d still runs after down", l.Hosts[0].KeeperPID)
	}
	if ps := processesOf(dir); len(ps) > 0 {
		t.Errorf("processes left after down: %v", ps)
	}
}
