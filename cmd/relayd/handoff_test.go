package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/relayctl/relayctl/relay/server"

	"github.com/relayctl/relayctl/relay/capability"
	"github.com/relayctl/relayctl/relay/client"
	"github.com/relayctl/relayctl/relay/wire"
	"github.com/relayctl/relayctl/tune"
)

// TestCapabilityMarker reads the marker from a stripped binary's bytes, as
// a planner does with a release artifact, without running it.
func TestCapabilityMarker(t *testing.T) {
	stripped := filepath.Join(t.TempDir(), "relayd")
	if out, err := exec.Command("go", "build", "-ldflags", "-s -w", "-o", stripped, ".").CombinedOutput(); err != nil {
		t.Fatalf("build stripped relayd: %v\n%s", err, out)
	}
	for _, bin := range []string{stripped, relaydPath} {
		b, err := os.ReadFile(bin)
		if err != nil {
			t.Fatal(err)
		}
		caps, err := capability.Capabilities(b)
		if err != nil || !capability.Has(caps, capability.Handoff) || !capability.Has(caps, capability.Drain) || !capability.Has(caps, capability.FDStore) {
			t.Errorf("%s: got %v, %v; want %s, %s and %s", bin, caps, err, capability.Handoff, capability.Drain, capability.FDStore)
		}
	}
	out, err := exec.Command(relaydPath, "--capabilities").Output()
	if err != nil || string(out) != capability.Marker {
		t.Errorf("relayd --capabilities: got %q, %v; want %q", out, err, capability.Marker)
	}
	// A program that is not relayd has none.
	if b, err := os.ReadFile("/bin/true"); err == nil {
		if caps, err := capability.Capabilities(b); err != nil || caps != nil {
			t.Errorf("/bin/true: got %v, %v; want none", caps, err)
		}
	}
}

// udpPlayer is a player of these tests: its own socket, sending to relay.
type udpPlayer struct {
	t            *testing.T
	lobby, id    uint32
	conn         *net.UDPConn
	relay        *net.UDPAddr
	buf          []byte
	seq          uint32
	receivedFrom map[uint32]int
}

func newUDPPlayer(t *testing.T, relay string, lobby, id uint32) *udpPlayer {
	t.Helper()
	raddr, err := net.ResolveUDPAddr("udp4", relay)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &udpPlayer{t: t, lobby: lobby, id: id, conn: c, relay: raddr, buf: make([]byte, 2048), receivedFrom: map[uint32]int{}}
}

// join makes p a member with the relay's handshake; it returns the
// relay's refusal, if it refuses.
func (p *udpPlayer) join() error {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return client.Join(ctx, p.conn, p.relay.AddrPort(), p.lobby, p.id)
}

func (p *udpPlayer) mustJoin() {
	p.t.Helper()
	if err := p.join(); err != nil {
		p.t.Fatal(err)
	}
}

func (p *udpPlayer) send() {
	p.t.Helper()
	b := wire.AppendHeader(nil, wire.Header{Lobby: p.lobby, Player: p.id, Seq: p.seq})
	p.seq++
	if _, err := p.conn.WriteToUDP(append(b, make([]byte, 32)...), p.relay); err != nil {
		p.t.Fatal(err)
	}
}

// expect reads one datagram and checks it comes from player from.
func (p *udpPlayer) expect(from uint32) {
	p.t.Helper()
	p.conn.SetReadDeadline(time.Now().Add(20 * time.Second)) // a hang guard, not a timing check
	n, _, err := p.conn.ReadFromUDP(p.buf)
	if err != nil {
		p.t.Fatalf("player %d/%d: read: %v", p.lobby, p.id, err)
	}
	h, err := wire.Decode(p.buf[:n])
	if err != nil || h.Player != from || h.Lobby != p.lobby {
		p.t.Fatalf("player %d/%d: got %+v, %v; want a datagram from player %d", p.lobby, p.id, h, err, from)
	}
}

// pair joins two players in a lobby and checks the relay forwards between
// them.
func pair(t *testing.T, relay string, lobby uint32) (*udpPlayer, *udpPlayer) {
	a, b := newUDPPlayer(t, relay, lobby, 1), newUDPPlayer(t, relay, lobby, 2)
	a.mustJoin()
	b.mustJoin()
	exchange(a, b)
	return a, b
}

// settled is p's status once its rx_packets reads the same twice, 50 ms
// apart: every datagram sent so far counted.
func settled(t *testing.T, p *proc) server.Status {
	t.Helper()
	st := p.status()
	waitFor(t, func() (bool, string) {
		time.Sleep(50 * time.Millisecond)
		next := p.status()
		ok := next.Counters.RxPackets == st.Counters.RxPackets
		st = next
		return ok, fmt.Sprintf("rx_packets still moving (%d)", st.Counters.RxPackets)
	})
	return st
}

func exchange(a, b *udpPlayer) {
	a.send()
	b.expect(a.id)
	b.send()
	a.expect(b.id)
}

