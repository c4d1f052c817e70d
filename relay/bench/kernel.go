package bench

import (
	"context"
	"fmt"
)

// KernelDelta is what the relay host's kernel counted over one step for the
// relay's socket, read over SSH (--ssh). All three counters are the same
// kernel drop count seen three ways (docs/kernel.md); reporting
// whether they agree with the relay's own rx_drops is the point.
type KernelDelta struct {
	SSDrops      uint64 `json:"ss_d"`               // d in ss -m skmem
	ProcDrops    uint64 `json:"proc_net_udp_drops"` // drops column of /proc/net/udp
	RcvbufErrors uint64 `json:"rcvbuf_errors"`      // Udp RcvbufErrors of /proc/net/snmp (whole netns)
	RcvBuf       uint64 `json:"rb"`                 // the socket's receive buffer, bytes
}

// Agrees reports whether the relay socket's two kernel counters (ss d and
// /proc/net/udp drops) equal the relay's own rx_drops.
func (k KernelDelta) Agrees(relayDrops uint64) bool {
	return k.SSDrops == relayDrops && k.ProcDrops == relayDrops
}

// Agreement is one phrase for the report. RcvbufErrors counts every socket
// of the relay's network namespace, so it can only be at least rx_drops;
// equal when the relay was the only socket dropping.
func (k KernelDelta) Agreement(relayDrops uint64) string {
	verdict := "the kernel agrees"
	if !k.Agrees(relayDrops) {
		verdict = "the kernel DISAGREES"
	}
	ns := fmt.Sprintf("RcvbufErrors %d", k.RcvbufErrors)
	if k.RcvbufErrors > relayDrops {
		ns += fmt.Sprintf(", %d from other sockets in its namespace", k.RcvbufErrors-relayDrops)
	}
	return fmt.Sprintf("%s: ss d %d, /proc/net/udp drops %d, relay rx_drops %d (%s; rb %d)",
		verdict, k.SSDrops, k.ProcDrops, relayDrops, ns, k.RcvBuf)
}

// KernelSnapshot is the relay host's cumulative counters at one moment.
type KernelSnapshot struct {
	SSDrops      uint64
	ProcDrops    uint64
	RcvbufErrors uint64
	RcvBuf       uint64
}

// KernelReader reads the relay host's kernel counters for the relay socket.
type KernelReader interface {
	ReadKernel(ctx context.Context) (KernelSnapshot, error)
}

// Sub is the delta from o to k; rb is k's.
func (k KernelSnapshot) Sub(o KernelSnapshot) KernelDelta {
	d := sat
	return KernelDelta{
		SSDrops:      d(k.SSDrops, o.SSDrops),
		ProcDrops:    d(k.ProcDrops, o.ProcDrops),
		RcvbufErrors: d(k.RcvbufErrors, o.RcvbufErrors),
		RcvBuf:       k.RcvBuf,
	}
}
