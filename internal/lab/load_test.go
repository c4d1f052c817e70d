package lab_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/relayctl/relayctl/relay/bench"
)

// loadStep runs one bench step of players against the relay on
// 127.0.0.1:port (its UDP socket and its control port both) and calls
// switchRelay 1.5 s into the 4 s step. A step the busy machine made
// invalid (the senders fell behind) is run again. Each step takes lobby
// ids of its own (lobbyBase), so no step meets the lobbies of the last.
func loadStep(t *testing.T, port, players int, lobbyBase *uint32, switchRelay func() error) (bench.Step, error) {
	t.Helper()
	return runStep(t, port, players, lobbyBase, switchRelay, false)
}

// anyStep is loadStep for a switch that makes the step invalid itself: a
// crash restart's second of queued datagrams arrives at the players in one
// burst, more than their sockets hold. Its first step is the one.
func anyStep(t *testing.T, port, players int, lobbyBase *uint32, switchRelay func() error) (bench.Step, error) {
	t.Helper()
	return runStep(t, port, players, lobbyBase, switchRelay, true)
}

func runStep(t *testing.T, port, players int, lobbyBase *uint32, switchRelay func() error, any bool) (bench.Step, error) {
	t.Helper()
	var switchErr error
	for attempt := range 4 {
		cfg := bench.Defaults()
		cfg.Relay, cfg.Control = fmt.Sprintf("127.0.0.1:%d", port), fmt.Sprintf("127.0.0.1:%d", port)
		cfg.Ramp = bench.Ramp{From: players, To: players, Step: 1}
		cfg.StepDuration, cfg.Interval, cfg.Calibrate = 4*time.Second, 250*time.Millisecond, 0
		*lobbyBase += 10
		cfg.LobbyBase = *lobbyBase
		done := make(chan error, 1)
		var once sync.Once
		rep, err := bench.Run(t.Context(), cfg, bench.Options{Progress: func(p bench.Progress) {
			if p.Elapsed >= 1500*time.Millisecond {
				once.Do(func() { go func() { done <- switchRelay() }() })
			}
		}})
		if err != nil {
			t.Fatal(err)
		}
		select {
		case switchErr = <-done:
		case <-time.After(30 * time.Second):
			t.Fatal("the switch did not return within 30 s of the step's end")
		}
		var b strings.Builder
		rep.WriteTable(&b)
		t.Logf("attempt %d:\n%s", attempt+1, b.String())
		if s := rep.Steps[0]; s.Valid || any {
			return s, switchErr
		}
		time.Sleep(time.Second)
	}
	t.Fatal("the bench fell behind in every attempt: the machine is too busy to measure")
	return bench.Step{}, nil
}

// checkNoLoss checks the bench's own count of every datagram of a step:
// nothing lost either way, nothing twice, no ICMP error, and the relay's
// counters exact across whatever happened to it.
func checkNoLoss(t *testing.T, s bench.Step) {
	t.Helper()
	checks := []struct {
		name      string
		got, want uint64
	}{
		{"loss (planned deliveries − received)", s.Loss, 0},
		{"lost player→relay (bench's count)", s.LostIn, 0},
		{"lost relay→players (bench's count)", s.LostOut, 0},
		{"duplicates", s.Duplicates, 0},
		{"icmp errors", s.ICMPErrors, 0},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s: got %d, want %d", c.name, c.got, c.want)
		}
	}
	if !s.Census || !s.RelayKnown || s.RelayRx != s.Sent {
		t.Errorf("census %v, relay known %v, relay rx %d of %d sent", s.Census, s.RelayKnown, s.RelayRx, s.Sent)
	}
}
