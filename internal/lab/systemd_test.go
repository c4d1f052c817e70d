package lab_test

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/relayctl/relayctl/internal/kerneltest"
	"github.com/relayctl/relayctl/internal/lab"
	"github.com/relayctl/relayctl/relay/dist"
)

// The kernel rule these tests read back (docs/kernel.md): a relay
// asking SO_RCVBUF X gets rb = max(2 * min(X, rmem_max), 2304). With
// rmem_max at the Linux default 212,992, asking 4 MiB gives 425,984.
const (
	defaultRmem = "212992"
	askedRcvbuf = 4194304
	cappedRb    = 425984 // 2 * 212992
	forcedRb    = 8388608
)

// relayState is what one SSH command reads about relayd on a systemd host.
type relayState struct {
	pid          int    // MainPID, in the host's PID namespace
	invocation   string // InvocationID
	nrestarts    int
	relayNetns   string // /proc/MAINPID/ns/net
	sessionNetns string // /proc/self/ns/net of the SSH session
	ss           string // nsenter -t MAINPID -n ss ... 'sport = :7788'
	status       string // GET /status inside the relay's netns
}

// readRelay is a shell script: MainPID and the unit's counters from
// systemctl, the socket from ss in the relay process's netns, /status
// through bash's /dev/tcp in that netns. It neither sleeps nor retries.
const readRelay = `set -e
pid=$(systemctl show -p MainPID --value relayd)
echo "pid=$pid"
echo "invocation=$(systemctl show -p InvocationID --value relayd)"
echo "nrestarts=$(systemctl show -p NRestarts --value relayd)"
echo "relay_netns=$(readlink /proc/$pid/ns/net)"
echo "session_netns=$(readlink /proc/self/ns/net)"
echo "ss=$(nsenter -t "$pid" -n ss -H -O -u -l -n -m 'sport = :7788')"
echo "status=$(nsenter -t "$pid" -n bash -c 'exec 3<>/dev/tcp/127.0.0.1/7789 && printf "GET /status HTTP/1.0\r\n\r\n" >&3 && cat <&3' | tr -d '\r\n')"
`

func parseRelay(t *testing.T, out string) relayState {
	t.Helper()
	kv := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), "=")
		kv[k] = v
	}
	var s relayState
	var err error
	if s.pid, err = strconv.Atoi(kv["pid"]); err != nil || s.pid == 0 {
		t.Fatalf("MainPID %q in:\n%s", kv["pid"], out)
	}
	if s.nrestarts, err = strconv.Atoi(kv["nrestarts"]); err != nil {
		t.Fatalf("NRestarts %q in:\n%s", kv["nrestarts"], out)
	}
	s.invocation, s.relayNetns, s.sessionNetns, s.ss, s.status = kv["invocation"], kv["relay_netns"], kv["session_netns"], kv["ss"], kv["status"]
	return s
}

var rbRe = regexp.MustCompile(`skmem:\(r\d+,rb(\d+),`)

