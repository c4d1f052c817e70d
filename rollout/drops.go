package rollout

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/relayctl/relayctl/plans"
)

// DropSpan is what a relay's drop counters did between two readings of
// one socket: each counter's rise, the drops and the traffic per second,
// and where the counters disagree (docs/soak.md).
type DropSpan struct {
	Seconds      float64 `json:"seconds"` // on the host's clock
	SSDrops      uint64  `json:"ss_d"`
	ProcUDPDrops uint64  `json:"proc_net_udp_drops"`
	RcvbufErrors uint64  `json:"snmp_rcvbuf_errors"`
	InErrors     uint64  `json:"snmp_in_errors"`
	RelayRxDrops *uint64 `json:"relay_rx_drops,omitempty"` // nil: the relay's /status was not read at both ends
	// Datagrams is what arrived at the relay's socket, read or dropped:
	// the relay's own rx_packets and the socket's d where the relay
	// reported, else the namespace's InDatagrams and RcvbufErrors.
	Datagrams   uint64  `json:"datagrams"`
	DatagramsBy string  `json:"datagrams_counted_by"` // "relay" or "namespace"
	DropRate    float64 `json:"drops_per_s"`          // ss d per second: the socket's own count
	Traffic     float64 `json:"datagrams_per_s"`
	// Forwarded is the data datagrams the relay forwarded for its players
	// (its counters.forwarded), ForwardedRate per second; nil when its
	// /status was not read at both ends. A relay forwards only a member's
	// datagrams from its own address, so a stranger's datagrams are not in
	// it: spoofed or from an address that never joined.
	Forwarded     *uint64  `json:"relay_forwarded,omitempty"`
	ForwardedRate *float64 `json:"forwarded_per_s,omitempty"`
	// Disagreement says where the counters do not agree; each is a
	// finding of its own (drops on another socket of the namespace, a
	// relay blind to its socket's drops).
	Disagreement []string `json:"disagreement,omitempty"`
}

// Why two readings give no span.
var (
	errOtherSocket = errors.New("another socket")
	errNoClock     = errors.New("no clock")
)

// Span is the span from reading a to reading b of the same socket. Two
// sockets give none (errOtherSocket: a new socket counts from zero), nor
// readings whose clock does not move forward.
func Span(a, b plans.DropCounters) (*DropSpan, error) {
	switch {
	case a.SocketInode == 0 || b.SocketInode == 0:
		return nil, fmt.Errorf("%w: the relay socket was not found", errOtherSocket)
	case !b.Holds(a.SocketInode):
		return nil, fmt.Errorf("%w: the relay socket changed (inode %d, then %d)", errOtherSocket, a.SocketInode, b.SocketInode)
	case a.ClockNanos <= 0 || b.ClockNanos <= a.ClockNanos:
		return nil, fmt.Errorf("%w: the readings carry no host clock that moved forward", errNoClock)
	}
	s := &DropSpan{Seconds: float64(b.ClockNanos-a.ClockNanos) / 1e9,
		SSDrops: rise(a.SSDrops, b.SSDrops), ProcUDPDrops: rise(a.ProcUDPDrops, b.ProcUDPDrops),
		RcvbufErrors: rise(a.RcvbufErrors, b.RcvbufErrors), InErrors: rise(a.InErrors, b.InErrors)}
	if a.RelayRxDrops != nil && b.RelayRxDrops != nil && *b.RelayRxDrops >= *a.RelayRxDrops {
		d := *b.RelayRxDrops - *a.RelayRxDrops
		s.RelayRxDrops = &d
	}
	if s.RelayRxDrops != nil && a.RelayRxPackets != nil && b.RelayRxPackets != nil && *b.RelayRxPackets >= *a.RelayRxPackets {
		s.Datagrams, s.DatagramsBy = *b.RelayRxPackets-*a.RelayRxPackets+s.SSDrops, "relay"
	} else {
		s.Datagrams, s.DatagramsBy = rise(a.InDatagrams, b.InDatagrams)+s.RcvbufErrors, "namespace"
	}
	s.DropRate = float64(s.SSDrops) / s.Seconds
	s.Traffic = float64(s.Datagrams) / s.Seconds
	if s.RelayRxDrops != nil && a.RelayForwarded != nil && b.RelayForwarded != nil && *b.RelayForwarded >= *a.RelayForwarded {
		f := *b.RelayForwarded - *a.RelayForwarded
		rate := float64(f) / s.Seconds
		s.Forwarded, s.ForwardedRate = &f, &rate
	}
	s.Disagreement = disagreement(s, max(a.Sockets, b.Sockets))
	return s, nil
}

