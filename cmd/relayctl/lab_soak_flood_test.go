package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/relayctl/relayctl/internal/lab"
	"github.com/relayctl/relayctl/relay/client"
	"github.com/relayctl/relayctl/rollout"
)

// The soak under a stranger's join-and-vanish flood, on lab hosts with
// the bench's players: 150 players from 20 addresses of the stranger's
// own (ten times the flood that once failed a soak), each with a cookie
// handshake, that then go silent and expire inside the soak. The relay's
// players rise by 150 and fall back; a good release still passes, and a
// bad one is still caught.

// floodSoak is the soak of these tests: 12 s sampled every 2 s after a
// baseline of 2 s, so the flood's players are in an early sample and gone
// by the last.
const floodSoak = "rollout:\n  soak: {duration: 12s, interval: 2s, baseline: 2s}\n"

// floodRelay is the lab relay's config: a 3 s idle timeout, so that the
// flood's silent players expire within the soak, and the bench's two
// addresses exempt from the per-address count (the strangers' are not).
const floodRelay = lab.DefaultRelayConfig + "RELAYD_IDLE_TIMEOUT=3s\n" + lab.BenchExempt

// inNetns runs fn on a thread in network namespace /run/netns/ns. The
// thread stays locked and ends with its goroutine, so nothing else runs
// there; sockets fn opens stay in the namespace.
func inNetns(ns string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		f, err := os.Open("/run/netns/" + ns)
		if err != nil {
			errc <- err
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("enter netns %s: %w", ns, err)
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// flood joins n players to the relay in host h's namespace, from addrs in
// turn (addresses of its loopback, each in a /24 of its own), each in a
// lobby of its own, and lets them go silent. It returns how many the
// relay welcomed.
func flood(t *testing.T, h *lab.Host, addrs []string, n int) int {
	t.Helper()
	var conns []*net.UDPConn
	err := inNetns(h.RelayNetns, func() error {
		for i := range n {
			c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.ParseIP(addrs[i%len(addrs)])})
			if err != nil {
				return err
			}
			conns = append(conns, c)
		}
		return nil
	})
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	if err != nil {
		t.Errorf("flood: open sockets: %v", err)
		return 0
	}
	relay := netip.MustParseAddrPort("127.0.0.1:7788")
	welcomed := 0
	var last error
	for i, c := range conns {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		err := client.Join(ctx, c, relay, uint32(3000+i), 1) // below relayd's 4096 lobby ids, above the bench's
		cancel()
		if err != nil {
			last = err // a relay that drops may lose a join, as any player's
			continue
		}
		welcomed++
	}
	if last != nil {
		t.Logf("flood: %d of %d players joined; the last failure: %v", welcomed, n, last)
	}
	return welcomed
}

// strangerAddrs are the flood's 20 addresses: 127.0.10.1 to 127.0.29.1,
// each in a /24 of its own (relayd holds a /24 to 64 players).
func strangerAddrs() []string {
	var a []string
	for k := range 20 {
		a = append(a, fmt.Sprintf("127.0.%d.1", 10+k))
	}
	return a
}

// statusWatch reads the relay's /status in h's namespace every 250 ms
// until stop, and keeps the most players it reported.
func statusWatch(h *lab.Host, stop <-chan struct{}) (peak func() int) {
	var mu sync.Mutex
	most := 0
	hc := &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			var c net.Conn
			err := inNetns(h.RelayNetns, func() (err error) {
				var d net.Dialer
				c, err = d.DialContext(ctx, network, addr)
				return err
			})
			return c, err
		}}}
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(250 * time.Millisecond):
			}
			resp, err := hc.Get("http://127.0.0.1:7789/status")
			if err != nil {
				continue
			}
			var st struct {
				Players int `json:"players"`
			}
			json.NewDecoder(resp.Body).Decode(&st)
			resp.Body.Close()
			mu.Lock()
			most = max(most, st.Players)
			mu.Unlock()
		}
	}()
	return func() int { mu.Lock(); defer mu.Unlock(); return most }
}

// floodLab is a lab of two hosts whose relays run floodRelay, and a spec
// edited by edit, with floodSoak.
func floodLab(t *testing.T, edit func(string) string) *labEnv {
	t.Helper()
	old := lab.BuildRelayd(t, "1.7.0")
	hosts := []lab.HostOptions{{}, {}}
	for i := range hosts {
		hosts[i].Relay = &lab.RelayInstall{Binary: old, Version: "1.7.0", Config: floodRelay, Start: true}
	}
	e := startLab(t, hosts, func(s string) string { return edit(s) + floodSoak })
	if code, out, errs := e.relayctl("plan", e.spec, "--out", e.plan, "--detailed-exitcode"); code != 2 {
		t.Fatalf("plan: exit %d\n%s\n%s", code, out, errs)
	}
	return e
}

