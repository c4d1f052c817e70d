package server

import (
	"encoding/binary"
	"net/netip"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// batchIO does relayd's socket I/O with recvmmsg/sendmmsg, or with
// recvmsg/sendmsg when the batch is 1. It calls the syscalls itself, on
// buffers allocated once, because golang.org/x/net/ipv4's ReadBatch
// allocates a *net.UDPAddr for every datagram it reads.
//
// The rx buffers hold one batch; a caller reads a batch, queues the copies
// to send (pointing into the rx buffers, no copying), sends them, and only
// then reads the next batch.
type batchIO struct {
	raw   syscall.RawConn
	batch int

	rxBuf   []byte
	rxIov   []unix.Iovec // full-size, for receiving
	rxNames []sockaddr4
	rxOOB   []byte
	rxHdrs  []mmsghdr

	txIov   []unix.Iovec // one per rx datagram, trimmed to its length
	txNames []sockaddr4
	txHdrs  []mmsghdr
	txReply []bool // the message is a handshake reply, not a copy
	nTx     int

	// Results of the syscall closures, which are built once so that a
	// read or write allocates nothing.
	recvFn, sendFn func(fd uintptr) bool
	nRx            int
	rxErr          error
	sent           int
	tx             txCounts
}

// txCounts is what one send put on the wire: copies of datagrams and
// handshake replies apart, and the messages the kernel refused.
type txCounts struct {
	packets, bytes      uint64 // copies
	replies, replyBytes uint64
	errors              uint64
}

// mmsghdr is struct mmsghdr; Go pads it as C does on 32 and 64 bits.
type mmsghdr struct {
	hdr unix.Msghdr
	n   uint32
}

// sockaddr4 is a struct sockaddr_in as bytes: family (host order), port
// (network order), address, zero.
type sockaddr4 [unix.SizeofSockaddrInet4]byte

const (
	maxDatagram = 2048               // longer datagrams are dropped as malformed
	oobSize     = 2 * (16 + 8)       // room for the SO_RXQ_OVFL message, CmsgSpace(4) on 64 bits
	maxVlen     = 1024               // UIO_MAXIOV: most messages one sendmmsg takes
	cmsgHdrLen  = unix.SizeofCmsghdr // data follows the header, already aligned
)

func newBatchIO(raw syscall.RawConn, batch, fanout int) *batchIO {
	b := &batchIO{
		raw:     raw,
		batch:   batch,
		rxBuf:   make([]byte, batch*maxDatagram),
		rxIov:   make([]unix.Iovec, batch),
		rxNames: make([]sockaddr4, batch),
		rxOOB:   make([]byte, batch*oobSize),
		rxHdrs:  make([]mmsghdr, batch),
		txIov:   make([]unix.Iovec, batch),
		txNames: make([]sockaddr4, batch*fanout),
		txHdrs:  make([]mmsghdr, batch*fanout),
		txReply: make([]bool, batch*fanout),
	}
	for i := range b.rxHdrs {
		b.rxIov[i].Base = &b.rxBuf[i*maxDatagram]
		b.rxIov[i].SetLen(maxDatagram)
		h := &b.rxHdrs[i].hdr
		h.Name = &b.rxNames[i][0]
		h.Iov = &b.rxIov[i]
		h.SetIovlen(1)
		h.Control = &b.rxOOB[i*oobSize]
	}
	for i := range b.txHdrs {
		h := &b.txHdrs[i].hdr
		h.Name = &b.txNames[i][0]
		h.Namelen = unix.SizeofSockaddrInet4
		h.SetIovlen(1)
	}
	b.recvFn = b.recvSyscall
	b.sendFn = b.sendSyscall
	return b
}

// recv reads up to one batch of datagrams, waiting for the first.
func (b *batchIO) recv() (int, error) {
	for i := range b.rxHdrs {
		m := &b.rxHdrs[i]
		m.hdr.Namelen = unix.SizeofSockaddrInet4
		m.hdr.SetControllen(oobSize)
		m.hdr.Flags = 0
		m.n = 0
	}
	b.nRx, b.rxErr = 0, nil
	if err := b.raw.Read(b.recvFn); err != nil {
		return 0, err
	}
	return b.nRx, b.rxErr
}

func (b *batchIO) recvSyscall(fd uintptr) bool {
	for {
		var n uintptr
		var errno syscall.Errno
		if b.batch == 1 {
			n, _, errno = unix.Syscall(unix.SYS_RECVMSG, fd, uintptr(unsafe.Pointer(&b.rxHdrs[0].hdr)), 0)
			if errno == 0 {
				b.rxHdrs[0].n, n = uint32(n), 1
			}
		} else {
			n, _, errno = unix.Syscall6(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&b.rxHdrs[0])), uintptr(len(b.rxHdrs)), 0, 0, 0)
		}
		switch errno {
		case 0:
			b.nRx = int(n)
			return true
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			return false // the runtime waits until the socket is readable
		default:
			b.rxErr = errno
			return true
		}
	}
}

