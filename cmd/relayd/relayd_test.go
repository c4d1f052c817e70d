package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/relayctl/relayctl/relay/config"
	"github.com/relayctl/relayctl/relay/server"
	"github.com/relayctl/relayctl/relay/sockstat"
)

// The tests here run the real relayd binary, built once with a stamped
// version, as relayctl's lab does. TEST_RELAYD=PATH runs them against
// another build instead (an older release, to see a test fail on it):
//
//	TEST_RELAYD=/tmp/old/relayd go test -run Hostile ./cmd/relayd

const stampedVersion = "1.8.0"

var relaydPath string

func TestMain(m *testing.M) {
	runWrapper()
	if p := os.Getenv("TEST_RELAYD"); p != "" {
		relaydPath = p
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "relayd-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	relaydPath = filepath.Join(dir, "relayd")
	out, err := exec.Command("go", "build", "-ldflags", "-X main.Version="+stampedVersion, "-o", relaydPath, ".").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "build relayd: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// proc is a running relayd.
type proc struct {
	t       *testing.T
	cmd     *exec.Cmd
	listen  string
	control string
	client  *http.Client

	mu   sync.Mutex
	log  bytes.Buffer
	done chan error
}

var startLine = regexp.MustCompile(`msg="relayd started".* listen=(\S+) control=(\S+)`)

// startRelayd runs prefix + relayd + args with env added to a clean
// environment, and waits for its start line. It stops relayd when the test
// ends.
func startRelayd(t *testing.T, prefix, env []string, args ...string) *proc {
	t.Helper()
	p := newCmd(t, prefix, env, args...)
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start relayd: %v", err)
	}
	p.done = make(chan error, 1)
	started := make(chan []string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			p.mu.Lock()
			p.log.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
			if m := startLine.FindStringSubmatch(sc.Text()); m != nil {
				started <- m[1:]
			}
		}
		close(started)
		p.done <- p.cmd.Wait()
	}()
	t.Cleanup(func() {
		p.cmd.Process.Signal(syscall.SIGTERM)
		<-p.done
		if t.Failed() {
			t.Logf("relayd log:\n%s", p.logText())
		}
	})
	m, ok := <-started
	if !ok {
		<-p.done
		t.Fatalf("relayd exited before its start line:\n%s", p.logText())
	}
	p.listen, p.control = m[0], m[1]
	p.client = http.DefaultClient
	return p
}

func newCmd(t *testing.T, prefix, env []string, args ...string) *proc {
	argv := append(append(append([]string{}, prefix...), relaydPath), args...)
	cmd := exec.Command(argv[0], argv[1:]...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "RELAYD_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	return &proc{t: t, cmd: cmd}
}

func (p *proc) logText() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}

func (p *proc) status() server.Status {
	p.t.Helper()
	resp, err := p.client.Get("http://" + p.control + "/status")
	if err != nil {
		p.t.Fatalf("get status: %v", err)
	}
	defer resp.Body.Close()
	var st server.Status
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		p.t.Fatalf("decode status: %v", err)
	}
	return st
}

