package fdstore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/relayctl/relayctl/relay/handoff"
)

// The state relayd keeps in a memfd, version 1 (docs/relayd.md, "State in
// systemd's fd store"). All integers big-endian.
//
//	0   4  magic "RLYS"
//	4   2  version, 1
//	6   2  flags: bit 0 final (written after the relay stopped reading,
//	       as it stopped); the other bits 0
//	8   8  sequence: each save one more than the last, across processes
//	16  4  pid of the relayd that wrote it
//	20  8  inode of the UDP socket it describes: its counters count on
//	       that socket only
//	28  2  length of the writer's release (at most 256), then the release
//	…   4  length of the state (at most handoff.MaxStateBytes), then the
//	       state: handoff.EncodeState (last read, the save's time, the
//	       counters, the lobby table in its RLYT encoding)
//
// The decoder accepts only what EncodeSaved writes, so that a memfd it
// accepts encodes back to the same bytes (FuzzDecodeSaved).
const (
	SavedMagic   = "RLYS"
	SavedVersion = 1

	savedFixedLen = 28
	maxRelease    = 256
	flagFinal     = 1
	// MaxSavedBytes bounds a saved state, checked before a memfd is read.
	MaxSavedBytes = savedFixedLen + 2 + maxRelease + 4 + handoff.MaxStateBytes
)

// Saved is one save of relayd's state.
type Saved struct {
	Seq     uint64
	Final   bool // written as relayd stopped, after its last read
	PID     int
	Inode   uint64
	Release string
	State   handoff.State
}

// ErrSavedVersion is a state of a version this relayd cannot read.
var ErrSavedVersion = errors.New("unsupported saved state version")

// EncodeSaved returns the bytes of s.
func EncodeSaved(s Saved) ([]byte, error) {
	if len(s.Release) > maxRelease {
		return nil, fmt.Errorf("encode saved state: a release of %d bytes, at most %d", len(s.Release), maxRelease)
	}
	if s.PID < 0 || s.PID > 1<<31-1 {
		return nil, fmt.Errorf("encode saved state: pid %d", s.PID)
	}
	st, err := handoff.EncodeState(s.State)
	if err != nil {
		return nil, fmt.Errorf("encode saved state: %w", err)
	}
	var flags uint16
	if s.Final {
		flags |= flagFinal
	}
	b := make([]byte, 0, savedFixedLen+2+len(s.Release)+4+len(st))
	b = append(b, SavedMagic...)
	b = binary.BigEndian.AppendUint16(b, SavedVersion)
	b = binary.BigEndian.AppendUint16(b, flags)
	b = binary.BigEndian.AppendUint64(b, s.Seq)
	b = binary.BigEndian.AppendUint32(b, uint32(s.PID))
	b = binary.BigEndian.AppendUint64(b, s.Inode)
	b = binary.BigEndian.AppendUint16(b, uint16(len(s.Release)))
	b = append(b, s.Release...)
	b = binary.BigEndian.AppendUint32(b, uint32(len(st)))
	return append(b, st...), nil
}

