package server

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// SetRcvbuf asks for a new receive buffer on the socket the relay serves,
// without closing it (relayd's SIGHUP): the kernel applies setsockopt to a
// live socket at once, against the rmem_max in force now, so raising both
// takes no restart and cuts no player. n 0 gives the socket
// net.core.rmem_default's buffer, as a new socket would get. It returns
// what getsockopt reads back (rb in ss).
func (s *Server) SetRcvbuf(n int, force bool) (int, error) {
	raw, err := s.conn.SyscallConn()
	if err != nil {
		return 0, fmt.Errorf("get raw udp socket: %w", err)
	}
	s.bufMu.Lock()
	defer s.bufMu.Unlock()
	old, oldForce := s.cfg.SORcvbuf, s.cfg.SORcvbufForce
	s.cfg.SORcvbuf, s.cfg.SORcvbufForce = n, force
	if n > 0 {
		err = s.setSockopts("", "", raw)
	} else {
		s.defaultRcvbuf(raw)
	}
	var got int
	var gerr error
	if cerr := raw.Control(func(fd uintptr) { got, gerr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF) }); cerr != nil || gerr != nil {
		err = fmt.Errorf("read back SO_RCVBUF: %w", firstErr(cerr, gerr))
	}
	if err != nil {
		s.cfg.SORcvbuf, s.cfg.SORcvbufForce = old, oldForce
		return s.effective, err
	}
	s.effective = got
	s.log.Info("receive buffer set on the live socket", "so_rcvbuf_requested", n, "so_rcvbuf_force", force, "so_rcvbuf_effective", got, "socket_inode", s.inode)
	return got, nil
}

func firstErr(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}
