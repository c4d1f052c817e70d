package client

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/relayctl/relayctl/relay/wire"
)

// fakeRelay answers joins on a loopback socket with answer, which sees
// each join and returns what to send back (nothing for a zero Kind).
func fakeRelay(t *testing.T, answer func(n int, h wire.Handshake) wire.Handshake) netip.AddrPort {
	t.Helper()
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	go func() {
		buf := make([]byte, 2048)
		for n := 0; ; n++ {
			k, from, err := c.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			h, err := wire.DecodeHandshake(buf[:k])
			if err != nil || h.Kind != wire.KindJoin {
				t.Errorf("the fake relay got %d bytes that are not a join: %v", k, err)
				continue
			}
			if a := answer(n, h); a.Kind != wire.KindUnknown {
				c.WriteToUDPAddrPort(wire.EncodeHandshake(make([]byte, wire.HandshakeLen), a), from)
			}
		}
	}()
	return c.LocalAddr().(*net.UDPAddr).AddrPort()
}

func player(t *testing.T) *net.UDPConn {
	t.Helper()
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

var cookie = wire.Cookie{1, 2, 3}

// handshake is a relay that challenges a join without the cookie and
// welcomes one with it.
func handshake(n int, h wire.Handshake) wire.Handshake {
	if h.Cookie != cookie {
		return wire.Handshake{Kind: wire.KindChallenge, Lobby: h.Lobby, Player: h.Player, Cookie: cookie}
	}
	return wire.Handshake{Kind: wire.KindWelcome, Lobby: h.Lobby, Player: h.Player}
}

func TestJoin(t *testing.T) {
	relay := fakeRelay(t, handshake)
	if err := Join(t.Context(), player(t), relay, 4, 2); err != nil {
		t.Errorf("got %v, want nil", err)
	}
}

// TestJoinResends: a join lost on the way (the first two here) is sent
// again after Retry, and the cookie travels with every join after the
// challenge.
func TestJoinResends(t *testing.T) {
	relay := fakeRelay(t, func(n int, h wire.Handshake) wire.Handshake {
		if n < 2 {
			return wire.Handshake{}
		}
		return handshake(n, h)
	})
	start := time.Now()
	if err := Join(t.Context(), player(t), relay, 4, 2); err != nil {
		t.Fatalf("got %v, want nil", err)
	}
	if d := time.Since(start); d < 2*Retry {
		t.Errorf("joined in %v: the lost joins were not waited for", d)
	}
}

func TestJoinRefused(t *testing.T) {
	relay := fakeRelay(t, func(n int, h wire.Handshake) wire.Handshake {
		if h.Cookie != cookie {
			return handshake(n, h)
		}
		return wire.Refusal(h.Lobby, h.Player, wire.ReasonLobbyFull)
	})
	err := Join(t.Context(), player(t), relay, 4, 2)
	var refused *RefusedError
	if !errors.As(err, &refused) || refused.Reason != wire.ReasonLobbyFull || refused.Lobby != 4 || refused.Player != 2 {
		t.Fatalf("got %v, want refused: lobby full", err)
	}
	if !strings.Contains(err.Error(), "join lobby 4 as player 2: refused by the relay: lobby full") {
		t.Errorf("got %q", err)
	}
}

// TestJoinIgnoresOthers: an answer for another lobby or player, or from
// another address than the relay's, is not the relay's answer.
func TestJoinIgnoresOthers(t *testing.T) {
	c := player(t)
	stranger := player(t)
	relay := fakeRelay(t, func(n int, h wire.Handshake) wire.Handshake {
		if n == 0 {
			to := c.LocalAddr().(*net.UDPAddr).AddrPort()
			stranger.WriteToUDPAddrPort(wire.EncodeHandshake(make([]byte, wire.HandshakeLen), wire.Refusal(h.Lobby, h.Player, wire.ReasonDraining)), to)
			return wire.Refusal(h.Lobby+1, h.Player, wire.ReasonDraining)
		}
		return handshake(n, h)
	})
	if err := Join(t.Context(), c, relay, 4, 2); err != nil {
		t.Errorf("got %v, want nil", err)
	}
}

func TestJoinGivesUp(t *testing.T) {
	relay := fakeRelay(t, func(int, wire.Handshake) wire.Handshake { return wire.Handshake{} })
	ctx, cancel := context.WithTimeout(t.Context(), 3*Retry/2)
	defer cancel()
	err := Join(ctx, player(t), relay, 4, 2)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "no welcome from the relay at "+relay.String()) {
		t.Errorf("got %v, want no welcome and the deadline", err)
	}
}
