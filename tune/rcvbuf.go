package tune

import (
	"fmt"
	"math"
)

// SockMinRcvbuf is the smallest receive buffer the kernel gives a socket
// (SOCK_MIN_RCVBUF in include/net/sock.h: 2048 plus the aligned struct
// sk_buff). Measured on kernel 6.18: setsockopt(SO_RCVBUF, 1) reads back 2304.
const SockMinRcvbuf = 2304

// maxRcvbufArg is the largest argument __sock_set_rcvbuf keeps (INT_MAX/2,
// so that doubling it still fits an int).
const maxRcvbufArg = math.MaxInt32 / 2

// RcvbufExpect is the receive buffer a socket will read back, and why.
type RcvbufExpect struct {
	Requested   int  // the SO_RCVBUF argument; 0 means the relay never calls setsockopt
	Force       bool // SO_RCVBUFFORCE instead of SO_RCVBUF
	RmemMax     int  // net.core.rmem_max
	RmemDefault int  // net.core.rmem_default
	Effective   int  // rb: what getsockopt(SO_RCVBUF) and ss's skmem rb will show
	Capped      bool // rmem_max silently cut the request
}

// ExpectRcvbuf applies the kernel's rule (docs/kernel.md, net/core/sock.c
// sk_setsockopt and __sock_set_rcvbuf):
//   - no setsockopt: rb = rmem_default;
//   - SO_RCVBUF X: rb = max(2*min(X, rmem_max), 2304), the cap silent;
//   - SO_RCVBUFFORCE X: rb = max(2*X, 2304), rmem_max ignored.
//
// Either way the argument is first limited to INT_MAX/2. SO_RCVBUF compares
// as unsigned, so a negative X counts as huge and gets rmem_max;
// SO_RCVBUFFORCE turns a negative X into 0.
func ExpectRcvbuf(requested int, force bool, rmemMax, rmemDefault int) RcvbufExpect {
	e := RcvbufExpect{Requested: requested, Force: force, RmemMax: rmemMax, RmemDefault: rmemDefault}
	if requested == 0 {
		e.Effective = rmemDefault
		return e
	}
	v := requested
	if force {
		v = max(v, 0)
	} else if requested < 0 || requested > rmemMax {
		// The kernel compares the option as a u32, so a negative one is huge.
		v = rmemMax
		e.Capped = true
	}
	v = min(v, maxRcvbufArg)
	e.Effective = max(2*v, SockMinRcvbuf)
	return e
}

// Warning explains a silent cap in the words an operator needs, or returns
// "" when there is nothing to warn about.
func (e RcvbufExpect) Warning() string {
	if !e.Capped {
		return ""
	}
	uncapped := 2 * min(max(e.Requested, 0), maxRcvbufArg)
	return fmt.Sprintf("the relay asks for SO_RCVBUF %d (%s) but net.core.rmem_max is %d: "+
		"the kernel caps it silently and the socket will read back rb %d (%s), not %d",
		e.Requested, kib(e.Requested), e.RmemMax, e.Effective, kib(e.Effective), uncapped)
}

// NeverAsksWarning explains that raising rmem_max does nothing for a relay
// that never calls setsockopt(SO_RCVBUF): its socket gets rmem_default
// (docs/kernel.md). It returns "" when the plan does not raise rmem_max.
func NeverAsksWarning(rmemMaxBefore, rmemMaxAfter, rmemDefault int) string {
	if rmemMaxAfter <= rmemMaxBefore {
		return ""
	}
	return fmt.Sprintf("raising net.core.rmem_max from %d to %d changes nothing for a relay that never calls "+
		"setsockopt(SO_RCVBUF): its socket keeps rb %d (%s), the value of net.core.rmem_default; "+
		"raise net.core.rmem_default (the buffer every new socket gets), or ship a release that requests SO_RCVBUF",
		rmemMaxBefore, rmemMaxAfter, rmemDefault, kib(rmemDefault))
}

// kib prints n bytes in KiB, as quic-go's "wanted 2048 kiB, got 416 kiB".
func kib(n int) string {
	if n%1024 == 0 {
		return fmt.Sprintf("%d KiB", n/1024)
	}
	return fmt.Sprintf("%.1f KiB", float64(n)/1024)
}
