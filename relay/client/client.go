// Package client is the player's side of relayd's join handshake
// (relay/wire), for Go programs that play against a relay: the load
// generator and the tests. The bench answers the handshake inside its own
// receivers (relay/bench), on sockets it is already reading.
package client

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"time"

	"github.com/relayctl/relayctl/relay/wire"
)

// RefusedError is a relay's refusal of a join with a valid cookie.
type RefusedError struct {
	Lobby, Player uint32
	Reason        wire.Reason
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("join lobby %d as player %d: refused by the relay: %s", e.Lobby, e.Player, e.Reason)
}

// Retry is how long Join waits for an answer before it sends again.
const Retry = 200 * time.Millisecond

// Join joins lobby as player from conn, a socket nothing else reads while
// it runs: it sends a join, answers the relay's challenge with its cookie
// and returns once the relay welcomes it, sending again every Retry until
// ctx ends. A refusal is a *RefusedError. conn may be connected to relay
// (net.DialUDP) or not. Datagrams that are not the relay's answer for this
// lobby and player are read and dropped.
func Join(ctx context.Context, conn *net.UDPConn, relay netip.AddrPort, lobby, player uint32) error {
	defer conn.SetReadDeadline(time.Time{})
	join := wire.Handshake{Kind: wire.KindJoin, Lobby: lobby, Player: player}
	out := make([]byte, wire.HandshakeLen)
	in := make([]byte, 2048)
	for {
		if err := send(conn, relay, wire.EncodeHandshake(out, join)); err != nil {
			return fmt.Errorf("join lobby %d as player %d: %w", lobby, player, err)
		}
		deadline := time.Now().Add(Retry)
		if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
			deadline = d
		}
		conn.SetReadDeadline(deadline)
		for {
			n, from, err := conn.ReadFromUDPAddrPort(in)
			if errors.Is(err, os.ErrDeadlineExceeded) {
				break
			}
			if err != nil {
				return fmt.Errorf("join lobby %d as player %d: %w", lobby, player, err)
			}
			h, err := wire.DecodeHandshake(in[:n])
			if err != nil || from.Addr().Unmap() != relay.Addr().Unmap() || from.Port() != relay.Port() || h.Lobby != lobby || h.Player != player {
				continue
			}
			switch h.Kind {
			case wire.KindWelcome:
				return nil
			case wire.KindRefused:
				return &RefusedError{Lobby: lobby, Player: player, Reason: h.Reason}
			case wire.KindChallenge:
				join.Cookie = h.Cookie
				if err := send(conn, relay, wire.EncodeHandshake(out, join)); err != nil {
					return fmt.Errorf("join lobby %d as player %d: %w", lobby, player, err)
				}
			}
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("join lobby %d as player %d: no welcome from the relay at %s: %w", lobby, player, relay, err)
		}
	}
}

func send(conn *net.UDPConn, relay netip.AddrPort, b []byte) error {
	if conn.RemoteAddr() != nil {
		_, err := conn.Write(b)
		return err
	}
	_, err := conn.WriteToUDPAddrPort(b, relay)
	return err
}