// applyUnderFlood applies the plan with the bench's 32 players on lab-1
// through its soak and the flood's 150 players joining as it starts; it
// returns the exit code, stdout, stderr, how many the flood got in, and
// the most players lab-1's relay reported meanwhile.
func (e *labEnv) applyUnderFlood(bin string) (int, string, string, int, int) {
	e.t.Helper()
	h := e.lab.Hosts[0]
	stop := make(chan struct{})
	peak := statusWatch(h, stop)
	welcomed := 0
	code, out, errs, _ := e.applyWithPlayersAnd(bin, h, 32, 16*time.Second, func() {
		welcomed = flood(e.t, h, strangerAddrs(), 150)
	})
	close(stop)
	e.t.Logf("the flood got %d players in; lab-1's relay reported at most %d players\nrecap:\n%s", welcomed, peak(), out)
	return code, out, errs, welcomed, peak()
}

// A good release passes its canary's soak under the flood, and the fleet
// goes on: the players the flood added and took away are not the
// established players the soak judges, nor their traffic.
func TestLabSoakPassesAGoodReleaseUnderAJoinAndVanishFlood(t *testing.T) {
	bin := buildRelayctl(t)
	e := floodLab(t, func(s string) string { return s })
	code, out, errs, welcomed, peak := e.applyUnderFlood(bin)
	rc1, rc2 := receiptOf2(t, e.plan, 0), receiptOf2(t, e.plan, 1)
	if welcomed != 150 || peak < 150 {
		t.Errorf("the flood got %d players in, the relay reported at most %d: want all 150 in, beside the bench's", welcomed, peak)
	}
	s := rc1.Soak
	if code != 0 || rc1.Outcome != rollout.Applied || rc2.Outcome != rollout.Applied || s == nil || s.Verdict != rollout.SoakPass {
		t.Fatalf("apply under the flood: exit %d, lab-1 %s (soak %+v), lab-2 %s; want both applied, lab-1's soak a pass\nstdout:\n%s\nstderr:\n%s", code, rc1.Outcome, s, rc2.Outcome, out, errs)
	}
	t.Logf("lab-1's soak: %s: %s (established players: peak %d, end %d)", s.Verdict, s.Why, *s.PlayersPeak, *s.PlayersEnd)
	if s.PlayersCounted != rollout.PlayersEstablished || *s.PlayersPeak > 32 || *s.PlayersEnd < 32*3/4 {
		t.Errorf("lab-1's soak counted %s players, peak %d, end %d; want the bench's established 32, none of the flood's", s.PlayersCounted, *s.PlayersPeak, *s.PlayersEnd)
	}
	if s.After.SSDrops != 0 || s.After.ForwardedRate == nil || *s.After.ForwardedRate < 500 {
		t.Errorf("lab-1's soak: %+v; want no drops under the players' forwarded traffic", s.After)
	}
}

// A bad release (the 2 KiB buffer forced) is still caught under the
// flood: its drops regress, it is rolled back, and the fleet stops.
func TestLabSoakCatchesABadReleaseUnderAJoinAndVanishFlood(t *testing.T) {
	bin := buildRelayctl(t)
	e := floodLab(t, func(s string) string {
		return strings.Replace(s, "  so_rcvbuf: 4194304\n", "  so_rcvbuf: 2048\n  so_rcvbuf_force: true\n", 1)
	})
	code, out, errs, welcomed, _ := e.applyUnderFlood(bin)
	rc1, rc2 := receiptOf2(t, e.plan, 0), receiptOf2(t, e.plan, 1)
	s := rc1.Soak
	if code != 1 || s == nil || s.Verdict != rollout.SoakRegression || s.Action != "rolled back" || rc2.Outcome != rollout.NotStarted {
		t.Fatalf("apply of the bad release under the flood: exit %d, lab-1 soak %+v, lab-2 %s; want a regression, rolled back, lab-2 not started\nstdout:\n%s\nstderr:\n%s", code, s, rc2.Outcome, out, errs)
	}
	t.Logf("lab-1's soak: %s: %s", s.Verdict, s.Why)
	if s.After.DropRate <= s.Allowed || !strings.Contains(s.Why, "drops/s allowed") {
		t.Errorf("lab-1's soak: %s; want the drops to be the regression", s.Why)
	}
	if welcomed == 0 {
		t.Errorf("the flood got no player in")
	}
}