// DecodeSaved reads what EncodeSaved wrote. Whatever wrote the memfd is
// not trusted: every length is checked against its bound and against the
// bytes there before anything is allocated for it.
func DecodeSaved(b []byte) (Saved, error) {
	if len(b) < savedFixedLen+2 {
		return Saved{}, fmt.Errorf("decode saved state: %d bytes, shorter than the %d-byte header", len(b), savedFixedLen+2)
	}
	if string(b[0:4]) != SavedMagic {
		return Saved{}, fmt.Errorf("decode saved state: magic %q, want %q", b[0:4], SavedMagic)
	}
	if v := binary.BigEndian.Uint16(b[4:6]); v != SavedVersion {
		return Saved{}, fmt.Errorf("decode saved state: version %d: %w (this relayd reads version %d)", v, ErrSavedVersion, SavedVersion)
	}
	flags := binary.BigEndian.Uint16(b[6:8])
	if flags&^flagFinal != 0 {
		return Saved{}, fmt.Errorf("decode saved state: unknown flags %#x", flags)
	}
	pid := binary.BigEndian.Uint32(b[16:20])
	if pid > 1<<31-1 {
		return Saved{}, fmt.Errorf("decode saved state: pid %d", pid)
	}
	s := Saved{Seq: binary.BigEndian.Uint64(b[8:16]), Final: flags&flagFinal != 0,
		PID: int(pid), Inode: binary.BigEndian.Uint64(b[20:28])}
	rest := b[savedFixedLen:]
	rl := int(binary.BigEndian.Uint16(rest))
	rest = rest[2:]
	if rl > maxRelease || len(rest) < rl+4 {
		return Saved{}, fmt.Errorf("decode saved state: a release of %d bytes (at most %d) with %d bytes left", rl, maxRelease, len(rest))
	}
	s.Release, rest = string(rest[:rl]), rest[rl:]
	sl := binary.BigEndian.Uint32(rest)
	rest = rest[4:]
	if sl > handoff.MaxStateBytes || uint64(len(rest)) != uint64(sl) {
		return Saved{}, fmt.Errorf("decode saved state: a state of %d bytes (at most %d) with %d bytes left", sl, handoff.MaxStateBytes, len(rest))
	}
	st, err := handoff.DecodeState(rest)
	if err != nil {
		return Saved{}, fmt.Errorf("decode saved state: %w", err)
	}
	// STATE's decoder takes the counters in any order; EncodeState sorts
	// them. Only the bytes EncodeState writes are a state relayd saved.
	if again, err := handoff.EncodeState(st); err != nil || !bytes.Equal(again, rest) {
		return Saved{}, fmt.Errorf("decode saved state: the state is not as relayd encodes it (counters out of order)")
	}
	s.State = st
	return s, nil
}

// seals a state's memfd must carry: nobody can change its bytes or its
// size, nor lift the seals.
const seals = unix.F_SEAL_SEAL | unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_WRITE

// WriteMemfd puts b in a new memfd, sealed against any change, and returns
// its descriptor (close-on-exec; the caller closes it).
func WriteMemfd(b []byte) (int, error) {
	fd, err := unix.MemfdCreate("relayd-state", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING|unix.MFD_NOEXEC_SEAL)
	if errors.Is(err, unix.EINVAL) { // before Linux 6.3: no MFD_NOEXEC_SEAL
		fd, err = unix.MemfdCreate("relayd-state", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	}
	if err != nil {
		return -1, fmt.Errorf("create memfd: %w", err)
	}
	for off := 0; off < len(b); {
		n, err := unix.Pwrite(fd, b[off:], int64(off))
		if err != nil {
			unix.Close(fd)
			return -1, fmt.Errorf("write memfd: %w", err)
		}
		off += n
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, seals); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("seal memfd: %w", err)
	}
	return fd, nil
}

// ReadMemfd reads a state's memfd: a regular file (a memfd is one) of at
// most MaxSavedBytes, sealed as WriteMemfd seals it, so that its bytes are
// the ones its writer put there.
func ReadMemfd(fd int) ([]byte, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("read memfd: %w", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, fmt.Errorf("read memfd: not a regular file (mode %#o)", st.Mode)
	}
	if st.Size < 0 || st.Size > MaxSavedBytes {
		return nil, fmt.Errorf("read memfd: %d bytes, at most %d", st.Size, MaxSavedBytes)
	}
	got, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	if err != nil {
		return nil, fmt.Errorf("read memfd: get seals: %w", err)
	}
	if got&seals != seals {
		return nil, fmt.Errorf("read memfd: seals %#x, want %#x: its bytes could have changed since it was written", got, seals)
	}
	b := make([]byte, st.Size)
	for off := 0; off < len(b); {
		n, err := unix.Pread(fd, b[off:], int64(off))
		if err != nil {
			return nil, fmt.Errorf("read memfd: %w", err)
		}
		if n == 0 {
			return nil, fmt.Errorf("read memfd: %d of %d bytes", off, len(b))
		}
		off += n
	}
	return b, nil
}
