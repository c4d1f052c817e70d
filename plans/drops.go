package plans

// DropCounters is one reading of a relay's drop counters, the traffic
// beside them, the socket they belong to and the host's clock. Two
// readings of the same socket give a rate (rollout/drops.go); readings of
// two sockets give nothing, since a new socket counts from zero. The
// counters are those that agreed to the unit in the incident: the socket's
// d (ss), the same counter in /proc/net/udp, the namespace's Udp
// RcvbufErrors (and InErrors, which moves with it) and the relay's own
// rx_drops (docs/soak.md says why these).
type DropCounters struct {
	SSDrops      uint64 `json:"ss_d"`
	ProcUDPDrops uint64 `json:"proc_net_udp_drops"`
	RcvbufErrors uint64 `json:"snmp_rcvbuf_errors"`
	InErrors     uint64 `json:"snmp_in_errors"`
	InDatagrams  uint64 `json:"snmp_in_datagrams"` // the namespace's Udp InDatagrams: traffic when the relay's own count is unknown
	// RelayRxDrops and RelayRxPackets are the relay's own /status counters
	// (nil when it was not read), RelayForwarded the data datagrams it
	// forwarded for its players; Players is what it reported, and
	// PlayersEstablished those that have played 5 s (nil from a relay
	// that does not say).
	RelayRxDrops       *uint64 `json:"relay_rx_drops"`
	RelayRxPackets     *uint64 `json:"relay_rx_packets,omitempty"`
	RelayForwarded     *uint64 `json:"relay_forwarded,omitempty"`
	Players            *int    `json:"players,omitempty"`
	PlayersEstablished *int    `json:"players_established,omitempty"`
	// The socket read: its inode (the same inode is the same socket), how
	// many bound sockets share the port (ss d sums them), and the relay
	// process read.
	SocketInode uint64   `json:"socket_inode,omitempty"`
	Inodes      []uint64 `json:"socket_inodes,omitempty"` // every socket counted, when there are several
	Sockets     int      `json:"sockets,omitempty"`
	PID         int      `json:"pid,omitempty"`
	ClockNanos  int64    `json:"clock_ns,omitempty"` // the host's clock at the reading (Unix ns)
}

// DropCountersOf picks the drop counters out of facts.
func DropCountersOf(f *Facts) DropCounters {
	s := f.Socket
	c := DropCounters{SSDrops: s.Drops, ProcUDPDrops: s.ProcUDPDrops, RcvbufErrors: s.RcvbufErrors, InErrors: s.InErrors, InDatagrams: s.InDatagrams,
		SocketInode: s.Inode, Sockets: s.Sockets, PID: f.Service.PID, ClockNanos: f.ClockNanos}
	if st := f.RelayStatus; st != nil && st.Read {
		drops, rx, fwd, players := st.RxDrops, st.RxPackets, st.Forwarded, st.Players
		c.RelayRxDrops, c.RelayRxPackets, c.RelayForwarded, c.Players = &drops, &rx, &fwd, &players
		if e := st.PlayersEstablished; e != nil {
			n := *e
			c.PlayersEstablished = &n
		}
	}
	if len(s.All) > 1 {
		for _, e := range s.All {
			c.Inodes = append(c.Inodes, e.Inode)
		}
	}
	if !s.Found {
		c.SocketInode, c.Inodes = 0, nil
	}
	return c
}

// Holds reports whether the reading counted the socket with inode i.
func (c DropCounters) Holds(i uint64) bool {
	if i == 0 {
		return false
	}
	if c.SocketInode == i {
		return true
	}
	for _, x := range c.Inodes {
		if x == i {
			return true
		}
	}
	return false
}

// LastApply is what a host's newest receipt with a read-back in it says
// (under StateDir/receipts): the relay's drop counters right after that
// apply's window. verify measures the rate since from it.
type LastApply struct {
	Receipt  string       `json:"receipt"` // its file name
	Plan     string       `json:"plan"`
	Checksum string       `json:"plan_checksum"`
	Outcome  string       `json:"outcome"`
	Drops    DropCounters `json:"drops_after"`
}
