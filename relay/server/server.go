// Package server is relayd, the reference UDP relay: one IPv4 socket
// forwarding each datagram of a player to the other members of its lobby
// (see package wire for the format), and a control plane on loopback TCP
// serving /status (JSON) and /metrics (Prometheus).
//
// It exists so that relayctl can show on a real process with a real socket
// that the SO_RCVBUF it asks for took effect, and count what the kernel
// dropped.
package server

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/relayctl/relayctl/relay/config"
	"github.com/relayctl/relayctl/relay/cookie"
	"github.com/relayctl/relayctl/relay/handoff"
	"github.com/relayctl/relayctl/relay/lobby"
)

// RmemMaxPath is where the kernel's cap on SO_RCVBUF is read at start.
const RmemMaxPath = "/proc/sys/net/core/rmem_max"

// RmemDefaultPath is the buffer a new socket gets, which a release asking
// for none (RELAYD_SO_RCVBUF=0) puts on an inherited socket.
const RmemDefaultPath = "/proc/sys/net/core/rmem_default"

// Server is a running relay. Create it with New, then call Run.
type Server struct {
	cfg     config.Config
	version string
	log     *slog.Logger
	started time.Time

	conn      *net.UDPConn
	io        *batchIO
	ctl       net.Listener
	http      *http.Server
	handoffLn *handoff.Listener // nil without RELAYD_HANDOFF_SOCKET
	closeOnce sync.Once
	// viaProcOnce: relayd has warned that it finds /drain's callers in
	// /proc/net/tcp, a netlink socket being refused it.
	viaProcOnce sync.Once
	done        chan struct{} // closed by Close

	effective int          // SO_RCVBUF read back with getsockopt
	rmemMax   int          // net.core.rmem_max at start, 0 if unreadable
	inode     uint64       // the UDP socket's inode, as ss -e shows it (ino:)
	boundAt   time.Time    // when this process bound the socket (not after a handoff)
	closedAt  time.Time    // when Close closed it
	from      *handoffInfo // set when this process took over from another
	// socketFrom says where the UDP socket came from: SocketBound,
	// SocketHandoff or SocketFDStore.
	socketFrom string
	sd         *systemd // what systemd passed and its fd store; nil without WithSystemd

	mu    sync.Mutex // guards table and jar
	bufMu sync.Mutex // guards cfg.SORcvbuf, cfg.SORcvbufForce and effective after start (SetRcvbuf)
	table *lobby.Table
	// jar makes and checks the join handshake's cookies, under a secret of
	// this process that never leaves it: not through a handoff either
	// (docs/relayd.md, "Who may join").
	jar *cookie.Jar

	c       counters
	targets []netip.AddrPort // scratch for the fan-out of one datagram

	// The relay loop's reads, Unix ns: the last (handed to the next
	// process) and the first (the end of a handoff's gap).
	lastRead, firstRead atomic.Int64

	// Pausing for a handoff: Pause sets pausing and a read deadline in the
	// past; the relay loop parks (parked) until wake says resume or stop.
	pausing     atomic.Bool
	parked      chan struct{}
	wake        chan bool
	forwardDone chan struct{}
	handedTo    atomic.Int64
}

// counters are updated once per batch by the forwarding goroutine and read
// by the control plane at any time.
type counters struct {
	rxPackets, rxBytes, txPackets, txBytes, txErrors atomic.Uint64
	rxDrops, forwarded, lobbyFull, expired           atomic.Uint64
	refusedDraining                                  atomic.Uint64
	malformed                                        [numReasons]atomic.Uint64

	// The join handshake (join.go).
	notJoined, otherVersion, joinsRx, joinChallenged atomic.Uint64
	cookieRejected, joined, sourceLimit              atomic.Uint64
	replies, replyBytes                              atomic.Uint64
}

// tally counts one batch, added to the counters once.
type tally struct {
	rxBytes, forwarded, lobbyFull, noNew                uint64
	notJoined, otherVersion, joinsRx                    uint64
	joinChallenged, cookieRejected, joined, sourceLimit uint64
	bad                                                 [numReasons]uint64
}

