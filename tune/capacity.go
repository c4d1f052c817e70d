package tune

import (
	"fmt"
	"math"
	"math/bits"
	"time"
)

// Promise is what a region promises to carry: players in lobbies, each
// sending one datagram of PacketSize bytes (the UDP payload, relay/wire's
// 24-byte header included) per tick at Hz, and the longest time the relay
// may stop reading its socket (a GC pause, a descheduled thread, a restart
// handoff) without dropping.
type Promise struct {
	Players    int           `json:"players"`
	LobbySize  int           `json:"lobby_size"`
	Hz         int           `json:"hz"`
	PacketSize int           `json:"packet_size"`
	Stall      time.Duration `json:"stall_ns"`
}

// Limits of a promise, so that no product overflows and every figure is one
// a person could mean.
const (
	MaxPromisePlayers = 10_000_000
	MaxPromiseHz      = 10_000
	MaxPacketSize     = 65507 // the largest UDP payload over IPv4
	MaxPromiseStall   = time.Hour
)

// Validate reports the first field of p that is out of range, by its name.
func (p Promise) Validate() error {
	switch {
	case p.Players < 1 || p.Players > MaxPromisePlayers:
		return fmt.Errorf("players %d: want 1 to %d", p.Players, MaxPromisePlayers)
	case p.LobbySize < 2 || p.LobbySize > 256:
		return fmt.Errorf("lobby size %d: want 2 to 256 (a lobby of one forwards nothing)", p.LobbySize)
	case p.Hz < 1 || p.Hz > MaxPromiseHz:
		return fmt.Errorf("hz %d: want 1 to %d", p.Hz, MaxPromiseHz)
	case p.PacketSize < 1 || p.PacketSize > MaxPacketSize:
		return fmt.Errorf("packet size %d: want 1 to %d bytes (the UDP payload)", p.PacketSize, MaxPacketSize)
	case p.Stall < 0 || p.Stall > MaxPromiseStall:
		return fmt.Errorf("stall %v: want 0 to %v", p.Stall, MaxPromiseStall)
	}
	return nil
}

// StallTicks is how many aligned ticks' bursts can be queued when the relay
// stops reading for the promised stall: floor(stall*hz) whole ticks plus the
// one in flight when it stops (RcvbufFor's assumption).
func (p Promise) StallTicks() int {
	return int(min(stallTicks(p.Stall, p.Hz), math.MaxInt32))
}

// stallTicks is floor(stall*hz)+1, in 128 bits so no input overflows,
// saturating.
func stallTicks(stall time.Duration, hz int) uint64 {
	stall, hz = max(stall, 0), max(hz, 0)
	hi, lo := bits.Mul64(uint64(stall), uint64(hz))
	if hi >= uint64(time.Second) {
		return math.MaxUint64
	}
	ticks, _ := bits.Div64(hi, lo, uint64(time.Second))
	return satAdd(ticks, 1)
}

// DefaultHeadroom is the factor Size puts on the buffer a promise needs:
// the truesize model is measured on loopback and veth, and a NIC's driver
// may charge more per datagram (page fragments of 2 or 4 KiB).
const DefaultHeadroom = 2.0

// Sizing is the receive buffer a promise needs, and every figure on the
// way to it, so a reader can check the arithmetic.
type Sizing struct {
	Promise Promise `json:"promise"`

	InPPS       int `json:"in_datagrams_per_second"`  // into the relay socket: players × hz
	InBytesPS   int `json:"in_bytes_per_second"`      // payload bytes of them
	OutPPS      int `json:"out_datagrams_per_second"` // copies out, full lobbies: players × (lobby−1) × hz
	OutBytesPS  int `json:"out_bytes_per_second"`
	Truesize    int `json:"truesize"`    // what each datagram costs in the receive buffer
	Burst       int `json:"burst"`       // datagrams one aligned tick delivers at once: one per player
	StallTicks  int `json:"stall_ticks"` // ticks queued during the stall, the one in flight included
	Queue       int `json:"queue"`       // datagrams to hold: Burst × StallTicks
	NeedRcvbuf  int `json:"need_rb"`     // the smallest rb that holds them (may exceed MaxRcvbuf)
	NeedRequest int `json:"need_so_rcvbuf"`
	// Possible is false when no socket buffer holds the stall: the need is
	// above the kernel's largest rb, MaxRcvbuf.
	Possible bool `json:"possible"`

	Headroom float64 `json:"headroom"`
	Rcvbuf   int     `json:"rb"`        // NeedRcvbuf × Headroom: the rb to aim for
	Request  int     `json:"so_rcvbuf"` // the SO_RCVBUF to request for it: half, rounded up
	RmemMax  int     `json:"rmem_max"`  // net.core.rmem_max at least this, or the request is capped

	// DefaultHeld is how many of these datagrams the Linux default buffer
	// (rb 212992, rmem_default) holds: the incident's ceiling.
	DefaultHeld int `json:"default_rb_holds"`
}

