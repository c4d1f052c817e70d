package rollouttest

import (
	"cmp"
	"context"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"time"
	"unsafe"

	"github.com/relayctl/relayctl/plans"
)

// Net is the network between relayctl and one Sim, for the fleet
// simulator. Every Run is a round trip: it takes Latency and up to Jitter
// more, Restart more when the relay restarts in it, and its bytes take as
// long as they need to cross three things: the controller's uplink, one
// for the whole fleet (Uplink: a rate shared by every connection), the
// SSH channel's window (a connection has at most Uplink.Window bytes in
// flight, so it moves at most a window a round trip), and the host's own
// link (Bandwidth). Connecting takes Connect round trips (TCP, the SSH
// key exchange and authentication, the session's channel) before the
// first Run. The Sim sleeps that long; the network's own time is kept
// apart from the engine's (Trips), so the simulator can say how far the
// apply is from what the network alone allows.
type Net struct {
	Latency   time.Duration
	Jitter    time.Duration
	Bandwidth int64 // the host's own link, bytes a second; 0: no limit
	Uplink    *Uplink
	Restart   time.Duration // a relay's restart, in the round trip that does it
	Connect   int           // round trips to connect, before the first Run

	mu    sync.Mutex
	rng   *rand.Rand
	slept time.Duration
	trips []Trip
}

// Trip is one round trip as the network carried it: its latency (jitter
// included), the bytes it carried to the host, whether the relay restarted
// in it, and how long it took in all (its bytes' crossing, and their wait
// for the uplink, included).
type Trip struct {
	Latency time.Duration
	Took    time.Duration
	Sent    int32
	Restart bool
}

// Uplink is the controller's own link, shared by every host: a rate, and
// the window of each SSH channel (the bytes a connection may send before
// the host's sshd acknowledges them: OpenSSH's default receive window,
// CHAN_SES_WINDOW_DEFAULT, is 64 packets of 32 KiB, 2 MiB, as is
// x/crypto/ssh's channelWindowSize), so a connection moves at most Window
// a round trip. The bytes in flight share the rate as a fluid: each
// transfer gets an equal part, except one that cannot take it (its window
// or its host's own link allow less), whose rest goes to the others, as
// TCP flows share a bottleneck. A small request is not queued behind a
// large upload; the uplink is never idle while there is something to send.
type Uplink struct {
	Rate   int64 // bytes a second; 0: no limit
	Window int   // bytes; 0: no limit

	mu      sync.Mutex
	flows   map[*flow]bool
	last    time.Time // when the flows' progress was last counted
	wake    chan struct{}
	running bool // run is ending transfers: while there are any
	bytes   int64
}

// flow is one transfer in flight on the uplink.
type flow struct {
	left float64 // bytes still to cross
	max  float64 // the most it can take, bytes a second
	rate float64 // its share now
	done chan struct{}
}

// DefaultWindow is an SSH channel's window (see Uplink).
const DefaultWindow = 2 << 20

// smallTransfer is a transfer too small to share the uplink as a flow (a
// batch of requests, a receipt): at 1 Gbit/s shared by 200 connections,
// 64 KiB cross in about 100 ms at worst. Its bytes are counted; it takes
// only what its own connection needs.
const smallTransfer = 64 << 10

// count adds bytes sent outside a flow.
func (u *Uplink) count(n int) {
	u.mu.Lock()
	u.bytes += int64(n)
	u.mu.Unlock()
}

// Bytes is what has been sent on the uplink so far.
func (u *Uplink) Bytes() int64 {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.bytes
}

// send is n bytes of one connection across the uplink, at most max bytes
// a second: it returns once they have crossed, or ctx ended.
func (u *Uplink) send(ctx context.Context, n int, max float64) {
	f := &flow{left: float64(n), max: max, done: make(chan struct{})}
	u.mu.Lock()
	if u.flows == nil {
		u.flows, u.wake = map[*flow]bool{}, make(chan struct{}, 1)
	}
	if !u.running {
		u.running = true
		go u.run()
	}
	u.bytes += int64(n)
	u.progress(time.Now())
	u.flows[f] = true
	u.share()
	u.mu.Unlock()
	select {
	case u.wake <- struct{}{}:
	default:
	}
	select {
	case <-f.done:
	case <-ctx.Done():
	}
}

