package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/relayctl/relayctl/relay/capability"
	"github.com/relayctl/relayctl/relay/client"
	"github.com/relayctl/relayctl/relay/wire"
)

// The hostile tests play an attacker on loopback against the real relayd:
// a raw socket sends datagrams with any source address (a spoofed victim,
// 127.0.0.9) or from any port of one address (127.0.0.7), and the test
// counts what the relay sends where and what it keeps. Loopback sources
// stand for strangers on the internet here, and for the relay host's own
// unprivileged processes: relayd exempts no source by default.
//
// They speak both wire versions (a join of version 1 is a datagram) so
// that TEST_RELAYD can point them at a relayd from before the handshake,
// which they fail on.

// spoofer sends UDP datagrams from any source: a raw IPv4 socket with
// IPPROTO_RAW, where the caller writes the IP header (IP_HDRINCL). The
// kernel fills in the header's checksum, total length and id; a UDP
// checksum of 0 is none, which IPv4 allows.
type spoofer struct{ fd int }

func newSpoofer(t *testing.T) *spoofer {
	t.Helper()
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_RAW)
	if err != nil {
		t.Fatalf("open raw socket (needs root): %v", err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return &spoofer{fd: fd}
}

func (s *spoofer) send(t *testing.T, from, to netip.AddrPort, payload []byte) {
	t.Helper()
	pkt := make([]byte, 28, 28+len(payload))
	pkt[0] = 0x45                                // IPv4, 20-byte header
	binary.BigEndian.PutUint16(pkt[6:8], 0x4000) // don't fragment
	pkt[8], pkt[9] = 64, unix.IPPROTO_UDP        // TTL, protocol
	src, dst := from.Addr().As4(), to.Addr().As4()
	copy(pkt[12:16], src[:])
	copy(pkt[16:20], dst[:])
	binary.BigEndian.PutUint16(pkt[20:22], from.Port())
	binary.BigEndian.PutUint16(pkt[22:24], to.Port())
	binary.BigEndian.PutUint16(pkt[24:26], uint16(8+len(payload)))
	pkt = append(pkt, payload...)
	for {
		err := unix.Sendto(s.fd, pkt, 0, &unix.SockaddrInet4{Addr: dst})
		if errors.Is(err, unix.ENOBUFS) || errors.Is(err, unix.EAGAIN) {
			time.Sleep(time.Millisecond)
			continue
		}
		if err != nil {
			t.Fatalf("send spoofed datagram from %s: %v", from, err)
		}
		return
	}
}

// hostileRelay is the relayd under attack and the wire version it speaks.
type hostileRelay struct {
	*proc
	addr netip.AddrPort
	v2   bool // it speaks wire version 2 (capability join=cookie/1)
}

func startHostile(t *testing.T, lobbySize int) *hostileRelay {
	t.Helper()
	return startHostileWith(t, lobbySize, []string{"RELAYD_EXEMPT_SOURCES="})
}

// startHostileWith starts the relayd under attack with env (for a relay of
// wire version 2) over its defaults.
func startHostileWith(t *testing.T, lobbySize int, env2 []string) *hostileRelay {
	t.Helper()
	bin, err := os.ReadFile(relaydPath)
	if err != nil {
		t.Fatal(err)
	}
	caps, err := capability.Capabilities(bin)
	if err != nil {
		t.Fatal(err)
	}
	v2 := capability.Has(caps, capability.Join)
	var env []string
	if v2 {
		env = append(env, env2...)
	}
	// A buffer that holds every burst: the tests count what the relay
	// does with what it reads, so it must read everything.
	p := startRelayd(t, nil, env, append(loopbackArgs(t), "--lobby-size", strconv.Itoa(lobbySize),
		"--so-rcvbuf", "4194304", "--so-rcvbuf-force")...)
	addr, err := netip.ParseAddrPort(p.listen)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("relayd %s, capabilities %v: wire version %d", relaydPath, caps, map[bool]int{false: 1, true: 2}[v2])
	return &hostileRelay{proc: p, addr: addr, v2: v2}
}

// data is a data datagram of the relay's wire version, size bytes.
func (r *hostileRelay) data(lobby, player, seq uint32, size int) []byte {
	b := wire.Encode(make([]byte, size), wire.Header{Lobby: lobby, Player: player, Seq: seq})
	if !r.v2 {
		binary.BigEndian.PutUint32(b, wire.MagicV1)
	}
	return b
}

// spoofedJoins is every form of join a stranger can send without
// receiving anything: a version 1 datagram, a version 2 join, and one
// with a made-up cookie.
func spoofedJoins(lobby, player uint32) [][]byte {
	v1 := wire.Encode(make([]byte, 144), wire.Header{Lobby: lobby, Player: player})
	binary.BigEndian.PutUint32(v1, wire.MagicV1)
	hello := wire.EncodeHandshake(make([]byte, wire.HandshakeLen), wire.Handshake{Kind: wire.KindJoin, Lobby: lobby, Player: player})
	forged := wire.Handshake{Kind: wire.KindJoin, Lobby: lobby, Player: player}
	rand.Read(forged.Cookie[:])
	return [][]byte{v1, hello, wire.EncodeHandshake(make([]byte, wire.HandshakeLen), forged)}
}

// join makes conn's player a member: the handshake, or a datagram for a
// relay of wire version 1.
func (r *hostileRelay) join(t *testing.T, conn *net.UDPConn, lobby, player uint32) error {
	t.Helper()
	if !r.v2 {
		_, err := conn.WriteToUDPAddrPort(r.data(lobby, player, 0, 144), r.addr)
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return client.Join(ctx, conn, r.addr, lobby, player)
}

// joinLen is how many datagrams a join sends the relay.
func (r *hostileRelay) joinLen() int {
	if r.v2 {
		return 2
	}
	return 1
}

// settle waits until the relay has read rx datagrams in all, or has read
// nothing more for half a second: a datagram may be lost before it
// reaches the relay's socket (loopback's backlog is 1,000 datagrams deep),
// and then it never comes. It logs such a loss.
func (r *hostileRelay) settle(t *testing.T, rx uint64) {
	t.Helper()
	var last uint64
	still := time.Now()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		st := r.status()
		got := st.Counters.RxPackets + st.Counters.RxDrops
		if got >= rx {
			return
		}
		if got != last {
			last, still = got, time.Now()
		}
		if time.Since(still) > 500*time.Millisecond {
			t.Logf("the relay read %d of %d datagrams sent: %d were lost on the way (rx_drops %d)", got, rx, rx-got, st.Counters.RxDrops)
			return
		}
	}
	t.Fatalf("the relay read %d of %d datagrams in 30 s", last, rx)
}

// listenOn opens a player's socket on ip, with a receive buffer that holds
// all a test sends it (SO_RCVBUFFORCE: over rmem_max), so that it counts
// everything.
func listenOn(t *testing.T, ip string) *net.UDPConn {
	t.Helper()
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.ParseIP(ip)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	raw, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var serr error
	raw.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 4<<20) })
	if serr != nil {
		t.Fatalf("set SO_RCVBUFFORCE: %v", serr)
	}
	return c
}

