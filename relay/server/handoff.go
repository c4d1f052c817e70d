package server

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/relayctl/relayctl/relay/handoff"
	"github.com/relayctl/relayctl/relay/lobby"
)

// The Server is the running relay a handoff transport hands over.
var _ handoff.Relay = (*Server)(nil)

// handoffInfo is what this process knows of the handoff it started from.
type handoffInfo struct {
	fromPID          int
	fromVersion      string
	lastRead         int64 // Unix ns of the old process's last read, 0 if it read nothing
	paused           int64 // Unix ns when the old process stopped reading
	reading          int64 // Unix ns when this process was allowed to read
	lobbies, players int
}

// Hello says who hands over.
func (s *Server) Hello() handoff.Hello {
	return handoff.Hello{PID: os.Getpid(), Version: s.version, Listen: s.ListenAddr().String(), Control: s.ControlAddr().String()}
}

// Files duplicates the UDP socket and the control listener with
// F_DUPFD_CLOEXEC, as plain descriptors (see handoff.Relay).
func (s *Server) Files() (udp, control int, err error) {
	udp, err = dupFD(s.conn)
	if err != nil {
		return -1, -1, fmt.Errorf("duplicate udp socket: %w", err)
	}
	control = -1
	if tl, ok := s.ctl.(*net.TCPListener); ok {
		if control, err = dupFD(tl); err != nil {
			unix.Close(udp)
			return -1, -1, fmt.Errorf("duplicate control listener: %w", err)
		}
	}
	return udp, control, nil
}

func dupFD(c syscall.Conn) (int, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return -1, err
	}
	nfd, derr := -1, error(nil)
	if err := raw.Control(func(fd uintptr) { nfd, derr = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0) }); err != nil {
		return -1, err
	}
	return nfd, derr
}

// Pause stops the relay loop once it has relayed the batch it holds: the
// read deadline in the past makes its next read return at once, without
// a syscall, and it parks. The state is then final: nothing reads the
// socket until Resume or HandedOver.
func (s *Server) Pause() (handoff.State, error) {
	st, err := s.stopReading()
	if err != nil {
		return handoff.State{}, err
	}
	s.log.Info("handoff: stopped reading", "lobbies", st.Lobbies, "players", st.Players,
		"rx_packets", s.c.rxPackets.Load(), "last_read_at", unixNano(s.lastRead.Load()))
	return st.State, nil
}

// pausedState is the state once the relay loop has stopped reading.
type pausedState struct {
	handoff.State
	Lobbies, Players int
}

// stopReading is Pause without its log line: a stop that keeps the state
// in systemd's fd store stops reading the same way.
func (s *Server) stopReading() (pausedState, error) {
	s.pausing.Store(true)
	if err := s.conn.SetReadDeadline(time.Unix(1, 0)); err != nil {
		s.pausing.Store(false)
		return pausedState{}, fmt.Errorf("stop reading: %w", err)
	}
	select {
	case <-s.parked:
	case <-s.forwardDone:
		return pausedState{}, errors.New("stop reading: the relay loop has ended")
	case <-s.done:
		return pausedState{}, errors.New("stop reading: the relay is stopping")
	}
	paused := time.Now()
	s.mu.Lock()
	snap := s.table.Snapshot(paused)
	s.mu.Unlock()
	table, err := lobby.EncodeTable(nil, snap, s.cfg.LobbySize)
	if err != nil {
		s.Resume()
		return pausedState{}, err
	}
	st := handoff.State{LastRead: s.lastRead.Load(), Paused: paused.UnixNano(), Counters: s.counterMap(), Table: table}
	return pausedState{State: st, Lobbies: len(snap), Players: snap.Players()}, nil
}

// Resume reads again after a handoff that did not complete.
func (s *Server) Resume() {
	s.conn.SetReadDeadline(time.Time{})
	s.pausing.Store(false)
	select {
	case s.wake <- true:
	case <-s.done:
	}
	s.log.Info("handoff: reading again")
}

// HandedOver ends the relay loop for good: pid reads the socket now. It
// logs at once what it handed over (the state has been final since Pause),
// before the control plane's shutdown, which may take a while.
func (s *Server) HandedOver(pid int) {
	s.handedTo.Store(int64(pid))
	s.mu.Lock()
	lobbies, players := s.table.Lobbies(), s.table.Players()
	s.mu.Unlock()
	s.log.Info("handed over", "to_pid", pid, "lobbies", lobbies, "players", players,
		"rx_packets", s.c.rxPackets.Load(), "last_read_at", unixNano(s.lastRead.Load()))
	select {
	case s.wake <- false:
	case <-s.done:
	}
}

