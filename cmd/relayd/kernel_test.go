package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/net/ipv4"
	"golang.org/x/sys/unix"

	"github.com/relayctl/relayctl/internal/kerneltest"
	"github.com/relayctl/relayctl/relay/client"
	"github.com/relayctl/relayctl/relay/wire"
)

// TestSORcvbufKernelRule starts relayd with --so-rcvbuf 4194304 under two
// values of net.core.rmem_max and checks the buffer it reports (and ss
// shows) against the kernel rule of docs/kernel.md: rb = max(2*min(X, rmem_max),
// 2304), and X*2 regardless of rmem_max with SO_RCVBUFFORCE.
func TestSORcvbufKernelRule(t *testing.T) {
	kerneltest.Lock(t)
	const requested = 4194304
	tests := []struct {
		rmemMax    string
		force      bool
		wantCapped bool
	}{
		{rmemMax: "212992", wantCapped: true},
		{rmemMax: "8388608"},
		{rmemMax: "212992", force: true},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("rmem_max=%s/force=%v", tt.rmemMax, tt.force), func(t *testing.T) {
			kerneltest.Set(t, "net.core.rmem_max", tt.rmemMax)
			rmemMax, err := strconv.Atoi(kerneltest.Read(t, "net.core.rmem_max"))
			if err != nil {
				t.Fatal(err)
			}
			want := max(2*min(requested, rmemMax), 2304)
			if tt.force {
				want = 2 * requested
			}
			args := append(loopbackArgs(t), "--so-rcvbuf", strconv.Itoa(requested))
			if tt.force {
				args = append(args, "--so-rcvbuf-force")
			}
			p := startRelayd(t, nil, nil, args...)
			st := p.status()
			if st.SORcvbufEffective != want {
				t.Errorf("so_rcvbuf_effective: got %d, want %d (rmem_max %d)", st.SORcvbufEffective, want, rmemMax)
			}
			if st.SORcvbufRequested != requested || st.SORcvbufForce != tt.force || st.RmemMaxAtStart != rmemMax {
				t.Errorf("got requested %d force %v rmem_max_at_start %d, want %d %v %d",
					st.SORcvbufRequested, st.SORcvbufForce, st.RmemMaxAtStart, requested, tt.force, rmemMax)
			}
			if rb, _ := skmem(t, ss(t, nil, portOf(p.listen)), p.listen); rb != uint64(want) {
				t.Errorf("ss rb: got %d, want %d", rb, want)
			}
			warning := fmt.Sprintf("SO_RCVBUF capped by the kernel: requested %d, effective %d (want %d); raise net.core.rmem_max (now %d) or use --so-rcvbuf-force",
				requested, want, 2*requested, rmemMax)
			if got := strings.Contains(p.logText(), warning); got != tt.wantCapped {
				t.Errorf("capped warning in log: got %v, want %v; want text %q; log:\n%s", got, tt.wantCapped, warning, p.logText())
			}
		})
	}
}

// netns is a network namespace of its own, so that no other test's
// traffic moves its /proc/net/snmp counters.
type netns struct {
	name string
}

func newNetns(t *testing.T) *netns {
	t.Helper()
	n := &netns{name: fmt.Sprintf("relayd-test-%d", os.Getpid())}
	runCmd(t, "ip", "netns", "add", n.name)
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "del", n.name).CombinedOutput(); err != nil {
			t.Errorf("ip netns del %s: %v\n%s", n.name, err, out)
		}
	})
	runCmd(t, "ip", "-n", n.name, "link", "set", "lo", "up")
	return n
}

func runCmd(t *testing.T, argv ...string) {
	t.Helper()
	if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(argv, " "), err, out)
	}
}

