package bench

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/relayctl/relayctl/internal/sshtest"
	"github.com/relayctl/relayctl/rollout/sshrun"
)

func TestParseKernel(t *testing.T) {
	ss := "UNCONN 0      0      127.0.0.1:7788 0.0.0.0:* skmem:(r0,rb8192,t0,tb212992,f0,w0,o0,bl0,d44)\n"
	udp := "   sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops\n" +
		"   12: 0100007F:1E6C 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 41 2 0000000000000000 44\n" +
		"   13: 0100007F:1E6C 0100007F:9C40 01 00000000:00000000 00:00000000 00000000     0        0 42 2 0000000000000000 3\n"
	snmp := "Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors IgnoredMulti MemErrors\n" +
		"Udp: 100 0 50 700 50 0 0 0 0\n"
	got, err := parseKernel([]byte(ss), []byte(udp), []byte(snmp), 7788)
	if err != nil {
		t.Fatal(err)
	}
	want := KernelSnapshot{SSDrops: 44, ProcDrops: 44, RcvbufErrors: 50, RcvBuf: 8192}
	if got != want {
		t.Errorf("got %+v, want %+v (the connected socket on the same port is not the relay's)", got, want)
	}
	d := got.Sub(KernelSnapshot{})
	if !d.Agrees(44) || d.Agrees(43) {
		t.Errorf("Agrees: got %v for 44 and %v for 43, want true and false", d.Agrees(44), d.Agrees(43))
	}
	if a := d.Agreement(44); !strings.Contains(a, "6 from other sockets") {
		t.Errorf("Agreement: got %q, want the 6 other drops of the namespace named", a)
	}
	if _, err := parseKernel([]byte(ss), []byte(udp), []byte(snmp), 9999); err == nil {
		t.Errorf("got no error for a port with no socket, want one")
	}
}

// TestKernelCountersOverSSH reads the relay host's counters through the real
// SSH transport (an in-process server running the machine's own sh, ss and
// /proc) while relayd drops in a deliberately small buffer, and checks that
// the kernel and the relay count the same drops.
func TestKernelCountersOverSSH(t *testing.T) {
	r := startRelayd(t, "--so-rcvbuf", "4096")
	key := sshtest.NewKey(t)
	srv := sshtest.New(t, sshtest.WithAuthorizedKeys(key.PublicKey()))
	dir := t.TempDir()
	keyFile, known, sshConfig := filepath.Join(dir, "id"), filepath.Join(dir, "known_hosts"), filepath.Join(dir, "config")
	key.WriteFile(t, keyFile)
	sshtest.WriteKnownHosts(t, known, srv.KnownHostsLine())
	if err := os.WriteFile(sshConfig, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	client, err := sshrun.Dial(context.Background(), "root@"+srv.Addr(), sshrun.Options{KnownHosts: known, Identities: []string{keyFile}, SSHConfig: sshConfig})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	_, portText, _ := strings.Cut(r.udp, ":")
	port, err := strconv.Atoi(portText)
	if err != nil {
		t.Fatal(err)
	}
	kern := &SSHKernel{Runner: client, Port: port}

	cfg := r.config(Ramp{From: 8, To: 24, Step: 8})
	cfg.AfterKnee = 0
	rep := measure(t, cfg, func() Options { return Options{Kernel: kern} })
	if kern.PID != r.cmd.Process.Pid {
		t.Errorf("got relay pid %d from ss -p, want %d", kern.PID, r.cmd.Process.Pid)
	}
	if !rep.Knee.Found {
		t.Fatalf("got no knee (%s), want one on an 8 KiB buffer", rep.Knee.Summary)
	}
	s := rep.Steps[rep.Knee.Step]
	if s.Kernel == nil {
		t.Fatalf("knee step: got no kernel counters (notes %q)", s.Notes)
	}
	if s.RelayDrop == 0 || !s.Kernel.Agrees(s.RelayDrop) {
		t.Errorf("knee step: got %s, want ss d and /proc/net/udp drops equal to the relay's non-zero rx_drops", s.Kernel.Agreement(s.RelayDrop))
	}
	if s.Kernel.RcvbufErrors < s.RelayDrop {
		t.Errorf("knee step: got RcvbufErrors %d, want at least the relay's %d drops", s.Kernel.RcvbufErrors, s.RelayDrop)
	}
	if s.Kernel.RcvBuf == 0 {
		t.Errorf("got rb 0, want the relay socket's receive buffer")
	}
	if !strings.Contains(rep.Knee.Where, "the kernel agrees") {
		t.Errorf("knee: got where %q, want it to say the kernel agrees", rep.Knee.Where)
	}
}