// received is what a socket was sent: data (copies of players' datagrams)
// and handshake answers, counted and in bytes.
type received struct {
	data, answers, answerBytes int
}

// drain reads c until nothing has come for quiet.
func drain(t *testing.T, c *net.UDPConn, quiet time.Duration) received {
	t.Helper()
	var r received
	buf := make([]byte, 4096)
	for {
		c.SetReadDeadline(time.Now().Add(quiet))
		n, _, err := c.ReadFromUDP(buf)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return r
		}
		if err != nil {
			t.Fatal(err)
		}
		switch wire.KindOf(buf[:n]) {
		case wire.KindData, wire.KindV1:
			r.data++
		default:
			r.answers++
			r.answerBytes += n
		}
	}
}

// TestHostileSpoofedJoins is the amplification attack: joins spoofed
// from a victim's address, then the attacker's own datagrams to that
// lobby. The victim must get none of them: at most one answer, no larger,
// to each datagram sent in its name.
func TestHostileSpoofedJoins(t *testing.T) {
	for _, size := range []int{8, 256} {
		t.Run(fmt.Sprintf("lobby size %d", size), func(t *testing.T) {
			r := startHostile(t, size)
			victim := listenOn(t, "127.0.0.9")
			vaddr := victim.LocalAddr().(*net.UDPAddr).AddrPort()
			attacker := listenOn(t, "127.0.0.7")
			sp := newSpoofer(t)
			const lobby, rounds = 3, 200

			var spoofed, spoofedBytes, rx int
			spoof := func(b []byte) {
				sp.send(t, vaddr, r.addr, b)
				spoofed, spoofedBytes, rx = spoofed+1, spoofedBytes+len(b), rx+1
			}
			for pl := uint32(1); pl < uint32(size); pl++ {
				for _, m := range spoofedJoins(lobby, pl) {
					spoof(m)
				}
			}
			// The attacker joins the lobby itself and sends.
			if err := r.join(t, attacker, lobby, uint32(size)); err != nil {
				t.Fatalf("the attacker's own join: %v", err)
			}
			rx += r.joinLen()
			for seq := range uint32(rounds) {
				if _, err := attacker.WriteToUDPAddrPort(r.data(lobby, uint32(size), seq, 144), r.addr); err != nil {
					t.Fatal(err)
				}
				rx++
			}
			// Data in the victim's name, as the players it claimed.
			for pl := uint32(1); pl < uint32(size); pl++ {
				spoof(r.data(lobby, pl, 0, 144))
			}
			r.settle(t, uint64(rx))
			got := drain(t, victim, 300*time.Millisecond)
			t.Logf("spoofed from the victim: %d datagrams, %d bytes; the victim got %d of the attacker's datagrams and %d answers, %d bytes",
				spoofed, spoofedBytes, got.data, got.answers, got.answerBytes)
			if got.data != 0 {
				t.Errorf("the victim received %d datagrams of the attacker's %d: ×%.1f", got.data, rounds, float64(got.data)/rounds)
			}
			if got.answers > spoofed || got.answerBytes > spoofedBytes {
				t.Errorf("the victim got %d answers, %d bytes, for %d datagrams, %d bytes sent in its name: more than it sent",
					got.answers, got.answerBytes, spoofed, spoofedBytes)
			}
			if st := r.status(); st.Players != 1 {
				t.Errorf("players: got %d, want 1 (the attacker; nobody joined in the victim's name)", st.Players)
			}
		})
	}
}

