package lab_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/relayctl/relayctl/internal/lab"
)

// busyboxService is one busybox host running relay-service, with what its
// tests need at hand.
type busyboxService struct {
	l   *lab.Lab
	h   *lab.Host
	env string // the settings file, as the machine reaches it
}

// run runs relay-service with args over SSH.
func (b busyboxService) run(t *testing.T, args string) (string, string, int) {
	t.Helper()
	return sshRun(t, b.l, b.h.Name, lab.ServiceScript+" "+args, "")
}

// ok runs relay-service with args and wants exit 0 and want on stdout.
func (b busyboxService) ok(t *testing.T, args, want string) string {
	t.Helper()
	out, errs, code := b.run(t, args)
	if code != 0 || !strings.Contains(out, want) {
		t.Fatalf("relay-service %s: exit %d, stdout %q, stderr %q; want 0 and %q", args, code, out, errs, want)
	}
	return out
}

// settings writes the host's settings file: the lab's (RELAY_NETNS) and extra.
func (b busyboxService) settings(t *testing.T, extra string) {
	t.Helper()
	s := "RELAY_NETNS=" + b.h.RelayNetns + "\n" + extra
	if err := os.WriteFile(b.env, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// pid is the relay's pid, or 0 when relay-service says it is not running.
func (b busyboxService) pid(t *testing.T) int {
	t.Helper()
	p, err := b.h.RelayPID(t.Context())
	if errors.Is(err, lab.ErrRelayNotRunning) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// install installs a release of relayd, or, with script set, a script named
// relayd (a broken build).
func (b busyboxService) install(t *testing.T, version, script, config string) {
	t.Helper()
	bin := ""
	if script != "" {
		bin = filepath.Join(t.TempDir(), "relayd")
		if err := os.WriteFile(bin, []byte("#!/bin/sh\n"+script), 0o755); err != nil {
			t.Fatal(err)
		}
	} else {
		bin = lab.BuildRelayd(t, version)
	}
	if err := b.h.InstallRelay(t.Context(), lab.RelayInstall{Binary: bin, Version: version, Config: config}); err != nil {
		t.Fatal(err)
	}
}

// TestBusyboxRelayService runs relay-service on a busybox host (busybox
// 1.35's sh and applets, Debian's ip, no nohup, no bash, no util-linux
// setpriv) through what docs/relay-service.md promises: start in the
// relay's network namespace, status with its socket, restart, a handoff
// that keeps the socket, a handoff and starts that fail, a stale pid file,
// run under a supervisor, RELAY_USER, and the settings it refuses.
func TestBusyboxRelayService(t *testing.T) {
	t.Parallel()
	l := lab.StartT(t, lab.Options{Hosts: []lab.HostOptions{{Busybox: true}}})
	h := l.Hosts[0]
	env, err := h.Path(lab.ServiceEnv)
	if err != nil {
		t.Fatal(err)
	}
	b := busyboxService{l: l, h: h, env: env}
	conf := handoffConfig("")

	t.Run("no release", func(t *testing.T) {
		if out, errs, code := b.run(t, "start"); code != 1 || !strings.Contains(errs, "no executable release installed") {
			t.Errorf("start: exit %d, %q %q; want 1 and no executable release installed", code, out, errs)
		}
		for _, c := range []struct {
			args string
			code int
		}{{"pid", 3}, {"status", 3}, {"stop", 0}, {"frobnicate", 2}} {
			if out, errs, code := b.run(t, c.args); code != c.code {
				t.Errorf("%s: exit %d, %q %q; want %d", c.args, code, out, errs, c.code)
			}
		}
	})

	b.install(t, "1.9.0", "", conf)
	var first int
	t.Run("start, status, restart", func(t *testing.T) {
		b.ok(t, "start", "relayd started (pid ")
		first = b.pid(t)
		if first == 0 || netnsOf(t, first) == netnsOf(t, os.Getpid()) {
			t.Fatalf("relay %d: not running, or in the machine's network namespace", first)
		}
		relaySocket(t, first, 7788)
		b.ok(t, "start", fmt.Sprintf("relayd already running (pid %d)", first))
		// status reads the socket with busybox's nsenter and Debian's ss.
		out := b.ok(t, "status", fmt.Sprintf("pid:     %d", first))
		if !regexp.MustCompile(`udp: .*:7788 .*pid=` + strconv.Itoa(first) + `,`).MatchString(out) {
			t.Errorf("status shows no UDP socket on 7788:\n%s", out)
		}
		b.ok(t, "restart", "relayd started (pid ")
		if p := b.pid(t); p == 0 || p == first || running(first) {
			t.Errorf("after restart: pid %d, was %d (running: %v)", p, first, running(first))
		}
		first = b.pid(t)
	})

	t.Run("handoff", func(t *testing.T) {
		before := relaySocket(t, first, 7788)
		b.install(t, "1.9.1", "", conf)
		b.ok(t, "handoff", "relayd handed over (pid "+strconv.Itoa(first)+" -> ")
		second := b.pid(t)
		if after := relaySocket(t, second, 7788); second == first || running(first) || after.Inode != before.Inode {
			t.Errorf("after handoff: pid %d (was %d, running %v), inode %d (was %d)", second, first, running(first), after.Inode, before.Inode)
		}
		// A release that exits at once: the running one keeps serving.
		b.install(t, "1.9.2-broken", "echo 'relayd: broken build' >&2\nexit 4\n", conf)
		_, errs, code := b.run(t, "handoff")
		if code != 1 || !strings.Contains(errs, "the new relayd exited (status 4)") || !strings.Contains(errs, "relayd: broken build") ||
			!strings.Contains(errs, fmt.Sprintf("the old relayd (pid %d) still serves", second)) {
			t.Errorf("handoff to a broken release: exit %d, %q", code, errs)
		}
		if p := b.pid(t); p != second {
			t.Errorf("after the failed handoff: pid %d, want %d", p, second)
		}
		b.ok(t, "stop", fmt.Sprintf("relayd stopped (pid %d)", second))
		if running(second) || b.pid(t) != 0 {
			t.Errorf("relay %d still running after stop", second)
		}
	})

	t.Run("stale pid file", func(t *testing.T) {
		b.install(t, "1.9.1", "", conf)
		other := exec.Command("sleep", "60")
		if err := other.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { other.Process.Kill(); other.Wait() }()
		pidFile, err := h.Path(lab.RelayPIDFile)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(pidFile, []byte(strconv.Itoa(other.Process.Pid)+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if out, _, code := b.run(t, "pid"); code != 3 || out != "" {
			t.Errorf("pid naming a process that is not relayd: exit %d, %q; want 3", code, out)
		}
		b.ok(t, "stop", "relayd not running")
		os.WriteFile(pidFile, []byte(strconv.Itoa(other.Process.Pid)+"\n"), 0o644)
		b.ok(t, "start", "relayd started (pid ")
		if p := b.pid(t); p == 0 || p == other.Process.Pid {
			t.Errorf("start over a stale pid file: pid %d", p)
		}
		if !running(other.Process.Pid) {
			t.Errorf("the process the stale pid file named (%d) was signalled", other.Process.Pid)
		}
		b.ok(t, "stop", "relayd stopped")
	})

	t.Run("releases that fail to start", func(t *testing.T) {
		// It also shows the release starts with SIGHUP ignored, as nohup
		// gave it (busybox has none).
		b.install(t, "0.0.1-exits", "grep SigIgn /proc/$$/status\necho \"relayd: bad flag in $*\" >&2\nexit 4\n", conf)
		_, errs, code := b.run(t, "start")
		if code != 1 || !strings.Contains(errs, "exited (status 4)") || !strings.Contains(errs, "relayd: bad flag in --config /etc/relay/relayd.env") {
			t.Errorf("start of a release that exits: exit %d, %q; want 1, its status and its log", code, errs)
		}
		wantHUPIgnored(t, errs)
		b.install(t, "0.0.2-mute", "echo 'relayd: up, not listening'\nwhile :; do sleep 1; done\n", conf)
		b.settings(t, "RELAY_WAIT=1\n")
		defer b.settings(t, "")
		_, errs, code = b.run(t, "start")
		if code != 1 || !strings.Contains(errs, "not listening on udp port 7788 after 1s") || !strings.Contains(errs, "relayd: up, not listening") {
			t.Errorf("start of a release that never listens: exit %d, %q", code, errs)
		}
		if m := regexp.MustCompile(`relayd \(pid (\d+)\)`).FindStringSubmatch(errs); m == nil {
			t.Errorf("no pid in %q", errs)
		} else if p, _ := strconv.Atoi(m[1]); running(p) {
			t.Errorf("the release that never listened (pid %d) is still running", p)
		}
		if p := b.pid(t); p != 0 {
			t.Errorf("after failed starts: pid %d", p)
		}
	})

	t.Run("run", func(t *testing.T) {
		b.install(t, "1.9.0", "", conf)
		cmd := h.Command(t.Context(), lab.ServiceScript, "run")
		var out strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		for b.pid(t) == 0 {
			select {
			case err := <-done:
				t.Fatalf("run ended before a relay served: %v\n%s", err, &out)
			case <-time.After(50 * time.Millisecond):
			}
		}
		old := b.pid(t)
		b.install(t, "1.9.1", "", conf)
		b.ok(t, "handoff", "relayd handed over")
		nw := b.pid(t)
		select {
		case err := <-done:
			t.Fatalf("run ended with the handoff: %v\n%s", err, &out)
		default:
		}
		cmd.Process.Signal(syscall.SIGTERM)
		if err := <-done; err != nil || running(nw) || running(old) {
			t.Errorf("run after SIGTERM: %v (want exit 0), relays %d %v, %d %v\n%s", err, old, running(old), nw, running(nw), &out)
		}
	})

	t.Run("RELAY_USER", func(t *testing.T) {
		b.install(t, "1.9.0", "", lab.DefaultRelayConfig)
		b.settings(t, "RELAY_USER=nobody\n")
		defer b.settings(t, "")
		b.ok(t, "start", "relayd started")
		p := b.pid(t)
		st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p))
		if err != nil {
			t.Fatal(err)
		}
		// busybox's setpriv cannot empty the bounding set; with no_new_privs
		// nothing can raise the empty sets from it.
		for _, want := range []string{"\nUid:\t65534\t65534\t65534\t65534\n", "\nGid:\t65534\t65534\t65534\t65534\n",
			"\nCapInh:\t0000000000000000\n", "\nCapPrm:\t0000000000000000\n", "\nCapEff:\t0000000000000000\n",
			"\nCapAmb:\t0000000000000000\n", "\nNoNewPrivs:\t1\n"} {
			if !strings.Contains(string(st), want) {
				t.Errorf("relayd %d: no %q in its status:\n%s", p, strings.TrimSpace(want), st)
			}
		}
		b.ok(t, "stop", "relayd stopped")
	})

	t.Run("unsafe settings", func(t *testing.T) {
		etc := filepath.Dir(env)
		for _, c := range []struct {
			path string
			mode os.FileMode
			want string
		}{
			{env, 0o666, "settings file /etc/relay/service.env is group- or world-writable (mode 666): chmod go-w it"},
			{etc, 0o777, "settings file /etc/relay/service.env: /etc/relay above it is group- or world-writable (mode 777): chmod go-w it"},
		} {
			fi, err := os.Stat(c.path)
			if err != nil {
				t.Fatal(err)
			}
			os.Chmod(c.path, c.mode)
			_, errs, code := b.run(t, "start")
			os.Chmod(c.path, fi.Mode().Perm())
			if code != 1 || !strings.Contains(errs, c.want) {
				t.Errorf("start with %s mode %o: exit %d, %q; want 1 and %q", c.path, c.mode, code, errs, c.want)
			}
		}
		if p := b.pid(t); p != 0 {
			t.Errorf("a relay started anyway: pid %d", p)
		}
	})
}

// wantHUPIgnored: the SigIgn line a release printed (relay-service's words
// carry its log's tail) has SIGHUP, as nohup gave a release.
func wantHUPIgnored(t *testing.T, errs string) {
	t.Helper()
	if m := regexp.MustCompile(`SigIgn:\s+([0-9a-f]+)`).FindStringSubmatch(errs); m == nil {
		t.Errorf("the release's log shows no SigIgn: %q", errs)
	} else if mask, err := strconv.ParseUint(m[1], 16, 64); err != nil || mask&(1<<(syscall.SIGHUP-1)) == 0 {
		t.Errorf("the release did not start with SIGHUP ignored: SigIgn %s", m[1])
	}
}
