package sshrun_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/relayctl/relayctl/rollout/shellhost"
	"github.com/relayctl/relayctl/rollout/sshrun"
)

// syncBuffer is a bytes.Buffer a session writes while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// waitFor polls cond for at most d.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(d); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
	}
}

const keepalive = "keepalive@openssh.com want-reply"

// A host that falls silent (its traffic dropped; its sshd and its command
// alive) is cut once it has sent nothing through ServerAliveCountMax
// intervals of ServerAliveInterval, here from ssh_config: a session that
// waits on it (the agent's, which has no command timeout) ends then, with
// ErrSilent, within (count + 1) × interval of the silence. On the code
// before, the client sent no keepalive and the session waited for TCP to
// give up (Go's keepalive probes, 150 s; with data in flight, the kernel's
// tcp_retries2, about 15 minutes).
func TestSilentHostIsCut(t *testing.T) {
	e := newEnv(t)
	s := e.server(t)
	cfg := filepath.Join(t.TempDir(), "config")
	writeFile(t, cfg, fmt.Sprintf("Host relay-ash-1\n  HostName 127.0.0.1\n  Port %d\n  User root\n  ServerAliveInterval 1\n  ServerAliveCountMax 2\n", s.Port()))
	o := e.opts()
	o.SSHConfig = cfg
	c := dial(t, "relay-ash-1", o)

	var out syncBuffer
	done := make(chan error, 1)
	go func() {
		ctx := shellhost.WithoutCommandTimeout(context.Background())
		done <- c.Run(ctx, "echo started; exec sleep 600", nil, &out, nil)
	}()
	waitFor(t, 5*time.Second, "the command's start", func() bool { return out.String() == "started\n" })
	// Keepalives go to an idle connection, and are answered.
	waitFor(t, 5*time.Second, "a keepalive", func() bool { return slices.Contains(s.GlobalRequests(), keepalive) })

	s.Silence()
	silent := time.Now()
	// The bound is 3 s; the margin is for a loaded machine.
	select {
	case err := <-done:
		if !errors.Is(err, sshrun.ErrSilent) {
			t.Fatalf("the session ended with %v, want ErrSilent", err)
		}
		want := "relay-ash-1 (127.0.0.1:" + fmt.Sprint(s.Port()) + "): the host fell silent: nothing heard through 2 keepalives 1s apart; the connection was cut"
		if err.Error() != want {
			t.Errorf("got %q, want %q", err, want)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("the session still waits on a host silent for %v, past its bound of 3s (2 keepalives 1s apart, and one interval)", time.Since(silent).Round(time.Second))
	}
	// Every later session fails at once, with the same cause.
	if err := c.Run(context.Background(), "true", nil, nil, nil); !errors.Is(err, sshrun.ErrSilent) {
		t.Errorf("a session on the cut connection: got %v, want ErrSilent", err)
	}
}

// A host that answers is never cut, however long it stays idle, and a
// busy one is not either while its bytes arrive: ten intervals of an idle
// connection, then a command that prints for longer than count intervals.
func TestAnsweringHostIsNotCut(t *testing.T) {
	e := newEnv(t)
	s := e.server(t)
	o := e.opts()
	o.ServerAliveInterval, o.ServerAliveCountMax = 50*time.Millisecond, 2
	c := dial(t, "root@"+s.Addr(), o)
	time.Sleep(500 * time.Millisecond)
	if err := c.Run(context.Background(), "i=0; while [ $i -lt 20 ]; do echo $i; sleep 0.02; i=$((i+1)); done", nil, nil, nil); err != nil {
		t.Fatalf("run: %v", err)
	}
	n := 0
	for _, r := range s.GlobalRequests() {
		if r != keepalive {
			t.Errorf("global request %q, want only %q", r, keepalive)
		}
		n++
	}
	// One every 50 ms for 0.9 s: the floor is far below, for a loaded machine.
	if n < 3 {
		t.Errorf("%d keepalives in 0.9 s at one every 50 ms, want at least 3", n)
	}
}

// --server-alive-interval 0 (Options' negative interval) sends none.
func TestKeepaliveOff(t *testing.T) {
	e := newEnv(t)
	s := e.server(t)
	o := e.opts()
	o.ServerAliveInterval = -1
	c := dial(t, "root@"+s.Addr(), o)
	time.Sleep(300 * time.Millisecond)
	if err := c.Run(context.Background(), "true", nil, nil, nil); err != nil {
		t.Fatal(err)
	}
	if got := s.GlobalRequests(); len(got) != 0 {
		t.Errorf("global requests %q, want none with keepalives off", got)
	}
	if iv, n := c.Keepalive(); iv != 0 || n != 0 {
		t.Errorf("Keepalive() = %v, %d; want 0, 0 (off)", iv, n)
	}
}

// The interval and count: Options' (the flags) over the host's
// ssh_config, over relayctl's defaults; ssh_config's 0 interval is
// OpenSSH's default (none), read as unset; its 0 count (cut at the first
// unanswered keepalive) is relayctl's 1.
func TestKeepaliveSettings(t *testing.T) {
	e := newEnv(t)
	s := e.server(t)
	tests := []struct {
		name      string
		config    string // ServerAlive lines for the host
		interval  time.Duration
		count     int
		wantIv    time.Duration
		wantCount int
	}{
		{name: "defaults", wantIv: 15 * time.Second, wantCount: 3},
		{name: "ssh_config seconds", config: "ServerAliveInterval 30\nServerAliveCountMax 5", wantIv: 30 * time.Second, wantCount: 5},
		{name: "ssh_config time format", config: "ServerAliveInterval 1m30s", wantIv: 90 * time.Second, wantCount: 3},
		{name: "ssh_config units any case", config: "ServerAliveInterval 2M", wantIv: 2 * time.Minute, wantCount: 3},
		{name: "ssh_config seconds last", config: "ServerAliveInterval 1m30", wantIv: 90 * time.Second, wantCount: 3},
		{name: "ssh_config 0 is unset", config: "ServerAliveInterval 0", wantIv: 15 * time.Second, wantCount: 3},
		{name: "ssh_config count 0", config: "ServerAliveCountMax 0", wantIv: 15 * time.Second, wantCount: 1},
		{name: "flags over ssh_config", config: "ServerAliveInterval 30\nServerAliveCountMax 5", interval: 2 * time.Second, count: 4, wantIv: 2 * time.Second, wantCount: 4},
		{name: "one flag", config: "ServerAliveInterval 30\nServerAliveCountMax 5", count: 1, wantIv: 30 * time.Second, wantCount: 1},
		{name: "off", config: "ServerAliveInterval 30", interval: -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := filepath.Join(t.TempDir(), "config")
			lines := strings.ReplaceAll(tt.config, "\n", "\n  ")
			writeFile(t, cfg, fmt.Sprintf("Host relay-ash-1\n  HostName 127.0.0.1\n  Port %d\n  User root\n  %s\n", s.Port(), lines))
			o := e.opts()
			o.SSHConfig, o.ServerAliveInterval, o.ServerAliveCountMax = cfg, tt.interval, tt.count
			c := dial(t, "relay-ash-1", o)
			if iv, n := c.Keepalive(); iv != tt.wantIv || n != tt.wantCount {
				t.Errorf("got %v × %d, want %v × %d", iv, n, tt.wantIv, tt.wantCount)
			}
		})
	}
}

