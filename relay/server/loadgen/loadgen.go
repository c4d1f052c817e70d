// Package loadgen drives a relay with full lobbies, for relayd's Go
// benchmark and its load program (internal/cmd/relayload).
//
// Each lobby has Size players on their own UDP sockets: Size-1 senders and
// one observer that only listens, from another address than the senders'
// (relayd lets no address hold every seat of a lobby). Every datagram a sender sends leaves the
// relay Size-1 times (to the other senders and to the observer), so the
// fan-out is that of a real full lobby, and the observer receives each
// datagram exactly once. The observers' count closes the loop: at most
// Window datagrams are in flight, so the load measures what the relay
// forwards, not how fast the kernel can drop (the bench tool's second
// defect in the incident report).
//
// Every player joins with the handshake of wire version 2 (relay/client);
// Options.Wire 1 speaks version 1 instead (a datagram joins), to measure a
// relayd released before the handshake against the current one in the
// same run.
package loadgen

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/ipv4"
	"golang.org/x/sys/unix"

	"github.com/relayctl/relayctl/relay/client"
	"github.com/relayctl/relayctl/relay/wire"
)

// Options shape the load.
type Options struct {
	Relay     netip.AddrPort // the relay's UDP address
	Lobbies   int            // number of full lobbies
	Size      int            // players per lobby, the relay's lobby size; fan-out is Size-1
	FirstID   uint32         // lobby ids FirstID .. FirstID+Lobbies-1
	Datagram  int            // UDP payload bytes of each datagram, header included
	Window    int            // most datagrams sent but not yet seen by an observer
	SendBatch int            // datagrams per sendmmsg on one sender socket
	Wire      int            // wire version the relay speaks: 2 (0 means 2), or 1 for a relayd from before the handshake
	// ObserversFrom is the local address the observers listen on: another
	// than the senders' (the relay's own address), so that a lobby is never
	// one address's. The zero value: the next loopback address for a relay
	// on loopback (127.0.0.2 for 127.0.0.1); a relay elsewhere needs one.
	ObserversFrom netip.Addr
}

// Defaults: lobbies of eight (fan-out 7) and 120-byte datagrams.
func (o Options) withDefaults() Options {
	if o.Size == 0 {
		o.Size = 8
	}
	if o.Lobbies == 0 {
		o.Lobbies = 4
	}
	if o.Datagram == 0 {
		o.Datagram = 120
	}
	if o.Window == 0 {
		o.Window = 512
	}
	if o.SendBatch == 0 {
		o.SendBatch = 8
	}
	if o.Wire == 0 {
		o.Wire = wire.Version
	}
	return o
}

// joinTimeout bounds one player's handshake.
const joinTimeout = 5 * time.Second

// Result is what one Run sent and saw.
type Result struct {
	Sent     uint64        // datagrams the senders sent
	Observed uint64        // datagrams the observers received, one copy each
	Elapsed  time.Duration // from the first send until the observers caught up or stalled
}

// Load is a set of joined lobbies, ready to Run.
type Load struct {
	o         Options
	senders   []*sender
	observers []*net.UDPConn
	observed  atomic.Uint64
	bad       atomic.Uint64
	seq       uint32
	wg        sync.WaitGroup
}

type sender struct {
	conn *net.UDPConn
	pc   *ipv4.PacketConn
	msgs []ipv4.Message
}

// rcvbuf is asked (with SO_RCVBUFFORCE when allowed) for observer sockets,
// so that a window of datagrams always fits and none is lost there.
const rcvbuf = 4 << 20

// Dial opens the sockets and joins every player, one after another. Close
// releases them.
func Dial(o Options) (*Load, error) {
	o = o.withDefaults()
	if o.Size < 2 || o.Lobbies < 1 || o.Datagram < wire.HeaderLen || o.SendBatch < 1 || o.Window < o.SendBatch || (o.Wire != 1 && o.Wire != wire.Version) {
		return nil, fmt.Errorf("check load options %+v: want Size >= 2, Lobbies >= 1, Datagram >= %d, SendBatch >= 1, Window >= SendBatch, Wire 1 or 2", o, wire.HeaderLen)
	}
	l := &Load{o: o}
	relay := net.UDPAddrFromAddrPort(o.Relay)
	local := &net.UDPAddr{IP: o.Relay.Addr().AsSlice()}
	if o.Relay.Addr().IsUnspecified() {
		local.IP = net.IPv4(127, 0, 0, 1)
		relay.IP = local.IP
	}
	observer, err := observersFrom(o.ObserversFrom, netip.MustParseAddr(local.IP.String()))
	if err != nil {
		return nil, err
	}
	for lb := 0; lb < o.Lobbies; lb++ {
		id := o.FirstID + uint32(lb)
		for p := 1; p <= o.Size; p++ {
			from := local
			if p == o.Size {
				from = observer
			}
			c, err := net.ListenUDP("udp4", from)
			if err != nil {
				l.Close()
				return nil, fmt.Errorf("open player socket: %w", err)
			}
			if p == o.Size {
				l.observers = append(l.observers, c)
				setRcvbuf(c)
			} else {
				s := &sender{conn: c, pc: ipv4.NewPacketConn(c), msgs: make([]ipv4.Message, o.SendBatch)}
				for i := range s.msgs {
					s.msgs[i] = ipv4.Message{Buffers: [][]byte{l.datagram(id, uint32(p))}, Addr: relay}
				}
				l.senders = append(l.senders, s)
			}
			if err := l.join(c, relay, id, uint32(p)); err != nil {
				l.Close()
				return nil, err
			}
		}
	}
	for _, c := range l.observers {
		l.wg.Add(1)
		go l.observe(c)
	}
	return l, nil
}