// run ends each transfer when its bytes have crossed: it sleeps until the
// next one will have, or a new one changes the shares; it returns when
// none is left.
func (u *Uplink) run() {
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		u.mu.Lock()
		u.progress(time.Now())
		u.share()
		if len(u.flows) == 0 {
			u.running = false
			u.mu.Unlock()
			return
		}
		next := time.Hour
		for f := range u.flows {
			if f.rate > 0 {
				next = min(next, time.Duration(f.left/f.rate*float64(time.Second))+time.Microsecond)
			}
		}
		u.mu.Unlock()
		t.Reset(next)
		select {
		case <-t.C:
		case <-u.wake:
			if !t.Stop() {
				<-t.C
			}
		}
	}
}

// progress counts what each transfer sent since last at its share, and
// ends those that are through.
func (u *Uplink) progress(now time.Time) {
	dt := now.Sub(u.last).Seconds()
	u.last = now
	for f := range u.flows {
		if f.left -= f.rate * dt; f.left <= 0.5 {
			delete(u.flows, f)
			close(f.done)
		}
	}
}

// share gives each transfer its part of the rate: equal parts, a transfer
// that can take less than its part taking what it can and leaving the
// rest to the others (max-min fairness).
func (u *Uplink) share() {
	fs := make([]*flow, 0, len(u.flows))
	for f := range u.flows {
		fs = append(fs, f)
	}
	slices.SortFunc(fs, func(a, b *flow) int { return cmp.Compare(a.max, b.max) })
	left := float64(u.Rate)
	for i, f := range fs {
		f.rate = f.max
		if u.Rate > 0 {
			f.rate = min(f.max, left/float64(len(fs)-i))
			left -= f.rate
		}
	}
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

// Trips are the round trips so far, in order.
func (n *Net) Trips() []Trip {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]Trip(nil), n.trips...)
}

// Reset forgets the time slept and the trips (between a plan and an apply).
func (n *Net) Reset() {
	n.mu.Lock()
	n.slept, n.trips = 0, nil
	n.mu.Unlock()
}

// connect is the connection's round trips, as one Trip.
func (n *Net) connect(ctx context.Context) {
	if n == nil || n.Connect <= 0 {
		return
	}
	var lat time.Duration
	for range n.Connect {
		lat += n.latency()
	}
	t0 := time.Now()
	sleepUntil(ctx, t0.Add(lat))
	n.mu.Lock()
	n.slept += lat
	n.trips = append(n.trips, Trip{Latency: lat, Took: lat})
	n.mu.Unlock()
}

// latency is one round trip's: Latency and its jitter.
func (n *Net) latency() time.Duration {
	n.mu.Lock()
	defer n.mu.Unlock()
	lat := n.Latency
	if n.Jitter > 0 {
		lat += time.Duration(n.rng.Int64N(int64(n.Jitter)))
	}
	return lat
}

// trip is one round trip carrying sent bytes (restart: the relay restarts
// in it): it sleeps the time the network takes, or until ctx ends.
func (n *Net) trip(ctx context.Context, sent int, restart bool) {
	if n == nil {
		return
	}
	lat := n.latency()
	t0 := time.Now()
	at := n.carry(ctx, t0, sent, lat).Add(lat)
	if restart {
		at = at.Add(n.Restart)
	}
	sleepUntil(ctx, at)
	n.mu.Lock()
	n.slept += at.Sub(t0)
	n.trips = append(n.trips, Trip{Latency: lat, Took: at.Sub(t0), Sent: int32(sent), Restart: restart})
	n.mu.Unlock()
}

// carry sends sent bytes from at: they cross the uplink as one transfer,
// at most as fast as the host's own link and the channel's window a round
// trip allow. It returns when they have crossed.
func (n *Net) carry(ctx context.Context, at time.Time, sent int, lat time.Duration) time.Time {
	if sent <= 0 {
		return at
	}
	max := math.Inf(1)
	if n.Bandwidth > 0 {
		max = float64(n.Bandwidth)
	}
	if n.Uplink != nil && n.Uplink.Window > 0 && lat > 0 {
		max = min(max, float64(n.Uplink.Window)/lat.Seconds())
	}
	if n.Uplink != nil && sent < smallTransfer {
		n.Uplink.count(sent) // a request's few bytes: their turn on the uplink is too short to tell
	}
	if n.Uplink == nil || sent < smallTransfer || n.Uplink.Rate <= 0 && math.IsInf(max, 1) {
		if !math.IsInf(max, 1) {
			at = at.Add(time.Duration(float64(sent) / max * float64(time.Second)))
		}
		sleepUntil(ctx, at)
		return at
	}
	n.Uplink.send(ctx, sent, max)
	return later(at, time.Now())
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func sleepUntil(ctx context.Context, t time.Time) {
	d := time.Until(t)
	if d <= 0 {
		return
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
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
