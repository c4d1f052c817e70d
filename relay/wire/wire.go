// Package wire is the datagram format relayd speaks, version 2. Any client
// that follows it can use the relay: relayctl's bench is one such client.
//
// Every datagram starts with a 4-byte magic that names the message. Data
// datagrams have a 24-byte header, all integers big-endian:
//
//	offset  size  field
//	0       4     magic, the bytes "RLY2"
//	4       4     lobby id, 0 <= id < the relay's --max-lobbies
//	8       4     player id, any value but 0, unique within the lobby
//	12      4     sequence number, chosen by the sender (the bench counts up from 0)
//	16      8     send time, Unix nanoseconds of the sender's clock
//	24      ...   payload, opaque to the relay
//
// The relay forwards a data datagram, unchanged, to the other members of
// its lobby, and only when its source address is the member's: a player
// becomes a member through the join handshake (handshake.go), which proves
// that its address receives what the relay sends there. Until then the
// relay sends an address nothing but single replies no larger than what it
// sent.
//
// Version 1 ("RLY1") joined a lobby with any datagram, from any source
// address, unverified; relayd answers a version 1 datagram of at least
// HandshakeLen bytes with a Refused message (ReasonVersion) and drops it.
package wire

import (
	"encoding/binary"
	"errors"
)

// Version is the wire version this package speaks.
const Version = 2

// HeaderLen is the size of a data datagram's fixed header in bytes.
const HeaderLen = 24

// The magics, each the first four bytes of one kind of message.
const (
	Magic          uint32 = 0x524c5932 // "RLY2": data
	MagicV1        uint32 = 0x524c5931 // "RLY1": data of wire version 1, no longer relayed
	MagicJoin      uint32 = 0x524c594a // "RLYJ": join, player to relay
	MagicChallenge uint32 = 0x524c5943 // "RLYC": challenge with a cookie, relay to player
	MagicWelcome   uint32 = 0x524c5957 // "RLYW": welcome, the player is a member, relay to player
	MagicRefused   uint32 = 0x524c5952 // "RLYR": refused, with a reason, relay to player
)

// Kind is what a datagram is, by its magic.
type Kind int

const (
	KindUnknown   Kind = iota // shorter than a magic, or a magic of none of these
	KindData                  // RLY2
	KindV1                    // RLY1
	KindJoin                  // RLYJ
	KindChallenge             // RLYC
	KindWelcome               // RLYW
	KindRefused               // RLYR
)

// KindOf reads the magic of b. It never retains b.
func KindOf(b []byte) Kind {
	if len(b) < 4 {
		return KindUnknown
	}
	switch binary.BigEndian.Uint32(b) {
	case Magic:
		return KindData
	case MagicV1:
		return KindV1
	case MagicJoin:
		return KindJoin
	case MagicChallenge:
		return KindChallenge
	case MagicWelcome:
		return KindWelcome
	case MagicRefused:
		return KindRefused
	}
	return KindUnknown
}

// Header is the decoded fixed part of a data datagram.
type Header struct {
	Lobby    uint32
	Player   uint32
	Seq      uint32
	SentUnix int64 // nanoseconds
}

var (
	ErrShort    = errors.New("datagram shorter than the 24-byte header")
	ErrMagic    = errors.New("datagram does not start with magic RLY2")
	ErrPlayerID = errors.New("player id 0 is reserved")
)

// Decode reads the header of a data datagram b. It never retains b.
func Decode(b []byte) (Header, error) {
	if len(b) < HeaderLen {
		return Header{}, ErrShort
	}
	if binary.BigEndian.Uint32(b[0:4]) != Magic {
		return Header{}, ErrMagic
	}
	return decodeFields(b)
}

// DecodeV1 reads the header of a wire version 1 datagram, so the relay can
// name its lobby and player when it refuses it.
func DecodeV1(b []byte) (Header, error) {
	if len(b) < HeaderLen {
		return Header{}, ErrShort
	}
	if binary.BigEndian.Uint32(b[0:4]) != MagicV1 {
		return Header{}, errors.New("datagram does not start with magic RLY1")
	}
	return decodeFields(b)
}

func decodeFields(b []byte) (Header, error) {
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