func (c *counters) add(t *tally) {
	for _, a := range []struct {
		c *atomic.Uint64
		v uint64
	}{
		{&c.rxBytes, t.rxBytes}, {&c.forwarded, t.forwarded}, {&c.lobbyFull, t.lobbyFull},
		{&c.refusedDraining, t.noNew}, {&c.notJoined, t.notJoined}, {&c.otherVersion, t.otherVersion},
		{&c.joinsRx, t.joinsRx}, {&c.joinChallenged, t.joinChallenged}, {&c.cookieRejected, t.cookieRejected},
		{&c.joined, t.joined}, {&c.sourceLimit, t.sourceLimit},
	} {
		if a.v > 0 {
			a.c.Add(a.v)
		}
	}
	for r, v := range t.bad {
		if v > 0 {
			c.malformed[r].Add(v)
		}
	}
}

// reason is why a datagram was refused as malformed.
type reason int

const (
	reasonShort reason = iota
	reasonMagic
	reasonPlayerID
	reasonLobbyRange
	reasonPlayerTaken
	reasonTooLong
	reasonJoin // a join message that does not decode: not 40 bytes, or a reason set
	numReasons
)

var reasonNames = [numReasons]string{"short", "magic", "player_id", "lobby_range", "player_taken", "too_long", "join"}

// New opens the relay's UDP socket (applying SO_RCVBUF as cfg asks) and its
// control listener, and logs the start line. Nothing is served until Run.
//
// With cfg.HandoffSocket set, it first asks a relayd running there for its
// sockets and lobby table (package handoff), and binds a socket of its own
// only when nobody answers. Then it listens there itself, for the next
// release. With WithSystemd, it takes the socket and the lobby table that
// systemd kept in its fd store, if they fit (fdstore.go), before it binds.
func New(cfg config.Config, version string, log *slog.Logger, opts ...Option) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("check config: %w", err)
	}
	table, err := lobby.New(lobby.Config{Size: cfg.LobbySize, MaxLobbies: cfg.MaxLobbies, IdleTimeout: cfg.IdleTimeout,
		MaxPerAddr: cfg.MaxPlayersPerAddr, MaxPerNet: cfg.MaxPlayersPerNet, Exempt: cfg.Exempt()})
	if err != nil {
		return nil, fmt.Errorf("create lobby table: %w", err)
	}
	jar, err := cookie.New(rand.Reader, time.Now())
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, version: version, log: log, table: table, jar: jar, started: time.Now(),
		targets: make([]netip.AddrPort, 0, cfg.LobbySize-1),
		done:    make(chan struct{}), parked: make(chan struct{}), wake: make(chan bool), forwardDone: make(chan struct{})}
	for _, o := range opts {
		o(s)
	}

	s.rmemMax, err = readIntFile(RmemMaxPath)
	if err != nil {
		log.Warn("cannot read net.core.rmem_max", "err", err)
	}
	if cfg.HandoffSocket != "" {
		in, err := handoff.Dial(cfg.HandoffSocket)
		switch {
		case err == nil:
			s.closeInherited()
			if _, err := s.takeOver(in); err != nil {
				return nil, err
			}
			s.socketFrom = SocketHandoff
			return s, s.finishStart()
		case !errors.Is(err, handoff.ErrNoPeer):
			return nil, fmt.Errorf("RELAYD_HANDOFF_SOCKET %s: %w", cfg.HandoffSocket, err)
		}
	}
	stored, err := s.adoptStored()
	if err != nil {
		s.closeSockets()
		return nil, err
	}
	s.socketFrom = SocketFDStore
	if !stored {
		lc := net.ListenConfig{Control: s.setSockopts}
		pc, err := lc.ListenPacket(context.Background(), "udp4", cfg.Listen)
		if err != nil {
			return nil, fmt.Errorf("listen udp %s: %w", cfg.Listen, err)
		}
		s.boundAt = time.Now()
		s.conn = pc.(*net.UDPConn)
		s.socketFrom = SocketBound
	}
	s.ctl, err = net.Listen("tcp", cfg.Control)
	if err != nil {
		s.conn.Close()
		return nil, fmt.Errorf("listen control %s: %w", cfg.Control, err)
	}
	if err := s.setup(); err != nil {
		s.closeSockets()
		return nil, err
	}
	s.keepInStore()
	return s, s.finishStart()
}