func TestDrainCall(t *testing.T) {
	p := startRelayd(t, nil, nil, loopbackArgs(t)...)
	a, b := pair(t, p.listen, 1)
	post := func(method string) map[string]any {
		t.Helper()
		req, _ := http.NewRequest(method, "http://"+p.control+"/drain", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var body map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("%s /drain: %s, %v", method, resp.Status, err)
		}
		return body
	}
	if got := post("POST"); got["draining"] != true || got["lobbies"] != 1.0 || got["players"] != 2.0 {
		t.Errorf("POST /drain: got %v", got)
	}
	// A new lobby is refused and counted; the one in progress plays on.
	c, d := newUDPPlayer(t, p.listen, 2, 1), newUDPPlayer(t, p.listen, 2, 2)
	for _, q := range []*udpPlayer{c, d} {
		var refused *client.RefusedError
		if err := q.join(); !errors.As(err, &refused) || refused.Reason != wire.ReasonDraining {
			t.Errorf("join a new lobby while draining: got %v, want refused: draining", err)
		}
	}
	exchange(a, b)
	waitFor(t, func() (bool, string) {
		st := p.status()
		return st.Counters.RefusedDraining == 2, fmt.Sprintf("refused_draining %d, want 2", st.Counters.RefusedDraining)
	})
	if st := p.status(); !st.Draining || st.Lobbies != 1 || st.Players != 2 {
		t.Errorf("status while draining: draining %v lobbies %d players %d; want true 1 2", st.Draining, st.Lobbies, st.Players)
	}
	if !strings.Contains(p.logText(), `msg="draining: no new lobbies" lobbies=1 players=2`) {
		t.Errorf("log lacks the drain line:\n%s", p.logText())
	}
	if got := post("DELETE"); got["draining"] != false {
		t.Errorf("DELETE /drain: got %v", got)
	}
	c.mustJoin()
	d.mustJoin()
	d.send()
	c.expect(2)
	if st := p.status(); st.Draining || st.Lobbies != 2 {
		t.Errorf("after DELETE /drain: draining %v lobbies %d; want false 2", st.Draining, st.Lobbies)
	}
}

// TestHandoffBetweenProcesses: a second relayd started with the same
// handoff socket takes the first one's socket and lobbies; the first exits
// 0. Its players carry on without joining again.
func TestHandoffBetweenProcesses(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "run", "handoff.sock")
	args := append(loopbackArgs(t), "--handoff-socket", sock)
	old := startRelayd(t, nil, nil, append(args, "--so-rcvbuf", "65536")...)
	a, b := pair(t, old.listen, 7)
	// The relay counts a batch's datagrams once it has forwarded them, so
	// the last forward can reach a player before its count is in /status:
	// read the counters once they have settled (the race a -short run hit).
	before := settled(t, old)

	// Same flags but the port: the new one takes the socket, whatever its
	// port, and asks for a bigger buffer.
	nw := startRelayd(t, nil, nil, append(args, "--so-rcvbuf", "131072")...)
	if err := <-old.done; err != nil {
		t.Errorf("old relayd after the handoff: %v, want exit 0", err)
	}
	old.done <- nil
	for _, want := range []string{`msg="handed over" to_pid=` + strconv.Itoa(nw.cmd.Process.Pid) + " lobbies=1 players=2", `msg="relayd stopped: handed over"`} {
		if !strings.Contains(old.logText(), want) {
			t.Errorf("old relayd's log lacks %q:\n%s", want, old.logText())
		}
	}
	if nw.listen != old.listen || nw.control != old.control {
		t.Errorf("new relayd on %s control %s, old on %s control %s", nw.listen, nw.control, old.listen, old.control)
	}
	exchange(a, b)
	st := settled(t, nw) // the exchange's last count may follow its forward
	want := tune.ExpectRcvbuf(131072, false, st.RmemMaxAtStart, 0).Effective
	if st.SocketInode != before.SocketInode || st.SORcvbufEffective != want || st.HandoffFromPID != old.cmd.Process.Pid ||
		st.Lobbies != 1 || st.Players != 2 || st.HandoffLobbies != 1 || st.HandoffPlayers != 2 {
		t.Errorf("new relayd: inode %d (old %d), rb %d (want %d), from pid %d (want %d), lobbies %d players %d, handed %d/%d",
			st.SocketInode, before.SocketInode, st.SORcvbufEffective, want, st.HandoffFromPID, old.cmd.Process.Pid,
			st.Lobbies, st.Players, st.HandoffLobbies, st.HandoffPlayers)
	}
	if st.Counters.RxPackets != before.Counters.RxPackets+2 || st.Counters.Joined != before.Counters.Joined {
		t.Errorf("rx_packets %d, joined %d: want the old relayd's %d and %d carried on, plus 2 datagrams and no join",
			st.Counters.RxPackets, st.Counters.Joined, before.Counters.RxPackets, before.Counters.Joined)
	}
	// And the next release takes over from this one.
	third := startRelayd(t, nil, nil, args...)
	<-nw.done
	nw.done <- nil
	exchange(a, b)
	if st := third.status(); st.HandoffFromPID != nw.cmd.Process.Pid || st.SocketInode != before.SocketInode {
		t.Errorf("third relayd: from pid %d inode %d", st.HandoffFromPID, st.SocketInode)
	}
	third.cmd.Process.Signal(syscall.SIGTERM)
}
