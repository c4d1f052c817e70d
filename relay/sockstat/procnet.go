package sockstat

import (
	"encoding/hex"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// UDPSocket is one line of /proc/net/udp or /proc/net/udp6.
type UDPSocket struct {
	LocalAddr  string // "127.0.0.1", "::"
	LocalPort  int
	RemoteAddr string
	RemotePort int
	State      int    // 7 (TCP_CLOSE) for a bound socket, 1 for a connected one
	TxQueue    uint64 // bytes charged to the send queue
	RxQueue    uint64 // bytes charged to the receive queue (truesize, as ss's skmem r)
	Inode      uint64
	Drops      uint64 // the socket's drops, the same counter as ss's skmem d
}

// ParseProcNetUDP parses /proc/net/udp or /proc/net/udp6 (also
// /proc/PID/net/udp, the view from the relay's network namespace).
//
// Addresses are printed as the kernel's 32-bit words in host byte order;
// they are decoded as little-endian, which every host relayctl manages is
// (x86-64, arm64).
func ParseProcNetUDP(content []byte) ([]UDPSocket, error) {
	lines := strings.Split(string(content), "\n")
	start := -1
	for i, l := range lines {
		if strings.TrimSpace(l) == "" {
			continue
		}
		f := strings.Fields(l)
		if f[0] != "sl" || !strings.Contains(l, "local_address") || f[len(f)-1] != "drops" {
			return nil, fmt.Errorf("parse /proc/net/udp line %d: want the header \"sl local_address ... drops\", got %q", i+1, clip(l))
		}
		start = i + 1
		break
	}
	if start < 0 {
		return nil, fmt.Errorf("parse /proc/net/udp: empty, want at least the header line")
	}
	var socks []UDPSocket
	for i := start; i < len(lines); i++ {
		if strings.TrimSpace(lines[i]) == "" {
			continue
		}
		s, err := parseUDPLine(lines[i])
		if err != nil {
			return nil, fmt.Errorf("parse /proc/net/udp line %d: %w", i+1, err)
		}
		socks = append(socks, s)
	}
	return socks, nil
}

// parseUDPLine parses
// "1860: 0100007F:E4A8 00000000:0000 07 00000000:00033E00 00:00000000 00000000 0 0 23197 2 00000000484025bd 134".
func parseUDPLine(l string) (UDPSocket, error) {
	var s UDPSocket
	f := strings.Fields(l)
	if len(f) != 13 {
		return s, fmt.Errorf("want 13 fields, got %d in %q", len(f), clip(l))
	}
	if !strings.HasSuffix(f[0], ":") {
		return s, fmt.Errorf("slot %q does not end in ':'", clip(f[0]))
	}
	var err error
	if s.LocalAddr, s.LocalPort, err = hexAddrPort(f[1]); err != nil {
		return s, fmt.Errorf("local address: %w", err)
	}
	if s.RemoteAddr, s.RemotePort, err = hexAddrPort(f[2]); err != nil {
		return s, fmt.Errorf("remote address: %w", err)
	}
	st, err := strconv.ParseUint(f[3], 16, 8)
	if err != nil {
		return s, fmt.Errorf("state %q is not a hex byte", clip(f[3]))
	}
	s.State = int(st)
	tx, rx, ok := strings.Cut(f[4], ":")
	if !ok {
		return s, fmt.Errorf("queues %q are not tx:rx", clip(f[4]))
	}
	if s.TxQueue, err = strconv.ParseUint(tx, 16, 64); err != nil {
		return s, fmt.Errorf("tx_queue %q is not hex", clip(tx))
	}
	if s.RxQueue, err = strconv.ParseUint(rx, 16, 64); err != nil {
		return s, fmt.Errorf("rx_queue %q is not hex", clip(rx))
	}
	if s.Inode, err = strconv.ParseUint(f[9], 10, 64); err != nil {
		return s, fmt.Errorf("inode %q is not a number", clip(f[9]))
	}
	if s.Drops, err = strconv.ParseUint(f[12], 10, 64); err != nil {
		return s, fmt.Errorf("drops %q is not a number", clip(f[12]))
	}
	return s, nil
}

// hexAddrPort decodes "0100007F:E4A8" (IPv4) or 32 hex digits and a port
// (IPv6) to an address string and a port.
func hexAddrPort(s string) (string, int, error) {
	ap, err := tcpAddrPort(s)
	if err != nil {
		return "", 0, err
	}
	return ap.Addr().String(), int(ap.Port()), nil
}

// tcpAddrPort decodes an address of /proc/net/{tcp,udp}{,6}: each 4-byte
// word of the address is little-endian, the port is big-endian hex.
func tcpAddrPort(s string) (netip.AddrPort, error) {
	a, p, ok := strings.Cut(s, ":")
	if !ok || len(p) != 4 {
		return netip.AddrPort{}, fmt.Errorf("%q is not ADDR:PORT in hex", clip(s))
	}
	port, err := strconv.ParseUint(p, 16, 16)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("port %q is not hex", p)
	}
	if len(a) != 8 && len(a) != 32 {
		return netip.AddrPort{}, fmt.Errorf("address %q is neither 8 nor 32 hex digits", clip(a))
	}
	b, err := hex.DecodeString(a)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("address %q is not hex", clip(a))
	}
	for w := 0; w < len(b); w += 4 {
		b[w], b[w+1], b[w+2], b[w+3] = b[w+3], b[w+2], b[w+1], b[w]
	}
	addr, _ := netip.AddrFromSlice(b) // 4 or 16 bytes: always valid
	return netip.AddrPortFrom(addr, uint16(port)), nil
}

