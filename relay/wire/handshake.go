package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// The join handshake proves that a player's address receives what the
// relay sends there, before the relay sends it anything it did not ask for
// (as QUIC's Retry and DTLS's HelloVerifyRequest do):
//
//	player → relay   Join      lobby, player, no cookie
//	relay  → player  Challenge lobby, player, a cookie bound to the player's address and port
//	player → relay   Join      lobby, player, the cookie
//	relay  → player  Welcome   (or Refused, with a reason)
//
// The relay keeps nothing for the first join: the cookie is a MAC of the
// address, the port and the time under a secret of the relay process, so a
// join that echoes it proves the address without the relay remembering
// anything. Every handshake message is HandshakeLen bytes, so the relay's
// answer to a join is exactly as large as the join: an address that has
// proven nothing gets at most one datagram, no larger than its own, for
// each it sends. A player that is sent a Challenge at any time (its lobby
// forgot it: the relay restarted, or it was idle too long) joins again
// with that cookie.
//
// Layout, integers big-endian:
//
//	offset  size  field
//	0       4     magic: "RLYJ" join, "RLYC" challenge, "RLYW" welcome, "RLYR" refused
//	4       2     wire version, 2
//	6       2     reason: why a challenge or a refusal (Reason); 0 in a join and a welcome
//	8       4     lobby id
//	12      4     player id
//	16      24    join: zero, or the cookie of the challenge it answers;
//	              challenge: the cookie; welcome: zero;
//	              refused: the reason as ASCII text, NUL-padded, for people reading a capture

// HandshakeLen is the length of every handshake message.
const HandshakeLen = 40

// CookieLen is the size of a cookie, opaque to the player.
const CookieLen = 24

// Cookie is what a challenge carries and a join echoes. The zero Cookie is
// none: a first join.
type Cookie [CookieLen]byte

// Reason says why a relay challenged or refused.
type Reason uint16

// The reasons' values are the wire format: they never change.
const (
	ReasonNone Reason = 0
	// Challenges.
	ReasonCookieRejected Reason = 1 // the join's cookie was expired, forged, or for another address
	ReasonNotJoined      Reason = 2 // a data datagram from an address that is not a member of its lobby
	// Refusals, to a join with a valid cookie (or, for ReasonVersion, to
	// any datagram of another version at least HandshakeLen long).
	ReasonLobbyFull   Reason = 3 // the lobby has its relay's lobby size of members
	ReasonPlayerTaken Reason = 4 // another address holds this player id in the lobby
	ReasonDraining    Reason = 5 // the relay takes no new lobbies (its drain gate is on)
	ReasonSourceLimit Reason = 6 // the address or its /24 holds as many players as the relay allows
	ReasonLobbyRange  Reason = 7 // the lobby id is not below the relay's max lobbies
	ReasonPlayerID    Reason = 8 // player id 0
	ReasonVersion     Reason = 9 // the relay speaks wire version 2 only
	numReasons               = 10
)

var reasonText = [numReasons]string{
	"", "cookie rejected", "not joined",
	"lobby full", "player id taken", "draining", "source limit",
	"lobby id out of range", "player id 0", "relayd speaks wire v2",
}

func (r Reason) String() string {
	if r < numReasons && r != ReasonNone {
		return reasonText[r]
	}
	return fmt.Sprintf("reason %d", uint16(r))
}

// Handshake is a decoded handshake message.
type Handshake struct {
	Kind    Kind // KindJoin, KindChallenge, KindWelcome or KindRefused
	Version uint16
	Reason  Reason
	Lobby   uint32
	Player  uint32
	Cookie  Cookie // in a refusal, its text
}

var (
	ErrHandshakeLen = fmt.Errorf("handshake message not %d bytes", HandshakeLen)
	ErrNotHandshake = errors.New("not a handshake message (magic RLYJ, RLYC, RLYW or RLYR)")
	ErrVersion      = fmt.Errorf("handshake of a wire version other than %d", Version)
	ErrReason       = errors.New("handshake reason not allowed for its kind")
	ErrWelcome      = errors.New("welcome with a cookie")
)

// kindMagic is the magic of each handshake kind, 0 for the others.
var kindMagic = [...]uint32{KindJoin: MagicJoin, KindChallenge: MagicChallenge, KindWelcome: MagicWelcome, KindRefused: MagicRefused}

// DecodeHandshake reads a handshake message. A message of another version
// returns ErrVersion with Kind, Version, Lobby and Player set, so the relay
// can say which version it speaks; any other error returns the zero
// Handshake. It never retains b.
func DecodeHandshake(b []byte) (Handshake, error) {
	if len(b) != HandshakeLen {
		return Handshake{}, ErrHandshakeLen
	}
	h := Handshake{
		Kind:    KindOf(b),
		Version: binary.BigEndian.Uint16(b[4:6]),
		Reason:  Reason(binary.BigEndian.Uint16(b[6:8])),
		Lobby:   binary.BigEndian.Uint32(b[8:12]),
		Player:  binary.BigEndian.Uint32(b[12:16]),
		Cookie:  Cookie(b[16:40]),
	}
	if h.Kind < KindJoin {
		return Handshake{}, ErrNotHandshake
	}
	if h.Version != Version {
		return Handshake{Kind: h.Kind, Version: h.Version, Lobby: h.Lobby, Player: h.Player}, ErrVersion
	}
	if !reasonFits(h.Kind, h.Reason) {
		return Handshake{}, ErrReason
	}
	if h.Kind == KindWelcome && h.Cookie != (Cookie{}) {
		return Handshake{}, ErrWelcome
	}
	return h, nil
}

func reasonFits(k Kind, r Reason) bool {
	switch k {
	case KindChallenge:
		return r <= ReasonNotJoined
	case KindRefused:
		return r >= ReasonLobbyFull && r < numReasons
	}
	return r == ReasonNone
}

// EncodeHandshake writes h into the first HandshakeLen bytes of b, which
// must be at least that long, with this package's version whatever
// h.Version says, and returns them. It does not allocate.
func EncodeHandshake(b []byte, h Handshake) []byte {
	b = b[:HandshakeLen]
	binary.BigEndian.PutUint32(b[0:4], kindMagic[h.Kind])
	binary.BigEndian.PutUint16(b[4:6], Version)
	binary.BigEndian.PutUint16(b[6:8], uint16(h.Reason))
	binary.BigEndian.PutUint32(b[8:12], h.Lobby)
	binary.BigEndian.PutUint32(b[12:16], h.Player)
	copy(b[16:40], h.Cookie[:])
	return b
}

// Refusal is the Refused message for lobby and player with reason r, its
// text filled in.
func Refusal(lobby, player uint32, r Reason) Handshake {
	h := Handshake{Kind: KindRefused, Reason: r, Lobby: lobby, Player: player}
	if r < numReasons {
		copy(h.Cookie[:], reasonText[r])
	}
	return h
}
