package server

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"

	"github.com/relayctl/relayctl/relay/sockstat"
)

// Who may call POST and DELETE /drain: root and the user relayd runs as,
// on the relay host itself. The caller is the owner of the other end of
// the request's connection, which the kernel knows by its four-tuple. Only
// a live end counts (established, with an inode): a caller that closes at
// once leaves a timewait entry in its place, which the kernel lists with
// uid 0 and no inode, and whose uid is nobody's. The same live socket is
// asked for again right before relayd acts.

// drainEnds are the request's two ends: the caller's address and relayd's
// own. why is set when they cannot be told.
func drainEnds(r *http.Request) (from, to netip.AddrPort, why string) {
	from, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return from, to, "the caller's address is unknown"
	}
	at, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if !ok {
		return from, to, "the connection's own address is unknown"
	}
	if to, err = netip.ParseAddrPort(at.String()); err != nil {
		return from, to, "the connection's own address is unknown"
	}
	return from, to, ""
}

// callerSocket is the caller's end of the connection from to to, as the
// kernel lists it: asked of sock_diag by the exact four-tuple or, where a
// sandbox refuses relayd a netlink socket (a systemd unit whose
// RestrictAddressFamilies= leaves out AF_NETLINK), read from its network
// namespace's /proc/net/tcp, whose live line is taken before any other.
// via says which.
func callerSocket(from, to netip.AddrPort) (sock sockstat.TCPSock, found bool, via string, err error) {
	sock, found, err = sockstat.LookupTCP(from, to)
	if !errors.Is(err, sockstat.ErrNoSockDiag) {
		return sock, found, "sock_diag", err
	}
	file := "/proc/self/net/tcp"
	if from.Addr().Unmap().Is6() {
		file = "/proc/self/net/tcp6"
	}
	b, rerr := os.ReadFile(file)
	if rerr != nil {
		return sock, false, file, fmt.Errorf("%w; %w", err, rerr)
	}
	sock, found, err = sockstat.ProcNetTCPSock(b, from, to)
	return sock, found, file, err
}

// callerRefused says why a caller whose socket the kernel lists as sock
// (found or not, as via says) may not change the relay ("" when it may):
// only a live socket of root's or of euid's (relayd's own user) may.
func callerRefused(sock sockstat.TCPSock, found bool, via string, from, to netip.AddrPort, euid int) string {
	switch {
	case !found:
		return fmt.Sprintf("cannot tell who calls: no socket %s to %s (%s)", from, to, via)
	case !sock.Live():
		return fmt.Sprintf("the caller's socket %s to %s is %s with inode %d, not an established one a process holds: keep the connection open until the answer is read", from, to, sock.StateName(), sock.Inode)
	case sock.UID != 0 && int64(sock.UID) != int64(euid):
		return fmt.Sprintf("the caller is uid %d; only root and relayd's own user (uid %d) may call it", sock.UID, euid)
	}
	return ""
}

// callerLeft says why the caller, whose socket was was, no longer stands
// ("" when it still does): the socket now is not the same live one.
func callerLeft(was, now sockstat.TCPSock, found bool, from, to netip.AddrPort) string {
	switch {
	case !found:
		return fmt.Sprintf("the caller's socket %s to %s is gone", from, to)
	case !now.Live():
		return fmt.Sprintf("the caller's socket %s to %s is now %s with inode %d: keep the connection open until the answer is read", from, to, now.StateName(), now.Inode)
	case now.Inode != was.Inode || now.UID != was.UID:
		return fmt.Sprintf("the caller's socket %s to %s changed (inode %d uid %d, was inode %d uid %d)", from, to, now.Inode, now.UID, was.Inode, was.UID)
	}
	return ""
}

// drainRefused says why the request may not change the relay ("" when it
// may). It asks the kernel for the caller's socket twice: to tell who
// calls, then, as the last thing before the handler acts, that the same
// socket still stands.
func (s *Server) drainRefused(r *http.Request) string {
	from, to, why := drainEnds(r)
	if why != "" {
		return why
	}
	if !from.Addr().Unmap().IsLoopback() || r.Header.Get("Origin") != "" {
		return "only a client on the relay host itself (loopback, no browser Origin) may call it"
	}
	sock, found, via, err := callerSocket(from, to)
	if err != nil {
		return "cannot tell who calls: " + err.Error()
	}
	s.noteVia(via)
	if why := callerRefused(sock, found, via, from, to, os.Geteuid()); why != "" {
		return why
	}
	now, found, _, err := callerSocket(from, to)
	if err != nil {
		return "cannot tell who calls: " + err.Error()
	}
	return callerLeft(sock, now, found, from, to)
}

// noteVia warns once when relayd finds callers in /proc/net/tcp rather
// than by sock_diag: the file lists every socket of the namespace,
// listeners first, so it is slower, and a local user holding many
// listeners makes it slower still.
func (s *Server) noteVia(via string) {
	if via == "sock_diag" {
		return
	}
	s.viaProcOnce.Do(func() {
		s.log.Warn("drain: finding callers in "+via+": a netlink socket is refused (a systemd unit needs AF_NETLINK in RestrictAddressFamilies=, as relay/dist/relayd.service has it)", "via", via)
	})
}