// vmRSS reads a process's resident set from /proc/PID/status, in bytes.
func vmRSS(t *testing.T, pid int) int64 {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("parse VmRSS %q: %v", v, err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no VmRSS in /proc/%d/status", pid)
	return 0
}

// floodRSSBound is how much relayd's resident memory may grow under the
// flood of TestHostileFloodOneSource. The relay allocates nothing for an
// address that has proven nothing; 4,096 lobbies of one player each at
// lobby size 256 took about 64 MiB before the handshake (LobbySize ×
// 64 B up front per lobby).
const floodRSSBound = 8 << 20

// TestHostileFloodOneSource is the squatting attack: 32,768 tiny
// datagrams from one address, each claiming a lobby, in every form of
// join, from ever other ports; then that address, proven, claiming 64
// lobbies. It must hold no more than its per-source limit, the relay's
// memory must not grow with the lobby ids claimed, and other players must
// still play.
func TestHostileFloodOneSource(t *testing.T) {
	if testing.Short() {
		t.Skip("drives relayd with a flood for seconds; skipped under -short (make test runs it)")
	}
	r := startHostile(t, 256)
	pid := r.cmd.Process.Pid
	sp := newSpoofer(t)
	rss0 := vmRSS(t, pid)
	const n, maxLobbies = 32768, 4096
	rx := 0
	for i := range n {
		from := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.7"), uint16(1024+i%60000))
		lobby, player := uint32(i%maxLobbies), uint32(i/maxLobbies+1)
		tiny := r.data(lobby, player, 0, wire.HeaderLen)
		for _, m := range append([][]byte{tiny}, spoofedJoins(lobby, player)[1:]...) {
			sp.send(t, from, r.addr, m)
			rx++
		}
		if rx%1536 == 0 { // let the relay and loopback's backlog catch up now and then
			r.settle(t, uint64(rx))
		}
	}
	r.settle(t, uint64(rx))
	// The same address, proven, claims 64 lobbies from 64 sockets.
	admitted, limited := 0, 0
	for k := range 64 {
		err := r.join(t, listenOn(t, "127.0.0.7"), uint32(100+k), 1)
		var refused *client.RefusedError
		switch {
		case err == nil:
			admitted++
		case errors.As(err, &refused) && refused.Reason == wire.ReasonSourceLimit:
			limited++
		default:
			t.Fatalf("join %d: %v", k, err)
		}
	}
	rx += r.joinLen() * 64
	r.settle(t, uint64(rx))
	st := r.status()
	rss1 := vmRSS(t, pid)
	t.Logf("after %d datagrams and 64 proven joins from 127.0.0.7: %d lobbies, %d players (%d admitted, %d refused: source limit); VmRSS %d → %d KiB",
		rx, st.Lobbies, st.Players, admitted, limited, rss0>>10, rss1>>10)
	if st.Lobbies > 16 || st.Players > 16 {
		t.Errorf("one address holds %d lobbies and %d players, want at most 16 (RELAYD_MAX_PLAYERS_PER_ADDR)", st.Lobbies, st.Players)
	}
	if grew := rss1 - rss0; grew > floodRSSBound {
		t.Errorf("VmRSS grew by %d KiB, want at most %d KiB", grew>>10, floodRSSBound>>10)
	}
	// Two other players still meet in lobby 0, which the flood claimed.
	a, b := listenOn(t, "127.0.0.8"), listenOn(t, "127.0.0.10")
	for i, c := range []*net.UDPConn{a, b} {
		if err := r.join(t, c, 0, uint32(i+1)); err != nil {
			t.Fatalf("a player of lobby 0 after the flood: %v", err)
		}
	}
	if _, err := a.WriteToUDPAddrPort(r.data(0, 1, 1, 144), r.addr); err != nil {
		t.Fatal(err)
	}
	if got := drain(t, b, 300*time.Millisecond); got.data != 1 {
		t.Errorf("lobby 0 after the flood: the second player got %d datagrams of the first's 1", got.data)
	}
}

// TestHostileLobbyFullOneSource: one address, with as many sockets as a
// lobby has seats, cannot fill it: a player from elsewhere still gets in.
func TestHostileLobbyFullOneSource(t *testing.T) {
	const size, lobby = 8, 9
	r := startHostile(t, size)
	rx := 0
	for pl := uint32(1); pl <= size; pl++ {
		err := r.join(t, listenOn(t, "127.0.0.7"), lobby, pl)
		var refused *client.RefusedError
		switch {
		case err == nil:
		case pl == size && errors.As(err, &refused) && refused.Reason == wire.ReasonSourceLimit:
		default:
			t.Fatalf("the one source's player %d: %v", pl, err)
		}
		rx += r.joinLen()
	}
	r.settle(t, uint64(rx))
	before := r.status().Counters.LobbyFull
	if err := r.join(t, listenOn(t, "127.0.0.8"), lobby, size+1); err != nil {
		t.Errorf("a player from another address: %v", err)
	}
	r.settle(t, uint64(rx+r.joinLen()))
	if got := r.status().Counters.LobbyFull - before; got != 0 {
		t.Errorf("lobby_full: one source's %d players made the relay refuse %d join(s) from another address as lobby full", size, got)
	}
}

// seatTaker is one local process trying to take every seat of lobbies
// [first, first+lobbies) from one loopback address: it counts the players
// the relay welcomed, and refused for the per-source limits.
func seatTaker(t *testing.T, r *hostileRelay, from string, first uint32, lobbies, size int) (welcomed, limited int) {
	t.Helper()
	for l := range lobbies {
		for pl := 1; pl <= size; pl++ {
			err := r.join(t, listenOn(t, from), first+uint32(l), uint32(pl))
			var refused *client.RefusedError
			switch {
			case err == nil:
				welcomed++
			case errors.As(err, &refused) && refused.Reason == wire.ReasonSourceLimit:
				limited++
			default:
				t.Fatalf("%s: lobby %d player %d: %v", from, first+uint32(l), pl, err)
			}
		}
	}
	return welcomed, limited
}

// othersGetIn checks that a player from another address joins each of the
// lobbies, and that none of them was refused as full.
func othersGetIn(t *testing.T, r *hostileRelay, from string, first uint32, lobbies, size int) {
	t.Helper()
	full := r.status().Counters.LobbyFull
	for l := range lobbies {
		if err := r.join(t, listenOn(t, from), first+uint32(l), uint32(size+1)); err != nil {
			t.Errorf("a player from %s in lobby %d: %v", from, first+uint32(l), err)
		}
	}
	if got := r.status().Counters.LobbyFull - full; got != 0 {
		t.Errorf("%d players from %s were refused as lobby full", got, from)
	}
}

// TestHostileLocalProcessCannotSquat: relayd as it starts with no config
// at all. An unprivileged process on the relay host sends from its
// loopback and tries to take all 128 seats of 16 lobbies: it holds at
// most its address's 16 players, and a player from elsewhere still gets
// into every one of those lobbies.
func TestHostileLocalProcessCannotSquat(t *testing.T) {
	const size, lobbies, first = 8, 16, 200
	r := startHostileWith(t, size, nil)
	if !r.v2 {
		t.Skip("a relayd of wire version 1 has no per-source limits")
	}
	welcomed, limited := seatTaker(t, r, "127.0.0.1", first, lobbies, size)
	st := r.status()
	t.Logf("one loopback address asked for %d seats: %d welcomed, %d refused (source limit); the relay holds %d players in %d lobbies",
		lobbies*size, welcomed, limited, st.Players, st.Lobbies)
	if welcomed > 16 || st.Players > 16 {
		t.Errorf("one local address holds %d players (%d welcomed), want at most 16 (RELAYD_MAX_PLAYERS_PER_ADDR): loopback must not be exempt by default", st.Players, welcomed)
	}
	othersGetIn(t, r, "127.0.0.8", first, lobbies, size)
}

// TestHostileExemptSourceCannotFillALobby: a source the operator exempts
// (a bench) holds any number of players across lobbies, but never every
// seat of one: a player from elsewhere still gets the last seat.
func TestHostileExemptSourceCannotFillALobby(t *testing.T) {
	const size, lobbies, first = 8, 16, 300
	r := startHostileWith(t, size, []string{"RELAYD_EXEMPT_SOURCES=127.0.0.1/32"})
	if !r.v2 {
		t.Skip("a relayd of wire version 1 has no per-source limits")
	}
	welcomed, limited := seatTaker(t, r, "127.0.0.1", first, lobbies, size)
	t.Logf("the exempt address asked for %d seats: %d welcomed, %d refused (source limit)", lobbies*size, welcomed, limited)
	if welcomed != lobbies*(size-1) || limited != lobbies {
		t.Errorf("the exempt address got %d seats (%d refused), want %d: all but the last seat of each lobby", welcomed, limited, lobbies*(size-1))
	}
	othersGetIn(t, r, "127.0.0.8", first, lobbies, size)
}

// drainAs sends "VERB /drain" to the control plane from a process running
// as uid (bash's /dev/tcp, a raw request as any local program writes it)
// and returns the answer's status line.
func drainAs(t *testing.T, control string, uid uint32, verb string) string {
	t.Helper()
	host, port, _ := net.SplitHostPort(control)
	script := fmt.Sprintf(`exec 3<>/dev/tcp/%s/%s && printf '%s /drain HTTP/1.0\r\n\r\n' >&3 && head -n 1 <&3`, host, port, verb)
	cmd := exec.Command("bash", "-c", script)
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s /drain as uid %d: %v\n%s", verb, uid, err, out)
	}
	return strings.TrimSpace(string(out))
}

