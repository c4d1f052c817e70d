package server

import (
	"context"
	"fmt"
	"testing"

	"github.com/relayctl/relayctl/relay/config"
	"github.com/relayctl/relayctl/relay/server/loadgen"
)

// loadSenders is the load's senders' address (the relay's own), which the
// relay must exempt from its per-address count: every sender of every
// lobby sends from it. Its observers listen on another address, so no
// lobby is one address's.
const loadSenders = "127.0.0.1/32"

// BenchmarkForward measures forwarded datagrams per second on loopback:
// four full lobbies of eight (fan-out 7), 120-byte datagrams, with
// batching (64 per recvmmsg/sendmmsg) and without (1: recvmsg/sendmsg).
// b.N is the number of datagrams sent; fwd/s counts each once, tx/s counts
// the copies. The sender and the observers run in this process too, so on
// a small machine they share the CPU with the relay; the load program
// (internal/cmd/relayload) measures the relay's own CPU.
func BenchmarkForward(b *testing.B) {
	for _, batch := range []int{64, 1} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			s := start(b, testConfig(func(c *config.Config) {
				c.Batch = batch
				// Room for the load's window, whatever rmem_max is.
				c.SORcvbuf, c.SORcvbufForce = 4<<20, true
				c.ExemptSources = loadSenders // 28 senders from one address
			}))
			l, err := loadgen.Dial(loadgen.Options{Relay: s.ListenAddr(), Lobbies: 4, Size: 8, Datagram: 120})
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			b.ResetTimer()
			res, err := l.Run(context.Background(), uint64(b.N), 0)
			b.StopTimer()
			if err != nil {
				b.Fatal(err)
			}
			if res.Observed != res.Sent || l.Bad() != 0 {
				b.Fatalf("observers saw %d of %d datagrams (%d bad), want all", res.Observed, res.Sent, l.Bad())
			}
			if d := s.Status().Counters.RxDrops; d != 0 {
				b.Fatalf("relay socket dropped %d datagrams, want 0: the window is too big for the buffer", d)
			}
			b.ReportMetric(float64(res.Observed)/res.Elapsed.Seconds(), "fwd/s")
			b.ReportMetric(7*float64(res.Observed)/res.Elapsed.Seconds(), "tx/s")
		})
	}
}

// TestLoadgen checks the load against the relay's own counters: every
// datagram sent is forwarded once and leaves seven times.
func TestLoadgen(t *testing.T) {
	s := start(t, testConfig(func(c *config.Config) { c.ExemptSources = loadSenders }))
	l, err := loadgen.Dial(loadgen.Options{Relay: s.ListenAddr(), Lobbies: 3, Size: 8, Datagram: 120, Window: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	before := settle(t, s, 2*24).Counters // the handshakes
	const count = 5000
	res, err := l.Run(context.Background(), count, 0)
	if err != nil {
		t.Fatal(err)
	}
	if res.Sent != count || res.Observed != count || l.Bad() != 0 {
		t.Fatalf("got sent %d observed %d bad %d, want %d %d 0", res.Sent, res.Observed, l.Bad(), count, count)
	}
	after := settle(t, s, before.RxPackets+count).Counters
	if got := after.Forwarded - before.Forwarded; got != count {
		t.Errorf("forwarded: got %d, want %d", got, count)
	}
	if got := after.TxPackets - before.TxPackets; got != 7*count {
		t.Errorf("tx_packets: got %d, want 7 x %d", got, count)
	}
	if after.RxDrops != 0 || after.Malformed != 0 {
		t.Errorf("got rx_drops %d malformed %d, want 0 0", after.RxDrops, after.Malformed)
	}
}

// TestLoadgenWire1: the load of wire version 1, for a relayd from before
// the handshake, joins nobody here: the relay refuses every datagram as
// another version and forwards none.
func TestLoadgenWire1(t *testing.T) {
	s := start(t, testConfig(nil))
	l, err := loadgen.Dial(loadgen.Options{Relay: s.ListenAddr(), Lobbies: 1, Size: 8, Datagram: 120, Window: 8, Wire: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	res, err := l.Run(context.Background(), 8, 0)
	if err != nil || res.Sent != 8 || res.Observed != 0 || l.Bad() != 1 {
		t.Fatalf("run: got %+v, %v, %d bad; want 8 sent, none observed, 1 bad (the refusal of the observer's join)", res, err, l.Bad())
	}
	st := s.Status()
	if st.Counters.Forwarded != 0 || st.Counters.OtherVersion != 8+8 || st.Players != 0 {
		t.Errorf("got forwarded %d other_version %d players %d, want 0, 16 (8 joins, 8 sent), 0",
			st.Counters.Forwarded, st.Counters.OtherVersion, st.Players)
	}
}
