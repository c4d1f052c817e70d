package bench

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/ipv4"
	"golang.org/x/sys/unix"

	"github.com/relayctl/relayctl/relay/sockstat"
	"github.com/relayctl/relayctl/relay/wire"
)

// Tags in the payload say what a datagram belongs to.
const (
	joinTag = 0x8000_0000 // | round: lobby join handshake, never counted
	calTag  = 0x7fff_fffe // the calibration run
)

// benchRcvBuf is what each player socket asks for: enough that the bench's
// own receive buffers are not where loss happens. The kernel caps it at
// rmem_max silently; the header reports what was granted.
const benchRcvBuf = 1 << 20

// shardCount is how many counter shards a window has.
const shardCount = 8

// readBatch is how many datagrams one recvmmsg call may return.
const readBatch = 32

// fleet is the players: one UDP socket each, a receiver goroutine each,
// and one sender (the schedule) that writes on all of them.
type fleet struct {
	lobbySize int
	lobbyBase uint32
	nonce     uint32
	conns     []*net.UDPConn
	bufs      [][]byte // per player, header and nonce filled in once
	seq       []uint32
	rcvBuf    int // receive buffer the kernel granted the player sockets

	win     atomic.Pointer[window] // the step being counted, nil between steps
	icmp    []atomic.Uint64        // per player: ICMP errors its socket got (IP_RECVERR)
	late    []atomic.Uint64        // per step: datagrams that arrived after it closed
	foreign atomic.Uint64

	joinRound atomic.Uint32
	joinSeen  []atomic.Uint32 // per player, join datagrams of the current round
	hs        handshakes      // the relay's join handshake (handshake.go)

	ports     map[int]bool // local ports of the player sockets
	relayPort int

	wg     sync.WaitGroup
	closed atomic.Bool
}

// window counts one step (or the calibration) across all receivers, in a
// few shards so the receivers do not all contend on one cache line.
type window struct {
	tag    uint32
	shards []shard
	census *census // nil: not counted per datagram
}

type shard struct {
	received atomic.Uint64
	lat      atomicHist
	_        [64]byte
}

func newWindow(tag uint32, shards int) *window {
	return &window{tag: tag, shards: make([]shard, shards)}
}

func (w *window) totals() (uint64, Hist) {
	var n uint64
	var h Hist
	for i := range w.shards {
		n += w.shards[i].received.Load()
		s := w.shards[i].lat.snapshot()
		h.Merge(&s)
	}
	return n, h
}

// lobbyOf and playerID place player i: lobbies are filled in order, so the
// ramp adds players to the last lobby before it opens a new one.
func (f *fleet) lobbyOf(i int) uint32        { return f.lobbyBase + uint32(i/f.lobbySize) }
func (f *fleet) playerID(i int) uint32       { return uint32(i%f.lobbySize) + 1 }
func (f *fleet) lobbyIndex(i int) int        { return i / f.lobbySize }
func (f *fleet) lobbyRange(l int) (int, int) { return l * f.lobbySize, (l + 1) * f.lobbySize }

// lobbies lists the members of each lobby when the first n players play.
func lobbies(n, size int) []int {
	var m []int
	for n > 0 {
		k := min(n, size)
		m = append(m, k)
		n -= k
	}
	return m
}

// openFleet opens n player sockets towards relay and starts their receivers.
// Player i sends from sources[i mod len(sources)] (none: the kernel's
// choice).
func openFleet(relay string, sources []netip.Addr, n, lobbySize, packetSize int, lobbyBase, nonce uint32, steps int) (*fleet, error) {
	raddr, err := net.ResolveUDPAddr("udp4", relay)
	if err != nil {
		return nil, fmt.Errorf("resolve relay %s: %w", relay, err)
	}
	f := &fleet{
		lobbySize: lobbySize,
		lobbyBase: lobbyBase,
		nonce:     nonce,
		late:      make([]atomic.Uint64, steps),
		joinSeen:  make([]atomic.Uint32, n),
		icmp:      make([]atomic.Uint64, n),
		ports:     make(map[int]bool, n),
		relayPort: raddr.Port,
	}
	for i := range n {
		// A connected udp4 socket per player: its own ephemeral port, as a
		// real player has, and the kernel filters out anyone but the relay.
		var laddr *net.UDPAddr
		if len(sources) > 0 {
			laddr = net.UDPAddrFromAddrPort(netip.AddrPortFrom(sources[i%len(sources)], 0))
		}
		c, err := net.DialUDP("udp4", laddr, raddr)
		if err != nil {
			f.close()
			if laddr != nil {
				return nil, fmt.Errorf("open player socket %d of %d on the bench machine, from %s: %w", i+1, n, laddr.IP, err)
			}
			return nil, fmt.Errorf("open player socket %d of %d on the bench machine: %w", i+1, n, err)
		}
		f.conns = append(f.conns, c)
		f.ports[c.LocalAddr().(*net.UDPAddr).Port] = true
		if err := setupSocket(c); err != nil {
			f.close()
			return nil, fmt.Errorf("set up player socket %d: %w", i+1, err)
		}
		b := make([]byte, packetSize)
		wire.Encode(b, wire.Header{Lobby: f.lobbyOf(i), Player: f.playerID(i)})
		binary.BigEndian.PutUint32(b[wire.HeaderLen+tagLen:], nonce)
		f.bufs = append(f.bufs, b)
	}
	f.seq = make([]uint32, n)
	f.hs.init(f, n)
	if n > 0 {
		rb, err := rcvBuf(f.conns[0])
		if err != nil {
			f.close()
			return nil, err
		}
		f.rcvBuf = rb
	}
	for i := range n {
		f.wg.Add(1)
		go f.receive(i, i%shardCount, packetSize)
	}
	return f, nil
}