// rb is the socket's receive buffer in an ss -m line.
func (s relayState) rb(t *testing.T) int {
	t.Helper()
	m := rbRe.FindStringSubmatch(s.ss)
	if m == nil {
		t.Fatalf("no 0.0.0.0:7788 socket with skmem in ss output %q", s.ss)
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// checkServing checks the relay s describes is relaying in a network
// namespace of its own, with the buffer the kernel rule gives, and that its
// /status (answered inside that namespace) is its own.
func checkServing(t *testing.T, s relayState, wantRb int) {
	t.Helper()
	if s.relayNetns == "" || s.relayNetns == s.sessionNetns {
		t.Errorf("relay netns %q, SSH session's %q: want the relay in a namespace of its own", s.relayNetns, s.sessionNetns)
	}
	if !strings.Contains(s.ss, "0.0.0.0:7788") {
		t.Errorf("ss in the relay's netns: %q, want a socket on 0.0.0.0:7788", s.ss)
	}
	if got := s.rb(t); got != wantRb {
		t.Errorf("rb %d, want %d", got, wantRb)
	}
	if want := fmt.Sprintf(`"pid": %d,`, s.pid); !strings.Contains(s.status, want) {
		t.Errorf("/status %q, want it to contain %q", s.status, want)
	}
	if want := fmt.Sprintf(`"so_rcvbuf_effective": %d`, wantRb); !strings.Contains(s.status, want) {
		t.Errorf("/status %q, want it to contain %q", s.status, want)
	}
}

// setDefaultRmem puts net.core.rmem_max and rmem_default at the Linux
// default, under the machine-wide lock, restored when the test ends.
func setDefaultRmem(t *testing.T) {
	kerneltest.Lock(t)
	kerneltest.Set(t, "net.core.rmem_max", defaultRmem)
	kerneltest.Set(t, "net.core.rmem_default", defaultRmem)
}

// TestSystemdHost runs relayd as a unit of the unit file this project ships,
// on a host booted with a real systemd, reached over real SSH.
func TestSystemdHost(t *testing.T) {
	lab.RequireSystemd(t)
	setDefaultRmem(t)
	// The machine's /tmp holds this marker: systemd-tmpfiles in the host
	// must not remove it.
	marker, err := os.CreateTemp("", "relaylab-machine-tmp-")
	if err != nil {
		t.Fatal(err)
	}
	marker.Close()
	t.Cleanup(func() { os.Remove(marker.Name()) })

	relayd := lab.BuildRelayd(t, "1.8.0")
	cfg := fmt.Sprintf("RELAYD_LISTEN=0.0.0.0:7788\nRELAYD_CONTROL=127.0.0.1:7789\nRELAYD_SO_RCVBUF=%d\n", askedRcvbuf)
	l := lab.StartT(t, lab.Options{Hosts: []lab.HostOptions{{Systemd: true,
		Relay: &lab.RelayInstall{Binary: relayd, Version: "1.8.0", Config: cfg, Start: true}}}})
	h := l.Hosts[0]
	t.Logf("%s: ssh ready after %v, running after %v", h.Name, h.Boot.SSHReady, h.Boot.Running)

	if got := sshOK(t, l, h.Name, "systemctl is-system-running"); got != "running\n" {
		t.Errorf("is-system-running: %q, want running", got)
	}
	// The unit is the file this project ships, byte for byte.
	if got := sshOK(t, l, h.Name, "cat /etc/systemd/system/relayd.service"); got != string(dist.Unit) {
		t.Errorf("/etc/systemd/system/relayd.service differs from relay/dist/relayd.service:\n%s", got)
	}
	if got := sshOK(t, l, h.Name, "systemctl is-enabled systemd-sysctl.service || true"); got != "masked\n" {
		t.Errorf("systemd-sysctl.service is %q, want masked", got)
	}

	var relayNetns string
	t.Run("relay", func(t *testing.T) {
		s := parseRelay(t, sshOK(t, l, h.Name, readRelay))
		checkServing(t, s, cappedRb)
		relayNetns = s.relayNetns
		if got, err := h.RelayPID(t.Context()); err != nil || got != s.pid {
			t.Errorf("RelayPID: %d, %v; want MainPID %d", got, err, s.pid)
		}
		// The same process on the machine: its NSpid line ends with MainPID.
		mp, err := h.MachinePID(s.pid)
		if err != nil {
			t.Fatal(err)
		}
		st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", mp))
		if err != nil {
			t.Fatal(err)
		}
		if !regexp.MustCompile(fmt.Sprintf(`(?m)^NSpid:.*\t%d$`, s.pid)).Match(st) {
			t.Errorf("machine pid %d: NSpid does not end with %d:\n%s", mp, s.pid, st)
		}
		if got := netnsOf(t, mp); got != s.relayNetns {
			t.Errorf("machine pid %d in %s, want %s", mp, got, s.relayNetns)
		}
		if exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", mp)); exe != "/opt/relay/releases/1.8.0/relayd" {
			t.Errorf("relay executable %q, want /opt/relay/releases/1.8.0/relayd", exe)
		}
		// Hardening that the unit asks for is in force.
		if out := sshOK(t, l, h.Name, fmt.Sprintf("ps -o user= -p %d; grep ^CapEff /proc/%d/status", s.pid, s.pid)); !strings.Contains(out, "CapEff:\t0000000000000000") || strings.HasPrefix(out, "root") {
			t.Errorf("relay user and capabilities: %q, want a dynamic user and no capabilities", out)
		}
	})

	t.Run("drain", func(t *testing.T) {
		checkDrainUnderTheUnit(t, l, h)
	})

	t.Run("restart returns when ready", func(t *testing.T) {
		before := parseRelay(t, sshOK(t, l, h.Name, readRelay))
		// No sleep between the restart and the read-back.
		out := sshOK(t, l, h.Name, "systemctl restart relayd\n"+readRelay)
		after := parseRelay(t, out)
		checkServing(t, after, cappedRb)
		if after.pid == before.pid {
			t.Errorf("MainPID %d after restart, want a new one", after.pid)
		}
		if after.invocation == before.invocation || after.invocation == "" {
			t.Errorf("InvocationID %q after restart, was %q: want a new one", after.invocation, before.invocation)
		}
		// NRestarts counts restarts that Restart= made, not systemctl's.
		if after.nrestarts != before.nrestarts {
			t.Errorf("NRestarts %d after systemctl restart, was %d: want unchanged", after.nrestarts, before.nrestarts)
		}
		if after.relayNetns != before.relayNetns {
			t.Errorf("relay netns %s after restart, was %s: relay-netns.service keeps one namespace", after.relayNetns, before.relayNetns)
		}

		// The same with a relay that takes a second before it binds: only a
		// restart that waits for READY=1 finds its socket right away (with
		// Type=simple this read-back finds none).
		slow, err := h.Path("/etc/systemd/system/relayd.service.d/zz-slow-start.conf")
		if err != nil {
			t.Fatal(err)
		}
		const slowStart = "[Service]\nExecStart=\nExecStart=/bin/sh -c 'sleep 1 && cat >/run/relayd/relayd.env && exec /opt/relay/current/relayd --config /run/relayd/relayd.env'\n"
		if err := os.WriteFile(slow, []byte(slowStart), 0o644); err != nil {
			t.Fatal(err)
		}
		out = sshOK(t, l, h.Name, "systemctl daemon-reload\nsystemctl restart relayd\n"+readRelay)
		checkServing(t, parseRelay(t, out), cappedRb)
		if err := os.Remove(slow); err != nil {
			t.Fatal(err)
		}
		after = parseRelay(t, sshOK(t, l, h.Name, "systemctl daemon-reload\nsystemctl restart relayd\n"+readRelay))
		checkServing(t, after, cappedRb)

		// A relay that dies is restarted by Restart=on-failure, which counts.
		sshOK(t, l, h.Name, fmt.Sprintf("kill -KILL %d", after.pid))
		waitUntil(t, func() bool {
			out := sshOK(t, l, h.Name, "systemctl show -p ActiveState -p MainPID relayd")
			return strings.Contains(out, "ActiveState=active\n") && !strings.Contains(out, "MainPID=0\n") &&
				!strings.Contains(out, fmt.Sprintf("MainPID=%d\n", after.pid))
		})
		again := parseRelay(t, sshOK(t, l, h.Name, readRelay))
		if again.nrestarts != after.nrestarts+1 {
			t.Errorf("NRestarts %d after a crash, was %d: want one more", again.nrestarts, after.nrestarts)
		}
		checkServing(t, again, cappedRb)
	})

	t.Run("failed start", func(t *testing.T) {
		cfgPath, err := h.Path(lab.RelayConfig)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(cfgPath, []byte(cfg+"RELAYD_BATCH=0\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		out, errs, code := sshRun(t, l, h.Name, "systemctl restart relayd", "")
		if code == 0 {
			t.Errorf("systemctl restart with a bad config: exit 0 (%q), want a failure", out)
		}
		t.Logf("systemctl restart: exit %d: %s", code, strings.TrimSpace(errs))
		if got := sshOK(t, l, h.Name, "systemctl is-failed relayd || true"); got != "failed\n" {
			t.Errorf("is-failed: %q, want failed", got)
		}
		journal := sshOK(t, l, h.Name, "journalctl -u relayd -n 20 --no-pager")
		if want := "relayd: error: /run/relayd/relayd.env:4: RELAYD_BATCH: want a decimal integer from 1 to 1024"; !strings.Contains(journal, want) {
			t.Errorf("journal lacks %q:\n%s", want, journal)
		}
		// Exit status 2 (bad config) is not retried.
		if got := sshOK(t, l, h.Name, "systemctl show -p NRestarts -p ExecMainStatus relayd"); !strings.Contains(got, "ExecMainStatus=2") {
			t.Errorf("after a bad config: %q, want ExecMainStatus=2", got)
		}
		if got := sshOK(t, l, h.Name, "systemctl is-system-running || true"); got != "degraded\n" {
			t.Errorf("is-system-running with relayd failed: %q, want degraded", got)
		}

		// SO_RCVBUFFORCE needs CAP_NET_ADMIN, which the unit does not
		// grant: relayd cannot start without the force drop-in.
		if err := os.WriteFile(cfgPath, []byte(cfg+"RELAYD_SO_RCVBUF_FORCE=true\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, _, code := sshRun(t, l, h.Name, "systemctl restart relayd", ""); code == 0 {
			t.Errorf("so_rcvbuf_force without the drop-in: restart succeeded, want a failure")
		}
		if journal := sshOK(t, l, h.Name, "journalctl -u relayd -n 5 --no-pager"); !strings.Contains(journal, "set SO_RCVBUFFORCE 4194304: operation not permitted") {
			t.Errorf("journal lacks the SO_RCVBUFFORCE refusal:\n%s", journal)
		}
		dropIn, err := h.Path("/etc/systemd/system/" + dist.ForceDropInPath)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dropIn, dist.ForceDropIn, 0o644); err != nil {
			t.Fatal(err)
		}
		s := parseRelay(t, sshOK(t, l, h.Name, "systemctl daemon-reload\nsystemctl restart relayd\n"+readRelay))
		checkServing(t, s, forcedRb)
		if got := sshOK(t, l, h.Name, "systemctl is-system-running"); got != "running\n" {
			t.Errorf("is-system-running after a good restart: %q, want running", got)
		}
	})

	t.Run("proc sys", func(t *testing.T) {
		// Writable: net.core, the machine's own values (the lock is held).
		sshOK(t, l, h.Name, "echo 300000 > /proc/sys/net/core/rmem_max")
		if got := kerneltest.Read(t, "net.core.rmem_max"); got != "300000" {
			t.Errorf("rmem_max on the machine after a write on the host: %s, want 300000", got)
		}
		sshOK(t, l, h.Name, "echo "+defaultRmem+" > /proc/sys/net/core/rmem_max")
		if got := kerneltest.Read(t, "net.core.rmem_max"); got != defaultRmem {
			t.Errorf("rmem_max after restoring from the host: %s, want %s", got, defaultRmem)
		}
		// Read-only: the rest. Each rewrites the current value, so nothing
		// would change if the write went through.
		for _, key := range []string{"kernel/hostname", "vm/swappiness", "net/ipv4/ip_forward", "fs/file-max"} {
			_, errs, code := sshRun(t, l, h.Name, fmt.Sprintf(`v=$(cat /proc/sys/%s) && printf '%%s\n' "$v" > /proc/sys/%s`, key, key), "")
			if code == 0 || !strings.Contains(errs, "Read-only file system") {
				t.Errorf("write /proc/sys/%s: exit %d, %q; want Read-only file system", key, code, errs)
			}
		}
	})

	t.Run("private tmp", func(t *testing.T) {
		if _, _, code := sshRun(t, l, h.Name, "test -e "+marker.Name(), ""); code == 0 {
			t.Errorf("the host sees the machine's %s", marker.Name())
		}
		if _, err := os.Stat(marker.Name()); err != nil {
			t.Errorf("the machine's %s after the host booted: %v", marker.Name(), err)
		}
		sshOK(t, l, h.Name, "echo host > /tmp/relaylab-host-file")
		if _, err := os.Stat("/tmp/relaylab-host-file"); err == nil {
			t.Errorf("the machine sees the host's /tmp/relaylab-host-file")
		}
		// A file in the host's /tmp from the machine's side.
		p, err := h.Path("/tmp/relaylab-host-file")
		if err != nil {
			t.Fatal(err)
		}
		if b, err := os.ReadFile(p); err != nil || string(b) != "host\n" {
			t.Errorf("host file through Path %s: %q, %v", p, b, err)
		}
	})

	closeAndCheckSystemd(t, l, relayNetns)
}

// drainCall sends "VERB /drain" to relayd in its network namespace, as
// root, or as uid 65534 with asNobody, and prints the answer's status line.
const drainCall = `pid=$(systemctl show -p MainPID --value relayd)
nsenter -t "$pid" -n %s bash -c 'exec 3<>/dev/tcp/127.0.0.1/7789 && printf "%s /drain HTTP/1.0\r\n\r\n" >&3 && head -n 1 <&3'`

const asNobody = "setpriv --reuid=65534 --regid=65534 --clear-groups"

// checkDrainUnderTheUnit: under the shipped unit's sandbox, relayd asks
// sock_diag who calls /drain (the unit allows AF_NETLINK for it): root
// may, another user may not, and relayd never says it reads
// /proc/net/tcp instead. Under the unit as it was before (AF_NETLINK
// refused), it does say so, and root still drains.
func checkDrainUnderTheUnit(t *testing.T, l *lab.Lab, h *lab.Host) {
	call := func(verb, as string) string {
		return strings.TrimSpace(sshOK(t, l, h.Name, fmt.Sprintf(drainCall, as, verb)))
	}
	const fallback = "drain: finding callers in"
	for _, c := range []struct{ verb, as, want string }{
		{"POST", asNobody, " 403 "}, {"POST", "", " 200 "}, {"DELETE", asNobody, " 403 "}, {"DELETE", "", " 200 "},
	} {
		if got := call(c.verb, c.as); !strings.Contains(got, c.want) {
			t.Errorf("%s /drain as %q: %q, want%s", c.verb, c.as, got, c.want)
		}
	}
	journal := sshOK(t, l, h.Name, "journalctl -u relayd --no-pager -o cat")
	if strings.Contains(journal, fallback) || strings.Count(journal, "drain refused") < 2 {
		t.Errorf("journal: want two refusals and no fallback to /proc/net/tcp:\n%s", journal)
	}
	old, err := h.Path("/etc/systemd/system/relayd.service.d/zz-no-netlink.conf")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(old, []byte("[Service]\nRestrictAddressFamilies=\nRestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sshOK(t, l, h.Name, "systemctl daemon-reload && systemctl restart relayd")
	if got := call("POST", ""); !strings.Contains(got, " 200 ") {
		t.Errorf("POST /drain as root, AF_NETLINK refused: %q, want 200", got)
	}
	if got := call("DELETE", asNobody); !strings.Contains(got, " 403 ") {
		t.Errorf("DELETE /drain as nobody, AF_NETLINK refused: %q, want 403", got)
	}
	if journal := sshOK(t, l, h.Name, "journalctl -u relayd --no-pager -o cat -n 20"); !strings.Contains(journal, fallback) {
		t.Errorf("journal, AF_NETLINK refused: no %q:\n%s", fallback, journal)
	}
	if err := os.Remove(old); err != nil {
		t.Fatal(err)
	}
	sshOK(t, l, h.Name, "systemctl daemon-reload && systemctl restart relayd")
}

// TestSystemdSysctlPersistence: a drop-in in the host's /etc/sysctl.d is
// what systemd-sysctl, the host's real one, puts in force at boot.
func TestSystemdSysctlPersistence(t *testing.T) {
	lab.RequireSystemd(t)
	setDefaultRmem(t)
	l := lab.StartT(t, lab.Options{Hosts: []lab.HostOptions{{Systemd: true}}})
	h := l.Hosts[0]

	write := func(name, content string) {
		t.Helper()
		p, err := h.Path(filepath.Join("/etc/sysctl.d", name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	run := func() {
		t.Helper()
		out, err := h.RunSystemdSysctl(t.Context(), "net.core.rmem_max")
		if err != nil {
			t.Fatal(err)
		}
		if len(out) > 0 {
			t.Logf("systemd-sysctl: %s", out)
		}
	}

	write("90-relayctl.conf", "net.core.rmem_max = 1048576\n")
	run()
	if got := kerneltest.Read(t, "net.core.rmem_max"); got != "1048576" {
		t.Errorf("rmem_max after systemd-sysctl: %s, want 1048576 from 90-relayctl.conf", got)
	}
	// Files apply in the order of their names; the last value wins.
	write("95-later.conf", "net.core.rmem_max = 2097152\n")
	run()
	if got := kerneltest.Read(t, "net.core.rmem_max"); got != "2097152" {
		t.Errorf("rmem_max with 95-later.conf: %s, want 2097152", got)
	}
	// --prefix keeps it to the keys asked: rmem_default stays.
	write("96-default.conf", "net.core.rmem_default = 1048576\n")
	run()
	if got := kerneltest.Read(t, "net.core.rmem_default"); got != defaultRmem {
		t.Errorf("rmem_default: %s, want %s (not asked)", got, defaultRmem)
	}
	if _, err := h.RunSystemdSysctl(t.Context(), "vm.swappiness"); err == nil || !strings.Contains(err.Error(), "want net.core.NAME") {
		t.Errorf("RunSystemdSysctl(vm.swappiness): %v, want a refusal", err)
	}
	closeAndCheckSystemd(t, l, "")
}

// waitUntil polls cond; the test binary's -timeout bounds it.
func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	for !cond() {
		if dl, ok := t.Deadline(); ok && time.Until(dl) < 10*time.Second {
			t.Fatal("gave up waiting")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// closeAndCheckSystemd closes the lab and checks that nothing of its
// systemd hosts is left: no process in their namespaces, no cgroup, and no
// reference to the relay's network namespace (relayNetns, "net:[N]").
func closeAndCheckSystemd(t *testing.T, l *lab.Lab, relayNetns string) {
	t.Helper()
	nss := map[string]string{}
	for _, h := range l.Hosts {
		for _, kind := range []string{"pid", "mnt", "uts", "ipc", "cgroup"} {
			id, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", h.InitPID, kind))
			if err != nil {
				t.Fatalf("%s: %v", h.Name, err)
			}
			nss[kind+" "+id] = h.Name
		}
	}
	if err := l.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || !running(pid) {
			continue
		}
		for _, kind := range []string{"pid", "mnt", "uts", "ipc", "cgroup"} {
			id, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", pid, kind))
			if name, ok := nss[kind+" "+id]; ok {
				t.Errorf("%s: process %d still in its %s namespace after Close", name, pid, kind)
			}
		}
		if relayNetns == "" {
			continue
		}
		if id, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", pid)); id == relayNetns {
			t.Errorf("process %d still in the relay's namespace %s", pid, relayNetns)
		}
		if mi, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", pid)); err == nil && strings.Contains(string(mi), relayNetns) {
			t.Errorf("process %d's mounts still hold the relay's namespace %s", pid, relayNetns)
		}
	}
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range l.Hosts {
		if _, err := os.Stat(h.Cgroup); err == nil {
			t.Errorf("%s: cgroup %s left after Close", h.Name, h.Cgroup)
		}
		// The host's mounts were only ever in its own mount namespace.
		if d := filepath.Join(l.Dir, h.Name); strings.Contains(string(mi), d) {
			t.Errorf("%s: the machine has a mount under %s", h.Name, d)
		}
	}
}
