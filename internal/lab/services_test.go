package lab_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/relayctl/relayctl/internal/kerneltest"
	"github.com/relayctl/relayctl/internal/lab"
	"github.com/relayctl/relayctl/relay/sockstat"
	"github.com/relayctl/relayctl/tune"
)

// Packaged UDP servers, run from their Debian units as shipped, in a lab
// host's relay network namespace. Each asks the kernel for its buffer its
// own way: unbound calls setsockopt(SO_RCVBUFFORCE) with so-rcvbuf and
// falls back to SO_RCVBUF without CAP_NET_ADMIN; memcached never sets
// SO_RCVBUF, so its socket gets rmem_default when it is made.
const (
	unboundConf   = "/etc/unbound/unbound.conf.d/relaylab.conf"
	unboundDropIn = "/etc/systemd/system/unbound.service.d/hardening.conf"
	soRcvbuf      = 8 << 20 // unbound's so-rcvbuf: 8m
	// An operator's hardening: unbound binds port 53 and drops to its
	// user, and needs no more; without CAP_NET_ADMIN, SO_RCVBUFFORCE fails.
	unboundHardening = "[Service]\nCapabilityBoundingSet=CAP_NET_BIND_SERVICE CAP_SETUID CAP_SETGID\n"
	memcachedConf    = "/etc/memcached.conf"
	memcachedDropIn  = "/etc/systemd/system/memcached.service.d/udp.conf"
)

// unboundConfig is the lab's unbound.conf.d file: two threads, so with
// so-reuseport (unbound's default) one socket per thread per address.
func unboundConfig(rcvbuf string) string {
	return "server:\n  so-rcvbuf: " + rcvbuf + "\n  num-threads: 2\n"
}

// memcachedConfig is /etc/memcached.conf as Debian ships it, with UDP on
// and TCP off (-p 0), read by the package's wrapper.
func memcachedConfig(udp string) string {
	return "-m 64\n-p 0\n" + udp + "\n-u memcache\n-l 127.0.0.1\n-P /var/run/memcached/memcached.pid\n"
}