// LinuxDefaultRcvbuf is net.core.rmem_default and rmem_max on a stock
// kernel (docs/kernel.md): the buffer of a relay that never asks.
const LinuxDefaultRcvbuf = 212992

// Size computes the receive buffer that absorbs p's stall, with headroom
// (a factor of at least 1; DefaultHeadroom when 0). p must be valid.
func Size(p Promise, headroom float64) Sizing {
	if headroom == 0 {
		headroom = DefaultHeadroom
	}
	headroom = max(headroom, 1)
	s := Sizing{
		Promise:    p,
		InPPS:      p.Players * p.Hz,
		Truesize:   Truesize(p.PacketSize),
		Burst:      p.Players,
		StallTicks: p.StallTicks(),
		Headroom:   headroom,
	}
	s.InBytesPS = satMulInt(s.InPPS, p.PacketSize)
	s.OutPPS = satMulInt(s.InPPS, p.LobbySize-1)
	s.OutBytesPS = satMulInt(s.OutPPS, p.PacketSize)
	s.Queue = satMulInt(s.Burst, s.StallTicks)
	s.NeedRcvbuf = max(rcvbufNeed(p.Players, p.Hz, p.PacketSize, p.Stall), SockMinRcvbuf)
	s.NeedRequest = SoRcvbufFor(p.Players, p.Hz, p.PacketSize, p.Stall)
	s.Possible = s.NeedRcvbuf <= MaxRcvbuf
	s.Rcvbuf = int(min(math.Ceil(float64(s.NeedRcvbuf)*headroom), MaxRcvbuf))
	s.Request = min((s.Rcvbuf+1)/2, maxRcvbufArg)
	s.RmemMax = s.Request
	s.DefaultHeld = DatagramsHeld(LinuxDefaultRcvbuf, p.PacketSize)
	return s
}

func satMulInt(a, b int) int {
	a, b = max(a, 0), max(b, 0)
	return int(min(mulSat(uint64(a), uint64(b)), math.MaxInt))
}

// Capacity is what one receive buffer does for a promise: the planner's
// check of a spec's rb against the spec's capacity, and `relayctl size
// --spec`'s answer.
type Capacity struct {
	Promise Promise `json:"promise"`
	Rcvbuf  int     `json:"rb"` // the socket's receive buffer, as ss shows rb

	Truesize int `json:"truesize"`
	Held     int `json:"held"` // datagrams of the promise's size rb holds
	// TicksHeld is how many aligned ticks' bursts (one datagram per
	// player) fit: Held / Players. 0: one tick already overflows.
	TicksHeld int `json:"ticks_held"`
	// Absorbs is the stall the buffer absorbs: any stall shorter than
	// this, TicksHeld/hz (a stall of d queues floor(d×hz)+1 ticks).
	Absorbs time.Duration `json:"absorbs_ns"`

	StallTicks int     `json:"stall_ticks"` // ticks the promised stall queues
	NeedRcvbuf int     `json:"need_rb"`     // the smallest rb for the promise; above MaxRcvbuf no socket meets it
	Margin     float64 `json:"margin"`      // Rcvbuf / NeedRcvbuf
	Meets      bool    `json:"meets"`       // TicksHeld >= StallTicks
}