// observersFrom is where the observers listen: given, or the loopback
// address after the senders'.
func observersFrom(given, senders netip.Addr) (*net.UDPAddr, error) {
	switch {
	case given.IsValid() && given == senders:
		return nil, fmt.Errorf("observers from %s: want another address than the senders' (relayd lets no address hold every seat of a lobby)", given)
	case given.IsValid():
		return &net.UDPAddr{IP: given.AsSlice()}, nil
	case !senders.Is4() || !senders.IsLoopback():
		return nil, fmt.Errorf("the relay at %s is not on loopback: say which other local address the observers listen on (ObserversFrom), since relayd lets no address hold every seat of a lobby", senders)
	}
	next := senders.Next()
	if !next.IsLoopback() {
		next = netip.MustParseAddr("127.0.0.2")
	}
	return &net.UDPAddr{IP: next.AsSlice()}, nil
}

// datagram is a data datagram of player in lobby, of the load's size and
// wire version.
func (l *Load) datagram(lobby, player uint32) []byte {
	b := wire.Encode(make([]byte, l.o.Datagram), wire.Header{Lobby: lobby, Player: player})
	if l.o.Wire == 1 {
		binary.BigEndian.PutUint32(b, wire.MagicV1)
	}
	return b
}

// join makes c's player a member: the handshake, or for wire version 1 a
// datagram, which the relay took as a join and forwarded to the members
// before it.
func (l *Load) join(c *net.UDPConn, relay *net.UDPAddr, lobby, player uint32) error {
	if l.o.Wire == 1 {
		if _, err := c.WriteToUDP(l.datagram(lobby, player), relay); err != nil {
			return fmt.Errorf("join lobby %d: %w", lobby, err)
		}
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), joinTimeout)
	defer cancel()
	return client.Join(ctx, c, relay.AddrPort(), lobby, player)
}

func setRcvbuf(c *net.UDPConn) {
	raw, err := c.SyscallConn()
	if err != nil {
		return
	}
	raw.Control(func(fd uintptr) {
		if unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, rcvbuf) != nil {
			unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, rcvbuf)
		}
	})
}

func (l *Load) observe(c *net.UDPConn) {
	defer l.wg.Done()
	pc := ipv4.NewPacketConn(c)
	msgs := make([]ipv4.Message, 64)
	for i := range msgs {
		msgs[i].Buffers = [][]byte{make([]byte, 2048)}
	}
	for {
		n, err := pc.ReadBatch(msgs, 0)
		if err != nil {
			return // closed
		}
		good := uint64(0)
		for _, m := range msgs[:n] {
			if m.N == l.o.Datagram && l.valid(m.Buffers[0][:m.N]) {
				good++
			} else {
				l.bad.Add(1)
			}
		}
		l.observed.Add(good)
	}
}

// valid reports whether b is a data datagram of the load's wire version.
func (l *Load) valid(b []byte) bool {
	if l.o.Wire == 1 {
		return wire.KindOf(b) == wire.KindV1
	}
	_, err := wire.Decode(b)
	return err == nil
}

// Run sends until count datagrams are sent or d has passed (a zero one is
// no limit), then waits until the observers have seen everything sent or
// nothing arrives for a second.
func (l *Load) Run(ctx context.Context, count uint64, d time.Duration) (Result, error) {
	if count == 0 && d == 0 {
		return Result{}, errors.New("run load: want a count or a duration")
	}
	base := l.observed.Load()
	start := time.Now()
	var sent uint64
	window := uint64(l.o.Window)
	k := uint64(l.o.SendBatch)
	for i := 0; ; i++ {
		if count > 0 && sent >= count {
			break
		}
		if d > 0 && i%64 == 0 && time.Since(start) >= d {
			break
		}
		if err := ctx.Err(); err != nil {
			return Result{}, err
		}
		for sent+k-(l.observed.Load()-base) > window {
			if !l.waitProgress(base, sent) {
				return Result{}, fmt.Errorf("run load: relay stopped forwarding with %d of %d datagrams seen", l.observed.Load()-base, sent)
			}
		}
		s := l.senders[i%len(l.senders)]
		n := int(k)
		if count > 0 {
			n = int(min(k, count-sent))
		}
		now := time.Now().UnixNano()
		for j := range s.msgs[:n] {
			b := s.msgs[j].Buffers[0]
			binary.BigEndian.PutUint32(b[12:16], l.seq)
			binary.BigEndian.PutUint64(b[16:24], uint64(now))
			l.seq++
		}
		for off := 0; off < n; {
			m, err := s.pc.WriteBatch(s.msgs[off:n], 0)
			if err != nil {
				return Result{}, fmt.Errorf("send load: %w", err)
			}
			off += m
		}
		sent += uint64(n)
	}
	for l.observed.Load()-base < sent {
		if !l.waitProgress(base, sent) {
			break
		}
	}
	return Result{Sent: sent, Observed: l.observed.Load() - base, Elapsed: time.Since(start)}, nil
}

// waitProgress waits for the observers to see more, and reports false when
// nothing arrived for a second (the relay dropped or stopped).
func (l *Load) waitProgress(base, sent uint64) bool {
	before := l.observed.Load()
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); {
		time.Sleep(50 * time.Microsecond)
		if now := l.observed.Load(); now != before || now-base >= sent {
			return true
		}
	}
	return false
}

// Bad returns how many datagrams the observers received with a wrong size
// or header (a relay's answer to a handshake among them); they are not
// counted as observed.
func (l *Load) Bad() uint64 { return l.bad.Load() }

// Close closes every socket and waits for the observers to stop.
func (l *Load) Close() error {
	for _, s := range l.senders {
		s.conn.Close()
	}
	for _, c := range l.observers {
		c.Close()
	}
	l.wg.Wait()
	return nil
}
