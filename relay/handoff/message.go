package handoff

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/relayctl/relayctl/relay/lobby"
)

// A message on the wire is a frame: type (1 byte), payload length (4
// bytes, big-endian), payload. docs/relayd.md lists every payload.
type msgType byte

const (
	msgHello msgType = 'H'
	msgReady msgType = 'R'
	msgState msgType = 'S'
	msgDone  msgType = 'D'
	msgAbort msgType = 'A'
)

func (t msgType) String() string {
	switch t {
	case msgHello:
		return "HELLO"
	case msgReady:
		return "READY"
	case msgState:
		return "STATE"
	case msgDone:
		return "DONE"
	case msgAbort:
		return "ABORT"
	}
	return fmt.Sprintf("message type %#x", byte(t))
}

// Bounds of every variable-length field, so a corrupt or hostile peer
// cannot make a decoder allocate without bound.
const (
	frameHeaderLen = 5
	maxString      = 256  // addresses and versions
	maxReason      = 1024 // an ABORT's reason
	maxCounters    = 64
	maxCounterName = 64
	stateFixedLen  = 8 + 8 + 2
	// maxFrame is the largest payload: a STATE with the largest table.
	maxFrame = stateFixedLen + maxCounters*(1+maxCounterName+8) + 4 + lobby.MaxTableBytes
)

var errShort = errors.New("cut short")

func appendFrame(dst []byte, t msgType, payload []byte) []byte {
	dst = append(dst, byte(t))
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(payload)))
	return append(dst, payload...)
}

// readFrame reads one frame; the payload length is checked against
// maxFrame before anything is allocated for it.
func readFrame(r io.Reader) (msgType, []byte, error) {
	var h [frameHeaderLen]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(h[1:])
	if n > maxFrame {
		return 0, nil, fmt.Errorf("%v of %d bytes, at most %d", msgType(h[0]), n, maxFrame)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return 0, nil, fmt.Errorf("read %v: %w", msgType(h[0]), err)
	}
	return msgType(h[0]), b, nil
}

// reader takes fields off a payload; the first error sticks.
type reader struct {
	b   []byte
	err error
}

func (r *reader) take(n int) []byte {
	if r.err != nil {
		return nil
	}
	if len(r.b) < n {
		r.err = errShort
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

func (r *reader) u16() uint16 {
	if b := r.take(2); b != nil {
		return binary.BigEndian.Uint16(b)
	}
	return 0
}

func (r *reader) u32() uint32 {
	if b := r.take(4); b != nil {
		return binary.BigEndian.Uint32(b)
	}
	return 0
}

func (r *reader) u64() uint64 {
	if b := r.take(8); b != nil {
		return binary.BigEndian.Uint64(b)
	}
	return 0
}

func (r *reader) str(limit int) string {
	n := int(r.u16())
	if r.err == nil && n > limit {
		r.err = fmt.Errorf("a string of %d bytes, at most %d", n, limit)
	}
	return string(r.take(n))
}

func (r *reader) end(what string) error {
	if r.err == nil && len(r.b) != 0 {
		r.err = fmt.Errorf("%d bytes after the last field", len(r.b))
	}
	if r.err != nil {
		return fmt.Errorf("decode %s: %w", what, r.err)
	}
	return nil
}

func appendStr(dst []byte, s string, limit int) []byte {
	if len(s) > limit {
		s = s[:limit]
	}
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(s)))
	return append(dst, s...)
}

// HELLO: version u16, pid u32, listen, control, release (each a u16 length
// and that many bytes, at most 256).
func encodeHello(h Hello) []byte {
	b := binary.BigEndian.AppendUint16(nil, protocolVersion)
	b = binary.BigEndian.AppendUint32(b, uint32(h.PID))
	b = appendStr(b, h.Listen, maxString)
	b = appendStr(b, h.Control, maxString)
	return appendStr(b, h.Version, maxString)
}

