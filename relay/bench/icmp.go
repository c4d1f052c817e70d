package bench

import (
	"errors"
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// While no socket is bound to the relay's port (a plain restart), the
// relay host answers each datagram with an ICMP port unreachable. On a
// connected UDP socket the kernel then fails the player's next send or
// receive with ECONNREFUSED, which many game clients take for a
// disconnect. With IP_RECVERR the kernel also queues every such error on
// the socket's error queue, so the bench can count them exactly rather
// than see one ECONNREFUSED for many errors.

// sizeofSockExtendedErr is sizeof(struct sock_extended_err).
const sizeofSockExtendedErr = 16

// enableRecvErr turns IP_RECVERR on for a player socket.
func enableRecvErr(c *net.UDPConn) error {
	raw, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := raw.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_RECVERR, 1)
	}); err != nil {
		return err
	}
	return serr
}

// isRefused reports an ECONNREFUSED: an ICMP error reached the socket.
func isRefused(err error) bool { return errors.Is(err, syscall.ECONNREFUSED) }

// drainErrors reads player p's error queue empty and counts the ICMP
// errors in it into f.icmp[p]. The queue is charged to the socket's
// receive buffer, so it must not be left to fill.
func (f *fleet) drainErrors(p int) {
	raw, err := f.conns[p].SyscallConn()
	if err != nil {
		return
	}
	var buf [64]byte
	oob := make([]byte, 512)
	raw.Control(func(fd uintptr) {
		for {
			_, oobn, _, _, err := unix.Recvmsg(int(fd), buf[:], oob, unix.MSG_ERRQUEUE|unix.MSG_DONTWAIT)
			if err != nil {
				return // EAGAIN: empty
			}
			msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
			if err != nil {
				continue
			}
			for _, m := range msgs {
				// struct sock_extended_err: ee_errno u32, ee_origin u8, ...
				if m.Header.Level == unix.SOL_IP && m.Header.Type == unix.IP_RECVERR &&
					len(m.Data) >= sizeofSockExtendedErr && m.Data[4] == unix.SO_EE_ORIGIN_ICMP {
					f.icmp[p].Add(1)
				}
			}
		}
	})
}

// icmpCounts copies every player's ICMP error count.
func (f *fleet) icmpCounts() []uint64 {
	c := make([]uint64, len(f.conns))
	for p := range f.conns {
		f.drainErrors(p)
		c[p] = f.icmp[p].Load()
	}
	return c
}

// icmpSince fills the ICMP figures of m from two icmpCounts.
func icmpSince(before, after []uint64, m *Impact) {
	for p := range after {
		if d := after[p] - before[p]; d > 0 {
			m.ICMPErrors += d
			m.ICMPPlayers++
		}
	}
}