// HandedTo is the pid of the process this one handed over to, 0 if none.
func (s *Server) HandedTo() int { return int(s.handedTo.Load()) }

// park is the relay loop waiting while paused; it reports whether to read
// again.
func (s *Server) park() bool {
	select {
	case s.parked <- struct{}{}:
	case <-s.done:
		return false
	}
	select {
	case resume := <-s.wake:
		return resume
	case <-s.done:
		return false
	}
}

// takeOver builds the relay on the sockets of a running relayd and takes
// its state. Any failure before Commit gives the socket back (Abort): the
// old process keeps or resumes reading.
func (s *Server) takeOver(in handoff.Incoming) (*Server, error) {
	from := in.From()
	udpF, ctlF := in.Files()
	closeFiles := func() {
		udpF.Close()
		if ctlF != nil {
			ctlF.Close()
		}
	}
	// undo puts back the socket's receive buffer if this process changed it
	// and then gives the socket back: the old process must read on with
	// the buffer it had, or a failed handoff leaves a host in between.
	undo := func() {}
	fail := func(err error) (*Server, error) {
		undo()
		in.Abort(err.Error())
		closeFiles()
		if s.conn != nil {
			s.conn.Close()
		}
		if s.ctl != nil {
			s.ctl.Close()
		}
		return nil, fmt.Errorf("take over from relayd pid %d (%s), which keeps serving: %w", from.PID, from.Version, err)
	}
	pc, err := net.FilePacketConn(udpF)
	if err != nil {
		return fail(fmt.Errorf("use the inherited udp socket: %w", err))
	}
	conn, ok := pc.(*net.UDPConn)
	if !ok {
		pc.Close()
		return fail(fmt.Errorf("the inherited socket is a %T, not a udp socket", pc))
	}
	s.conn = conn
	if err := sameAddr(conn.LocalAddr().(*net.UDPAddr).AddrPort(), s.cfg.Listen); err != nil {
		return fail(fmt.Errorf("the inherited udp socket does not match RELAYD_LISTEN: %w", err))
	}
	if err := checkUDP4(conn); err != nil {
		return fail(err)
	}
	raw, err := conn.SyscallConn()
	if err != nil {
		return fail(fmt.Errorf("get raw udp socket: %w", err))
	}
	// The buffer this release asks for, against the rmem_max in force now:
	// the point of handing over rather than restarting with a new socket.
	var before int
	var gerr error
	if cerr := raw.Control(func(fd uintptr) { before, gerr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF) }); cerr != nil || gerr != nil {
		return fail(fmt.Errorf("read the inherited socket's SO_RCVBUF: %w", errors.Join(cerr, gerr)))
	}
	if err := s.setSockopts("", "", raw); err != nil {
		return fail(err)
	}
	undo = func() { restoreRcvbuf(raw, before, s.log) }
	if s.cfg.SORcvbuf == 0 {
		s.defaultRcvbuf(raw)
	}
	if ctlF != nil {
		if ln, err := net.FileListener(ctlF); err == nil {
			if sameAddr(ln.Addr().(*net.TCPAddr).AddrPort(), s.cfg.Control) == nil {
				s.ctl = ln
			} else {
				ln.Close()
			}
		}
	}
	if s.ctl == nil {
		if s.ctl, err = net.Listen("tcp", s.cfg.Control); err != nil {
			return fail(fmt.Errorf("listen control %s: %w", s.cfg.Control, err))
		}
	}
	closeFiles()
	if err := s.setup(); err != nil {
		return fail(err)
	}

	st, err := in.Ready()
	if err != nil {
		return fail(err)
	}
	snap, _, err := lobby.DecodeTable(st.Table)
	if err == nil {
		err = s.table.Restore(snap, time.Now())
	}
	if err != nil {
		return fail(err)
	}
	s.setCounters(st.Counters)
	if err := in.Commit(); err != nil {
		// DONE may or may not have reached the old process: it either
		// exits or reads again, and this one must not read.
		s.closeSockets()
		return nil, fmt.Errorf("take over from relayd pid %d: confirm: %w", from.PID, err)
	}
	s.from = &handoffInfo{fromPID: from.PID, fromVersion: from.Version, lastRead: st.LastRead, paused: st.Paused,
		reading: time.Now().UnixNano(), lobbies: len(snap), players: snap.Players()}
	return s, nil
}

