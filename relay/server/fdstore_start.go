package server

import (
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/relayctl/relayctl/relay/fdstore"
	"github.com/relayctl/relayctl/relay/lobby"
)

// What a starting relayd takes from systemd's fd store; fdstore.go has the
// rest (the option, the saves, /status).

// adoptStored takes the UDP socket systemd passed (relayd-udp) when it is
// an IPv4 UDP socket bound where RELAYD_LISTEN says, sets this release's
// socket options on it, and reads the newest state passed. It removes
// from the store whatever it does not use: names it does not know, a
// socket bound elsewhere (a changed RELAYD_LISTEN: the next socket is a
// new one), older states. It reports whether s.conn is now the stored
// socket.
func (s *Server) adoptStored() (bool, error) {
	if s.sd == nil || len(s.sd.files) == 0 {
		return false, nil
	}
	d := s.sd
	inv := fdstore.Sort(d.files)
	defer func() {
		for _, f := range d.files {
			unix.Close(f.FD) // the adopted socket is a duplicate by now
		}
		d.files = nil
	}()
	for _, name := range fdstore.Names(inv.Other) {
		s.log.Warn("fd store: removing a descriptor this relayd does not know", "fdname", name)
		s.removeStored(name)
	}
	s.readStoredState(inv.States)

	conn, refused := pickStoredSocket(inv.UDP, s.cfg.Listen)
	if len(refused) > 0 {
		s.log.Warn("fd store: removing stored sockets this config does not use", "config_listen", s.cfg.Listen, "why", errors.Join(refused...).Error())
		s.removeStored(fdstore.NameUDP)
		if conn == nil && d.store != nil {
			// systemd must have closed its copy before this process binds
			// the address again.
			if err := d.store.Sync(); err != nil {
				d.fail(s, "wait for the removal", err)
			}
		}
	}
	if conn == nil {
		return false, nil
	}
	s.conn = conn
	if len(refused) > 0 && d.store != nil {
		if err := s.putConn(fdstore.NameUDP, conn); err != nil {
			d.fail(s, "store the udp socket again", err)
		}
	}
	raw, err := conn.SyscallConn()
	if err != nil {
		return true, fmt.Errorf("get raw udp socket: %w", err)
	}
	// This release's buffer, against the rmem_max in force now.
	if err := s.setSockopts("", "", raw); err != nil {
		return true, fmt.Errorf("the socket from systemd's fd store: %w", err)
	}
	if s.cfg.SORcvbuf == 0 {
		s.defaultRcvbuf(raw)
	}
	return true, nil
}

// pickStoredSocket returns the first stored socket that fits listen, and
// why each other one does not.
func pickStoredSocket(files []fdstore.File, listen string) (*net.UDPConn, []error) {
	var conn *net.UDPConn
	var refused []error
	for _, f := range files {
		c, err := storedSocket(f.FD, listen)
		switch {
		case err != nil:
			refused = append(refused, err)
		case conn == nil:
			conn = c
		default:
			c.Close()
			refused = append(refused, errors.New("a second stored socket"))
		}
	}
	return conn, refused
}

// storedSocket makes a connection of a stored socket, if it is an IPv4 UDP
// socket bound to the configured address.
func storedSocket(fd int, listen string) (*net.UDPConn, error) {
	// An os.File of its own, closed here: adoptStored closes fd itself.
	nfd, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("use the stored socket: %w", err)
	}
	f := os.NewFile(uintptr(nfd), fdstore.NameUDP)
	defer f.Close()
	pc, err := net.FilePacketConn(f)
	if err != nil {
		return nil, fmt.Errorf("use the stored socket: %w", err)
	}
	conn, ok := pc.(*net.UDPConn)
	if !ok {
		pc.Close()
		return nil, fmt.Errorf("the stored socket is a %T, not a udp socket", pc)
	}
	if err := checkUDP4(conn); err != nil {
		conn.Close()
		return nil, err
	}
	if err := sameAddr(conn.LocalAddr().(*net.UDPAddr).AddrPort(), listen); err != nil {
		conn.Close()
		return nil, fmt.Errorf("the stored socket does not match RELAYD_LISTEN: %w", err)
	}
	return conn, nil
}

// readStoredState picks the newest state that decodes and removes the
// others from the store.
func (s *Server) readStoredState(files []fdstore.File) {
	d := s.sd
	best, ok, refused := fdstore.Newest(files)
	if len(refused) > 0 {
		s.log.Warn("fd store: states passed over", "why", errors.Join(refused...).Error())
	}
	cur, seq := "", uint64(0)
	if ok {
		d.found, cur, seq = &best, best.Name, best.Saved.Seq
	}
	// Two states of the chosen name cannot be told apart in the store: remove
	// both names, and the first save stores a fresh state.
	dup := ok && countName(files, cur) > 1
	for _, name := range []string{fdstore.NameStateA, fdstore.NameStateB} {
		if countName(files, name) > 0 && (name != cur || dup) {
			s.removeStored(name)
		}
	}
	if dup {
		cur = ""
	}
	if d.store != nil {
		d.keeper = fdstore.NewKeeper(d.store, cur, seq)
	}
}

func countName(files []fdstore.File, name string) int {
	n := 0
	for _, f := range files {
		if f.Name == name {
			n++
		}
	}
	return n
}

func (s *Server) removeStored(name string) {
	if !s.usingStore() {
		return
	}
	if err := s.sd.store.Remove(name); err != nil {
		s.sd.fail(s, "remove "+name, err)
	}
}

// keepInStore, once the socket is set up: restores the lobby table and
// the counters from the state found in the store, and stores a socket
// this process bound.
func (s *Server) keepInStore() {
	if s.sd == nil {
		return
	}
	if f := s.sd.found; f != nil {
		s.restoreStored(f.Saved)
	}
	if s.usingStore() && s.socketFrom == SocketBound {
		if err := s.putConn(fdstore.NameUDP, s.conn); err != nil {
			s.sd.fail(s, "store the udp socket", err)
		}
	}
}

// restoreStored fills the lobby table from a saved state, each player idle
// for as long as it was at the save plus the time since: it expires when
// it would have. The counters carry on only on the socket they counted.
// A table that does not fit this config is logged and left out: players
// join again with their next datagram.
func (s *Server) restoreStored(saved fdstore.Saved) {
	now := time.Now()
	age := max(now.Sub(time.Unix(0, saved.State.Paused)), 0)
	s.sd.stateAge = age
	snap, _, err := lobby.DecodeTable(saved.State.Table)
	if err == nil {
		for i := range snap {
			for j := range snap[i].Members {
				m := &snap[i].Members[j]
				m.Idle = min(m.Idle+age, lobby.MaxIdle)
			}
		}
		err = s.table.Restore(snap, now)
	}
	if err != nil {
		s.sd.fail(s, "restore the lobby table", err)
		snap = nil
	}
	if saved.Inode == s.inode {
		s.setCounters(saved.State.Counters)
	}
	s.from = &handoffInfo{fromPID: saved.PID, fromVersion: saved.Release, lastRead: saved.State.LastRead,
		paused: saved.State.Paused, reading: now.UnixNano(), lobbies: len(snap), players: snap.Players()}
}

// closeInherited closes what systemd passed, unused: this process took
// its socket over from a running relayd instead.
func (s *Server) closeInherited() {
	if s.sd == nil {
		return
	}
	for _, f := range s.sd.files {
		unix.Close(f.FD)
	}
	s.sd.files = nil
}
