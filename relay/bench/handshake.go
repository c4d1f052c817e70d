package bench

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/relayctl/relayctl/relay/wire"
)

// The players join the relay with its handshake (relay/wire): a join, the
// relay's challenge with a cookie, the join again with it, a welcome. The
// receivers answer every challenge at once, also one that comes during a
// step (the relay forgot the player: it restarted, or the player was idle
// too long), as a game client would. Handshake datagrams are neither
// deliveries nor losses: they are not data, the relay counts them apart
// (joins_rx, replies), and the bench counts them apart too.

// handshakes is the fleet's handshake state, per player.
type handshakes struct {
	hello    [][]byte        // the first join, built once, read-only after
	echo     [][]byte        // the join with a cookie: written by player i's receiver only
	welcomed []atomic.Bool   // the relay has made the player a member
	refused  []atomic.Uint32 // the relay's reason to refuse it (wire.Reason), 0 if none
	// answered counts the challenges the receivers answered, for the
	// step's report: more than its players' first joins means the relay
	// forgot players and they joined again.
	answered atomic.Uint64
}

// init sets up the state of f's n players.
func (h *handshakes) init(f *fleet, n int) {
	h.welcomed, h.refused = make([]atomic.Bool, n), make([]atomic.Uint32, n)
	for i := range n {
		m := wire.Handshake{Kind: wire.KindJoin, Lobby: f.lobbyOf(i), Player: f.playerID(i)}
		h.hello = append(h.hello, wire.EncodeHandshake(make([]byte, wire.HandshakeLen), m))
		h.echo = append(h.echo, make([]byte, wire.HandshakeLen))
	}
}

// isHandshake reports whether b is one of the relay's handshake answers.
func isHandshake(b []byte) bool {
	switch wire.KindOf(b) {
	case wire.KindChallenge, wire.KindWelcome, wire.KindRefused:
		return true
	}
	return false
}

// answer takes player i's handshake datagram b, on i's receiver.
func (f *fleet) answer(i int, b []byte) {
	h, err := wire.DecodeHandshake(b)
	if err != nil || h.Lobby != f.lobbyOf(i) || h.Player != f.playerID(i) {
		f.foreign.Add(1)
		return
	}
	switch h.Kind {
	case wire.KindChallenge:
		f.hs.welcomed[i].Store(false)
		f.hs.answered.Add(1)
		m := wire.Handshake{Kind: wire.KindJoin, Lobby: h.Lobby, Player: h.Player, Cookie: h.Cookie}
		// A lost answer shows as a player never welcomed.
		_, _ = f.conns[i].Write(wire.EncodeHandshake(f.hs.echo[i], m))
	case wire.KindWelcome:
		f.hs.welcomed[i].Store(true)
	case wire.KindRefused:
		f.hs.refused[i].Store(uint32(h.Reason))
	}
}

// prove brings players [from, to) through the handshake: a first join
// each, paced, then again for any not welcomed, until every one is or the
// rounds run out. A refusal ends it with the relay's reason.
func (r *runner) prove(ctx context.Context, from, to int) error {
	hs := &r.f.hs
	for round := 0; round < maxJoinRounds; round++ {
		for p := from; p < to; p++ {
			if hs.welcomed[p].Load() {
				continue
			}
			_, _ = r.f.conns[p].Write(hs.hello[p])
			if err := r.clk.Sleep(ctx, joinPace); err != nil {
				return err
			}
		}
		deadline := time.Now().Add(300 * time.Millisecond)
		for {
			waiting, err := r.f.handshakeState(from, to)
			if err != nil || waiting == 0 {
				return err
			}
			if time.Now().After(deadline) {
				break
			}
			if err := r.clk.Sleep(ctx, 5*time.Millisecond); err != nil {
				return err
			}
		}
	}
	return fmt.Errorf("join players %d-%d: the relay did not welcome them after %d rounds of its join handshake (is it a relayd of wire version 1, from before the handshake?)", from+1, to, maxJoinRounds)
}

// handshakeState counts the players of [from, to) not welcomed yet, or
// says why the relay refused one.
func (f *fleet) handshakeState(from, to int) (int, error) {
	waiting := 0
	for p := from; p < to; p++ {
		if reason := wire.Reason(f.hs.refused[p].Load()); reason != wire.ReasonNone {
			return 0, refusedError(p, f.lobbyOf(p), reason, f.lobbySize)
		}
		if !f.hs.welcomed[p].Load() {
			waiting++
		}
	}
	return waiting, nil
}

// refusedError says why the relay refused player p, and what to do.
func refusedError(p int, lobby uint32, reason wire.Reason, lobbySize int) error {
	msg := fmt.Sprintf("join player %d (lobby %d): the relay refused it: %s", p+1, lobby, reason)
	switch reason {
	case wire.ReasonSourceLimit:
		msg += "; relayd holds each address to its per-source limits (16 players, 64 per /24, by default) and lets no address hold every seat of a lobby: send from at least two of this machine's addresses (--source A,B; the default for a relay on loopback) and exempt them on the relay (RELAYD_EXEMPT_SOURCES=A/32,B/32; no source is exempt by default)"
	case wire.ReasonLobbyFull:
		msg += fmt.Sprintf("; its lobby size is below --lobby-size %d", lobbySize)
	case wire.ReasonPlayerTaken:
		msg += "; the lobby may still be held by an earlier run (try --lobby-base)"
	case wire.ReasonDraining:
		msg += "; its drain gate is on (DELETE /drain on its control plane)"
	}
	return errors.New(msg)
}