// ProcNetTCPSock finds, in /proc/net/tcp or /proc/net/tcp6 content (the
// reader's network namespace), the TCP socket whose local address is
// local and whose peer is remote; found is false when no line has that
// pair. For a loopback connection both ends are in the file: the caller's
// socket is the line with the caller's address as its local one.
//
// A pair can have more than one line as the file is read (a socket the
// kernel replaces with a timewait entry meanwhile); a live one (TCPSock's
// Live) is returned before any other, so a reader that trusts only a live
// socket's uid never takes the uid 0 of a timewait entry for its holder's.
func ProcNetTCPSock(content []byte, local, remote netip.AddrPort) (sock TCPSock, found bool, err error) {
	lines := strings.Split(string(content), "\n")
	if !strings.Contains(lines[0], "local_address") || !strings.Contains(lines[0], "uid") || !strings.Contains(lines[0], "inode") {
		return TCPSock{}, false, fmt.Errorf("parse /proc/net/tcp: want the header \"sl local_address rem_address st ... uid timeout inode\", got %q", clip(lines[0]))
	}
	for i, l := range lines[1:] {
		if strings.TrimSpace(l) == "" {
			continue
		}
		s, la, ra, err := parseTCPLine(l)
		if err != nil {
			return TCPSock{}, false, fmt.Errorf("parse /proc/net/tcp line %d: %w", i+2, err)
		}
		if la.Addr().Unmap() != local.Addr().Unmap() || la.Port() != local.Port() ||
			ra.Addr().Unmap() != remote.Addr().Unmap() || ra.Port() != remote.Port() {
			continue
		}
		if !found || s.Live() && !sock.Live() {
			sock, found = s, true
		}
	}
	return sock, found, nil
}

// parseTCPLine parses the state, uid and inode of a /proc/net/tcp line,
// and its two addresses:
// "   2: 0100007F:D431 0100007F:1E75 01 00000000:00000000 00:00000000 00000000 65534 0 2002 1 ...".
// A timewait entry has 12 fields, a socket 17.
func parseTCPLine(l string) (s TCPSock, local, remote netip.AddrPort, err error) {
	f := strings.Fields(l)
	if len(f) < 10 {
		return s, local, remote, fmt.Errorf("want at least 10 fields, got %d in %q", len(f), clip(l))
	}
	if !strings.HasSuffix(f[0], ":") {
		return s, local, remote, fmt.Errorf("slot %q does not end in ':'", clip(f[0]))
	}
	if local, err = tcpAddrPort(f[1]); err != nil {
		return s, local, remote, fmt.Errorf("local address: %w", err)
	}
	if remote, err = tcpAddrPort(f[2]); err != nil {
		return s, local, remote, fmt.Errorf("remote address: %w", err)
	}
	st, err := strconv.ParseUint(f[3], 16, 8)
	if err != nil {
		return s, local, remote, fmt.Errorf("state %q is not a hex byte", clip(f[3]))
	}
	uid, err := strconv.ParseUint(f[7], 10, 32)
	if err != nil {
		return s, local, remote, fmt.Errorf("uid %q is not a number", clip(f[7]))
	}
	inode, err := strconv.ParseUint(f[9], 10, 64)
	if err != nil {
		return s, local, remote, fmt.Errorf("inode %q is not a number", clip(f[9]))
	}
	return TCPSock{State: uint8(st), UID: uint32(uid), Inode: inode}, local, remote, nil
}
