// Package bench drives synthetic lobbies through a relay that speaks the
// relay/wire format and reports, honestly, where it stops.
//
// It exists because the operator's first bench made three mistakes that each
// looked like a relay fault (docs/incident.md):
//
//  1. an echo host measured ingress only; here every lobby fans out, so a
//     lobby of eight carries one datagram in and seven out;
//  2. senders stalled on backpressure and "per player" figures rose as the
//     relay failed; here sending is open-loop on a schedule fixed in advance,
//     every figure derives from what was planned, and a step whose senders
//     fell behind is invalid, never capacity;
//  3. the bench machine ran out of file descriptors; here a preflight refuses
//     before anything is sent and says the limit is the bench machine's.
package bench

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/relayctl/relayctl/relay/wire"
)

// Payload layout after the wire header: a tag saying which step (or join
// round) the datagram belongs to, then a per-run nonce so datagrams of an
// earlier run, still in flight, are not counted in this one.
//
// A datagram is at least as long as a handshake message: the relay
// answers a datagram from a player it does not know (after a restart) with
// a challenge only if that is no larger than the datagram, and without the
// challenge the player would never learn to join again.
const (
	tagLen      = 4
	nonceLen    = 4
	MinPacket   = max(wire.HeaderLen+tagLen+nonceLen, wire.HandshakeLen)
	maxDatagram = 65507 // largest UDP payload over IPv4
)

// Config is one bench run.
type Config struct {
	Relay        string        // UDP address of the relay, host:port
	Control      string        // the relay's control plane, host:port or http URL
	LobbySize    int           // players per lobby: the fan-out is LobbySize-1
	PacketSize   int           // datagram size in bytes, header included
	Hz           int           // datagrams per player per second
	Jitter       time.Duration // each player's fixed offset within a tick is drawn from [0, Jitter)
	Ramp         Ramp          // players per step
	StepDuration time.Duration
	Interval     time.Duration // how often the control plane is read during a step
	Calibrate    time.Duration // length of the max-rate run that measures the bench; 0 skips it
	LobbyBase    uint32        // first lobby id used
	AfterKnee    int           // steps still run after the knee (-1: run the whole ramp)
	Threshold    float64       // loss fraction above which a step counts as lossy
	Seed         int64         // for the jitter offsets; the schedule is reproducible
	Gate         Gate          // capacity gate; Players 0: none
	// Sources are the local IPv4 addresses the players send from, player i
	// from the (i mod len)th, so each lobby mixes them: relayd lets no
	// address hold every seat of a lobby. None: LoopbackSources for a relay
	// on loopback, else the kernel's choice (one address).
	Sources []netip.Addr
}

// LoopbackSources are the bench's players' addresses when the relay is on
// this machine's loopback: two of them, so a lobby is never one address's.
var LoopbackSources = []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("127.0.0.2")}

// MaxSources bounds Sources.
const MaxSources = 256

// ParseSources reads a comma-separated list of local IPv4 addresses.
func ParseSources(s string) ([]netip.Addr, error) {
	var out []netip.Addr
	for _, f := range strings.Split(s, ",") {
		a, err := netip.ParseAddr(strings.TrimSpace(f))
		if err != nil || !a.Is4() || a.IsUnspecified() || a.IsMulticast() {
			return nil, fmt.Errorf("source %q: want IPv4 addresses of this machine, comma separated, e.g. 127.0.0.1,127.0.0.2", strings.TrimSpace(f))
		}
		out = append(out, a)
	}
	if len(out) > MaxSources {
		return nil, fmt.Errorf("%d sources: at most %d", len(out), MaxSources)
	}
	return out, nil
}

// playerSources are the addresses the players send from: Sources, or
// LoopbackSources for a relay on loopback; nil leaves it to the kernel.
func (c Config) playerSources() []netip.Addr {
	if len(c.Sources) > 0 {
		return c.Sources
	}
	host, _, err := net.SplitHostPort(c.Relay)
	if err != nil {
		return nil
	}
	if a, err := netip.ParseAddr(host); host == "localhost" || err == nil && a.Is4() && a.IsLoopback() {
		return LoopbackSources
	}
	return nil
}

// Defaults returns the documented defaults.
func Defaults() Config {
	return Config{
		LobbySize:    8,
		PacketSize:   200,
		Hz:           60,
		Ramp:         Ramp{From: 8, To: 400, Step: 8},
		StepDuration: 5 * time.Second,
		Interval:     time.Second,
		Calibrate:    time.Second,
		AfterKnee:    2,
		Seed:         1,
	}
}

