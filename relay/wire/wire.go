// Package wire is the datagram format relayd speaks. Any client that follows
// it can use the relay: relayctl's bench is one such client.
//
// Every datagram starts with a 24-byte header, all integers big-endian:
//
//	offset  size  field
//	0       4     magic, the bytes "RLY1"
//	4       4     lobby id, 0 <= id < the relay's --max-lobbies
//	8       4     player id, any value but 0, unique within the lobby
//	12      4     sequence number, chosen by the sender (the bench counts up from 0)
//	16      8     send time, Unix nanoseconds of the sender's clock
//	24      ...   payload, opaque to the relay
//
// A player joins a lobby by sending to it; the relay remembers the player's
// source address and forwards every later datagram, unchanged, to every
// other member of the lobby. A player id already held in that lobby by a
// different address is refused as malformed.
//
// relayd counts and drops, never forwards, a datagram that is shorter than
// the header, has the wrong magic, player id 0, a lobby id out of range,
// a player id claimed from another address, or more than 2048 bytes. A
// well-formed datagram for a full lobby from a player not in it is counted
// as lobby_full and dropped.
package wire

import (
	"encoding/binary"
	"errors"
)

// HeaderLen is the size of the fixed header in bytes.
const HeaderLen = 24

// Magic is the first four bytes of every datagram, "RLY1".
const Magic uint32 = 0x524c5931

// Header is the decoded fixed part of a datagram.
type Header struct {
	Lobby    uint32
	Player   uint32
	Seq      uint32
	SentUnix int64 // nanoseconds
}

var (
	ErrShort    = errors.New("datagram shorter than the 24-byte header")
	ErrMagic    = errors.New("datagram does not start with magic RLY1")
	ErrPlayerID = errors.New("player id 0 is reserved")
)

// Decode reads the header of b. It never retains b.
func Decode(b []byte) (Header, error) {
	if len(b) < HeaderLen {
		return Header{}, ErrShort
	}
	if binary.BigEndian.Uint32(b[0:4]) != Magic {
		return Header{}, ErrMagic
	}
	h := Header{
		Lobby:    binary.BigEndian.Uint32(b[4:8]),
		Player:   binary.BigEndian.Uint32(b[8:12]),
		Seq:      binary.BigEndian.Uint32(b[12:16]),
		SentUnix: int64(binary.BigEndian.Uint64(b[16:24])),
	}
	if h.Player == 0 {
		return Header{}, ErrPlayerID
	}
	return h, nil
}

// AppendHeader appends the encoded header h to dst and returns the extended
// slice; with enough capacity in dst it does not allocate.
func AppendHeader(dst []byte, h Header) []byte {
	dst = binary.BigEndian.AppendUint32(dst, Magic)
	dst = binary.BigEndian.AppendUint32(dst, h.Lobby)
	dst = binary.BigEndian.AppendUint32(dst, h.Player)
	dst = binary.BigEndian.AppendUint32(dst, h.Seq)
	return binary.BigEndian.AppendUint64(dst, uint64(h.SentUnix))
}

// Encode writes h into the first HeaderLen bytes of b, which must be at
// least that long, and returns b.
func Encode(b []byte, h Header) []byte {
	_ = b[HeaderLen-1]
	binary.BigEndian.PutUint32(b[0:4], Magic)
	binary.BigEndian.PutUint32(b[4:8], h.Lobby)
	binary.BigEndian.PutUint32(b[8:12], h.Player)
	binary.BigEndian.PutUint32(b[12:16], h.Seq)
	binary.BigEndian.PutUint64(b[16:24], uint64(h.SentUnix))
	return b
}