// CheckCapacity says whether a receive buffer of rb bytes absorbs the
// promised stall, and by how much. The model is Size's: aligned ticks (a
// whole tick's datagrams arrive at once), an empty queue when the stall
// starts, Truesize per datagram. p must be valid.
func CheckCapacity(p Promise, rb int) Capacity {
	c := Capacity{
		Promise:    p,
		Rcvbuf:     rb,
		Truesize:   Truesize(p.PacketSize),
		Held:       DatagramsHeld(rb, p.PacketSize),
		StallTicks: p.StallTicks(),
		NeedRcvbuf: max(rcvbufNeed(p.Players, p.Hz, p.PacketSize, p.Stall), SockMinRcvbuf),
	}
	if p.Players > 0 {
		c.TicksHeld = c.Held / p.Players
	}
	if p.Hz > 0 {
		c.Absorbs = time.Duration(int64(c.TicksHeld) * int64(time.Second) / int64(p.Hz))
	}
	if c.NeedRcvbuf > 0 {
		c.Margin = float64(rb) / float64(c.NeedRcvbuf)
	}
	c.Meets = c.TicksHeld >= c.StallTicks
	return c
}

// Summary is one sentence for a review or `relayctl size --spec`.
func (c Capacity) Summary() string {
	p := c.Promise
	held := fmt.Sprintf("rb %d holds %d datagrams of %d bytes (truesize %d)", c.Rcvbuf, c.Held, p.PacketSize, c.Truesize)
	var absorbs string
	if c.TicksHeld == 0 {
		absorbs = fmt.Sprintf("fewer than one aligned tick of %d players, so it drops without any stall", p.Players)
	} else {
		absorbs = fmt.Sprintf("%s of %d players: it absorbs a stall shorter than %s at %d Hz",
			Plural(c.TicksHeld, "aligned tick"), p.Players, Millis(c.Absorbs), p.Hz)
	}
	verdict := "meets"
	if !c.Meets {
		verdict = "does NOT meet"
	}
	return fmt.Sprintf("%s, %s; it %s the promise, %s (rb %d needed), margin %.2f×",
		held, absorbs, verdict, StallPhrase(p.Stall), c.NeedRcvbuf, c.Margin)
}

// StallPhrase names a promised stall: "a 50 ms stall", or for 0 "no stall
// beyond the tick in flight".
func StallPhrase(d time.Duration) string {
	if d <= 0 {
		return "no stall beyond the tick in flight"
	}
	return "a " + Millis(d) + " stall"
}

// Plural is "1 tick", "2 ticks".
func Plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// Warning explains, for a plan, a buffer that does not absorb the promised
// stall, with what to ask for instead; "" when it does.
func (c Capacity) Warning() string {
	if c.Meets {
		return ""
	}
	p := c.Promise
	short := "it holds fewer datagrams than one aligned tick brings, so it drops even without a stall"
	if c.TicksHeld > 0 {
		short = fmt.Sprintf("it absorbs only a stall shorter than %s", Millis(c.Absorbs))
	}
	need := fmt.Sprintf("it needs rb %d (so_rcvbuf %d with net.core.rmem_max at least that)", c.NeedRcvbuf, (c.NeedRcvbuf+1)/2)
	if c.NeedRcvbuf > MaxRcvbuf {
		need = fmt.Sprintf("it needs rb %d, more than any socket can have (%d): shorten the stall or spread the players over more sockets or relays", c.NeedRcvbuf, MaxRcvbuf)
	}
	return fmt.Sprintf("the relay socket's rb %d does not meet the promised capacity (%d players at %d Hz, %d-byte datagrams, %s): %s; %s, margin %.2f×",
		c.Rcvbuf, p.Players, p.Hz, p.PacketSize, StallPhrase(p.Stall), short, need, c.Margin)
}

// Millis prints a duration in milliseconds, to 0.1 ms: sizing speaks of
// stalls of a few ms to a few s.
func Millis(d time.Duration) string {
	ms := float64(d) / float64(time.Millisecond)
	if ms == math.Trunc(ms) {
		return fmt.Sprintf("%.0f ms", ms)
	}
	return fmt.Sprintf("%.1f ms", ms)
}
