package lab_test

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/relayctl/relayctl/internal/kerneltest"
	"github.com/relayctl/relayctl/internal/lab"
)

// sshRun runs cmd on host with the real OpenSSH client and the lab's
// ssh_config, and returns stdout, stderr and the exit status.
func sshRun(t *testing.T, l *lab.Lab, host, cmd, stdin string) (string, string, int) {
	t.Helper()
	c := exec.Command("ssh", "-F", l.SSHConfig, host, cmd)
	c.Stdin = strings.NewReader(stdin)
	var out, errb strings.Builder
	c.Stdout, c.Stderr = &out, &errb
	err := c.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		if ee.ExitCode() == 255 {
			t.Fatalf("ssh %s %q: connection failed: %s", host, cmd, errb.String())
		}
		return out.String(), errb.String(), ee.ExitCode()
	case err != nil:
		t.Fatalf("ssh %s %q: %v", host, cmd, err)
	}
	return out.String(), errb.String(), 0
}

// sshOK is sshRun for commands that must succeed.
func sshOK(t *testing.T, l *lab.Lab, host, cmd string) string {
	t.Helper()
	out, errs, code := sshRun(t, l, host, cmd, "")
	if code != 0 {
		t.Fatalf("ssh %s %q: exit %d: %s", host, cmd, code, errs)
	}
	return out
}

func netnsOf(t *testing.T, pid int) string {
	t.Helper()
	l, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", pid))
	if err != nil {
		t.Fatalf("read net namespace of %d: %v", pid, err)
	}
	return l
}

// running reports whether pid is a process that has not exited (a zombie
// waits for PID 1 to reap it and counts as gone).
func running(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(b), ')')
	return i > 0 && i+2 < len(b) && b[i+2] != 'Z' && b[i+2] != 'X'
}

// closeAndCheck closes the lab and checks that none of its processes and
// namespaces remain.
func closeAndCheck(t *testing.T, l *lab.Lab, pids ...int) {
	t.Helper()
	var nss []string
	for _, h := range l.Hosts {
		pids = append(pids, h.SSHDPID)
		for _, ns := range []string{h.SSHDNetns, h.RelayNetns} {
			if ns != "" {
				nss = append(nss, ns)
			}
		}
	}
	if err := l.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	for _, p := range pids {
		if running(p) {
			t.Errorf("pid %d still running after Close", p)
		}
	}
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		t.Fatalf("ip netns list: %v", err)
	}
	for _, ns := range nss {
		if strings.Contains(string(out), ns) {
			t.Errorf("namespace %s still listed after Close:\n%s", ns, out)
		}
	}
	for _, h := range l.Hosts {
		if h.Veth == "" {
			continue
		}
		if _, err := net.InterfaceByName(h.Veth); err == nil {
			t.Errorf("%s: veth %s still exists after Close", h.Name, h.Veth)
		}
	}
}