// waitFor polls cond until it holds; the test binary's -timeout bounds it.
func waitFor(t *testing.T, cond func() (bool, string)) {
	t.Helper()
	for {
		ok, msg := cond()
		if ok {
			return
		}
		if dl, set := t.Deadline(); set && time.Until(dl) < 10*time.Second {
			t.Fatalf("gave up waiting: %s", msg)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// emptyConfig keeps the host's /etc/relay/relayd.env out of the tests.
func emptyConfig(t *testing.T) string {
	p := filepath.Join(t.TempDir(), "relayd.env")
	if err := os.WriteFile(p, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func loopbackArgs(t *testing.T) []string {
	return []string{"--config", emptyConfig(t), "--listen", "127.0.0.1:0", "--control", "127.0.0.1:0"}
}

func TestVersion(t *testing.T) {
	out, err := exec.Command(relaydPath, "--version").Output()
	if err != nil {
		t.Fatalf("relayd --version: %v", err)
	}
	if got, want := string(out), stampedVersion+"\n"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	p := startRelayd(t, nil, nil, loopbackArgs(t)...)
	if got := p.status().Version; got != stampedVersion {
		t.Errorf("status version: got %q, want %q", got, stampedVersion)
	}
}

// SIGHUP reads the config again and sets a new receive buffer on the live
// socket: the same socket (inode), the new rb in the kernel, nothing else
// changed; a key that needs a restart is named, and a config that does
// not load changes nothing.
func TestSIGHUPSetsTheBufferOnTheLiveSocket(t *testing.T) {
	file := filepath.Join(t.TempDir(), "relayd.env")
	write := func(rcvbuf, batch string) {
		os.WriteFile(file, []byte("RELAYD_LISTEN=127.0.0.1:0\nRELAYD_CONTROL=127.0.0.1:0\nRELAYD_SO_RCVBUF="+rcvbuf+"\nRELAYD_BATCH="+batch+"\n"), 0o644)
	}
	write("32768", "8")
	p := startRelayd(t, nil, nil, "--config", file)
	before := p.status()
	if before.SORcvbufEffective != 65536 {
		t.Fatalf("effective %d at start, want 65536", before.SORcvbufEffective)
	}
	write("49152", "16")
	p.cmd.Process.Signal(syscall.SIGHUP)
	waitFor(t, func() (bool, string) {
		return p.status().SORcvbufEffective == 98304, "effective still " + strconv.Itoa(p.status().SORcvbufEffective) + "\n" + p.logText()
	})
	after := p.status()
	if rb, _ := skmem(t, ss(t, nil, portOf(p.listen)), p.listen); rb != 98304 || after.SocketInode != before.SocketInode || after.PID != before.PID {
		t.Errorf("after SIGHUP: ss rb %d, inode %d → %d, pid %d → %d; want rb 98304 on the same socket of the same process", rb, before.SocketInode, after.SocketInode, before.PID, after.PID)
	}
	if !strings.Contains(p.logText(), "RELAYD_BATCH changed; relayd applies it only at a restart") {
		t.Errorf("the log does not name the key that needs a restart:\n%s", p.logText())
	}
	os.WriteFile(file, []byte("RELAYD_SO_RCVBUF=lots\n"), 0o644)
	p.cmd.Process.Signal(syscall.SIGHUP)
	waitFor(t, func() (bool, string) {
		return strings.Contains(p.logText(), "SIGHUP: the config does not load; nothing changed"), p.logText()
	})
	if got := p.status().SORcvbufEffective; got != 98304 {
		t.Errorf("a config that does not load changed the buffer to %d", got)
	}
}

func TestSignals(t *testing.T) {
	p := startRelayd(t, nil, nil, loopbackArgs(t)...)

	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := <-p.done; err != nil {
		t.Errorf("after SIGTERM: got %v, want exit 0", err)
	}
	p.done <- nil // for the cleanup
	if !strings.Contains(p.logText(), `msg="relayd stopped"`) {
		t.Errorf("log lacks the stop line:\n%s", p.logText())
	}
	// The socket and the control port are closed: a new relayd can bind them.
	q := startRelayd(t, nil, nil, "--config", emptyConfig(t), "--listen", p.listen, "--control", p.control)
	q.status()
}

func TestConfigPrecedence(t *testing.T) {
	file := filepath.Join(t.TempDir(), "relayd.env")
	os.WriteFile(file, []byte("# test\nRELAYD_BATCH=8\nRELAYD_LOBBY_SIZE=4\nRELAYD_SO_RCVBUF=4096\nRELAYD_LISTEN=127.0.0.1:0\nRELAYD_CONTROL=127.0.0.1:0\n"), 0o644)
	p := startRelayd(t, nil, []string{"RELAYD_LOBBY_SIZE=5", "RELAYD_SO_RCVBUF=8192"}, "--config", file, "--so-rcvbuf", "16384")
	for _, want := range []string{"batch=8 ", "lobby_size=5 ", "so_rcvbuf_requested=16384 "} {
		if !strings.Contains(p.logText(), want) {
			t.Errorf("start line lacks %q:\n%s", want, p.logText())
		}
	}
	if got := p.status().SORcvbufRequested; got != 16384 {
		t.Errorf("so_rcvbuf_requested: got %d, want 16384 (flag over environment over file)", got)
	}
}

func TestBadConfig(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.env")
	os.WriteFile(bad, []byte("RELAYD_BATCH=8\nRELAYD_SO_RCVBUF=lots\n"), 0o644)
	tests := []struct {
		name string
		env  []string
		args []string
		want string
	}{
		{"missing explicit file", nil, []string{"--config", filepath.Join(dir, "nope.env")}, "relayd: error: open config: open " + filepath.Join(dir, "nope.env")},
		{"bad value in file", nil, []string{"--config", bad}, "relayd: error: " + bad + ":2: RELAYD_SO_RCVBUF: want a decimal integer"},
		{"bad environment", []string{"RELAYD_BATCH=0"}, []string{"--config", emptyConfig(t)}, "relayd: error: environment: RELAYD_BATCH: want a decimal integer from 1 to 1024"},
		{"bad flag", nil, []string{"--config", emptyConfig(t), "--listen", "[::1]:7788"}, "relayd: error: flag: RELAYD_LISTEN: want an IPv4 address"},
		{"public control", nil, []string{"--config", emptyConfig(t), "--control", "0.0.0.0:7789"}, "RELAYD_CONTROL: want a loopback address"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newCmd(t, nil, tt.env, tt.args...)
			var stderr bytes.Buffer
			p.cmd.Stderr = &stderr
			err := p.cmd.Run()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 2 {
				t.Fatalf("got %v, want exit status 2", err)
			}
			if !strings.Contains(stderr.String(), tt.want) {
				t.Errorf("got stderr %q, want it to contain %q", stderr.String(), tt.want)
			}
		})
	}
}

// skmem finds the socket bound to addr in ss -m output and returns its rb
// and d fields.
func skmem(t *testing.T, ssOut, addr string) (rb, d uint64) {
	t.Helper()
	socks, err := sockstat.ParseSS([]byte(ssOut))
	if err != nil {
		t.Fatalf("parse ss: %v", err)
	}
	ip, port, _ := net.SplitHostPort(addr)
	pn, _ := strconv.Atoi(port)
	for _, s := range sockstat.FilterPort(socks, pn) {
		if s.Local == ip {
			return s.Rcvbuf, s.Drops
		}
	}
	t.Fatalf("ss shows no socket bound to %s:\n%s", addr, ssOut)
	return 0, 0
}

func ss(t *testing.T, prefix []string, port string) string {
	t.Helper()
	argv := append(append([]string{}, prefix...), "ss", "-H", "-O", "-u", "-l", "-n", "-m", "sport = :"+port)
	out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(argv, " "), err, out)
	}
	return string(out)
}

// procNetUDP returns the drops and rx_queue of the socket bound to addr
// (ip:port) in /proc/PID/net/udp.
func procNetUDP(t *testing.T, pid int, addr string) (drops, rxQueue uint64) {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/udp", pid))
	if err != nil {
		t.Fatal(err)
	}
	socks, err := sockstat.ParseProcNetUDP(b)
	if err != nil {
		t.Fatalf("parse /proc/%d/net/udp: %v", pid, err)
	}
	ip, port, _ := net.SplitHostPort(addr)
	pn, _ := strconv.Atoi(port)
	for _, s := range socks {
		if s.LocalPort == pn && s.LocalAddr == ip {
			return s.Drops, s.RxQueue
		}
	}
	t.Fatalf("/proc/%d/net/udp has no socket %s", pid, addr)
	return 0, 0
}

// rcvbufErrors returns Udp RcvbufErrors from /proc/PID/net/snmp.
func rcvbufErrors(t *testing.T, pid int) uint64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/snmp", pid))
	if err != nil {
		t.Fatal(err)
	}
	st, err := sockstat.ParseSNMP(b)
	if err != nil {
		t.Fatalf("parse /proc/%d/net/snmp: %v", pid, err)
	}
	return st.RcvbufErrors
}

func portOf(addr string) string {
	_, port, _ := net.SplitHostPort(addr)
	return port
}

// TestEveryKeyHasAFlag: the flag, the environment and the file set the
// same settings (docs/relayd.md), so every config key has a flag.
func TestEveryKeyHasAFlag(t *testing.T) {
	flags := map[string]bool{"RELAYD_SO_RCVBUF_FORCE": true} // a boolean flag of its own
	for _, f := range flagKeys {
		flags[f.key] = true
	}
	for _, k := range config.Keys() {
		if !flags[k] {
			t.Errorf("config key %s has no flag", k)
		}
	}
}