// needRoot skips a test that acts as another user, or fails it in CI,
// where a test that skips proves nothing.
func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("calls the control plane as another user: needs root")
	}
	t.Skip("calls the control plane as another user: needs root")
}

// TestHostileDrainNeedsTheRelaysUser: any local user reaches the control
// plane on loopback, but only root and the user relayd runs as may turn
// the drain gate on (refusing every new lobby) or off (lifting a
// rollout's); another user's request is refused and changes nothing.
func TestHostileDrainNeedsTheRelaysUser(t *testing.T) {
	needRoot(t)
	p := startRelayd(t, nil, nil, loopbackArgs(t)...)
	const nobody = 65534
	for _, verb := range []string{"POST", "DELETE"} {
		if got := drainAs(t, p.control, nobody, verb); !strings.Contains(got, " 403 ") {
			t.Errorf("%s /drain as uid %d: %q, want 403", verb, nobody, got)
		}
		if p.status().Draining {
			t.Fatalf("after %s /drain as uid %d the relay drains", verb, nobody)
		}
	}
	if got := drainAs(t, p.control, 0, "POST"); !strings.Contains(got, " 200 ") || !p.status().Draining {
		t.Errorf("POST /drain as root: %q, draining %v; want 200 and draining", got, p.status().Draining)
	}
	if got := drainAs(t, p.control, nobody, "DELETE"); !strings.Contains(got, " 403 ") || !p.status().Draining {
		t.Errorf("DELETE /drain as uid %d while draining: %q, draining %v; want 403 and still draining", nobody, got, p.status().Draining)
	}
}

