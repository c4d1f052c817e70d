package shellhost

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/relayctl/relayctl/internal/lab"
	"github.com/relayctl/relayctl/plans"
	"github.com/relayctl/relayctl/relay/client"
	"github.com/relayctl/relayctl/relay/wire"
	"github.com/relayctl/relayctl/rollout"
)

// The soak's verdict against a real relayd and real datagrams: the
// relay's /status and socket read by the real agent's sample, as a soak
// reads them, and judged as the soak judges. A stranger's join-and-vanish
// flood (players that join from its own addresses and go silent, expiring
// inside the soak) must not fail it; players that really leave, and
// their traffic with them, still do; a stranger's datagrams alone are no
// traffic.

// soakRelay is a relayd on loopback with a 2 s idle timeout, so that a
// player gone silent leaves within a short soak.
type soakRelay struct {
	pid, port int
	addr      netip.AddrPort
	control   string
}

func startSoakRelay(t *testing.T) *soakRelay {
	t.Helper()
	lab.Require(t)
	bin := lab.BuildRelayd(t, "1.9.0")
	port := lab.FreePort(t)
	cmd := exec.Command(bin, "--config", os.DevNull, "--listen", fmt.Sprintf("127.0.0.1:%d", port), "--control", fmt.Sprintf("127.0.0.1:%d", port),
		"--idle-timeout", "2s", "--so-rcvbuf", "4194304", "--so-rcvbuf-force")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Signal(syscall.SIGTERM); cmd.Wait() })
	r := &soakRelay{pid: cmd.Process.Pid, port: port, addr: netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(port)), control: fmt.Sprintf("127.0.0.1:%d", port)}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if c, err := net.Dial("tcp", r.control); err == nil {
			c.Close()
			return r
		}
		if time.Now().After(deadline) {
			t.Fatal("relayd did not serve its control plane within 10 s")
		}
	}
}

// joinFrom makes a player of lobby from address ip, and returns its socket.
func (r *soakRelay) joinFrom(t *testing.T, ip string, lobby, player uint32) *net.UDPConn {
	t.Helper()
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.ParseIP(ip)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := client.Join(ctx, c, r.addr, lobby, player); err != nil {
		t.Fatalf("%s: %v", ip, err)
	}
	return c
}

// play sends player's datagrams from c at 50 Hz until stop is closed, and
// reads what the relay forwards to it.
func (r *soakRelay) play(c *net.UDPConn, lobby, player uint32, stop <-chan struct{}, wg *sync.WaitGroup) {
	wg.Add(2)
	go func() {
		defer wg.Done()
		b := make([]byte, 2048)
		for {
			c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
			if _, _, err := c.ReadFromUDP(b); err != nil && !os.IsTimeout(err) {
				return
			}
			select {
			case <-stop:
				return
			default:
			}
		}
	}()
	go func() {
		defer wg.Done()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for seq := uint32(1); ; seq++ {
			select {
			case <-stop:
				return
			case <-tick.C:
				c.WriteToUDPAddrPort(wire.Encode(make([]byte, 64), wire.Header{Lobby: lobby, Player: player, Seq: seq}), r.addr)
			}
		}
	}()
}

// soakCfg is the soak of these tests: 6 s sampled every 500 ms.
func soakCfg() plans.Soak {
	cfg := plans.DefaultSoak
	cfg.Duration, cfg.Interval, cfg.Baseline = 6*time.Second, 500*time.Millisecond, 0
	return cfg
}

// soak samples the relay through the real agent every 500 ms for 6 s,
// calling at(i) after sample i, and judges the samples as the soak does.
func (r *soakRelay) soak(t *testing.T, h *Host, at func(i int)) (*rollout.SoakResult, []plans.DropCounters) {
	t.Helper()
	cfg := soakCfg()
	var samples []plans.DropCounters
	for i := 0; i <= 12; i++ {
		res, err := runOps(h, op("sample", strconv.Itoa(r.pid), strconv.Itoa(r.port), r.control))
		if err != nil || len(res) != 1 || res[0].Drops == nil || res[0].Drops.RelayForwarded == nil {
			t.Fatalf("sample %d: %v, %+v", i, err, res)
		}
		samples = append(samples, *res[0].Drops)
		if at != nil {
			at(i)
		}
		time.Sleep(500 * time.Millisecond)
	}
	s := rollout.JudgeSamples(cfg, nil, samples)
	var players, est []string
	for _, c := range samples {
		players = append(players, strconv.Itoa(*c.Players))
		est = append(est, strconv.Itoa(*c.PlayersEstablished))
	}
	t.Logf("players %s; established %s\n%s: %s", strings.Join(players, " "), strings.Join(est, " "), s.Verdict, s.Why)
	return s, samples
}

