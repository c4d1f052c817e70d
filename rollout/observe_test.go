package rollout

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/relayctl/relayctl/plans"
)

// localRunner runs commands on this machine with sh -c: the observe script
// meets the real kernel, real ss and real /proc without SSH in between.
type localRunner struct{}

func (localRunner) Run(ctx context.Context, cmd string, stdin io.Reader, stdout, stderr io.Writer) error {
	c := exec.CommandContext(ctx, "sh", "-c", cmd)
	c.Stdin, c.Stdout, c.Stderr = stdin, stdout, stderr
	err := c.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return &ExitError{Status: ee.ExitCode()}
	}
	return err
}

const testBoundary = "@@relayctl-0123456789abcdef01234567"

func TestParseFrames(t *testing.T) {
	B := testBoundary
	out := B + " kernel\n6.18.44\n\n" + B + " end 0\n" +
		B + " relay-config\nabsent\n\n" + B + " end 2\n" +
		B + " file /etc/sysctl.d/a b.conf\na = 1\n@@relayctl-guess end 0\n\n" + B + " end 0\n"
	frames, err := ParseFrames([]byte(out), B)
	if err != nil {
		t.Fatal(err)
	}
	if len(frames) != 3 {
		t.Fatalf("got %d frames, want 3", len(frames))
	}
	if frames[0].Name != "kernel" || string(frames[0].Data) != "6.18.44\n" {
		t.Errorf("kernel frame: got %q %q", frames[0].Name, frames[0].Data)
	}
	if frames[2].Name != "file /etc/sysctl.d/a b.conf" || string(frames[2].Data) != "a = 1\n@@relayctl-guess end 0\n" {
		t.Errorf("a frame whose content fakes another boundary: got %q %q", frames[2].Name, frames[2].Data)
	}
	if frames[1].Status != 2 {
		t.Errorf("status: got %d, want 2", frames[1].Status)
	}
	for _, bad := range []string{
		"garbage\n",
		B + " kernel\n6.18\n",                    // never ends
		B + " kernel\n6.18\n\n" + B + " end x\n", // bad status
		B + " kernel\n6.18\n\n" + B + " end 0",   // no final newline
		B + " kernel",                            // no header newline
		"@@relayctl-other kernel\nx\n\n@@relayctl-other end 0\n",
	} {
		if _, err := ParseFrames([]byte(bad), B); err == nil {
			t.Errorf("ParseFrames(%q): got no error", bad)
		}
	}
}

func FuzzParseFrames(f *testing.F) {
	B := testBoundary
	f.Add([]byte(B + " kernel\n6.18.44\n\n" + B + " end 0\n"))
	f.Add([]byte(B + " relay-config\nabsent\n\n" + B + " end 2\n"))
	f.Add([]byte(B + " a\nabc\n" + B + " end 0\n" + B + " b\nx\n\n" + B + " end 1\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		frames, err := ParseFrames(b, B)
		if err != nil {
			return
		}
		n := 0
		for _, fr := range frames {
			n += len(fr.Data)
		}
		if n > len(b) {
			t.Fatalf("frames hold %d bytes of a %d-byte input", n, len(b))
		}
		FactsFromFrames(frames, Query{Keys: []string{"net.core.rmem_max"}, Port: 7788})
	})
}

func TestQueryCommandQuotes(t *testing.T) {
	q := Query{Keys: []string{"net.core.rmem_max"}, Port: 7788, Paths: plans.PlanPaths(plans.DefaultPaths),
		Service: plans.PlanService{Manager: "command", PID: []string{"/opt/relay/bin/relay-service", "pid; reboot"}}}
	cmd, err := q.command(testBoundary)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(cmd, `/opt/relay/bin/relay-service 'pid; reboot'`) {
		t.Errorf("got %q, want the pid argv quoted word by word", cmd)
	}
	q.Paths.RelayConfig = "/etc/relay/$(id).env"
	if _, err := q.command(testBoundary); err == nil {
		t.Error("a path with shell characters was accepted")
	}
}

// TestObserveThisMachine runs the real observe script here, with a UDP
// socket standing in for the relay and a pid command that prints our PID.
func TestObserveThisMachine(t *testing.T) {
	conn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	port := conn.LocalAddr().(*net.UDPAddr).Port
	dir := t.TempDir()
	pidCmd := dir + "/pid"
	os.WriteFile(pidCmd, []byte("#!/bin/sh\necho "+strconv.Itoa(os.Getpid())+"\n"), 0o755)
	os.MkdirAll(dir+"/releases/1.7.0", 0o755)
	os.Symlink(dir+"/releases/1.7.0", dir+"/current")
	os.WriteFile(dir+"/relayd.env", []byte("RELAYD_SO_RCVBUF=0\n"), 0o644)

	q := Query{Keys: []string{"net.core.rmem_default", "net.core.rmem_max", "net.ipv4.udp_mem", "net.core.no_such_key"}, Port: port,
		Paths:   plans.PlanPaths{Current: dir + "/current", Releases: dir + "/releases", RelayConfig: dir + "/relayd.env", StateDir: dir + "/state", SysctlFile: "/etc/sysctl.d/90-relayctl.conf"},
		Service: plans.PlanService{Manager: "command", PID: []string{pidCmd}}}
	f, err := Observe(context.Background(), localRunner{}, "here", "local", "root", q)
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
	if !f.Service.Running || f.Service.PID != os.Getpid() {
		t.Errorf("service: got %+v, want running with pid %d", f.Service, os.Getpid())
	}
	if f.Release.Current != "1.7.0" || f.Config.Content != "RELAYD_SO_RCVBUF=0\n" {
		t.Errorf("release/config: got %+v / %q", f.Release, f.Config.Content)
	}
	raw, _ := conn.SyscallConn()
	var rb int
	raw.Control(func(fd uintptr) { rb = getRcvbuf(t, fd) })
	if !f.Socket.Found || f.Socket.Rcvbuf != uint64(rb) {
		t.Errorf("socket: got %+v, want found with rb %d (getsockopt)", f.Socket, rb)
	}
	if !f.InitialNetns {
		t.Error("this test runs in the initial network namespace, observe says otherwise")
	}
	var buf bytes.Buffer
	for _, cf := range f.SysctlFiles {
		buf.WriteString(cf.Path + "\n")
	}
	if !strings.Contains(buf.String(), "/etc/sysctl.conf") && fileExists("/etc/sysctl.conf") {
		t.Errorf("sysctl files: got\n%s\nwant /etc/sysctl.conf among them", buf.String())
	}
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }
