package sockstat

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// TCPSock is what the kernel says of one end of a TCP connection: its
// state, the uid that owns it and its inode. A socket no process holds any
// more (an orphan closing, a timewait entry) has inode 0, and a timewait
// entry uid 0 besides: only a live socket's uid names who holds it.
type TCPSock struct {
	State uint8 // the kernel's TCP state: TCPEstablished, TCPFinWait2, ...
	UID   uint32
	Inode uint64
}

// The kernel's TCP states (include/net/tcp_states.h), as /proc/net/tcp's
// st column and inet_diag's idiag_state give them.
const (
	TCPEstablished uint8 = 1 + iota
	TCPSynSent
	TCPSynRecv
	TCPFinWait1
	TCPFinWait2
	TCPTimeWait
	TCPClose
	TCPCloseWait
	TCPLastAck
	TCPListen
	TCPClosing
	TCPNewSynRecv
)

var tcpStateNames = [...]string{"", "ESTABLISHED", "SYN_SENT", "SYN_RECV", "FIN_WAIT1", "FIN_WAIT2",
	"TIME_WAIT", "CLOSE", "CLOSE_WAIT", "LAST_ACK", "LISTEN", "CLOSING", "NEW_SYN_RECV"}

// StateName is the state as the kernel's headers spell it.
func (s TCPSock) StateName() string {
	if int(s.State) < len(tcpStateNames) && s.State != 0 {
		return tcpStateNames[s.State]
	}
	return fmt.Sprintf("state %d", s.State)
}

// Live reports whether a process holds the socket with its connection up:
// established, with an inode. Only then is its uid its holder's.
func (s TCPSock) Live() bool { return s.State == TCPEstablished && s.Inode != 0 }

// ErrNoSockDiag: a netlink socket for NETLINK_SOCK_DIAG cannot be opened,
// as under a systemd unit whose RestrictAddressFamilies= leaves out
// AF_NETLINK.
var ErrNoSockDiag = errors.New("cannot open a NETLINK_SOCK_DIAG socket")

// Sizes of the kernel's structures (include/uapi/linux/inet_diag.h).
const (
	sizeofNlmsghdr   = 16
	sizeofDiagSockID = 48 // sport, dport, src[4], dst[4], if, cookie[2]
	sizeofDiagReqV2  = 8 + sizeofDiagSockID
	sizeofDiagMsg    = 4 + sizeofDiagSockID + 20 // ... expires, rqueue, wqueue, uid, inode
)

var diagSeq atomic.Uint32

// LookupTCP asks the kernel (NETLINK_SOCK_DIAG, inet_diag's lookup of one
// socket by its exact four-tuple) for the TCP socket of the caller's
// network namespace whose local address is local and whose peer is
// remote; found is false when there is none. An IPv4 tuple also finds an
// IPv6 socket that connected to a v4-mapped address. The error wraps
// ErrNoSockDiag when the netlink socket cannot be opened.
func LookupTCP(local, remote netip.AddrPort) (sock TCPSock, found bool, err error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
	if err != nil {
		return TCPSock{}, false, fmt.Errorf("%w: %w", ErrNoSockDiag, err)
	}
	defer unix.Close(fd)
	// The kernel answers before sendto returns; the timeout only bounds a
	// kernel that never does.
	tv := unix.Timeval{Sec: 1}
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return TCPSock{}, false, fmt.Errorf("sock_diag: set a receive timeout: %w", err)
	}
	seq := diagSeq.Add(1)
	if err := unix.Sendto(fd, diagRequest(seq, local, remote), 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return TCPSock{}, false, fmt.Errorf("sock_diag: ask for %s to %s: %w", local, remote, err)
	}
	buf := make([]byte, 8192)
	for {
		n, from, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			return TCPSock{}, false, fmt.Errorf("sock_diag: read the answer for %s to %s: %w", local, remote, err)
		}
		if nl, ok := from.(*unix.SockaddrNetlink); !ok || nl.Pid != 0 {
			continue // not the kernel's
		}
		return ParseDiagAnswer(buf[:n], seq, local, remote)
	}
}

// diagRequest is an inet_diag_req_v2 for the one TCP socket with local
// and remote as its ends (SOCK_DIAG_BY_FAMILY without NLM_F_DUMP).
func diagRequest(seq uint32, local, remote netip.AddrPort) []byte {
	b := make([]byte, sizeofNlmsghdr+sizeofDiagReqV2)
	ne := binary.NativeEndian
	ne.PutUint32(b[0:], uint32(len(b)))
	ne.PutUint16(b[4:], unix.SOCK_DIAG_BY_FAMILY)
	ne.PutUint16(b[6:], unix.NLM_F_REQUEST)
	ne.PutUint32(b[8:], seq)
	r := b[sizeofNlmsghdr:]
	r[0], r[1] = diagFamily(local, remote), unix.IPPROTO_TCP
	ne.PutUint32(r[4:], ^uint32(0)) // every state: the caller judges the one found
	putDiagID(r[8:], local, remote)
	return b
}

// diagFamily is AF_INET for an IPv4 tuple (v4-mapped or not), AF_INET6
// otherwise.
func diagFamily(local, remote netip.AddrPort) uint8 {
	if local.Addr().Unmap().Is4() && remote.Addr().Unmap().Is4() {
		return unix.AF_INET
	}
	return unix.AF_INET6
}

