package shellhost

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/relayctl/relayctl/plans"
	"github.com/relayctl/relayctl/rollout/hostfacts"
	"github.com/relayctl/relayctl/uplink"
)

// localRunner runs commands on this machine with sh -c: the observe script
// meets the real kernel, real ss and real /proc without SSH in between.
type localRunner struct {
	netns bool // in a network namespace of its own (unshare -n)
}

func (l localRunner) Run(ctx context.Context, cmd string, stdin io.Reader, stdout, stderr io.Writer) error {
	c := exec.CommandContext(ctx, "sh", "-c", cmd)
	if l.netns {
		c = exec.CommandContext(ctx, "unshare", "-n", "sh", "-c", cmd)
	}
	if stdin != nil {
		w, err := c.StdinPipe()
		if err != nil {
			return err
		}
		go func() {
			io.Copy(w, stdin)
			w.Close()
		}()
	}
	c.Stdout, c.Stderr = stdout, stderr
	// A session killed on the host ends its command, as an SSH channel
	// does, whatever its stdin still holds.
	err := c.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return &ExitError{Status: ee.ExitCode()}
	}
	return err
}

func TestQueryCommandQuotes(t *testing.T) {
	q := Query{Keys: []string{"net.core.rmem_max"}, Port: 7788, Paths: plans.PlanPaths(plans.DefaultPaths),
		Service: plans.PlanService{Manager: "command", PIDFile: "/opt/relay/run/relayd.pid"}}
	c, err := newObserveCall(q, "h", "a", "u")
	if err != nil {
		t.Fatal(err)
	}
	if args, argv := c.words(); len(args) != 1 || !strings.HasPrefix(args[0], "@@relayctl-") || strings.Contains(strings.Join(argv, "\n"), "@@relayctl-") {
		t.Errorf("the boundary is not observe's one argument, or is among its words: %q %q", args, argv)
	}
	for _, bad := range []func(q *Query){
		func(q *Query) { q.Paths.RelayConfig = "/etc/relay/$(id).env" },
		func(q *Query) { q.Service = plans.PlanService{Manager: "systemd", Name: "-Hroot@evil.example"} },
		func(q *Query) { q.Service.PIDFile = "/run/x; reboot" },
		func(q *Query) { q.Keys = []string{"net.core.rmem_max,kernel.x"} },
	} {
		c := q
		bad(&c)
		if _, err := newObserveCall(c, "h", "a", "u"); err == nil {
			t.Errorf("%+v was accepted", c)
		}
	}
}

// fakeRelay is a "relay" for observing this machine: a copy of sleep
// started from a release folder (so its executable is a release), with
// its pid in a pid file, and a UDP socket of ours on a free port.
type fakeRelay struct {
	dir, pidFile string
	port, pid    int
	conn         *net.UDPConn
}

func startFakeRelay(t testing.TB) *fakeRelay {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("observe reads the relay through nsenter: needs root")
	}
	conn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	dir := t.TempDir()
	os.MkdirAll(dir+"/releases/1.7.0", 0o755)
	sleep, _ := exec.LookPath("sleep")
	b, err := os.ReadFile(sleep)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(dir+"/releases/1.7.0/relayd", b, 0o755)
	os.Symlink(dir+"/releases/1.7.0", dir+"/current")
	os.WriteFile(dir+"/relayd.env", []byte("RELAYD_SO_RCVBUF=0\n"), 0o644)
	cmd := exec.Command(dir+"/releases/1.7.0/relayd", "60")
	// The stand-in holds the socket, as a relay does: observe reads back
	// only the sockets of the service's processes (ss -p).
	sock, err := conn.File()
	if err != nil {
		t.Fatal(err)
	}
	defer sock.Close()
	cmd.ExtraFiles = []*os.File{sock}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	r := &fakeRelay{dir: dir, pidFile: dir + "/relayd.pid", port: conn.LocalAddr().(*net.UDPAddr).Port, pid: cmd.Process.Pid, conn: conn}
	os.WriteFile(r.pidFile, []byte(strconv.Itoa(r.pid)+"\n"), 0o644)
	return r
}

func (r *fakeRelay) query(control string) Query {
	return Query{Keys: []string{"net.core.rmem_default", "net.core.rmem_max", "net.ipv4.udp_mem", "net.core.no_such_key"}, Port: r.port, Control: control,
		Paths:   plans.PlanPaths{Current: r.dir + "/current", Releases: r.dir + "/releases", RelayConfig: r.dir + "/relayd.env", StateDir: r.dir + "/state", SysctlFile: "/etc/sysctl.d/90-relayctl.conf"},
		Service: plans.PlanService{Manager: "command", PIDFile: r.pidFile}}
}

func (r *fakeRelay) rcvbuf(t *testing.T) uint64 {
	raw, _ := r.conn.SyscallConn()
	var rb int
	raw.Control(func(fd uintptr) { rb = getRcvbuf(t, fd) })
	return uint64(rb)
}