func TestHostsArePrivate(t *testing.T) {
	t.Parallel()
	l := lab.StartT(t, lab.Options{Hosts: []lab.HostOptions{{}, {}}})

	for _, h := range l.Hosts {
		if got, want := sshOK(t, l, h.Name, `echo "$HOME $(id -u)"`), "/root 0\n"; got != want {
			t.Errorf("%s: got %q, want %q", h.Name, got, want)
		}
		start := time.Now()
		sshOK(t, l, h.Name, "true")
		t.Logf("%s: ssh true took %v", h.Name, time.Since(start))
		// An empty home: the machine's /root/.bashrc costs 0.5 s per command.
		if got := sshOK(t, l, h.Name, "ls -A /root"); got != "" {
			t.Errorf("%s: /root holds %q, want an empty private home", h.Name, got)
		}
		if got, want := netnsOf(t, h.SSHDPID), netnsOf(t, os.Getpid()); got != want {
			t.Errorf("%s: sshd in network namespace %s, want the initial one %s", h.Name, got, want)
		}
	}

	// The sysctl directories start as a copy of the machine's, so
	// precedence on a host is realistic.
	ents, err := os.ReadDir("/etc/sysctl.d")
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, e := range ents {
		want = append(want, e.Name())
	}
	if got := strings.Fields(sshOK(t, l, "lab-2", "ls -A /etc/sysctl.d")); !slices.Equal(got, want) {
		t.Errorf("lab-2 /etc/sysctl.d: got %q, want the machine's %q", got, want)
	}

	const conf = "/etc/sysctl.d/50-lab-private-test.conf"
	if _, errs, code := sshRun(t, l, "lab-1", "cat > "+conf, "net.core.somaxconn = 4096\n"); code != 0 {
		t.Fatalf("write %s on lab-1: exit %d: %s", conf, code, errs)
	}
	if got := sshOK(t, l, "lab-1", "cat "+conf); got != "net.core.somaxconn = 4096\n" {
		t.Errorf("lab-1 %s: got %q", conf, got)
	}
	if _, _, code := sshRun(t, l, "lab-2", "test -e "+conf, ""); code == 0 {
		t.Errorf("lab-2 sees lab-1's %s", conf)
	}
	if _, err := os.Stat(conf); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the machine sees lab-1's %s (stat: %v)", conf, err)
	}
	p, err := l.Hosts[0].Path(conf)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(p); err != nil || string(b) != "net.core.somaxconn = 4096\n" {
		t.Errorf("lab-1 %s from the machine at %s: got %q, %v", conf, p, b, err)
	}
	for _, d := range []string{"/opt/relay/run", "/var/lib/relayctl/x", "/etc/relay/x"} {
		sshOK(t, l, "lab-1", "mkdir -p "+d)
		if _, err := os.Stat(d); err == nil {
			t.Errorf("the machine sees lab-1's %s", d)
		}
	}

	// The sshd runs in the initial network namespace, so a session can
	// really write the global rmem_max (here its own value, under the lock
	// that tests changing it take).
	kerneltest.Lock(t)
	if _, errs, code := sshRun(t, l, "lab-1", `v=$(cat /proc/sys/net/core/rmem_max) && printf '%s\n' "$v" > /proc/sys/net/core/rmem_max`, ""); code != 0 {
		t.Errorf("lab-1: write net.core.rmem_max: exit %d: %s", code, errs)
	}

	// A process a session left behind, detached, is the lab's to stop too.
	out := sshOK(t, l, "lab-2", "setsid sleep 600 </dev/null >/dev/null 2>&1 & echo $!")
	orphan, err := strconv.Atoi(strings.TrimSpace(out))
	if err != nil || !running(orphan) {
		t.Fatalf("detached sleep: pid %q, %v", out, err)
	}
	closeAndCheck(t, l, orphan)
}

func TestSSHDInNetns(t *testing.T) {
	t.Parallel()
	l := lab.StartT(t, lab.Options{Hosts: []lab.HostOptions{{SSHDInNetns: true}}})
	h := l.Hosts[0]
	if !strings.HasPrefix(h.HostName, "10.231.") {
		t.Errorf("sshd address %s, want one in 10.231.0.0/16", h.HostName)
	}
	if got, dont := netnsOf(t, h.SSHDPID), netnsOf(t, os.Getpid()); got == dont {
		t.Errorf("sshd runs in the initial network namespace %s", got)
	}
	if got := sshOK(t, l, h.Name, "stat -c %a /proc/sys/net/core/rmem_max"); got != "444\n" {
		t.Errorf("mode of rmem_max in the session: got %q, want 444", got)
	}
	// Rewriting the current value: if it were writable, nothing changes.
	_, errs, code := sshRun(t, l, h.Name, `v=$(cat /proc/sys/net/core/rmem_max) && printf '%s\n' "$v" > /proc/sys/net/core/rmem_max`, "")
	if code == 0 {
		t.Errorf("write net.core.rmem_max in the session succeeded, want it read-only")
	}
	t.Logf("write rmem_max: exit %d: %s", code, strings.TrimSpace(errs))
	// docs/kernel.md: sysctl -w says "Invalid argument" and exits 0 there.
	out, errs, code := sshRun(t, l, h.Name, `sysctl -w net.core.rmem_max="$(cat /proc/sys/net/core/rmem_max)"`, "")
	if code != 0 || !strings.Contains(out+errs, "Invalid argument") {
		t.Errorf("sysctl -w net.core.rmem_max: exit %d, output %q, want exit 0 and Invalid argument", code, out+errs)
	}
	// The per-namespace keys stay writable.
	sshOK(t, l, h.Name, "sysctl -w net.core.somaxconn=1234 && test \"$(cat /proc/sys/net/core/somaxconn)\" = 1234")

	closeAndCheck(t, l)
}

