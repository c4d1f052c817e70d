package server

import (
	"errors"
	"net/netip"
	"time"

	"github.com/relayctl/relayctl/relay/lobby"
	"github.com/relayctl/relayctl/relay/wire"
)

// What the relay does with each datagram (docs/relayd.md, "Who may join").
// An address that has proven nothing gets at most one reply to each
// datagram it sends, written over that datagram and never longer
// (batchIO.queueReply): a challenge to a join or to data from a
// non-member, a refusal to another wire version. Everything else it is
// sent (welcomes, refusals of a join, copies of its lobby's datagrams)
// goes to an address that echoed a cookie or joined with one.
//
// The relay answers only joins, data and version 1 datagrams, never the
// challenges, welcomes and refusals another relay sends, so two relays
// made to talk to each other with spoofed sources do not start a loop.

// handle routes datagram i of the batch, data bytes from from. Callers
// hold s.mu.
func (s *Server) handle(i int, data []byte, from netip.AddrPort, now time.Time, t *tally) {
	switch wire.KindOf(data) {
	case wire.KindData:
		s.relayData(i, data, from, now, t)
	case wire.KindJoin:
		t.joinsRx++
		s.answerJoin(i, data, from, now, t)
	case wire.KindV1:
		t.otherVersion++
		h, _ := wire.DecodeV1(data) // names the lobby and player if it can
		s.reply(i, data, wire.Refusal(h.Lobby, h.Player, wire.ReasonVersion), from)
	default:
		if len(data) < 4 {
			t.bad[reasonShort]++
		} else {
			t.bad[reasonMagic]++
		}
	}
}

// relayData forwards a member's datagram to the rest of its lobby, and
// challenges anyone else to join.
func (s *Server) relayData(i int, data []byte, from netip.AddrPort, now time.Time, t *tally) {
	h, err := wire.Decode(data)
	switch {
	case errors.Is(err, wire.ErrShort):
		t.bad[reasonShort]++
		return
	case err != nil:
		t.bad[reasonPlayerID]++
		return
	}
	s.targets, err = s.table.Forward(h.Lobby, h.Player, from, now, s.targets[:0])
	switch {
	case errors.Is(err, lobby.ErrLobbyRange):
		t.bad[reasonLobbyRange]++
	case err != nil: // lobby.ErrNotMember: a newcomer, a player the relay forgot, or a spoofed source
		t.notJoined++
		s.challenge(i, data, h.Lobby, h.Player, from, now, wire.ReasonNotJoined)
	default:
		t.forwarded++
		for _, to := range s.targets {
			s.io.queue(i, len(data), to)
		}
	}
}

// answerJoin challenges a join without a valid cookie and answers one with
// a valid cookie: the player is a member (welcome) or why not (refused).
func (s *Server) answerJoin(i int, data []byte, from netip.AddrPort, now time.Time, t *tally) {
	h, err := wire.DecodeHandshake(data)
	switch {
	case errors.Is(err, wire.ErrVersion):
		t.otherVersion++
		s.reply(i, data, wire.Refusal(h.Lobby, h.Player, wire.ReasonVersion), from)
		return
	case err != nil:
		t.bad[reasonJoin]++
		return
	}
	if h.Cookie == (wire.Cookie{}) {
		t.joinChallenged++
		s.challenge(i, data, h.Lobby, h.Player, from, now, wire.ReasonNone)
		return
	}
	if err := s.jar.Check(h.Cookie, from, now); err != nil {
		t.joinChallenged++
		t.cookieRejected++
		s.challenge(i, data, h.Lobby, h.Player, from, now, wire.ReasonCookieRejected)
		return
	}
	// The address is proven: from here on the relay may tell it anything.
	r := joinOutcome(s.table.Join(h.Lobby, h.Player, from, now), t)
	answer := wire.Handshake{Kind: wire.KindWelcome, Lobby: h.Lobby, Player: h.Player}
	if r != wire.ReasonNone {
		answer = wire.Refusal(h.Lobby, h.Player, r)
	}
	s.reply(i, data, answer, from)
}

// joinOutcome counts the table's answer to a proven join and gives the
// reason to refuse it, ReasonNone for a welcome.
func joinOutcome(err error, t *tally) wire.Reason {
	switch {
	case err == nil:
		t.joined++
		return wire.ReasonNone
	case errors.Is(err, lobby.ErrLobbyFull):
		t.lobbyFull++
		return wire.ReasonLobbyFull
	case errors.Is(err, lobby.ErrNoNewLobbies):
		t.noNew++
		return wire.ReasonDraining
	case errors.Is(err, lobby.ErrSourceLimit):
		t.sourceLimit++
		return wire.ReasonSourceLimit
	case errors.Is(err, lobby.ErrPlayerTaken):
		t.bad[reasonPlayerTaken]++
		return wire.ReasonPlayerTaken
	case errors.Is(err, lobby.ErrLobbyRange):
		t.bad[reasonLobbyRange]++
		return wire.ReasonLobbyRange
	default: // lobby.ErrPlayerID
		t.bad[reasonPlayerID]++
		return wire.ReasonPlayerID
	}
}

// challenge answers datagram i with a cookie for from.
func (s *Server) challenge(i int, data []byte, lobbyID, player uint32, from netip.AddrPort, now time.Time, why wire.Reason) {
	c, err := s.jar.Issue(from, now)
	if err != nil {
		return // the random source failed: no cookie, no answer
	}
	s.reply(i, data, wire.Handshake{Kind: wire.KindChallenge, Reason: why, Lobby: lobbyID, Player: player, Cookie: c}, from)
}

// reply writes m over datagram i, data, in its receive buffer (which
// always has room for it), and sends it back to from. queueReply refuses
// it if datagram i is shorter: a datagram shorter than a handshake message
// is not answered.
func (s *Server) reply(i int, data []byte, m wire.Handshake, to netip.AddrPort) {
	wire.EncodeHandshake(data[:cap(data)], m)
	s.io.queueReply(i, wire.HandshakeLen, to)
}