// sh runs a shell command on the host (nsenter, all its namespaces).
func sh(t *testing.T, h *lab.Host, cmd string) string {
	t.Helper()
	out, err := h.Exec(t.Context(), "sh", "-c", cmd)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// shCode runs a shell command on the host and returns its output (stdout
// and stderr) and exit status.
func shCode(t *testing.T, h *lab.Host, cmd string) (string, int) {
	t.Helper()
	out, err := h.Command(t.Context(), "sh", "-c", cmd).CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return string(out), ee.ExitCode()
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(out), 0
}

func writeHostFile(t *testing.T, h *lab.Host, path, content string) {
	t.Helper()
	p, err := h.Path(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// restart runs systemctl restart and logs how long it took.
func restart(t *testing.T, h *lab.Host, unit string) {
	t.Helper()
	start := time.Now()
	sh(t, h, "systemctl restart "+unit)
	t.Logf("systemctl restart %s: %v", unit, time.Since(start).Round(time.Millisecond))
}

// sockets waits until unit's main process has want UDP sockets, none of
// them one of old (a restarted Type=simple unit binds after systemctl
// returns), and returns them.
func sockets(t *testing.T, h *lab.Host, unit string, want int, old []sockstat.Socket) []sockstat.Socket {
	t.Helper()
	var socks []sockstat.Socket
	var err error
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("%s: last read: %v, %+v", unit, err, socks)
		}
	})
	waitUntil(t, func() bool {
		socks, err = h.UnitSockets(t.Context(), unit)
		if errors.Is(err, lab.ErrUnitNotRunning) {
			return false
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range socks {
			if s.Inode == 0 {
				t.Fatalf("%s: socket %s:%d has no inode (ss -e)", unit, s.Local, s.Port)
			}
			if slices.ContainsFunc(old, func(o sockstat.Socket) bool { return o.Inode == s.Inode }) {
				return false
			}
		}
		return len(socks) == want
	})
	return socks
}

// checkRb checks every socket's rb against the kernel rule.
func checkRb(t *testing.T, socks []sockstat.Socket, want int) {
	t.Helper()
	for _, s := range socks {
		if s.Rcvbuf != uint64(want) {
			t.Errorf("%s:%d (ino %d): rb %d, want %d", s.Local, s.Port, s.Inode, s.Rcvbuf, want)
		}
	}
}

func inodes(socks []sockstat.Socket) []uint64 {
	var ns []uint64
	for _, s := range socks {
		ns = append(ns, s.Inode)
	}
	slices.Sort(ns)
	return ns
}

// journalOf waits until unit's journal has a line containing until (a
// line the process writes after the ones of interest: journald keeps
// each stream's order) and returns the lines containing match.
func journalOf(t *testing.T, h *lab.Host, unit, until, match string) []string {
	t.Helper()
	var lines []string
	waitUntil(t, func() bool {
		var err error
		if lines, err = h.Journal(t.Context(), unit, 400); err != nil {
			t.Fatal(err)
		}
		return slices.ContainsFunc(lines, func(l string) bool { return strings.Contains(l, until) })
	})
	var got []string
	for _, l := range lines {
		if strings.Contains(l, match) {
			got = append(got, l)
		}
	}
	return got
}

func mainPID(t *testing.T, h *lab.Host, unit string) int {
	t.Helper()
	pid, err := h.UnitPID(t.Context(), unit)
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// checkNoneInMachineNetns checks that ss in the machine's network
// namespace (this test's) lists no UDP socket of unit's main process.
func checkNoneInMachineNetns(t *testing.T, h *lab.Host, unit string) {
	t.Helper()
	mp, err := h.MachinePID(mainPID(t, h, unit))
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("ss", "-H", "-O", "-u", "-a", "-n", "-m", "-p").Output()
	if err != nil {
		t.Fatal(err)
	}
	socks, err := sockstat.ParseSS(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range socks {
		if slices.Contains(s.PIDs, mp) {
			t.Errorf("%s (machine pid %d) has %s:%d in the machine's network namespace", unit, mp, s.Local, s.Port)
		}
	}
}

// checkMasked checks a packaged service the host did not ask for cannot
// start there.
func checkMasked(t *testing.T, h *lab.Host, unit string) {
	t.Helper()
	if got := sh(t, h, "systemctl is-enabled "+unit+" || true"); got != "masked\n" {
		t.Errorf("%s on a host that did not ask for it: %q, want masked", unit, got)
	}
	if out, code := shCode(t, h, "systemctl start "+unit); code == 0 || !strings.Contains(out, "masked") {
		t.Errorf("systemctl start %s: exit %d, %q; want a refusal naming the mask", unit, code, out)
	}
}

// waitFailed waits until unit is failed (Restart= gave up) and returns
// its NRestarts.
func waitFailed(t *testing.T, h *lab.Host, unit string) int {
	t.Helper()
	waitUntil(t, func() bool { return sh(t, h, "systemctl is-failed "+unit+" || true") == "failed\n" })
	n, err := strconv.Atoi(strings.TrimSpace(sh(t, h, "systemctl show -p NRestarts --value "+unit)))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestPackagedUnbound runs Debian's unbound from its own unit: as shipped
// it runs as root, and its SO_RCVBUFFORCE gets so-rcvbuf whatever
// rmem_max says; under a hardening drop-in without CAP_NET_ADMIN it falls
// back to SO_RCVBUF, which rmem_max caps, and says so itself, but only
// when it got less than half of what it asked.
func TestPackagedUnbound(t *testing.T) {
	lab.RequireServices(t, "unbound.service")
	setDefaultRmem(t)
	l := lab.StartT(t, lab.Options{Hosts: []lab.HostOptions{{Systemd: true, Services: []lab.Service{{
		Unit: "unbound.service", Files: map[string]string{unboundConf: unboundConfig("8m")}}}}}})
	h := l.Hosts[0]
	t.Logf("%s: ssh ready after %v, running (unbound started) after %v", h.Name, h.Boot.SSHReady, h.Boot.Running)
	checkMasked(t, h, "memcached.service")
	const grant = "was not granted"
	capped := func(rmemMax int) int { return tune.ExpectRcvbuf(soRcvbuf, false, rmemMax, 212992).Effective }

	var shipped []sockstat.Socket
	t.Run("as shipped", func(t *testing.T) {
		if err := h.CheckServiceNetns(t.Context(), "unbound.service"); err != nil {
			t.Fatal(err)
		}
		checkNoneInMachineNetns(t, h, "unbound.service")
		// Two threads, two addresses (127.0.0.1 and ::1), port 53.
		shipped = sockets(t, h, "unbound.service", 4, nil)
		var addrs []string
		for _, s := range shipped {
			addrs = append(addrs, fmt.Sprintf("%s:%d", s.Local, s.Port))
		}
		slices.Sort(addrs)
		if want := []string{"127.0.0.1:53", "127.0.0.1:53", "::1:53", "::1:53"}; !slices.Equal(addrs, want) {
			t.Errorf("sockets %v, want %v", addrs, want)
		}
		checkRb(t, shipped, tune.ExpectRcvbuf(soRcvbuf, true, 212992, 212992).Effective)
		pid := mainPID(t, h, "unbound.service")
		if got := journalOf(t, h, "unbound.service", fmt.Sprintf("[%d:0] info: start of service", pid), grant); len(got) > 0 {
			t.Errorf("a forced buffer, yet unbound warns: %q", got)
		}
		// It drops to its user after binding, which is why a reload
		// cannot make its sockets again.
		if got := sh(t, h, fmt.Sprintf("ps -o user= -p %d", pid)); got != "unbound\n" {
			t.Errorf("unbound runs as %q, want unbound", got)
		}
		if got := sh(t, h, "unbound-control status"); !strings.Contains(got, "is running") {
			t.Errorf("unbound-control status: %q", got)
		}
	})

	t.Run("reload keeps the sockets", func(t *testing.T) {
		pid := mainPID(t, h, "unbound.service")
		writeHostFile(t, h, unboundConf, unboundConfig("4m"))
		sh(t, h, "systemctl reload unbound")
		journalOf(t, h, "unbound.service", fmt.Sprintf("[%d:0] notice: Restart of unbound", pid), "")
		journalOf(t, h, "unbound.service", fmt.Sprintf("[%d:0] info: start of service", pid), "")
		if got := sh(t, h, "unbound-control get_option so-rcvbuf"); got != "4194304\n" {
			t.Errorf("so-rcvbuf after the reload: %q, want the new 4194304", got)
		}
		socks := sockets(t, h, "unbound.service", 4, nil)
		if !slices.Equal(inodes(socks), inodes(shipped)) {
			t.Errorf("inodes %v after a reload, were %v: want the same sockets", inodes(socks), inodes(shipped))
		}
		// The old buffer: so-rcvbuf applies when a socket is made.
		checkRb(t, socks, tune.ExpectRcvbuf(soRcvbuf, true, 212992, 212992).Effective)
		if got := mainPID(t, h, "unbound.service"); got != pid {
			t.Errorf("MainPID %d after a reload, was %d", got, pid)
		}
		writeHostFile(t, h, unboundConf, unboundConfig("8m"))
	})

	t.Run("without CAP_NET_ADMIN", func(t *testing.T) {
		writeHostFile(t, h, unboundDropIn, unboundHardening)
		sh(t, h, "systemctl daemon-reload")
		for _, rmemMax := range []int{212992, 2097152, 16777216} {
			kerneltest.Set(t, "net.core.rmem_max", strconv.Itoa(rmemMax))
			sh(t, h, "systemctl reset-failed unbound") // a test's restarts are not a crash loop
			restart(t, h, "unbound.service")
			socks := sockets(t, h, "unbound.service", 4, nil)
			checkRb(t, socks, capped(rmemMax))
			pid := mainPID(t, h, "unbound.service")
			if got := sh(t, h, fmt.Sprintf("grep ^CapEff /proc/%d/status", pid)); got != "CapEff:\t0000000000000000\n" {
				t.Errorf("unbound's capabilities: %q, want none", got)
			}
			warned := journalOf(t, h, "unbound.service", fmt.Sprintf("[%d:0] info: start of service", pid), fmt.Sprintf("unbound[%d:0] warning: ", pid))
			// unbound warns when getsockopt reads back less than half of
			// so-rcvbuf: rmem_max 2 MiB gives rb 4 MiB of the 8 asked, silently.
			if got := capped(rmemMax); got < soRcvbuf/2 {
				want := fmt.Sprintf("warning: so-rcvbuf %d was not granted. Got %d. To fix: start with root permissions(linux) or sysctl bigger net.core.rmem_max(linux) or kern.ipc.maxsockbuf(bsd) values.", soRcvbuf, got)
				if len(warned) != len(socks) || !strings.HasSuffix(warned[0], want) {
					t.Errorf("rmem_max %d: unbound's warnings %q, want one per socket (%d) ending %q", rmemMax, warned, len(socks), want)
				}
			} else if len(warned) > 0 {
				t.Errorf("rmem_max %d, rb %d: unbound warns %q, want no warning", rmemMax, got, warned)
			}
		}
		kerneltest.Set(t, "net.core.rmem_max", "212992")
	})

	t.Run("bad config", func(t *testing.T) {
		writeHostFile(t, h, unboundConf, "server:\n  so-rcvbuff: 8m\n")
		// unbound-checkconf names the line before a restart does.
		out, code := shCode(t, h, "unbound-checkconf")
		if want := unboundConf + ":2: error: unknown keyword 'so-rcvbuff'"; code != 1 || !strings.Contains(out, want) {
			t.Errorf("unbound-checkconf: exit %d, %q; want exit 1 and %q", code, out, want)
		}
		sh(t, h, "systemctl reset-failed unbound")
		begin := time.Now()
		out, code = shCode(t, h, "systemctl restart unbound")
		t.Logf("systemctl restart with a bad config: exit %d after %v: %s", code, time.Since(begin).Round(time.Millisecond), strings.TrimSpace(out))
		if code == 0 {
			t.Errorf("systemctl restart with a bad config: exit 0")
		}
		// Restart=on-failure tries again until the start limit (5 starts
		// in 10 s) fails the unit.
		n := waitFailed(t, h, "unbound.service")
		t.Logf("failed after %v, NRestarts=%d", time.Since(begin).Round(time.Millisecond), n)
		if n < 1 {
			t.Errorf("NRestarts %d: want Restart=on-failure to have tried again", n)
		}
		lines, err := h.Journal(t.Context(), "unbound.service", 200)
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{
			unboundConf + ":2: error: unknown keyword 'so-rcvbuff'",
			"read /etc/unbound/unbound.conf failed: 3 errors in configuration file",
			"fatal error: Could not read config file: /etc/unbound/unbound.conf.",
			"unbound.service: Start request repeated too quickly.",
		} {
			if !slices.ContainsFunc(lines, func(l string) bool { return strings.Contains(l, want) }) {
				t.Errorf("journal lacks %q:\n%s", want, strings.Join(lines, "\n"))
			}
		}

		// The rollback: the start limit still holds in the 10 s after
		// the first failed start, so it needs reset-failed first.
		writeHostFile(t, h, unboundConf, unboundConfig("8m"))
		out, code = shCode(t, h, "systemctl restart unbound")
		if time.Since(begin) < 9*time.Second && code == 0 {
			t.Errorf("a restart right after the start limit failed the unit: exit 0, want a refusal")
		}
		t.Logf("restart without reset-failed %v after the bad one: exit %d: %s", time.Since(begin).Round(time.Millisecond), code, strings.TrimSpace(out))
		sh(t, h, "systemctl reset-failed unbound")
		restart(t, h, "unbound.service")
		checkRb(t, sockets(t, h, "unbound.service", 4, nil), capped(212992))
	})
	closeAndCheckSystemd(t, l, "")
}

// TestPackagedMemcached runs Debian's memcached from its own unit, its
// wrapper reading /etc/memcached.conf with -U: it never sets SO_RCVBUF, so
// rmem_max alone changes nothing and rmem_default counts when the socket
// is made.
func TestPackagedMemcached(t *testing.T) {
	lab.RequireServices(t, "memcached.service")
	setDefaultRmem(t)
	l := lab.StartT(t, lab.Options{Hosts: []lab.HostOptions{{Systemd: true, Services: []lab.Service{{
		Unit: "memcached.service", Files: map[string]string{memcachedConf: memcachedConfig("-U 11211")}}}}}})
	h := l.Hosts[0]
	t.Logf("%s: ssh ready after %v, running after %v", h.Name, h.Boot.SSHReady, h.Boot.Running)
	checkMasked(t, h, "unbound.service")
	rb := func(rmemMax, rmemDefault int) int { return tune.ExpectRcvbuf(0, false, rmemMax, rmemDefault).Effective }

	var first []sockstat.Socket
	t.Run("through the package's wrapper", func(t *testing.T) {
		if err := h.CheckServiceNetns(t.Context(), "memcached.service"); err != nil {
			t.Fatal(err)
		}
		checkNoneInMachineNetns(t, h, "memcached.service")
		if got := sh(t, h, "systemctl show -p ExecStart --value memcached"); !strings.Contains(got, "/usr/share/memcached/scripts/systemd-memcached-wrapper /etc/memcached.conf") {
			t.Errorf("ExecStart %q, want the package's wrapper", got)
		}
		// One socket, which its worker threads share through an fd each.
		first = sockets(t, h, "memcached.service", 1, nil)
		if s := first[0]; s.Local != "127.0.0.1" || s.Port != 11211 {
			t.Errorf("socket %s:%d, want 127.0.0.1:11211", s.Local, s.Port)
		}
		checkRb(t, first, rb(212992, 212992))
		pid := mainPID(t, h, "memcached.service")
		if got := sh(t, h, fmt.Sprintf("ps -o user= -p %d", pid)); got != "memcache\n" {
			t.Errorf("memcached runs as %q, want memcache", got)
		}
		// memcached reports its UDP port, and no buffer: only the kernel
		// tells what the socket got.
		stats := sh(t, h, fmt.Sprintf(`nsenter -t %d -n bash -c 'exec 3<>/dev/udp/127.0.0.1/11211 && printf "\000\001\000\000\000\001\000\000stats settings\r\n" >&3 && timeout 1 cat <&3 || true'`, pid))
		if !strings.Contains(stats, "STAT udpport 11211") || !strings.Contains(stats, "STAT num_threads_per_udp") {
			t.Errorf("stats settings over UDP: %q, want udpport 11211", stats)
		}
		if strings.Contains(stats, "rcvbuf") || strings.Contains(stats, "rmem") {
			t.Errorf("stats settings names a receive buffer: %q", stats)
		}
	})

	t.Run("rmem_max alone changes nothing", func(t *testing.T) {
		kerneltest.Set(t, "net.core.rmem_max", "16777216")
		restart(t, h, "memcached.service")
		socks := sockets(t, h, "memcached.service", 1, first)
		checkRb(t, socks, rb(16777216, 212992))
		first = socks
	})

	t.Run("rmem_default counts when the socket is made", func(t *testing.T) {
		kerneltest.Set(t, "net.core.rmem_default", "1048576")
		socks := sockets(t, h, "memcached.service", 1, nil)
		if socks[0].Inode != first[0].Inode {
			t.Fatalf("socket %d, was %d, with no restart", socks[0].Inode, first[0].Inode)
		}
		checkRb(t, socks, 212992)
		restart(t, h, "memcached.service")
		first = sockets(t, h, "memcached.service", 1, socks)
		checkRb(t, first, rb(16777216, 1048576))
	})

	t.Run("no reload", func(t *testing.T) {
		out, code := shCode(t, h, "systemctl reload memcached")
		if code == 0 || !strings.Contains(out, "Job type reload is not applicable for unit memcached.service") {
			t.Errorf("systemctl reload memcached: exit %d, %q; want a refusal", code, out)
		}
	})

	t.Run("ExecStart drop-in", func(t *testing.T) {
		writeHostFile(t, h, memcachedDropIn, "[Service]\nExecStart=\nExecStart=/usr/bin/memcached -U 11211 -p 0 -l 127.0.0.1 -u memcache -m 64\n")
		sh(t, h, "systemctl daemon-reload")
		restart(t, h, "memcached.service")
		first = sockets(t, h, "memcached.service", 1, first)
		checkRb(t, first, rb(16777216, 1048576))
		pid := mainPID(t, h, "memcached.service")
		if got := sh(t, h, fmt.Sprintf("tr '\\0' ' ' < /proc/%d/cmdline", pid)); got != "/usr/bin/memcached -U 11211 -p 0 -l 127.0.0.1 -u memcache -m 64 " {
			t.Errorf("cmdline %q", got)
		}
		p, err := h.Path(memcachedDropIn)
		if err != nil {
			t.Fatal(err)
		}
		os.Remove(p)
		sh(t, h, "systemctl daemon-reload")
	})

	t.Run("bad option", func(t *testing.T) {
		writeHostFile(t, h, memcachedConf, memcachedConfig("--udp-prot=11211"))
		sh(t, h, "systemctl reset-failed memcached")
		begin := time.Now()
		// Type=simple: systemctl says started once the wrapper runs.
		if out, code := shCode(t, h, "systemctl restart memcached"); code != 0 {
			t.Errorf("systemctl restart memcached with a bad option: exit %d, %q; want 0 (Type=simple)", code, out)
		}
		// Restart=always tries again until the start limit fails the unit.
		n := waitFailed(t, h, "memcached.service")
		t.Logf("failed after %v, NRestarts=%d", time.Since(begin).Round(time.Millisecond), n)
		if n < 1 {
			t.Errorf("NRestarts %d: want Restart=always to have tried again", n)
		}
		lines, err := h.Journal(t.Context(), "memcached.service", 200)
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{
			"/usr/bin/memcached: unrecognized option '--udp-prot=11211'",
			"memcached.service: Start request repeated too quickly.",
		} {
			if !slices.ContainsFunc(lines, func(l string) bool { return strings.Contains(l, want) }) {
				t.Errorf("journal lacks %q:\n%s", want, strings.Join(lines, "\n"))
			}
		}
		writeHostFile(t, h, memcachedConf, memcachedConfig("-U 11211"))
		sh(t, h, "systemctl reset-failed memcached")
		restart(t, h, "memcached.service")
		checkRb(t, sockets(t, h, "memcached.service", 1, nil), rb(16777216, 1048576))
	})
	closeAndCheckSystemd(t, l, "")
}

// startErr starts a lab that should not start and returns Start's error;
// a lab that starts anyway is closed.
func startErr(t *testing.T, o lab.Options) error {
	t.Helper()
	o.Dir = t.TempDir()
	l, err := lab.Start(t.Context(), o)
	if err == nil {
		if cerr := l.Close(); cerr != nil {
			t.Errorf("close lab: %v", cerr)
		}
	}
	return err
}

// TestPackagedServiceNeverInTheMachinesNetns: a drop-in that takes a
// service out of the relay's network namespace (here memcached, on a port
// of its own in the machine's) fails the start.
func TestPackagedServiceNeverInTheMachinesNetns(t *testing.T) {
	lab.RequireServices(t, "memcached.service")
	port := lab.FreePort(t)
	err := startErr(t, lab.Options{Hosts: []lab.HostOptions{{Systemd: true, Services: []lab.Service{{
		Unit: "memcached.service",
		Files: map[string]string{
			memcachedConf: memcachedConfig(fmt.Sprintf("-U %d", port)),
			"/etc/systemd/system/memcached.service.d/zz-machine.conf": "[Service]\nNetworkNamespacePath=\n",
		}}}}}})
	if err == nil || !strings.Contains(err.Error(), "memcached.service (pid ") || !strings.Contains(err.Error(), "runs in the machine's network namespace") {
		t.Fatalf("start with memcached out of the relay's namespace: %v, want a refusal", err)
	}
	t.Log(err)
}

// TestPackagedServiceFiles: a service's files never replace what the lab
// seeds, nor go through one of its symlinks (a mask points at the
// machine's /dev/null, an enabled unit at the machine's unit file).
func TestPackagedServiceFiles(t *testing.T) {
	lab.RequireServices(t, "memcached.service")
	for _, tt := range []struct{ name, path, want string }{
		{"a mask", "/etc/systemd/system/systemd-sysctl.service", "the lab seeds this path itself"},
		{"the enabled unit", "/etc/systemd/system/multi-user.target.wants/memcached.service", "the lab seeds this path itself"},
		{"through a mask", "/etc/systemd/system/unbound.service/x.conf", "/etc/systemd/system/unbound.service is a file or symlink the lab seeds"},
		{"the netns drop-in", "/etc/systemd/system/memcached.service.d/" + lab.ServiceNetnsDropIn, "the lab writes it"},
		{"the host name", "/etc/hostname", "the lab seeds this path itself"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := startErr(t, lab.Options{Hosts: []lab.HostOptions{{Systemd: true, Services: []lab.Service{{
				Unit: "memcached.service", Files: map[string]string{tt.path: "x\n"}}}}}})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("file %s: %v, want an error containing %q", tt.path, err, tt.want)
			}
		})
	}
}