func TestRelay(t *testing.T) {
	t.Parallel()
	relayd := lab.BuildRelayd(t, "1.7.0")
	// A relay in the initial namespace needs ports nobody else holds.
	udp, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := udp.LocalAddr().(*net.UDPAddr).Port
	udp.Close()
	shared := fmt.Sprintf("RELAYD_LISTEN=0.0.0.0:%d\nRELAYD_CONTROL=127.0.0.1:%d\n", port, port)

	tests := []struct {
		name   string
		host   lab.HostOptions
		port   int
		ownNet bool // the relay runs outside the initial network namespace
	}{
		{"relay netns", lab.HostOptions{}, 7788, true},
		{"shared netns", lab.HostOptions{NoRelayNetns: true}, port, false},
		{"sshd in netns", lab.HostOptions{SSHDInNetns: true}, 7788, true},
	}
	var opts lab.Options
	for _, tt := range tests {
		ho := tt.host
		ho.Relay = &lab.RelayInstall{Binary: relayd, Version: "1.7.0", Start: true}
		if !tt.ownNet {
			ho.Relay.Config = shared
		}
		opts.Hosts = append(opts.Hosts, ho)
	}
	l := lab.StartT(t, opts)

	var pids []int
	for i, tt := range tests {
		h := l.Hosts[i]
		t.Run(tt.name, func(t *testing.T) {
			out := sshOK(t, l, h.Name, lab.ServiceScript+" pid")
			pid, err := strconv.Atoi(strings.TrimSpace(out))
			if err != nil {
				t.Fatalf("relay-service pid printed %q", out)
			}
			pids = append(pids, pid)
			if got, err := h.RelayPID(t.Context()); err != nil || got != pid {
				t.Errorf("RelayPID: got %d, %v, want %d", got, err, pid)
			}
			if got := sshOK(t, l, h.Name, "readlink /opt/relay/current"); got != "releases/1.7.0\n" {
				t.Errorf("current: got %q, want releases/1.7.0", got)
			}

			inside, err := exec.Command("nsenter", "-t", strconv.Itoa(pid), "-n", "ss", "-H", "-u", "-l", "-n", "-p").Output()
			if err != nil {
				t.Fatalf("nsenter -t %d -n ss: %v", pid, err)
			}
			sock := regexp.MustCompile(fmt.Sprintf(`:%d .*pid=%d,`, tt.port, pid))
			if !sock.Match(inside) {
				t.Errorf("relay's namespace: no UDP socket on port %d owned by pid %d:\n%s", tt.port, pid, inside)
			}
			initial, err := exec.Command("ss", "-H", "-u", "-l", "-n", "-p").Output()
			if err != nil {
				t.Fatalf("ss: %v", err)
			}
			if got := sock.Match(initial); got == tt.ownNet {
				t.Errorf("relay's socket in the initial namespace: got %v, want %v", got, !tt.ownNet)
			}
			if tt.ownNet {
				want, err := os.Readlink("/proc/self/ns/net")
				if err != nil {
					t.Fatal(err)
				}
				nsFile := filepath.Join("/run/netns", h.RelayNetns)
				var st, self os.FileInfo
				if st, err = os.Stat(nsFile); err != nil {
					t.Fatal(err)
				}
				if self, err = os.Stat(fmt.Sprintf("/proc/%d/ns/net", pid)); err != nil {
					t.Fatal(err)
				}
				if !os.SameFile(st, self) {
					t.Errorf("relay %d is not in namespace %s", pid, h.RelayNetns)
				}
				if netnsOf(t, pid) == want {
					t.Errorf("relay %d runs in the initial namespace", pid)
				}
			}
			// What relayctl reads back: the relay's own namespace's counters.
			if snmp, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/snmp", pid)); err != nil || !strings.Contains(string(snmp), "RcvbufErrors") {
				t.Errorf("read /proc/%d/net/snmp: %v", pid, err)
			}

			if out := sshOK(t, l, h.Name, lab.ServiceScript+" status"); !strings.Contains(out, fmt.Sprintf("pid:     %d", pid)) {
				t.Errorf("status: %q", out)
			}
			if out := sshOK(t, l, h.Name, lab.ServiceScript+" restart"); !strings.Contains(out, "relayd started") {
				t.Errorf("restart printed %q", out)
			}
			old := pid
			if pid, err = h.RelayPID(t.Context()); err != nil || pid == old || running(old) {
				t.Errorf("after restart: pid %d (%v), was %d (running: %v); want a new process", pid, err, old, running(old))
			}
			sshOK(t, l, h.Name, lab.ServiceScript+" stop")
			if running(pid) {
				t.Errorf("relay %d still running after stop", pid)
			}
			if _, err := h.RelayPID(t.Context()); !errors.Is(err, lab.ErrRelayNotRunning) {
				t.Errorf("RelayPID after stop: got %v, want ErrRelayNotRunning", err)
			}
			// Started again, it is left to Close to stop.
			sshOK(t, l, h.Name, lab.ServiceScript+" start")
			if pid, err = h.RelayPID(t.Context()); err != nil {
				t.Fatal(err)
			}
			pids = append(pids, pid)
		})
	}
	closeAndCheck(t, l, pids...)
}

