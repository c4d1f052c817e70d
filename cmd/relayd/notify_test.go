package main

import (
	"errors"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// notifySocket is a real unixgram socket standing in for systemd's.
func notifySocket(t *testing.T) (*net.UnixConn, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "notify")
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, path
}

func readNotify(t *testing.T, c *net.UnixConn) string {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	buf := make([]byte, 4096)
	n, err := c.Read(buf)
	if err != nil {
		t.Fatalf("read notify socket: %v", err)
	}
	return string(buf[:n])
}

// TestNotifyReady: READY=1 arrives once the socket is bound with its
// SO_RCVBUF read back, so /status answers and ss shows the socket as soon
// as it arrives; STOPPING=1 on SIGTERM.
func TestNotifyReady(t *testing.T) {
	c, path := notifySocket(t)
	p := newCmd(t, nil, []string{"NOTIFY_SOCKET=" + path}, "--config", emptyConfig(t),
		"--listen", "127.0.0.1:0", "--control", "127.0.0.1:0", "--so-rcvbuf", "65536")
	p.cmd.Stderr = logWriter{p}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-done
	})

	ready := readNotify(t, c)
	m := regexp.MustCompile(`^READY=1\nSTATUS=relaying on (127\.0\.0\.1:\d+), SO_RCVBUF read back (\d+), socket bound$`).FindStringSubmatch(ready)
	if m == nil {
		t.Fatalf("first notification %q, want READY=1 and STATUS", ready)
	}
	if m[2] != "131072" {
		t.Errorf("STATUS says rb %s, want 131072 (2 x 65536)", m[2])
	}
	// No sleep, no retry: the socket is there now.
	out := ss(t, nil, portOf(m[1]))
	if rb, _ := skmem(t, out, m[1]); rb != 131072 {
		t.Errorf("ss rb %d right after READY, want 131072", rb)
	}
	// The control address is in the start line, which relayd wrote before
	// READY; only its way through our pipe may lag.
	var ctl []string
	waitFor(t, func() (bool, string) {
		ctl = regexp.MustCompile(`control=(\S+)`).FindStringSubmatch(p.logText())
		return ctl != nil, "no control address in the log: " + p.logText()
	})
	p.control, p.client = ctl[1], http.DefaultClient
	if got := p.status().SORcvbufEffective; got != 131072 {
		t.Errorf("/status right after READY: effective %d, want 131072", got)
	}

	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if got := readNotify(t, c); got != "STOPPING=1" {
		t.Errorf("after SIGTERM: got %q, want STOPPING=1", got)
	}
	if err := <-done; err != nil {
		t.Errorf("exit after SIGTERM: %v", err)
	}
	done <- nil
}

// TestNotifyBadConfig: a relay that cannot start says nothing to systemd,
// so systemd sees the exit, not a READY.
func TestNotifyBadConfig(t *testing.T) {
	c, path := notifySocket(t)
	p := newCmd(t, nil, []string{"NOTIFY_SOCKET=" + path, "RELAYD_BATCH=0"}, "--config", emptyConfig(t))
	err := p.cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 {
		t.Fatalf("got %v, want exit status 2", err)
	}
	c.SetReadDeadline(time.Now())
	if n, err := c.Read(make([]byte, 64)); err == nil {
		t.Errorf("got a notification of %d bytes from a relay that never started", n)
	}
}

// TestNotifyBadSocket: a notify socket nobody listens on is logged and the
// relay runs on.
func TestNotifyBadSocket(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "gone")
	p := startRelayd(t, nil, []string{"NOTIFY_SOCKET=" + missing}, loopbackArgs(t)...)
	waitFor(t, func() (bool, string) {
		return strings.Contains(p.logText(), `msg="cannot notify systemd"`), "no warning in the log:\n" + p.logText()
	})
	p.status()
}

// logWriter appends a process's output to its log.
type logWriter struct{ p *proc }

func (w logWriter) Write(b []byte) (int, error) {
	w.p.mu.Lock()
	defer w.p.mu.Unlock()
	return w.p.log.Write(b)
}
