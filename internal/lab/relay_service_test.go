package lab_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/relayctl/relayctl/internal/lab"
)

// These test relay/dist's relay-service as operators run it outside
// systemd; handoff_test.go tests its handoff.

// TestServiceRefusesUnsafePaths: relay-service sources its settings file as
// shell and, as root, writes the pid file and the log: a settings file or
// folder that someone else can write (or a symlink) is refused, with what
// to do, before anything runs.
func TestServiceRefusesUnsafePaths(t *testing.T) {
	t.Parallel()
	l := lab.StartT(t, lab.Options{Hosts: []lab.HostOptions{{Relay: &lab.RelayInstall{
		Binary: lab.BuildRelayd(t, "1.9.0"), Version: "1.9.0"}}}})
	h := l.Hosts[0]
	path := func(p string) string {
		t.Helper()
		got, err := h.Path(p)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	env, run, logDir, pidFile := path(lab.ServiceEnv), path("/opt/relay/run"), path("/opt/relay/log"), path(lab.RelayPIDFile)
	etcRelay, optRelay := filepath.Dir(env), filepath.Dir(run)
	etcMode, err := os.Stat(etcRelay)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name        string
		break_, fix func() error
		want        string
	}{
		{"settings file writable by all", func() error { return os.Chmod(env, 0o666) }, func() error { return os.Chmod(env, 0o644) },
			"settings file /etc/relay/service.env is group- or world-writable (mode 666): chmod go-w it"},
		{"settings file of another user", func() error { return os.Chown(env, 1000, -1) }, func() error { return os.Chown(env, 0, -1) },
			"settings file /etc/relay/service.env is owned by uid 1000, not by uid 0 that runs relay-service (or root): chown it"},
		{"pid folder writable by its group", func() error { return os.Chmod(run, 0o775) }, func() error { return os.Chmod(run, 0o755) },
			"folder /opt/relay/run is group- or world-writable (mode 775)"},
		{"log folder a symlink", func() error {
			if err := os.Rename(logDir, logDir+".real"); err != nil {
				return err
			}
			return os.Symlink("/tmp", logDir)
		}, func() error {
			if err := os.Remove(logDir); err != nil {
				return err
			}
			return os.Rename(logDir+".real", logDir)
		}, "folder /opt/relay/log is a symlink: use the real path"},
		// A folder above the one checked, open to another user: they could
		// swap what is below it for their own once it was checked.
		{"settings file's folder writable by all", func() error { return os.Chmod(etcRelay, 0o777) }, func() error { return os.Chmod(etcRelay, etcMode.Mode().Perm()) },
			"settings file /etc/relay/service.env: /etc/relay above it is group- or world-writable (mode 777): chmod go-w it"},
		{"pid folder's parent of another user", func() error { return os.Chown(optRelay, 1000, -1) }, func() error { return os.Chown(optRelay, 0, -1) },
			"folder /opt/relay/run: /opt/relay above it is owned by uid 1000, not by uid 0 that runs relay-service (or root): chown it"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			os.MkdirAll(run, 0o755)
			os.MkdirAll(logDir, 0o755)
			if err := tt.break_(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				if err := tt.fix(); err != nil {
					t.Fatal(err)
				}
			})
			out, errs, code := sshRun(t, l, h.Name, lab.ServiceScript+" start", "")
			if code != 1 || !strings.Contains(errs, tt.want) {
				t.Errorf("start: exit %d, stdout %q, stderr %q; want 1 and %q", code, out, errs, tt.want)
			}
			if b, err := os.ReadFile(pidFile); err == nil {
				t.Errorf("a relay started anyway: pid file %q", b)
			}
		})
	}
	// Put right, it starts.
	sshOK(t, l, h.Name, lab.ServiceScript+" start")
}