// TestServiceScriptFailures starts releases that are not a working relay:
// relayctl must see "a release that fails to start" as a failed start.
func TestServiceScriptFailures(t *testing.T) {
	t.Parallel()
	l := lab.StartT(t, lab.Options{Hosts: []lab.HostOptions{{}}})
	h := l.Hosts[0]
	svc := lab.ServiceScript

	if out, errs, code := sshRun(t, l, h.Name, svc+" start", ""); code != 1 || !strings.Contains(errs, "no executable release installed") {
		t.Errorf("start with no release: exit %d, %q %q; want 1 and no executable release installed", code, out, errs)
	}
	if out, _, code := sshRun(t, l, h.Name, svc+" pid", ""); code != 3 || out != "" {
		t.Errorf("pid when stopped: exit %d, %q; want 3 and nothing", code, out)
	}
	if _, _, code := sshRun(t, l, h.Name, svc+" status", ""); code != 3 {
		t.Errorf("status when stopped: exit %d, want 3", code)
	}
	if out, _, code := sshRun(t, l, h.Name, svc+" stop", ""); code != 0 {
		t.Errorf("stop when stopped: exit %d, %q; want 0", code, out)
	}
	if _, _, code := sshRun(t, l, h.Name, svc+" frobnicate", ""); code != 2 {
		t.Errorf("unknown subcommand: exit %d, want 2", code)
	}

	// Releases that are scripts named relayd, as a broken build would be.
	install := func(version, body string) {
		t.Helper()
		bin := filepath.Join(t.TempDir(), "relayd")
		if err := os.WriteFile(bin, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := h.InstallRelay(t.Context(), lab.RelayInstall{Binary: bin, Version: version}); err != nil {
			t.Fatal(err)
		}
	}

	install("0.0.1-exits", "grep SigIgn /proc/$$/status\necho \"relayd: bad flag in $*\" >&2\nexit 4\n")
	_, errs, code := sshRun(t, l, h.Name, svc+" start", "")
	if code != 1 || !strings.Contains(errs, "exited (status 4)") || !strings.Contains(errs, "relayd: bad flag in --config /etc/relay/relayd.env") {
		t.Errorf("start of a release that exits: exit %d, stderr %q; want 1, its status and its log", code, errs)
	}
	wantHUPIgnored(t, errs)
	if out, _, code := sshRun(t, l, h.Name, svc+" pid", ""); code != 3 {
		t.Errorf("pid after a failed start: exit %d, %q; want 3", code, out)
	}

	install("0.0.2-mute", "echo 'relayd: up, not listening'\nwhile :; do sleep 1; done\n")
	p, err := h.Path(lab.ServiceEnv)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(f, "RELAY_WAIT=1")
	f.Close()
	_, errs, code = sshRun(t, l, h.Name, svc+" start", "")
	if code != 1 || !strings.Contains(errs, "not listening on udp port 7788 after 1s") || !strings.Contains(errs, "relayd: up, not listening") {
		t.Errorf("start of a release that never listens: exit %d, stderr %q; want 1, the reason and its log", code, errs)
	}
	m := regexp.MustCompile(`relayd \(pid (\d+)\)`).FindStringSubmatch(errs)
	if m == nil {
		t.Fatalf("no pid in %q", errs)
	}
	if pid, _ := strconv.Atoi(m[1]); running(pid) {
		t.Errorf("the release that never listened (pid %d) is still running", pid)
	}
	if _, _, code := sshRun(t, l, h.Name, svc+" pid", ""); code != 3 {
		t.Errorf("pid after a failed start: exit %d, want 3", code)
	}
}

// TestLoadClose closes a lab through lab.json, as relaylab down does.
func TestLoadClose(t *testing.T) {
	t.Parallel()
	l := lab.StartT(t, lab.Options{Hosts: []lab.HostOptions{{}, {SSHDInNetns: true}}})
	sshOK(t, l, "lab-2", "true")
	loaded, err := lab.Load(l.Dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(loaded.Hosts) != 2 || loaded.SSHConfig != l.SSHConfig || loaded.ID != l.ID {
		t.Fatalf("loaded %+v, want %+v", loaded, l)
	}
	for i, h := range loaded.Hosts {
		o := l.Hosts[i]
		if h.Name != o.Name || h.Addr != o.Addr || h.SSHDPID != o.SSHDPID || h.MountNS != o.MountNS || h.RelayNetns != o.RelayNetns || h.Veth != o.Veth {
			t.Errorf("loaded host %+v, want %+v", *h, *o)
		}
	}
	if out, err := loaded.Hosts[1].Exec(t.Context(), "stat", "-c", "%a", "/proc/sys/net/core/rmem_max"); err != nil || string(out) != "444\n" {
		t.Errorf("Exec on the loaded lab-2: %q, %v; want 444", out, err)
	}
	closeAndCheck(t, loaded)
	if err := l.Close(); err != nil {
		t.Errorf("close the original after the loaded one: %v", err)
	}
}

func TestExecError(t *testing.T) {
	t.Parallel()
	l := lab.StartT(t, lab.Options{Hosts: []lab.HostOptions{{}}})
	_, err := l.Hosts[0].Exec(t.Context(), "sh", "-c", "echo oops >&2; exit 5")
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 5 || !strings.Contains(err.Error(), "lab-1") || !strings.Contains(err.Error(), "oops") {
		t.Errorf("got %v, want exit status 5 naming lab-1 and carrying oops", err)
	}
	if _, err := l.Hosts[0].Path("/etc/passwd"); err == nil {
		t.Errorf("Path(/etc/passwd): got no error, want not private")
	}
}

// A lab's folder can be used again: Start refuses one whose lab was not
// stopped (its lab.json), starts afresh in one an earlier lab left its
// trees in (Debian's /etc/sysctl.d/99-sysctl.conf symlink among them), and
// a Start that fails stops what it started and leaves no lab.json, so the
// next Start works. Stopped names a host that is no longer running.
func TestStartAgainInTheSameFolder(t *testing.T) {
	lab.Require(t)
	t.Parallel()
	dir := t.TempDir()
	l, err := lab.Start(t.Context(), lab.Options{Dir: dir, Hosts: []lab.HostOptions{{}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	stale := filepath.Join(l.Hosts[0].Root, "etc/sysctl.d/60-stale.conf")
	os.WriteFile(stale, []byte("net.core.somaxconn = 1\n"), 0o644)
	if _, err := lab.Start(t.Context(), lab.Options{Dir: dir, Hosts: []lab.HostOptions{{}}}); err == nil || !strings.Contains(err.Error(), "holds a lab that was not stopped (lab.json)") {
		t.Fatalf("Start in the folder of a lab that is up: %v, want a refusal", err)
	}
	if got := l.Stopped(); len(got) != 0 {
		t.Errorf("Stopped of a lab that is up: %v", got)
	}
	closeAndCheck(t, l)
	if got := l.Stopped(); !slices.Equal(got, []string{"lab-1"}) {
		t.Errorf("Stopped after Close: %v, want lab-1", got)
	}
	os.Remove(filepath.Join(dir, "lab.json")) // as relaylab down does

	// A relay that cannot start: Start fails once the sshd is up.
	broken := filepath.Join(t.TempDir(), "relayd")
	os.WriteFile(broken, []byte("#!/bin/sh\nexit 1\n"), 0o755)
	_, err = lab.Start(t.Context(), lab.Options{Dir: dir, Hosts: []lab.HostOptions{{Relay: &lab.RelayInstall{Binary: broken, Version: "1.0.0", Start: true}}}})
	if err == nil || !strings.Contains(err.Error(), "start relay") {
		t.Fatalf("Start with a relay that cannot start: %v, want it to fail", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "lab.json")); err == nil {
		t.Error("a Start that failed left lab.json")
	}

	again, err := lab.Start(t.Context(), lab.Options{Dir: dir, Hosts: []lab.HostOptions{{}}})
	if err != nil {
		t.Fatalf("Start after an earlier lab and a failed one: %v", err)
	}
	t.Cleanup(func() { again.Close() })
	if _, err := os.Stat(stale); err == nil {
		t.Errorf("the new lab-1 has the earlier one's %s", stale)
	}
	sshOK(t, again, "lab-1", "true")
}