// setup reads the socket's buffer and inode back and builds what serves
// it.
func (s *Server) setup() error {
	raw, err := s.conn.SyscallConn()
	if err != nil {
		return fmt.Errorf("get raw udp socket: %w", err)
	}
	var gerr, serr error
	var st unix.Stat_t
	if err := raw.Control(func(fd uintptr) {
		s.effective, gerr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF)
		serr = unix.Fstat(int(fd), &st)
	}); err != nil || gerr != nil || serr != nil {
		return fmt.Errorf("read back SO_RCVBUF and inode: %w", errors.Join(err, gerr, serr))
	}
	s.inode = st.Ino
	s.io = newBatchIO(raw, s.cfg.Batch, s.cfg.LobbySize-1)
	s.http = &http.Server{Handler: s.handler(), ReadHeaderTimeout: 10 * time.Second}
	return nil
}

// finishStart listens on the handoff socket, if configured, and logs the
// start line. A process that took over keeps serving without a handoff
// socket if it cannot make one: the old process has already exited.
func (s *Server) finishStart() error {
	if s.cfg.HandoffSocket != "" {
		ln, err := handoff.Listen(s.cfg.HandoffSocket, s.log)
		switch {
		case err == nil:
			s.handoffLn = ln
		case s.from != nil:
			s.log.Error("no handoff socket: the next release cannot take over, it must restart", "err", err)
		default:
			s.closeSockets()
			return fmt.Errorf("RELAYD_HANDOFF_SOCKET %s: %w", s.cfg.HandoffSocket, err)
		}
	}
	s.logStart()
	return nil
}

func (s *Server) closeSockets() {
	if s.conn != nil {
		s.conn.Close()
	}
	if s.ctl != nil {
		s.ctl.Close()
	}
}

// setSockopts runs on the socket before bind: the requested buffer, and
// SO_RXQ_OVFL so the kernel reports the socket's drops with each datagram.
func (s *Server) setSockopts(_, _ string, c syscall.RawConn) error {
	var serr error
	err := c.Control(func(fd uintptr) {
		if n := s.cfg.SORcvbuf; n > 0 {
			opt, name := unix.SO_RCVBUF, "SO_RCVBUF"
			if s.cfg.SORcvbufForce {
				opt, name = unix.SO_RCVBUFFORCE, "SO_RCVBUFFORCE"
			}
			if err := unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, opt, n); err != nil {
				serr = fmt.Errorf("set %s %d: %w", name, n, err)
				return
			}
		}
		if err := unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RXQ_OVFL, 1); err != nil {
			serr = fmt.Errorf("set SO_RXQ_OVFL: %w", err)
		}
	})
	return errors.Join(err, serr)
}