// TestServiceRun is relay-service run, as runit's ./run or a container's
// entrypoint uses it: it stays in the foreground while a relayd serves,
// follows a handoff to the new relayd, stops the relay on SIGTERM and exits
// 0; a relay that dies ends it with 1.
func TestServiceRun(t *testing.T) {
	t.Parallel()
	conf := handoffConfig("")
	l := lab.StartT(t, lab.Options{Hosts: []lab.HostOptions{{Relay: &lab.RelayInstall{
		Binary: lab.BuildRelayd(t, "1.9.0"), Version: "1.9.0", Config: conf}}}})
	h := l.Hosts[0]
	start := func() (*exec.Cmd, chan error, *strings.Builder) {
		t.Helper()
		cmd := h.Command(t.Context(), lab.ServiceScript, "run")
		var out strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		waitUntil(t, func() bool { _, err := h.RelayPID(t.Context()); return err == nil })
		return cmd, done, &out
	}

	cmd, done, out := start()
	first, err := h.RelayPID(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := h.InstallRelay(t.Context(), lab.RelayInstall{Binary: lab.BuildRelayd(t, "1.9.1"), Version: "1.9.1", Config: conf}); err != nil {
		t.Fatal(err)
	}
	sshOK(t, l, h.Name, lab.ServiceScript+" handoff")
	second, err := h.RelayPID(t.Context())
	if err != nil || second == first {
		t.Fatalf("after the handoff: pid %d, %v (was %d)", second, err, first)
	}
	select {
	case err := <-done:
		t.Fatalf("run ended with the handoff: %v\n%s", err, out)
	default:
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Errorf("run after SIGTERM: %v, want exit 0\n%s", err, out)
	}
	if running(second) || running(first) {
		t.Errorf("relayd still running after run stopped: %d %v, %d %v", first, running(first), second, running(second))
	}

	// A relay that dies on its own ends run with 1.
	_, done, out = start()
	pid, err := h.RelayPID(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	syscall.Kill(pid, syscall.SIGKILL)
	err = <-done
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(out.String(), "run: relayd is not running any more") {
		t.Errorf("run after its relay died: %v, %q; want exit 1 and why", err, out)
	}
}

// TestServiceUser: with RELAY_USER, relayd runs as that user with no
// capabilities; relay-service itself still runs as root.
func TestServiceUser(t *testing.T) {
	t.Parallel()
	l := lab.StartT(t, lab.Options{Hosts: []lab.HostOptions{{Relay: &lab.RelayInstall{
		Binary: lab.BuildRelayd(t, "1.9.0"), Version: "1.9.0"}}}})
	h := l.Hosts[0]
	env, err := h.Path(lab.ServiceEnv)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(env, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(f, "RELAY_USER=nobody")
	f.Close()
	sshOK(t, l, h.Name, lab.ServiceScript+" start")
	pid, err := h.RelayPID(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.ReadFile(filepath.Join("/proc", fmt.Sprint(pid), "status"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(st), "\nUid:\t65534\t65534\t65534\t65534\n") || !strings.Contains(string(st), "\nCapEff:\t0000000000000000\n") ||
		!strings.Contains(string(st), "\nCapBnd:\t0000000000000000\n") {
		t.Errorf("relayd %d: want uid nobody (65534) and no capabilities:\n%s", pid, st)
	}
	sshOK(t, l, h.Name, lab.ServiceScript+" stop")

	// A user that does not exist is refused before anything runs.
	b, _ := os.ReadFile(env)
	os.WriteFile(env, []byte(strings.ReplaceAll(string(b), "RELAY_USER=nobody", "RELAY_USER=no-such-user")), 0o644)
	if _, errs, code := sshRun(t, l, h.Name, lab.ServiceScript+" start", ""); code != 1 || !strings.Contains(errs, "RELAY_USER=no-such-user in /etc/relay/service.env: no such user") {
		t.Errorf("start with an unknown RELAY_USER: exit %d, %q", code, errs)
	}
}

// TestServiceNeedsOnlyItsTools runs start, handoff and stop with a PATH of
// only the tools relay-service's header lists (no ss, no nsenter, no ip: a
// minimal container has none of them).
func TestServiceNeedsOnlyItsTools(t *testing.T) {
	t.Parallel()
	conf := handoffConfig("")
	l := lab.StartT(t, lab.Options{Hosts: []lab.HostOptions{{NoRelayNetns: true, Relay: &lab.RelayInstall{
		Binary: lab.BuildRelayd(t, "1.9.0"), Version: "1.9.0", Config: conf}}}})
	h := l.Hosts[0]
	bin := filepath.Join(t.TempDir(), "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tool := range []string{"sh", "setsid", "sed", "awk", "readlink", "stat", "id", "cat", "rm", "mkdir",
		"mv", "sleep", "wc", "tail", "grep", "mkfifo", "timeout"} {
		p, err := exec.LookPath(tool)
		if err != nil {
			t.Fatalf("%s: %v", tool, err)
		}
		if err := os.Symlink(p, filepath.Join(bin, tool)); err != nil {
			t.Fatal(err)
		}
	}
	svc := "env PATH=" + bin + " " + lab.ServiceScript
	sshOK(t, l, h.Name, svc+" start")
	if err := h.InstallRelay(t.Context(), lab.RelayInstall{Binary: lab.BuildRelayd(t, "1.9.1"), Version: "1.9.1", Config: conf}); err != nil {
		t.Fatal(err)
	}
	if out := sshOK(t, l, h.Name, svc+" handoff"); !strings.Contains(out, "relayd handed over") {
		t.Errorf("handoff printed %q", out)
	}
	if out := sshOK(t, l, h.Name, svc+" stop"); !strings.Contains(out, "relayd stopped") {
		t.Errorf("stop printed %q", out)
	}
}