func TestSoakOfARealRelayUnderAJoinAndVanishFlood(t *testing.T) {
	r := startSoakRelay(t)
	h := lockedAgent(t, rootDir(t)+"/state")
	// Eight players in one lobby, four from each of two addresses, who
	// play through the first two soaks: established after 5 s of play.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for p := uint32(1); p <= 8; p++ {
		r.play(r.joinFrom(t, fmt.Sprintf("127.0.0.%d", 1+p%2), 7, p), 7, p, stop, &wg)
	}
	defer func() { close(stop); wg.Wait() }()
	time.Sleep(6 * time.Second)

	// The attack: 15 players from two addresses of the stranger's own,
	// each in a lobby of its own, join after the soak's first sample and
	// go silent; the relay forgets them 2 s later.
	var fakes atomic.Int32
	s, samples := r.soak(t, h, func(i int) {
		if i != 0 {
			return
		}
		for k := range 15 {
			r.joinFrom(t, fmt.Sprintf("127.0.%d.1", 10+k%2), uint32(100+k), 1)
			fakes.Add(1)
		}
	})
	if s.Verdict != rollout.SoakPass || s.PlayersCounted != rollout.PlayersEstablished {
		t.Errorf("under the flood of %d strangers' players: %s (%s); want a pass, by the established players", fakes.Load(), s.Verdict, s.Why)
	}
	if peak, end := *s.PlayersPeak, *s.PlayersEnd; peak != 8 || end != 8 {
		t.Errorf("established players: peak %d, end %d; want the 8 that play", peak, end)
	}
	// The same readings from a relay that reports no established players
	// (a relayd before them): judged by all its players, which the flood
	// moved, and so only with its traffic, which held; the verdict says so.
	for i := range samples {
		samples[i].PlayersEstablished = nil
	}
	old := rollout.JudgeSamples(soakCfg(), nil, samples)
	if old.Verdict != rollout.SoakPass || old.PlayersCounted != rollout.PlayersAll || *old.PlayersPeak != 23 ||
		!strings.Contains(old.Why, "23 players (the relay reports no established players: every member, a stranger's join too) at the soak's peak, 8 at its end: 65% gone, not counted as lost: their traffic held") {
		t.Errorf("without established players: %s (%s); want a pass that says the players gone kept their traffic", old.Verdict, old.Why)
	}

	// The real loss: the players stop halfway through the soak (2.5 s in,
	// after enough traffic to judge it); the relay forgets them 2 s later,
	// and their traffic is gone with them.
	s, _ = r.soak(t, h, func(i int) {
		if i == 5 {
			close(stop)
			wg.Wait()
			stop = make(chan struct{})
		}
	})
	if s.Verdict != rollout.SoakRegression || !strings.Contains(s.Why, "8 established players (that had played 5 s) at the soak's peak, 0 at its end: 100% gone, and their traffic with them") {
		t.Errorf("the players left: %s (%s); want a regression, players lost", s.Verdict, s.Why)
	}

	// A stranger's datagrams alone, on the relay now empty: 2,000 joins a
	// second that never complete reach the socket, and nothing is
	// forwarded: insufficient traffic, never a pass.
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.ParseIP("127.0.20.1")})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	flood := make(chan struct{})
	var fwg sync.WaitGroup
	fwg.Go(func() {
		join := wire.EncodeHandshake(make([]byte, wire.HandshakeLen), wire.Handshake{Kind: wire.KindJoin, Lobby: 300, Player: 1})
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-flood:
				return
			case <-tick.C:
				c.WriteToUDPAddrPort(join, r.addr)
				c.WriteToUDPAddrPort(join, r.addr)
			}
		}
	})
	s, _ = r.soak(t, h, nil)
	close(flood)
	fwg.Wait()
	if s.Verdict != rollout.SoakInsufficient || s.After == nil || s.After.Traffic < 500 || !strings.Contains(s.Why, "datagrams/s forwarded for the relay's players") {
		t.Errorf("strangers' joins alone: %s (%s), %+v; want insufficient traffic, with the datagrams that reached the relay not counted", s.Verdict, s.Why, s.After)
	}
}