func decodeHello(p []byte) (Hello, error) {
	r := &reader{b: p}
	v := r.u16()
	h := Hello{PID: int(r.u32())}
	h.Listen, h.Control, h.Version = r.str(maxString), r.str(maxString), r.str(maxString)
	if err := r.end("HELLO"); err != nil {
		return Hello{}, err
	}
	if v != protocolVersion {
		return Hello{}, fmt.Errorf("decode HELLO: protocol version %d, this relayd speaks %d", v, protocolVersion)
	}
	return h, nil
}

// STATE: last read i64, paused i64, counter count u16 (at most 64), each a
// name (u8 length, at most 64 bytes) and a u64; then the table's length u32
// and the table (lobby.EncodeTable, at most lobby.MaxTableBytes).
func encodeState(s State) ([]byte, error) {
	if len(s.Counters) > maxCounters {
		return nil, fmt.Errorf("encode STATE: %d counters, at most %d", len(s.Counters), maxCounters)
	}
	if len(s.Table) > lobby.MaxTableBytes {
		return nil, fmt.Errorf("encode STATE: a table of %d bytes, at most %d", len(s.Table), lobby.MaxTableBytes)
	}
	b := binary.BigEndian.AppendUint64(nil, uint64(s.LastRead))
	b = binary.BigEndian.AppendUint64(b, uint64(s.Paused))
	b = binary.BigEndian.AppendUint16(b, uint16(len(s.Counters)))
	names := make([]string, 0, len(s.Counters))
	for n := range s.Counters {
		names = append(names, n)
	}
	slices.Sort(names) // deterministic bytes
	for _, n := range names {
		if len(n) == 0 || len(n) > maxCounterName {
			return nil, fmt.Errorf("encode STATE: counter name %q: want 1 to %d bytes", n, maxCounterName)
		}
		b = append(b, byte(len(n)))
		b = append(b, n...)
		b = binary.BigEndian.AppendUint64(b, s.Counters[n])
	}
	b = binary.BigEndian.AppendUint32(b, uint32(len(s.Table)))
	return append(b, s.Table...), nil
}

func decodeState(p []byte) (State, error) {
	r := &reader{b: p}
	s := State{LastRead: int64(r.u64()), Paused: int64(r.u64())}
	n := int(r.u16())
	if r.err == nil && n > maxCounters {
		return State{}, fmt.Errorf("decode STATE: %d counters, at most %d", n, maxCounters)
	}
	s.Counters = make(map[string]uint64, n)
	for range n {
		l := r.take(1)
		if r.err != nil {
			break
		}
		if l[0] == 0 || int(l[0]) > maxCounterName {
			return State{}, fmt.Errorf("decode STATE: a counter name of %d bytes, want 1 to %d", l[0], maxCounterName)
		}
		name := string(r.take(int(l[0])))
		v := r.u64()
		if _, dup := s.Counters[name]; dup && r.err == nil {
			return State{}, fmt.Errorf("decode STATE: counter %q twice", name)
		}
		s.Counters[name] = v
	}
	tl := r.u32()
	if r.err == nil && tl > lobby.MaxTableBytes {
		return State{}, fmt.Errorf("decode STATE: a table of %d bytes, at most %d", tl, lobby.MaxTableBytes)
	}
	s.Table = r.take(int(tl))
	if err := r.end("STATE"); err != nil {
		return State{}, err
	}
	return s, nil
}

func encodeAbort(reason string) []byte { return appendStr(nil, reason, maxReason) }

func decodeAbort(p []byte) string {
	r := &reader{b: p}
	s := r.str(maxReason)
	if r.end("ABORT") != nil {
		return "(an ABORT that does not decode)"
	}
	return s
}

// EncodeState is STATE's payload for s, for a transport other than Unix
// that carries the state as bytes (relay/fdstore keeps it in a memfd).
func EncodeState(s State) ([]byte, error) { return encodeState(s) }

// DecodeState reads what EncodeState wrote, with the same bounds as a
// STATE from a peer: whoever wrote it is not trusted.
func DecodeState(p []byte) (State, error) { return decodeState(p) }

// MaxStateBytes bounds EncodeState's result.
const MaxStateBytes = maxFrame