// drainDecisions matches relayd's log line for each /drain call it
// decided: acted on (either way) or refused.
var drainDecisions = regexp.MustCompile(`msg="(draining: no new lobbies|drain ended: new lobbies welcome|drain refused)"`)

// decisionLines are relayd's log lines of /drain decisions, in order.
func decisionLines(log string) []string {
	var lines []string
	for _, l := range strings.Split(log, "\n") {
		if drainDecisions.MatchString(l) {
			lines = append(lines, l)
		}
	}
	return lines
}

// sendAndCloseAs sends "VERB /drain" as uid and closes the connection at
// once, without reading the answer, then waits (at most 5 s) until relayd
// has decided the call: logged that it acted or that it refused. It
// returns that log line.
func sendAndCloseAs(t *testing.T, p *proc, uid uint32, verb string) string {
	t.Helper()
	before := len(decisionLines(p.logText()))
	host, port, _ := net.SplitHostPort(p.control)
	script := fmt.Sprintf(`exec 3<>/dev/tcp/%s/%s && printf '%s /drain HTTP/1.0\r\n\r\n' >&3 && exec 3>&-`, host, port, verb)
	cmd := exec.Command("bash", "-c", script)
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s /drain as uid %d, closed at once: %v\n%s", verb, uid, err, out)
	}
	for deadline := time.Now().Add(5 * time.Second); ; {
		if lines := decisionLines(p.logText()); len(lines) > before {
			return lines[before]
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s /drain as uid %d, closed at once: relayd logged no decision in 5 s", verb, uid)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// holdListeners opens n TCP listeners on one loopback port with
// SO_REUSEPORT. /proc/net/tcp lists every listener before any connection,
// so a reader of that file reaches a connection's line only after n
// others: time in which a connection its caller has closed becomes a
// timewait entry. Any local user can hold them; whose they are does not
// change where the kernel lists them.
func holdListeners(t *testing.T, n int) {
	t.Helper()
	port := 0
	for i := range n {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatalf("listener %d: %v", i, err)
		}
		t.Cleanup(func() { unix.Close(fd) })
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEPORT, 1); err != nil {
			t.Fatalf("listener %d: SO_REUSEPORT: %v", i, err)
		}
		if err := unix.Bind(fd, &unix.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}}); err != nil {
			t.Fatalf("listener %d: bind 127.0.0.1:%d: %v", i, port, err)
		}
		if err := unix.Listen(fd, 1); err != nil {
			t.Fatalf("listener %d: listen: %v", i, err)
		}
		if port == 0 {
			sa, err := unix.Getsockname(fd)
			if err != nil {
				t.Fatal(err)
			}
			port = sa.(*unix.SockaddrInet4).Port
		}
	}
}

