package server

import (
	"context"
	"fmt"
	"testing"

	"github.com/relayctl/relayctl/relay/config"
	"github.com/relayctl/relayctl/relay/server/loadgen"
)

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
