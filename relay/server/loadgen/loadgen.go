// Package loadgen drives a relay with full lobbies, for relayd's Go
// benchmark and its load program (internal/cmd/relayload).
//
// Each lobby has Size players on their own UDP sockets: Size-1 senders and
// one observer that only listens. Every datagram a sender sends leaves the
// relay Size-1 times (to the other senders and to the observer), so the
// fan-out is that of a real full lobby, and the observer receives each
// datagram exactly once. The observers' count closes the loop: at most
// Window datagrams are in flight, so the load measures what the relay
// forwards, not how fast the kernel can drop (the bench tool's second
// defect in the incident report).
package loadgen

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/ipv4"
	"golang.org/x/sys/unix"

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
	return o
}

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

// Dial opens the sockets and joins every player: senders first, then the
// observer, whose join reaches only the senders. Close releases them.
func Dial(o Options) (*Load, error) {
	o = o.withDefaults()
	if o.Size < 2 || o.Lobbies < 1 || o.Datagram < wire.HeaderLen || o.SendBatch < 1 || o.Window < o.SendBatch {
		return nil, fmt.Errorf("check load options %+v: want Size >= 2, Lobbies >= 1, Datagram >= %d, SendBatch >= 1, Window >= SendBatch", o, wire.HeaderLen)
	}
	l := &Load{o: o}
	relay := net.UDPAddrFromAddrPort(o.Relay)
	local := &net.UDPAddr{IP: o.Relay.Addr().AsSlice()}
	if o.Relay.Addr().IsUnspecified() {
		local.IP = net.IPv4(127, 0, 0, 1)
		relay.IP = local.IP
	}
	join := make([]byte, o.Datagram)
	for lb := 0; lb < o.Lobbies; lb++ {
		id := o.FirstID + uint32(lb)
		for p := 1; p <= o.Size; p++ {
			c, err := net.ListenUDP("udp4", local)
			if err != nil {
				l.Close()
				return nil, fmt.Errorf("open player socket: %w", err)
			}
			wire.Encode(join, wire.Header{Lobby: id, Player: uint32(p)})
			if p == o.Size {
				l.observers = append(l.observers, c)
				setRcvbuf(c)
			} else {
				s := &sender{conn: c, pc: ipv4.NewPacketConn(c), msgs: make([]ipv4.Message, o.SendBatch)}
				for i := range s.msgs {
					b := make([]byte, o.Datagram)
					wire.Encode(b, wire.Header{Lobby: id, Player: uint32(p)})
					s.msgs[i] = ipv4.Message{Buffers: [][]byte{b}, Addr: relay}
				}
				l.senders = append(l.senders, s)
			}
			if _, err := c.WriteToUDP(join, relay); err != nil {
				l.Close()
				return nil, fmt.Errorf("join lobby %d: %w", id, err)
			}
		}
	}
	for _, c := range l.observers {
		l.wg.Add(1)
		go l.observe(c)
	}
	return l, nil
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
		for _, m := range msgs[:n] {
			if m.N != l.o.Datagram {
				l.bad.Add(1)
			} else if _, err := wire.Decode(m.Buffers[0][:m.N]); err != nil {
				l.bad.Add(1)
			}
		}
		l.observed.Add(uint64(n))
	}
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
			h, _ := wire.Decode(b)
			h.Seq, h.SentUnix = l.seq, now
			l.seq++
			wire.Encode(b, h)
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
// or header.
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