func (s *Server) logStart() {
	attrs := []any{"version", s.version, "pid", os.Getpid(),
		"listen", s.ListenAddr().String(), "control", s.ControlAddr().String(),
		"so_rcvbuf_requested", s.cfg.SORcvbuf, "so_rcvbuf_force", s.cfg.SORcvbufForce,
		"so_rcvbuf_effective", s.effective, "rmem_max", s.rmemMax,
		"batch", s.cfg.Batch, "lobby_size", s.cfg.LobbySize, "max_lobbies", s.cfg.MaxLobbies,
		"idle_timeout", s.cfg.IdleTimeout.String(), "socket_inode", s.inode}
	if s.handoffLn != nil {
		attrs = append(attrs, "handoff_socket", s.handoffLn.Path())
	}
	attrs = append(attrs, "socket_from", s.socketFrom)
	if f := s.from; f != nil {
		attrs = append(attrs, "handoff_from_pid", f.fromPID, "handoff_from_version", f.fromVersion,
			"lobbies_restored", f.lobbies, "players_restored", f.players,
			"handoff_pause_us", (f.reading-f.paused)/1e3)
	}
	if s.socketFrom == SocketBound {
		attrs = append(attrs, "socket_bound_at", s.boundAt.UTC().Format(time.RFC3339Nano))
	}
	attrs = append(attrs, s.storeAttrs()...)
	s.log.Info("relayd started", attrs...)
	if msg := cappedWarning(s.cfg.SORcvbuf, s.cfg.SORcvbufForce, s.effective, s.rmemMax); msg != "" {
		s.log.Warn(msg)
	}
}

// cappedWarning explains a buffer smaller than asked. The kernel gives
// 2*min(requested, rmem_max) and says nothing (docs/kernel.md), so
// an effective value under 2*requested means the cap applied.
func cappedWarning(requested int, force bool, effective, rmemMax int) string {
	if requested <= 0 || effective >= 2*requested {
		return ""
	}
	if force {
		return fmt.Sprintf("SO_RCVBUFFORCE capped by the kernel: requested %d, effective %d (want %d)", requested, effective, 2*requested)
	}
	return fmt.Sprintf("SO_RCVBUF capped by the kernel: requested %d, effective %d (want %d); raise net.core.rmem_max (now %d) or use --so-rcvbuf-force",
		requested, effective, 2*requested, rmemMax)
}

// ListenAddr is the UDP address the relay is bound to.
func (s *Server) ListenAddr() netip.AddrPort {
	return s.conn.LocalAddr().(*net.UDPAddr).AddrPort()
}

// ControlAddr is the TCP address of the control plane.
func (s *Server) ControlAddr() netip.AddrPort {
	return s.ctl.Addr().(*net.TCPAddr).AddrPort()
}

// Run relays and serves the control plane until ctx is done, either fails,
// or the relay is handed over to a new process, then closes both. It
// returns nil after a clean stop or a handoff (HandedTo says which).
func (s *Server) Run(ctx context.Context) error {
	errc := make(chan error, 2)
	stopExpiry := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(3)
	go func() {
		defer wg.Done()
		defer close(s.forwardDone)
		errc <- s.forward()
	}()
	go func() {
		defer wg.Done()
		if err := s.http.Serve(s.ctl); !errors.Is(err, http.ErrServerClosed) {
			errc <- fmt.Errorf("serve control: %w", err)
			return
		}
		errc <- nil
	}()
	go func() {
		defer wg.Done()
		s.expireLoop(stopExpiry)
	}()
	stopSaving, saving := make(chan struct{}), make(chan struct{})
	if s.usingStore() {
		go func() {
			defer close(saving)
			s.keepStateLoop(stopSaving)
		}()
	} else {
		close(saving)
	}
	if s.handoffLn != nil {
		wg.Go(func() {
			// A failure here leaves the relay serving; only the next
			// handoff is lost, and /status says so.
			if _, err := s.handoffLn.Serve(s); err != nil {
				s.log.Error("handoff socket stopped", "err", err)
			}
		})
	}

	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	close(stopExpiry)
	close(stopSaving)
	<-saving
	if s.usingStore() && s.HandedTo() == 0 {
		s.saveFinal()
	}
	s.mu.Lock()
	lobbies, players := s.table.Lobbies(), s.table.Players()
	s.mu.Unlock()
	s.Close()
	wg.Wait()
	if s.HandedTo() == 0 { // a handoff logged "handed over" instead
		s.log.Info("socket closed", "at", s.closedAt.UTC().Format(time.RFC3339Nano), "lobbies", lobbies, "players", players,
			"rx_packets", s.c.rxPackets.Load(), "last_read_at", unixNano(s.lastRead.Load()))
	}
	return err
}