// A value OpenSSH would refuse is refused, naming the file, line and key.
func TestKeepaliveSettingErrors(t *testing.T) {
	e := newEnv(t)
	s := e.server(t)
	tests := []struct{ line, want string }{
		{"ServerAliveInterval x", `line 5: ServerAliveInterval "x" for relay-ash-1: want seconds, or a time such as 1m30s`},
		{"ServerAliveInterval -1", `line 5: ServerAliveInterval "-1" for relay-ash-1: want seconds, or a time such as 1m30s`},
		{"ServerAliveInterval 1.5", `line 5: ServerAliveInterval "1.5" for relay-ash-1: want seconds, or a time such as 1m30s`},
		{"ServerAliveInterval 1m30x", `line 5: ServerAliveInterval "1m30x" for relay-ash-1: want seconds, or a time such as 1m30s`},
		{"ServerAliveInterval 3000000000", `line 5: ServerAliveInterval "3000000000" for relay-ash-1: want seconds, or a time such as 1m30s`},
		{"ServerAliveCountMax -1", `line 5: ServerAliveCountMax "-1" for relay-ash-1: want a whole number of keepalives, 0 or more`},
		{"ServerAliveCountMax 2s", `line 5: ServerAliveCountMax "2s" for relay-ash-1: want a whole number of keepalives, 0 or more`},
	}
	for _, tt := range tests {
		t.Run(tt.line, func(t *testing.T) {
			cfg := filepath.Join(t.TempDir(), "config")
			writeFile(t, cfg, fmt.Sprintf("Host relay-ash-1\n  HostName 127.0.0.1\n  Port %d\n  User root\n  %s\n", s.Port(), tt.line))
			o := e.opts()
			o.SSHConfig = cfg
			_, err := sshrun.Dial(context.Background(), "relay-ash-1", o)
			if want := "ssh config " + cfg + " " + tt.want; err == nil || err.Error() != want {
				t.Errorf("got %v, want %q", err, want)
			}
		})
	}
}