func setupSocket(c *net.UDPConn) error {
	if err := c.SetReadBuffer(benchRcvBuf); err != nil {
		return fmt.Errorf("set receive buffer: %w", err)
	}
	if err := enableRecvErr(c); err != nil {
		return fmt.Errorf("set IP_RECVERR: %w", err)
	}
	return nil
}

func rcvBuf(c *net.UDPConn) (int, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return 0, err
	}
	var v int
	var gerr error
	if err := rc.Control(func(fd uintptr) { v, gerr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF) }); err != nil {
		return 0, err
	}
	if gerr != nil {
		return 0, fmt.Errorf("read SO_RCVBUF: %w", gerr)
	}
	return v, nil
}

func (f *fleet) close() {
	f.closed.Store(true)
	for _, c := range f.conns {
		c.Close()
	}
	f.wg.Wait()
}

// receive reads player i's socket with recvmmsg until the socket closes.
func (f *fleet) receive(i, shardIdx, packetSize int) {
	defer f.wg.Done()
	pc := ipv4.NewPacketConn(f.conns[i])
	msgs := make([]ipv4.Message, readBatch)
	for j := range msgs {
		msgs[j].Buffers = [][]byte{make([]byte, packetSize+64)}
	}
	for {
		n, err := pc.ReadBatch(msgs, 0)
		if err != nil {
			if f.closed.Load() || errors.Is(err, net.ErrClosed) {
				return
			}
			if isRefused(err) {
				// An ICMP error while the relay's port had no socket:
				// count it (and any queued with it).
				f.drainErrors(i)
			}
			continue
		}
		now := time.Now().UnixNano()
		w := f.win.Load()
		for j := range n {
			m := &msgs[j]
			f.count(i, m.Buffers[0][:m.N], now, w, shardIdx)
		}
	}
}

// count attributes one received datagram.
func (f *fleet) count(i int, b []byte, now int64, w *window, shardIdx int) {
	if isHandshake(b) {
		f.answer(i, b)
		return
	}
	h, err := wire.Decode(b)
	if err != nil || len(b) < MinPacket || binary.BigEndian.Uint32(b[wire.HeaderLen+tagLen:]) != f.nonce {
		f.foreign.Add(1)
		return
	}
	tag := binary.BigEndian.Uint32(b[wire.HeaderLen:])
	switch {
	case tag&joinTag != 0:
		if tag == f.joinRound.Load() {
			f.joinSeen[i].Add(1)
		}
	case w != nil && tag == w.tag:
		s := &w.shards[shardIdx]
		s.received.Add(1)
		s.lat.add(time.Duration(now - h.SentUnix))
		w.census.received(f.sender(h), h.Seq)
	case tag < uint32(len(f.late)):
		f.late[tag].Add(1)
	case tag != calTag:
		f.foreign.Add(1)
	}
}

// sender is the index of the player that sent a datagram with header h,
// -1 if it is none of this fleet's.
func (f *fleet) sender(h wire.Header) int {
	l := int64(h.Lobby) - int64(f.lobbyBase)
	if l < 0 || h.Player == 0 || h.Player > uint32(f.lobbySize) {
		return -1
	}
	p := l*int64(f.lobbySize) + int64(h.Player) - 1
	if p >= int64(len(f.conns)) {
		return -1
	}
	return int(p)
}

// benchDrops sums the kernel's drop counters of the player sockets, read
// from /proc/self/net/udp. It is exact at the moment it is read, where
// SO_RXQ_OVFL would only report a drop with the next datagram the socket
// receives, and the last tick of a step may have none after it.
func (f *fleet) benchDrops() (uint64, error) {
	b, err := os.ReadFile(procUDP)
	if err != nil {
		return 0, fmt.Errorf("read bench socket drops: %w", err)
	}
	rows, err := sockstat.ParseProcNetUDP(b)
	if err != nil {
		return 0, fmt.Errorf("read bench socket drops: %w", err)
	}
	var n uint64
	for _, r := range rows {
		if f.ports[r.LocalPort] && r.RemotePort == f.relayPort {
			n += r.Drops
		}
	}
	return n, nil
}

// send writes player p's next datagram, tagged, stamped with the time now.
// Only one goroutine sends at a time, so the buffers need no lock.
func (f *fleet) send(p int, tag uint32) error {
	b := f.bufs[p]
	binary.BigEndian.PutUint32(b[12:16], f.seq[p])
	f.seq[p]++
	binary.BigEndian.PutUint64(b[16:24], uint64(time.Now().UnixNano()))
	binary.BigEndian.PutUint32(b[wire.HeaderLen:], tag)
	_, err := f.conns[p].Write(b)
	if err != nil && isRefused(err) {
		f.drainErrors(p)
	}
	return err
}