// PlayTraffic is what the soak's min_traffic judges: the datagrams per
// second the relay forwarded for its players, where it reports them, else
// every datagram that reached its socket (a stranger's too), and which.
func (s *DropSpan) PlayTraffic() (float64, string) {
	if s.ForwardedRate != nil {
		return *s.ForwardedRate, "forwarded for the relay's players"
	}
	return s.Traffic, "reached the relay (" + s.DatagramsBy + "'s count, a stranger's datagrams too: the relay's /status gave no forwarded count)"
}

// rise is how much a counter rose; a counter that went down (it cannot, on
// one socket and one namespace) rose by nothing.
func rise(a, b uint64) uint64 {
	if b < a {
		return 0
	}
	return b - a
}

// agree says whether two counts of the same drops agree: they are read
// moments apart, a few milliseconds in which drops go on, so within 5% or
// 2 datagrams.
func agree(a, b uint64) bool {
	d := max(a, b) - min(a, b)
	return d <= 2 || 20*d <= max(a, b)
}

// disagreement names each counter that does not agree with the socket's d,
// and what that means.
func disagreement(s *DropSpan, sockets int) []string {
	var out []string
	if sockets > 1 {
		out = append(out, fmt.Sprintf("%d bound sockets share the relay's port: ss d is their sum", sockets))
	}
	if !agree(s.SSDrops, s.ProcUDPDrops) {
		out = append(out, fmt.Sprintf("ss d +%s but /proc/net/udp drops +%s: the same kernel counter, read at two moments", thousands(s.SSDrops), thousands(s.ProcUDPDrops)))
	}
	switch {
	case agree(s.SSDrops, s.RcvbufErrors):
	case s.RcvbufErrors > s.SSDrops:
		out = append(out, fmt.Sprintf("UdpRcvbufErrors +%s but the relay socket's d +%s: %s datagrams were dropped by another UDP socket of the relay's network namespace",
			thousands(s.RcvbufErrors), thousands(s.SSDrops), thousands(s.RcvbufErrors-s.SSDrops)))
	default:
		out = append(out, fmt.Sprintf("the relay socket's d +%s but UdpRcvbufErrors +%s: %s drops were not for a full buffer (UdpInErrors +%s counts those too: a checksum, a socket filter)",
			thousands(s.SSDrops), thousands(s.RcvbufErrors), thousands(s.SSDrops-s.RcvbufErrors), thousands(s.InErrors)))
	}
	if r := s.RelayRxDrops; r != nil && !agree(s.SSDrops, *r) {
		if *r < s.SSDrops {
			out = append(out, fmt.Sprintf("rx_drops +%s but the socket's d +%s: the relay did not see %s of its socket's drops (another socket on its port, or a relay that reads no SO_RXQ_OVFL)",
				thousands(*r), thousands(s.SSDrops), thousands(s.SSDrops-*r)))
		} else {
			out = append(out, fmt.Sprintf("rx_drops +%s but the socket's d +%s: the relay counted %s drops its socket did not", thousands(*r), thousands(s.SSDrops), thousands(*r-s.SSDrops)))
		}
	}
	return out
}

// Counts is the span's counters in a line: "ss d +2,502, UdpRcvbufErrors
// +2,502, rx_drops +2,502".
func (s *DropSpan) Counts() string {
	parts := []string{"ss d +" + thousands(s.SSDrops), "UdpRcvbufErrors +" + thousands(s.RcvbufErrors)}
	if s.RelayRxDrops != nil {
		parts = append(parts, "rx_drops +"+thousands(*s.RelayRxDrops))
	}
	return strings.Join(parts, ", ")
}

// thousands writes n with commas between groups of three digits.
func thousands(n uint64) string {
	s := strconv.FormatUint(n, 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// BaselineOf is the longest span of one socket among readings (oldest
// first) that ends at the last one: a reading of another socket (the
// relay restarted) starts the span again. nil when there is none.
func BaselineOf(readings []plans.DropCounters) *DropSpan {
	if len(readings) < 2 {
		return nil
	}
	last := readings[len(readings)-1]
	for _, r := range readings[:len(readings)-1] {
		if s, err := Span(r, last); err == nil {
			return s
		}
	}
	return nil
}
