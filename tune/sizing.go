package tune

import (
	"math"
	"math/bits"
	"time"
)

// A UDP socket's receive buffer is charged each queued datagram's skb
// truesize, not its payload (docs/kernel.md): a 200-byte datagram costs 1280
// bytes, so the default 212992 holds 166 of them, "about 160".
//
// The model, for an IPv4 datagram built by ip_append_data and received
// over loopback (or a veth pair, which passes the same skb along):
//
//	head  = SKB_DATA_ALIGN(payload + 59) + 320
//	        59 = 20 (IPv4) + 8 (UDP) + 16 (LL_RESERVED_SPACE) + 15 (alignment slack);
//	        320 = the aligned struct skb_shared_info at the end of the head
//	slab  = 576 (skb_small_head_cache) if head <= 576, else head rounded up to a power of two (kmalloc)
//	truesize = slab + 256 (the aligned struct sk_buff)
//
// From payload 16005 on, payload+59 reaches SKB_MAX_ALLOC (16064) and the
// payload goes to page fragments charged byte for byte:
// truesize = 832 + payload.
//
// Measured on kernel 6.18 (x86-64, 64-byte cache lines): an unread udp4
// socket on 127.0.0.1, N datagrams of payload P sent from another socket,
// then r of `ss -H -O -u -l -n -m 'sport = :PORT'` skmem divided by N
// (tune's TestTruesizeMeasured repeats it):
//
//	P        0-197  198-645  646-1669  1670-3717  3718-7813  7814-16004  16005+
//	truesize 832    1280     2304      4352       8448       16640       832+P
//
// A NIC driver allocates received skbs its own way (virtio-net and most
// Ethernet drivers use page fragments of 2 or 4 KiB), so on a real link the
// cost per datagram is of the same order, often higher; size with headroom.
// The model is for IPv4: IPv6 adds 20 bytes of header.
const (
	skbStructSize  = 256   // SKB_DATA_ALIGN(sizeof(struct sk_buff))
	skbSharedInfo  = 320   // SKB_DATA_ALIGN(sizeof(struct skb_shared_info))
	smallHeadCache = 576   // SKB_SMALL_HEAD_CACHE_SIZE
	udp4Headroom   = 59    // IPv4 + UDP headers, link-layer reserve, 15 bytes of slack
	pagedPayload   = 16005 // first payload ip_append_data puts in page fragments
	cacheLine      = 64
)

// MaxRcvbuf is the largest receive buffer a socket can have: twice INT_MAX/2.
const MaxRcvbuf = 2 * maxRcvbufArg

// Truesize returns what one IPv4 UDP datagram of payload bytes costs in a
// socket's receive buffer, by the model above. A negative payload counts as 0.
func Truesize(payload int) int {
	payload = max(payload, 0)
	if payload >= pagedPayload {
		return smallHeadCache + skbStructSize + payload
	}
	head := (payload+udp4Headroom+cacheLine-1)/cacheLine*cacheLine + skbSharedInfo
	slab := smallHeadCache
	if head > smallHeadCache {
		slab = 1 << bits.Len(uint(head-1))
	}
	return slab + skbStructSize
}

// DatagramsHeld returns how many datagrams of payload bytes fit in a receive
// buffer of rb bytes before the kernel drops the next one. The kernel queues
// a datagram while the buffer's charge plus its truesize stays within rb, and
// always accepts one into an empty queue (measured on kernel 6.18: rb 2304
// holds one 2000-byte datagram of truesize 4352).
func DatagramsHeld(rb, payload int) int {
	if rb <= 0 {
		return 0
	}
	return max(rb/Truesize(payload), 1)
}

// RcvbufFor returns the receive buffer (rb, as getsockopt reads it back) that
// holds every datagram arriving while the relay's one receiving thread does
// not drain the socket for stall.
//
// Assumptions: each of players sends one datagram of payload bytes per tick
// at hz ticks a second, on aligned ticks, so a whole tick's worth lands at
// once; the queue is empty when the stall begins (the relay keeps up on
// average; if it does not, no buffer is enough); a stall of length d sees at
// most floor(d*hz)+1 ticks. Each datagram costs Truesize(payload). The result
// is at least SockMinRcvbuf and at most MaxRcvbuf. Negative inputs count as 0.
func RcvbufFor(players, hz, payload int, stall time.Duration) int {
	return max(min(rcvbufNeed(players, hz, payload, stall), MaxRcvbuf), SockMinRcvbuf)
}

// rcvbufNeed is RcvbufFor without the kernel's bounds: the bytes the burst
// takes, saturating at MaxInt, so a caller can tell a promise that no
// buffer meets.
func rcvbufNeed(players, hz, payload int, stall time.Duration) int {
	need := mulSat(mulSat(uint64(max(players, 0)), stallTicks(stall, hz)), uint64(Truesize(payload)))
	return int(min(need, math.MaxInt))
}

// SoRcvbufFor returns the SO_RCVBUF argument that yields RcvbufFor's rb:
// half of it, rounded up, because the kernel doubles the request. The host
// needs net.core.rmem_max at least this large, or the request is capped.
func SoRcvbufFor(players, hz, payload int, stall time.Duration) int {
	rb := RcvbufFor(players, hz, payload, stall)
	return min((rb+1)/2, maxRcvbufArg)
}

func mulSat(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	if hi != 0 {
		return math.MaxUint64
	}
	return lo
}

func satAdd(a, b uint64) uint64 {
	s, carry := bits.Add64(a, b, 0)
	if carry != 0 {
		return math.MaxUint64
	}
	return s
}