// TestHostileDrainSendAndClose: a local user that sends POST or DELETE
// /drain and closes at once, without reading the answer, leaves in its
// connection's place an orphan in FIN_WAIT1 and, once relayd's kernel has
// acknowledged the FIN (its delayed ACK, some 40 ms), a FIN_WAIT2 timewait
// entry, which the kernel lists with uid 0 and inode 0. Ten thousand
// listeners delay a reader of /proc/net/tcp past that (about 95 ms to read
// the file here). relayd must neither drain for that user nor lift root's
// drain for it: asking sock_diag, and reading /proc/net/tcp where a
// sandbox refuses it netlink sockets (the unit before it allowed
// AF_NETLINK).
func TestHostileDrainSendAndClose(t *testing.T) {
	needRoot(t)
	tests := []struct {
		name   string
		prefix []string
		env    []string
		via    string // the file relayd says it reads callers from; "" for sock_diag
	}{
		{name: "sock_diag"},
		{name: "no netlink socket", prefix: []string{os.Args[0]}, env: []string{noNetlinkEnv + "=1"}, via: "/proc/self/net/tcp"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := startRelayd(t, tt.prefix, tt.env, loopbackArgs(t)...)
			holdListeners(t, 10000)
			const nobody = 65534
			for range 3 {
				t.Log(sendAndCloseAs(t, p, nobody, "POST"))
				if p.status().Draining {
					t.Fatalf("POST /drain as uid %d, closed at once: the relay drains", nobody)
				}
			}
			if got := drainAs(t, p.control, 0, "POST"); !strings.Contains(got, " 200 ") {
				t.Fatalf("POST /drain as root: %q, want 200", got)
			}
			for range 3 {
				t.Log(sendAndCloseAs(t, p, nobody, "DELETE"))
				if !p.status().Draining {
					t.Fatalf("DELETE /drain as uid %d, closed at once, while root drains: the drain is lifted", nobody)
				}
			}
			if warned := strings.Contains(p.logText(), "drain: finding callers in "); warned != (tt.via != "") ||
				tt.via != "" && !strings.Contains(p.logText(), "via="+tt.via) {
				t.Errorf("relayd's warning of /proc/net/tcp: logged %v, want it naming %q (\"\" for none)", warned, tt.via)
			}
		})
	}
}