// putDiagID writes an inet_diag_sockid: ports in network order, addresses
// as 4 or 16 bytes, any interface, no cookie (INET_DIAG_NOCOOKIE).
func putDiagID(id []byte, local, remote netip.AddrPort) {
	binary.BigEndian.PutUint16(id[0:], local.Port())
	binary.BigEndian.PutUint16(id[2:], remote.Port())
	if diagFamily(local, remote) == unix.AF_INET {
		l, r := local.Addr().Unmap().As4(), remote.Addr().Unmap().As4()
		copy(id[4:], l[:])
		copy(id[20:], r[:])
	} else {
		l, r := local.Addr().As16(), remote.Addr().As16()
		copy(id[4:], l[:])
		copy(id[20:], r[:])
	}
	binary.NativeEndian.PutUint32(id[40:], ^uint32(0))
	binary.NativeEndian.PutUint32(id[44:], ^uint32(0))
}

// ParseDiagAnswer reads the kernel's answer to request seq for the socket
// with ends local and remote: one inet_diag_msg, or an NLMSG_ERROR
// (ENOENT: no such socket). The answer must be for that request and that
// socket: anything else is an error, never a guess.
func ParseDiagAnswer(b []byte, seq uint32, local, remote netip.AddrPort) (TCPSock, bool, error) {
	ne := binary.NativeEndian
	if len(b) < sizeofNlmsghdr {
		return TCPSock{}, false, fmt.Errorf("sock_diag: answer of %d bytes, shorter than a netlink header", len(b))
	}
	n, typ, gotSeq := ne.Uint32(b[0:]), ne.Uint16(b[4:]), ne.Uint32(b[8:])
	if n < sizeofNlmsghdr || uint64(n) > uint64(len(b)) {
		return TCPSock{}, false, fmt.Errorf("sock_diag: answer says %d bytes, got %d", n, len(b))
	}
	if gotSeq != seq {
		return TCPSock{}, false, fmt.Errorf("sock_diag: answer to request %d, want %d", gotSeq, seq)
	}
	body := b[sizeofNlmsghdr:n]
	switch typ {
	case unix.NLMSG_ERROR:
		return diagError(body)
	case unix.SOCK_DIAG_BY_FAMILY:
		return diagMsg(body, local, remote)
	}
	return TCPSock{}, false, fmt.Errorf("sock_diag: answer of netlink type %d, want %d or an error", typ, unix.SOCK_DIAG_BY_FAMILY)
}

// diagError reads an NLMSG_ERROR's code: ENOENT is "no such socket".
func diagError(body []byte) (TCPSock, bool, error) {
	if len(body) < 4 {
		return TCPSock{}, false, fmt.Errorf("sock_diag: error message of %d bytes, want at least 4", len(body))
	}
	code := -int32(binary.NativeEndian.Uint32(body))
	switch {
	case code == int32(unix.ENOENT):
		return TCPSock{}, false, nil
	case code <= 0:
		return TCPSock{}, false, fmt.Errorf("sock_diag: an acknowledgement (%d) instead of an answer", -code)
	}
	return TCPSock{}, false, fmt.Errorf("sock_diag: %w", syscall.Errno(code))
}

// diagMsg reads an inet_diag_msg and checks it is for local to remote.
func diagMsg(body []byte, local, remote netip.AddrPort) (TCPSock, bool, error) {
	if len(body) < sizeofDiagMsg {
		return TCPSock{}, false, fmt.Errorf("sock_diag: inet_diag_msg of %d bytes, want at least %d", len(body), sizeofDiagMsg)
	}
	gotLocal, gotRemote, err := diagEnds(body[0], body[4:4+sizeofDiagSockID])
	if err != nil {
		return TCPSock{}, false, err
	}
	if gotLocal.Addr().Unmap() != local.Addr().Unmap() || gotLocal.Port() != local.Port() ||
		gotRemote.Addr().Unmap() != remote.Addr().Unmap() || gotRemote.Port() != remote.Port() {
		return TCPSock{}, false, fmt.Errorf("sock_diag: asked for %s to %s, the kernel answered for %s to %s", local, remote, gotLocal, gotRemote)
	}
	tail := body[4+sizeofDiagSockID:]
	return TCPSock{
		State: body[1],
		UID:   binary.NativeEndian.Uint32(tail[12:]),
		Inode: uint64(binary.NativeEndian.Uint32(tail[16:])),
	}, true, nil
}

// diagEnds decodes an inet_diag_sockid of family fam.
func diagEnds(fam uint8, id []byte) (local, remote netip.AddrPort, err error) {
	lp, rp := binary.BigEndian.Uint16(id[0:]), binary.BigEndian.Uint16(id[2:])
	var l, r netip.Addr
	switch fam {
	case unix.AF_INET:
		l, r = netip.AddrFrom4([4]byte(id[4:8])), netip.AddrFrom4([4]byte(id[20:24]))
	case unix.AF_INET6:
		l, r = netip.AddrFrom16([16]byte(id[4:20])), netip.AddrFrom16([16]byte(id[20:36]))
	default:
		return local, remote, fmt.Errorf("sock_diag: answer of address family %d, want AF_INET or AF_INET6", fam)
	}
	return netip.AddrPortFrom(l, lp), netip.AddrPortFrom(r, rp), nil
}