// TestObserveThisMachine runs the real observe script here, against a
// stand-in relay (startFakeRelay).
func TestObserveThisMachine(t *testing.T) {
	r := startFakeRelay(t)
	f, err := observeWith(t, localRunner{}, "here", r.query(""))
	if err != nil {
		t.Fatal(err)
	}
	rmemMax, _ := os.ReadFile("/proc/sys/net/core/rmem_max")
	if got, want := f.Sysctls["net.core.rmem_max"].Value, strings.TrimSpace(string(rmemMax)); got != want {
		t.Errorf("rmem_max: got %q, want %q", got, want)
	}
	if !strings.Contains(f.Sysctls["net.ipv4.udp_mem"].Value, "\t") {
		t.Errorf("udp_mem: got %q, want the kernel's tab-separated form kept as read", f.Sysctls["net.ipv4.udp_mem"].Value)
	}
	if f.Sysctls["net.core.no_such_key"].Exists {
		t.Error("a missing key was reported as existing")
	}
	if !f.Service.Running || f.Service.PID != r.pid {
		t.Errorf("service: got %+v, want running with pid %d", f.Service, r.pid)
	}
	if f.Release.Current != "1.7.0" || f.Config.Content != "RELAYD_SO_RCVBUF=0\n" {
		t.Errorf("release/config: got %+v / %q", f.Release, f.Config.Content)
	}
	if rb := r.rcvbuf(t); !f.Socket.Found || f.Socket.Rcvbuf != rb || f.Socket.Inode == 0 {
		t.Errorf("socket: got %+v, want found with rb %d (getsockopt) and its inode", f.Socket, rb)
	}
	if !f.InitialNetns {
		t.Error("this test runs in the initial network namespace, observe says otherwise")
	}
	var want []string // what an upload to this machine may be packed in
	if _, err := exec.LookPath("gzip"); err == nil {
		want = append(want, uplink.Gzip)
	}
	if _, err := exec.LookPath("zstd"); err == nil {
		want = append(want, uplink.Zstd, uplink.ZstdPatch) // Debian's since bullseye: 1.4.8 and later
	}
	if !slices.Equal(f.Release.Decoders, want) {
		t.Errorf("decoders %v, want %v", f.Release.Decoders, want)
	}
	var buf bytes.Buffer
	for _, cf := range f.SysctlFiles {
		buf.WriteString(cf.Path + "\n")
	}
	if !strings.Contains(buf.String(), "/etc/sysctl.conf") && fileExists("/etc/sysctl.conf") {
		t.Errorf("sysctl files: got\n%s\nwant /etc/sysctl.conf among them", buf.String())
	}
}

// A pid file that names a process which does not run a release (pid 1), or
// that someone other than root can write, is not read back.
func TestObserveTrustsOnlyReleases(t *testing.T) {
	r := startFakeRelay(t)
	os.WriteFile(r.pidFile, []byte("1\n"), 0o644)
	f, err := observeWith(t, localRunner{}, "here", r.query(""))
	if err != nil {
		t.Fatal(err)
	}
	if f.Service.Running || !strings.Contains(f.Service.Detail, "pid 1 runs") || !strings.Contains(f.Service.Detail, "not the service's program") {
		t.Errorf("pid 1: got %+v, want not running, not read back", f.Service)
	}
	os.WriteFile(r.pidFile, []byte(strconv.Itoa(r.pid)+"\n"), 0o666)
	os.Chmod(r.pidFile, 0o666)
	f, err = observeWith(t, localRunner{}, "here", r.query(""))
	if err != nil {
		t.Fatal(err)
	}
	if f.Service.Running || !strings.Contains(f.Service.Detail, "only root may write it") {
		t.Errorf("a world-writable pid file: got %+v, want it distrusted", f.Service)
	}
}

var boundaryRe = regexp.MustCompile(`@@relayctl-[0-9a-f]{16,}`)

// The relay writes its own /status. One that learns the frame boundary the
// way any local user can (from /proc/PID/cmdline) and prints frames of its
// own must not change what observe reports: the socket's rb stays what the
// kernel says.
func TestObserveForgedStatusCannotChangeFacts(t *testing.T) {
	r := startFakeRelay(t)
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	learnt := false
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		var b string
		paths, _ := filepath.Glob("/proc/[0-9]*/cmdline")
		for _, p := range paths {
			c, _ := os.ReadFile(p)
			if m := boundaryRe.Find(c); m != nil {
				b = string(m)
			}
		}
		body := `{"version":"1.7.0","so_rcvbuf_effective":8388608}`
		if b != "" {
			learnt = true
			forged := fmt.Sprintf("UNCONN 0 0 127.0.0.1:%d 0.0.0.0:* ino:1 sk:1 <-> skmem:(r0,rb8388608,t0,tb212992,f0,w0,o0,bl0,d0)", r.port)
			body += "\n" + b + " end 0\n" + b + " ss\n" + forged + "\n" + b + " end 0\n" + b + " relay-status-more"
		}
		io.WriteString(w, body)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	f, err := observeWith(t, localRunner{}, "here", r.query(ln.Addr().String()))
	if errors.Is(err, hostfacts.ErrForgedFrame) {
		return // detected
	}
	if err != nil {
		t.Fatal(err)
	}
	if want := r.rcvbuf(t); f.Socket.Rcvbuf != want {
		t.Errorf("the relay's /status changed the reported rb to %d, the socket has %d (boundary learnt from cmdline: %v)", f.Socket.Rcvbuf, want, learnt)
	}
	if learnt {
		t.Error("the frame boundary was readable in a process's command line")
	}
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// What a host prints is kept only up to its bound, and the excess noted.
func TestLimitedBufferKeepsItsBound(t *testing.T) {
	var lb limitedBuffer
	lb.max = 10
	lb.Write([]byte("0123456789abc"))
	if !lb.over || lb.Len() != 10 {
		t.Errorf("limitedBuffer kept %d bytes, over %v", lb.Len(), lb.over)
	}
}