// TestHostileControlHost: a web page that rebinds its own name to
// 127.0.0.1 reaches the control plane through a browser on the relay host,
// with its name as Host; relayd answers only a loopback Host, and a
// request without one (HTTP/1.0, relayctl's host agent). The Origin rule
// of /drain holds besides. Raw requests, as a browser or an attacker
// writes them.
func TestHostileControlHost(t *testing.T) {
	p := startRelayd(t, nil, nil, loopbackArgs(t)...)
	_, port, _ := net.SplitHostPort(p.control)
	tests := []struct {
		name, request string
		want          int
	}{
		{"status, rebound name", "GET /status HTTP/1.1\r\nHost: rebind.example:" + port + "\r\n\r\n", 421},
		{"metrics, rebound name", "GET /metrics HTTP/1.1\r\nHost: rebind.example\r\n\r\n", 421},
		{"drain, rebound name", "POST /drain HTTP/1.1\r\nHost: rebind.example\r\nContent-Length: 0\r\n\r\n", 421},
		{"drain, rebound name, absolute URI", "POST http://rebind.example/drain HTTP/1.1\r\nHost: rebind.example\r\nContent-Length: 0\r\n\r\n", 421},
		{"status, a name ending in localhost's", "GET /status HTTP/1.1\r\nHost: localhost.rebind.example\r\n\r\n", 421},
		{"status, the host's public address", "GET /status HTTP/1.1\r\nHost: 192.0.2.1:" + port + "\r\n\r\n", 421},
		{"status, 127.0.0.1", "GET /status HTTP/1.1\r\nHost: 127.0.0.1:" + port + "\r\n\r\n", 200},
		{"status, localhost", "GET /status HTTP/1.1\r\nHost: localhost:" + port + "\r\n\r\n", 200},
		{"status, [::1]", "GET /status HTTP/1.1\r\nHost: [::1]:" + port + "\r\n\r\n", 200},
		{"status, HTTP/1.0 without Host (relayctl's agent)", "GET /status HTTP/1.0\r\n\r\n", 200},
		{"drain, loopback Host, a page's Origin", "POST /drain HTTP/1.1\r\nHost: 127.0.0.1\r\nOrigin: http://127.0.0.1\r\nContent-Length: 0\r\n\r\n", 403},
		{"drain off, loopback Host", "DELETE /drain HTTP/1.1\r\nHost: localhost\r\n\r\n", 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := net.Dial("tcp", p.control)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(10 * time.Second))
			if _, err := c.Write([]byte(tt.request)); err != nil {
				t.Fatal(err)
			}
			line, err := bufio.NewReader(c).ReadString('\n')
			if err != nil {
				t.Fatalf("read the status line: %v", err)
			}
			f := strings.Fields(line)
			if len(f) < 2 || f[1] != strconv.Itoa(tt.want) {
				t.Errorf("got %q, want status %d", strings.TrimSpace(line), tt.want)
			}
		})
	}
	if st := p.status(); st.Draining {
		t.Errorf("draining after the refused calls")
	}
}
