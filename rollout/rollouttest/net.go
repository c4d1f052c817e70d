package rollouttest

import (
	"context"
	"hash/fnv"
	"math/rand/v2"
	"sync"
	"time"
	"unsafe"

	"github.com/relayctl/relayctl/plans"
)

// Net is the network between relayctl and a Sim, for the fleet
// simulator: every Run (one round trip) takes Latency and up to Jitter
// more, and the Data sent in it len/Bandwidth more. The Sim sleeps that
// long and adds it to Slept, so a fleet's own time can be told apart from
// the engine's.
type Net struct {
	Latency   time.Duration
	Jitter    time.Duration
	Bandwidth int64 // bytes a second; 0: no limit

	mu    sync.Mutex
	rng   *rand.Rand
	slept time.Duration
}

// NewNet is a network for the host named name: its jitter is drawn from
// a source seeded by the name, so a run can be repeated.
func NewNet(name string, latency, jitter time.Duration, bandwidth int64) *Net {
	h := fnv.New64a()
	h.Write([]byte(name))
	return &Net{Latency: latency, Jitter: jitter, Bandwidth: bandwidth, rng: rand.New(rand.NewPCG(h.Sum64(), 24))}
}

// Slept is the time the host has spent in its network so far.
func (n *Net) Slept() time.Duration {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.slept
}

// Reset forgets the time slept (between a plan and an apply).
func (n *Net) Reset() {
	n.mu.Lock()
	n.slept = 0
	n.mu.Unlock()
}

// trip is one round trip carrying sent bytes: it sleeps the time the
// network takes, or until ctx ends.
func (n *Net) trip(ctx context.Context, sent int) {
	if n == nil {
		return
	}
	n.mu.Lock()
	d := n.Latency
	if n.Jitter > 0 {
		d += time.Duration(n.rng.Int64N(int64(n.Jitter)))
	}
	if n.Bandwidth > 0 && sent > 0 {
		d += time.Duration(float64(sent) / float64(n.Bandwidth) * float64(time.Second))
	}
	n.slept += d
	n.mu.Unlock()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// leanBlob is how a lean Sim keeps bytes of at least leanSize: their
// sha256, not a copy (a fleet of 50,000 Sims would otherwise hold 50,000
// copies of the release).
const leanSize = 64 << 10

const leanPrefix = "lean sha256:"

// sumOf is the sha256 of bytes the engine sends: a lean Sim hashes each
// distinct buffer once (the engine sends every host the same release
// buffer), as hashing it on every host would be the host's work, not
// relayctl's, and would swamp the simulator's measure of relayctl's CPU.
func sumOf(data []byte) string {
	if len(data) < leanSize {
		return plans.SHA256(string(data))
	}
	k := blobKey{unsafe.SliceData(data), len(data)}
	if s, ok := blobSums.Load(k); ok {
		return s.(string)
	}
	s := plans.SHA256(string(data))
	blobSums.Store(k, s)
	return s
}

type blobKey struct {
	p *byte
	n int
}

var blobSums sync.Map // blobKey → sha256 hex

// contentSHA is the sha256 of a file a Sim keeps, lean or not.
func contentSHA(c string) string {
	if len(c) > len(leanPrefix) && c[:len(leanPrefix)] == leanPrefix {
		return c[len(leanPrefix):]
	}
	return plans.SHA256(c)
}