// restoreRcvbuf asks for the receive buffer a socket had (getsockopt's
// doubled value): the kernel doubles a request, so half of it; with
// SO_RCVBUFFORCE first, which ignores rmem_max where this process may.
// defaultRcvbuf gives an inherited socket the buffer a new socket would
// get, net.core.rmem_default, for a release that asks for none: so a
// handoff leaves the same rb as a restart would (what relayctl predicts and
// reads back), and a handoff back to such a release, relayctl's rollback,
// puts back the buffer the socket had. The kernel doubles the request:
// rmem_default/2 gives rb rmem_default, unless rmem_max caps it.
func (s *Server) defaultRcvbuf(raw syscall.RawConn) {
	want, err := readIntFile(RmemDefaultPath)
	if err != nil || want <= 0 {
		s.log.Warn("inherited socket keeps its receive buffer: RELAYD_SO_RCVBUF is 0 and net.core.rmem_default cannot be read", "err", err)
		return
	}
	var got int
	var serr error
	raw.Control(func(fd uintptr) {
		if serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, want/2); serr == nil {
			got, serr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF)
		}
	})
	if serr != nil || got != want {
		s.log.Warn("inherited socket: could not give it net.core.rmem_default's buffer", "rmem_default", want, "rb", got, "err", serr)
	}
}

func restoreRcvbuf(raw syscall.RawConn, rb int, log *slog.Logger) {
	var got int
	raw.Control(func(fd uintptr) {
		if unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, rb/2) != nil {
			unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, rb/2)
		}
		got, _ = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF)
	})
	if got != rb {
		log.Warn("handoff aborted: could not put the socket's receive buffer back", "had", rb, "now", got)
	}
}

// sameAddr checks that a socket's address is the configured one; a
// configured port 0 (any port) matches any port.
func sameAddr(got netip.AddrPort, want string) error {
	w, err := netip.ParseAddrPort(want)
	if err != nil {
		return err
	}
	if got.Addr().Unmap() != w.Addr() || (got.Port() != w.Port() && w.Port() != 0) {
		return fmt.Errorf("bound to %s, configured %s", got, want)
	}
	return nil
}

// checkUDP4 makes sure the inherited socket is an IPv4 UDP socket, as
// relayd's own would be.
func checkUDP4(c *net.UDPConn) error {
	raw, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var dom, typ, proto int
	var derr, terr, perr error
	if err := raw.Control(func(fd uintptr) {
		dom, derr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_DOMAIN)
		typ, terr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_TYPE)
		proto, perr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_PROTOCOL)
	}); err != nil {
		return err
	}
	if err := errors.Join(derr, terr, perr); err != nil {
		return fmt.Errorf("inspect the inherited socket: %w", err)
	}
	// Go takes any IPv4 datagram socket for a UDP one (UDP-Lite, ICMP ping
	// sockets too): the protocol says which it is.
	if dom != unix.AF_INET || typ != unix.SOCK_DGRAM || proto != unix.IPPROTO_UDP {
		return fmt.Errorf("the inherited socket is domain %d type %d protocol %d, want AF_INET SOCK_DGRAM IPPROTO_UDP", dom, typ, proto)
	}
	return nil
}

// counterMap names the counters as /status does, for the next process.
func (s *Server) counterMap() map[string]uint64 {
	m := map[string]uint64{
		"rx_packets": s.c.rxPackets.Load(), "rx_bytes": s.c.rxBytes.Load(),
		"tx_packets": s.c.txPackets.Load(), "tx_bytes": s.c.txBytes.Load(), "tx_errors": s.c.txErrors.Load(),
		"rx_drops": s.c.rxDrops.Load(), "forwarded": s.c.forwarded.Load(), "lobby_full": s.c.lobbyFull.Load(),
		"expired_players": s.c.expired.Load(), "refused_draining": s.c.refusedDraining.Load(),
	}
	for r, name := range reasonNames {
		m["malformed_"+name] = s.c.malformed[r].Load()
	}
	return m
}

// setCounters carries on from the previous process's counters, so /status
// counts since the socket was created; names it does not know are ignored.
func (s *Server) setCounters(m map[string]uint64) {
	set := map[string]interface{ Store(uint64) }{
		"rx_packets": &s.c.rxPackets, "rx_bytes": &s.c.rxBytes, "tx_packets": &s.c.txPackets,
		"tx_bytes": &s.c.txBytes, "tx_errors": &s.c.txErrors, "rx_drops": &s.c.rxDrops,
		"forwarded": &s.c.forwarded, "lobby_full": &s.c.lobbyFull, "expired_players": &s.c.expired,
		"refused_draining": &s.c.refusedDraining,
	}
	for r, name := range reasonNames {
		set["malformed_"+name] = &s.c.malformed[r]
	}
	for name, v := range m {
		if c, ok := set[name]; ok {
			c.Store(v)
		}
	}
}

func unixNano(ns int64) string {
	if ns == 0 {
		return ""
	}
	return time.Unix(0, ns).UTC().Format(time.RFC3339Nano)
}