// datagram returns the i-th datagram of the last recv, whether the kernel
// truncated it, and its source.
func (b *batchIO) datagram(i int) (data []byte, truncated bool, from netip.AddrPort) {
	m := &b.rxHdrs[i]
	n := min(int(m.n), maxDatagram)
	data = b.rxBuf[i*maxDatagram : i*maxDatagram+n : (i+1)*maxDatagram] // cap: its own slot
	sa := &b.rxNames[i]
	from = netip.AddrPortFrom(netip.AddrFrom4([4]byte(sa[4:8])), binary.BigEndian.Uint16(sa[2:4]))
	return data, m.hdr.Flags&unix.MSG_TRUNC != 0, from
}

// drops returns the socket's drop count that the kernel attached to the
// i-th datagram with SO_RXQ_OVFL. The kernel attaches it only once the
// count is not zero.
func (b *batchIO) drops(i int) (uint32, bool) {
	oob := b.rxOOB[i*oobSize : i*oobSize+min(int(b.rxHdrs[i].hdr.Controllen), oobSize)]
	for len(oob) >= cmsgHdrLen {
		var l int
		if unix.SizeofPtr == 8 {
			l = int(binary.NativeEndian.Uint64(oob))
		} else {
			l = int(binary.NativeEndian.Uint32(oob))
		}
		level := int32(binary.NativeEndian.Uint32(oob[unix.SizeofPtr:]))
		typ := int32(binary.NativeEndian.Uint32(oob[unix.SizeofPtr+4:]))
		if l < cmsgHdrLen || l > len(oob) {
			return 0, false
		}
		if level == unix.SOL_SOCKET && typ == unix.SO_RXQ_OVFL && l >= cmsgHdrLen+4 {
			return binary.NativeEndian.Uint32(oob[cmsgHdrLen:]), true
		}
		next := (l + unix.SizeofPtr - 1) &^ (unix.SizeofPtr - 1)
		if next >= len(oob) {
			break
		}
		oob = oob[next:]
	}
	return 0, false
}

// queue adds a copy of the i-th received datagram, size bytes, for to.
func (b *batchIO) queue(i, size int, to netip.AddrPort) {
	b.add(i, size, to, false)
}

// queueReply sends the first size bytes of the i-th receive buffer, where
// the caller wrote its answer over the datagram it answers, back to to. It
// refuses (false) an answer longer than that datagram: the relay never
// sends an address more than that address sent it.
func (b *batchIO) queueReply(i, size int, to netip.AddrPort) bool {
	if size > int(b.rxHdrs[i].n) || size > maxDatagram {
		return false
	}
	b.add(i, size, to, true)
	return true
}

func (b *batchIO) add(i, size int, to netip.AddrPort, reply bool) {
	b.txIov[i].Base = &b.rxBuf[i*maxDatagram]
	b.txIov[i].SetLen(size)
	m := &b.txHdrs[b.nTx]
	m.hdr.Iov = &b.txIov[i]
	sa := &b.txNames[b.nTx]
	binary.NativeEndian.PutUint16(sa[0:2], unix.AF_INET)
	binary.BigEndian.PutUint16(sa[2:4], to.Port())
	a := to.Addr().As4()
	copy(sa[4:8], a[:])
	b.txReply[b.nTx] = reply
	b.nTx++
}

// send sends every queued message, waiting while the socket's send buffer
// is full, and returns what went out and how many messages the kernel
// refused (those are skipped).
func (b *batchIO) send() (txCounts, error) {
	b.sent, b.tx = 0, txCounts{}
	var err error
	if b.nTx > 0 {
		err = b.raw.Write(b.sendFn)
	}
	b.nTx = 0
	return b.tx, err
}

func (b *batchIO) sendSyscall(fd uintptr) bool {
	for b.sent < b.nTx {
		var n uintptr
		var errno syscall.Errno
		if b.batch == 1 {
			n, _, errno = unix.Syscall(unix.SYS_SENDMSG, fd, uintptr(unsafe.Pointer(&b.txHdrs[b.sent].hdr)), 0)
			if errno == 0 {
				b.txHdrs[b.sent].n, n = uint32(n), 1
			}
		} else {
			vlen := min(b.nTx-b.sent, maxVlen)
			n, _, errno = unix.Syscall6(unix.SYS_SENDMMSG, fd, uintptr(unsafe.Pointer(&b.txHdrs[b.sent])), uintptr(vlen), 0, 0, 0)
		}
		switch errno {
		case 0:
			for k := b.sent; k < b.sent+int(n); k++ {
				if b.txReply[k] {
					b.tx.replies++
					b.tx.replyBytes += uint64(b.txHdrs[k].n)
				} else {
					b.tx.packets++
					b.tx.bytes += uint64(b.txHdrs[k].n)
				}
			}
			b.sent += int(n)
		case unix.EINTR:
		case unix.EAGAIN:
			return false // the runtime waits until the socket is writable
		default:
			// This message failed (say, no route to its player); skip it
			// so one bad address cannot stall the others.
			b.tx.errors++
			b.sent++
		}
	}
	return true
}