// Close stops the relay's socket and control plane. Run calls it; call it
// directly only for a Server that was never run.
func (s *Server) Close() error {
	var err error
	s.closeOnce.Do(func() {
		close(s.done)
		if s.handoffLn != nil {
			if s.HandedTo() > 0 {
				s.handoffLn.Leave() // the path is the new process's now
			} else {
				err = s.handoffLn.Close()
			}
		}
		err = errors.Join(err, s.conn.Close())
		s.closedAt = time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		err = errors.Join(err, s.http.Shutdown(ctx))
		// Shutdown closes only the listeners Serve took; close it anyway
		// for a Server that never ran.
		if cerr := s.ctl.Close(); !errors.Is(cerr, net.ErrClosed) {
			err = errors.Join(err, cerr)
		}
	})
	return err
}

// forward is the relay loop: read a batch, route each datagram, send every
// copy, count. It allocates nothing per datagram. It parks while a handoff
// holds it (Pause) and ends when the relay is handed over.
func (s *Server) forward() error {
	for {
		n, err := s.io.recv()
		if err != nil && s.pausing.Load() && errors.Is(err, os.ErrDeadlineExceeded) {
			if s.park() {
				continue
			}
			return nil
		}
		if err != nil {
			err = fmt.Errorf("receive: %w", err)
		} else {
			err = s.relayBatch(n)
		}
		if errors.Is(err, net.ErrClosed) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// relayBatch handles the n datagrams of the last recv (join.go: forward
// data, answer joins), sends their copies and replies, and counts.
func (s *Server) relayBatch(n int) error {
	var t tally
	drops, sawDrops := uint32(0), false
	now := time.Now()
	s.lastRead.Store(now.UnixNano())
	if s.firstRead.Load() == 0 && n > 0 {
		s.noteFirstRead(now)
	}

	s.mu.Lock()
	for i := 0; i < n; i++ {
		data, truncated, from := s.io.datagram(i)
		t.rxBytes += uint64(len(data))
		if d, ok := s.io.drops(i); ok {
			drops, sawDrops = d, true
		}
		if truncated {
			t.bad[reasonTooLong]++
			continue
		}
		s.handle(i, data, from, now, &t)
	}
	s.mu.Unlock()

	tx, err := s.io.send()
	s.c.rxPackets.Add(uint64(n))
	s.c.add(&t)
	if sawDrops {
		s.c.rxDrops.Store(uint64(drops))
	}
	s.c.txPackets.Add(tx.packets)
	s.c.txBytes.Add(tx.bytes)
	s.c.replies.Add(tx.replies)
	s.c.replyBytes.Add(tx.replyBytes)
	s.c.txErrors.Add(tx.errors)
	if err != nil {
		return fmt.Errorf("send: %w", err)
	}
	return nil
}

// noteFirstRead logs this process's first read, once: after a handoff it
// ends the gap that began with the old process's last read.
func (s *Server) noteFirstRead(now time.Time) {
	if !s.firstRead.CompareAndSwap(0, now.UnixNano()) {
		return
	}
	attrs := []any{"at", now.UTC().Format(time.RFC3339Nano)}
	if f := s.from; f != nil && f.lastRead > 0 {
		attrs = append(attrs, "handoff_gap_us", (now.UnixNano()-f.lastRead)/1e3)
	}
	s.log.Info("first datagram read", attrs...)
}

// expireLoop removes idle players a few times per idle timeout, so a
// player leaves at most a quarter of the timeout late.
func (s *Server) expireLoop(stop <-chan struct{}) {
	every := min(max(s.cfg.IdleTimeout/4, 10*time.Millisecond), time.Second)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case now := <-tick.C:
			s.mu.Lock()
			n := s.table.Expire(now)
			s.mu.Unlock()
			s.c.expired.Add(uint64(n))
		}
	}
}

func readIntFile(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", path, err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, fmt.Errorf("parse %s: %w", path, err)
	}
	return n, nil
}
