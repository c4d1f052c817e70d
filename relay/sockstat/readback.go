package sockstat

import "fmt"

// RelaySocket is the relay socket read back from the kernel, in the relay
// process's network namespace: what relayctl's observe and the bench's
// kernel reader both report, from one reading of ss, /proc/net/udp and
// /proc/net/snmp, so they cannot disagree about the same socket.
type RelaySocket struct {
	Found        bool
	Sockets      int    // bound (unconnected) UDP sockets on the port; more than one with SO_REUSEPORT
	Rcvbuf       uint64 // skmem rb of the first; with several sockets, each has its own (MinRcvbuf is the smallest)
	Inode        uint64 // of the first, when ss ran with -e: the same inode means the same socket
	MinRcvbuf    uint64
	Drops        uint64 // skmem d, summed over the port's sockets
	ProcUDPDrops uint64 // /proc/net/udp drops, summed over the port's bound sockets
	RcvbufErrors uint64 // Udp RcvbufErrors of the namespace
	InErrors     uint64 // Udp InErrors of the namespace
	// Each is every socket counted, in ss's order.
	Each []Socket
}

// ReadBack reads the relay socket on port from the three outputs. A socket
// connected to a peer on the same port (a player, say) is not the relay's:
// only bound, unconnected sockets count. ss found nothing is not an error
// (Found is false); output that does not parse is.
func ReadBack(ss, udp, snmp []byte, port int) (RelaySocket, error) {
	return ReadBackOf(ss, udp, snmp, port, nil)
}

// ReadBackOf is ReadBack for the sockets of some processes only (ss -p's
// users): a service's, when another program has a socket on the same port
// in the namespace. No pids: every socket on the port.
func ReadBackOf(ss, udp, snmp []byte, port int, pids []int) (RelaySocket, error) {
	var r RelaySocket
	socks, err := ParseSS(ss)
	if err != nil {
		return r, fmt.Errorf("read ss: %w", err)
	}
	for _, s := range FilterPort(socks, port) {
		if s.State == "ESTAB" || len(pids) > 0 && !heldBy(s, pids) {
			continue
		}
		r.Each = append(r.Each, s)
		if !r.Found {
			r.Found, r.Rcvbuf, r.MinRcvbuf, r.Inode = true, s.Rcvbuf, s.Rcvbuf, s.Inode
		}
		r.Sockets++
		r.Drops += s.Drops
		r.MinRcvbuf = min(r.MinRcvbuf, s.Rcvbuf)
	}
	if udp != nil {
		rows, err := ParseProcNetUDP(udp)
		if err != nil {
			return r, fmt.Errorf("read /proc/net/udp: %w", err)
		}
		for _, row := range rows {
			if row.LocalPort == port && row.RemotePort == 0 {
				r.ProcUDPDrops += row.Drops
			}
		}
	}
	if snmp != nil {
		st, err := ParseSNMP(snmp)
		if err != nil {
			return r, fmt.Errorf("read /proc/net/snmp: %w", err)
		}
		r.RcvbufErrors, r.InErrors = st.RcvbufErrors, st.InErrors
	}
	return r, nil
}

// heldBy reports whether one of pids holds the socket (ss -p). A socket
// ss printed no users for is nobody's we can name: not the service's.
func heldBy(s Socket, pids []int) bool {
	for _, p := range s.PIDs {
		if containsInt(pids, p) {
			return true
		}
	}
	return false
}