// do runs fn on a thread that has entered the namespace. The thread stays
// locked and ends with the goroutine, so no other goroutine ever runs in
// the namespace; sockets fn opens stay in it.
func (n *netns) do(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		f, err := os.Open("/run/netns/" + n.name)
		if err != nil {
			errc <- err
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("enter netns %s: %w", n.name, err)
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// httpClient dials from inside the namespace, where relayd's control plane
// listens.
func (n *netns) httpClient() *http.Client {
	return &http.Client{Transport: &http.Transport{
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			var c net.Conn
			err := n.do(func() (err error) {
				var d net.Dialer
				c, err = d.DialContext(ctx, network, addr)
				return err
			})
			return c, err
		},
	}}
}

// TestDropCountersAgree overloads a relayd whose buffer is small and shows
// that the four drop counts agree to the unit: relayd's rx_drops
// (SO_RXQ_OVFL), d in ss -u -m, the drops column of /proc/net/udp and the
// delta of Udp RcvbufErrors in /proc/net/snmp, all in relayd's namespace.
func TestDropCountersAgree(t *testing.T) {
	ns := newNetns(t)
	prefix := []string{"ip", "netns", "exec", ns.name}
	// 4096 bytes read back as rb 8192: a few datagrams fill it.
	p := startRelayd(t, prefix, nil, append(loopbackArgs(t), "--so-rcvbuf", "4096")...)
	p.client = ns.httpClient()
	pid := p.cmd.Process.Pid // ip netns exec execs relayd in place
	st := p.status()
	if st.PID != pid {
		t.Fatalf("status pid %d, want %d: relayd is not the process ip netns exec started", st.PID, pid)
	}
	if st.SORcvbufEffective != 8192 {
		t.Fatalf("so_rcvbuf_effective: got %d, want 8192", st.SORcvbufEffective)
	}
	snmpBefore := rcvbufErrors(t, pid)

	// The sender is the lone member of lobby 1 (two handshake datagrams),
	// so nothing is forwarded, nothing is answered, and no other socket in
	// the namespace can overflow.
	var conn *net.UDPConn
	if err := ns.do(func() (err error) {
		conn, err = net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	relay, err := net.ResolveUDPAddr("udp4", p.listen)
	if err != nil {
		t.Fatal(err)
	}
	const handshake = 2
	if err := client.Join(t.Context(), conn, relay.AddrPort(), 1, 1); err != nil {
		t.Fatal(err)
	}
	const burst = 320 * 64 // whole batches
	msgs := make([]ipv4.Message, 64)
	for i := range msgs {
		msgs[i] = ipv4.Message{Buffers: [][]byte{make([]byte, 120)}, Addr: relay}
	}
	pc := ipv4.NewPacketConn(conn)
	seq := uint32(0)
	for seq < burst {
		for i := range msgs {
			wire.Encode(msgs[i].Buffers[0], wire.Header{Lobby: 1, Player: 1, Seq: seq + uint32(i)})
		}
		for off := 0; off < len(msgs); {
			n, err := pc.WriteBatch(msgs[off:], 0)
			if err != nil {
				t.Fatalf("send burst: %v", err)
			}
			off += n
		}
		seq += uint32(len(msgs))
	}
	// Wait until relayd has read all it was given.
	waitFor(t, func() (bool, string) {
		_, q := procNetUDP(t, pid, p.listen)
		return q == 0, fmt.Sprintf("relay socket rx_queue %d, want 0", q)
	})
	// The drop count reaches relayd with the next datagram it reads:
	// send a few, one at a time, each read before the next.
	const slow = 3
	for i := uint32(0); i < slow; i++ {
		before := p.status().Counters.RxPackets
		b := wire.AppendHeader(nil, wire.Header{Lobby: 1, Player: 1, Seq: seq + i})
		if _, err := conn.WriteToUDP(append(b, make([]byte, 96)...), relay); err != nil {
			t.Fatal(err)
		}
		waitFor(t, func() (bool, string) {
			got := p.status().Counters.RxPackets
			return got == before+1, fmt.Sprintf("rx_packets %d, want %d", got, before+1)
		})
	}

	st = p.status()
	_, ssDrops := skmem(t, ss(t, prefix, portOf(p.listen)), p.listen)
	udpDrops, _ := procNetUDP(t, pid, p.listen)
	snmpDelta := rcvbufErrors(t, pid) - snmpBefore
	t.Logf("burst %d: rx_packets %d, rx_drops %d, ss d %d, /proc/net/udp drops %d, RcvbufErrors delta %d",
		burst, st.Counters.RxPackets, st.Counters.RxDrops, ssDrops, udpDrops, snmpDelta)
	if st.Counters.RxDrops == 0 {
		t.Fatalf("rx_drops is 0: the burst did not overflow an 8192-byte buffer")
	}
	for _, c := range []struct {
		name string
		got  uint64
	}{{"ss d", ssDrops}, {"/proc/net/udp drops", udpDrops}, {"RcvbufErrors delta", snmpDelta}} {
		if c.got != st.Counters.RxDrops {
			t.Errorf("%s: got %d, want %d (relayd rx_drops)", c.name, c.got, st.Counters.RxDrops)
		}
	}
	// Every datagram was either read or dropped.
	if got, want := st.Counters.RxPackets+st.Counters.RxDrops, uint64(handshake+burst+slow); got != want {
		t.Errorf("rx_packets + rx_drops: got %d, want %d sent", got, want)
	}
	if st.Counters.Replies != handshake {
		t.Errorf("replies: got %d, want only the %d of the handshake", st.Counters.Replies, handshake)
	}
}