// Validate reports the first problem with c.
func (c Config) Validate() error {
	switch {
	case c.Relay == "":
		return errors.New("no relay address")
	case c.Control == "":
		return errors.New("no control address: the bench reads the relay's counters")
	case c.LobbySize < 2:
		return fmt.Errorf("lobby size %d: a lobby needs at least 2 players to forward anything", c.LobbySize)
	case c.PacketSize < MinPacket || c.PacketSize > maxDatagram:
		return fmt.Errorf("packet size %d: want %d to %d bytes", c.PacketSize, MinPacket, maxDatagram)
	case c.Hz < 1 || c.Hz > 10000:
		return fmt.Errorf("hz %d: want 1 to 10000", c.Hz)
	case c.Jitter < 0 || c.Jitter > time.Second/time.Duration(c.Hz):
		return fmt.Errorf("jitter %v: want 0 to one tick (%v)", c.Jitter, time.Second/time.Duration(c.Hz))
	case c.StepDuration < time.Second/time.Duration(c.Hz):
		return fmt.Errorf("step duration %v: shorter than one tick", c.StepDuration)
	case c.Interval <= 0:
		return fmt.Errorf("interval %v: want more than 0", c.Interval)
	case c.Calibrate < 0:
		return fmt.Errorf("calibrate %v: want 0 or more", c.Calibrate)
	case c.Threshold < 0 || c.Threshold >= 1:
		return fmt.Errorf("threshold %v: want 0 <= t < 1", c.Threshold)
	case len(c.Sources) > MaxSources:
		return fmt.Errorf("%d sources: at most %d", len(c.Sources), MaxSources)
	}
	for _, a := range c.Sources {
		if !a.Is4() || a.IsUnspecified() {
			return fmt.Errorf("source %s: want an IPv4 address of this machine", a)
		}
	}
	if err := c.Ramp.validate(); err != nil {
		return err
	}
	return c.Gate.validate(c.Ramp)
}

// steps lists the player count of every step: the ramp's, and the gate's
// when it falls between them.
func (c Config) steps() []int {
	return withGate(c.Ramp.Steps(), c.Gate.Players)
}

// Ramp is the players of each step: From, From+Step, ... up to To.
type Ramp struct{ From, To, Step int }

// ParseRamp reads "FROM:TO:STEP" or a single player count "N".
func ParseRamp(s string) (Ramp, error) {
	parts := strings.Split(s, ":")
	var n []int
	for _, p := range parts {
		v, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil {
			return Ramp{}, fmt.Errorf("parse players %q: want N or FROM:TO:STEP", s)
		}
		n = append(n, v)
	}
	var r Ramp
	switch len(n) {
	case 1:
		r = Ramp{From: n[0], To: n[0], Step: 1}
	case 3:
		r = Ramp{From: n[0], To: n[1], Step: n[2]}
	default:
		return Ramp{}, fmt.Errorf("parse players %q: want N or FROM:TO:STEP", s)
	}
	if err := r.validate(); err != nil {
		return Ramp{}, fmt.Errorf("parse players %q: %w", s, err)
	}
	return r, nil
}

// maxPlayers bounds one run: every player is a socket on the bench machine.
const maxPlayers = 100000

func (r Ramp) validate() error {
	switch {
	case r.From < 2:
		return fmt.Errorf("first step has %d players, want at least 2", r.From)
	case r.To < r.From:
		// The ramp only grows: the relay keeps every player that joined, so
		// a smaller step would still fan out to the silent ones.
		return fmt.Errorf("last step (%d) below the first (%d): the ramp only grows", r.To, r.From)
	case r.Step < 1:
		return fmt.Errorf("step %d: want at least 1", r.Step)
	case r.To > maxPlayers:
		return fmt.Errorf("%d players: at most %d", r.To, maxPlayers)
	}
	return nil
}

// Steps lists the player count of every step.
func (r Ramp) Steps() []int {
	var s []int
	for n := r.From; n <= r.To; n += r.Step {
		s = append(s, n)
	}
	return s
}

// Max is the largest step, which sizes the preflight.
func (r Ramp) Max() int {
	s := r.Steps()
	return s[len(s)-1]
}

func (r Ramp) String() string {
	if r.From == r.To {
		return strconv.Itoa(r.From)
	}
	return fmt.Sprintf("%d:%d:%d", r.From, r.To, r.Step)
}
