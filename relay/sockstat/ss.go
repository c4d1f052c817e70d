// Package sockstat parses what a host prints about its UDP sockets: the
// lines of `ss -u -m`, /proc/net/udp{,6} and the Udp counters of
// /proc/net/snmp. These are read back after a change, because the socket
// is the only proof the kernel gave the relay the buffer it asked for
// (docs/kernel.md). It also asks the kernel about one TCP connection's end
// (LookupTCP, or ProcNetTCPSock from /proc/net/tcp): relayd tells by it who
// calls its /drain.
//
// The input comes from remote hosts and is untrusted: every parser returns
// an error naming the line instead of guessing, and never panics.
package sockstat

import (
	"fmt"
	"strconv"
	"strings"
)

// Socket is one line of `ss -H -O -u -l -n -m -p 'sport = :PORT'`.
type Socket struct {
	State   string // UNCONN for a bound UDP socket, ESTAB for a connected one
	Local   string // the local address without port or brackets: "127.0.0.1", "::", "*", "127.0.0.53%lo"
	Port    int    // the local port
	Rmem    uint64 // skmem r: bytes charged to the receive queue (truesize, not payload)
	Rcvbuf  uint64 // skmem rb: the receive buffer, as getsockopt(SO_RCVBUF) reads it
	Wmem    uint64 // skmem t
	Sndbuf  uint64 // skmem tb
	Drops   uint64 // skmem d: datagrams dropped on this socket, the same counter as /proc/net/udp's drops
	Inode   uint64 // ino: with ss -e, the socket's inode (fstat's st_ino), the same while the socket lives; 0 without -e
	PIDs    []int  // users:(...) process ids, in ss's order, without repeats; empty without -p
	Process string // the first process name in users:(...); "" without -p
}

// ParseSS parses the output of `ss -u -n -m` (with or without -H, -O and
// -p). Each socket must carry its skmem:(...) block; without -O, ss wraps it
// onto an indented second line, which is joined back. Empty output is no
// sockets.
func ParseSS(out []byte) ([]Socket, error) {
	type line struct {
		n    int
		text string
	}
	var lines []line
	for i, raw := range strings.Split(string(out), "\n") {
		text := strings.TrimRight(raw, " \t\r")
		switch {
		case strings.TrimSpace(text) == "":
			continue
		case text[0] == ' ' || text[0] == '\t':
			if len(lines) == 0 {
				return nil, fmt.Errorf("parse ss line %d: continuation with no socket line before it", i+1)
			}
			lines[len(lines)-1].text += " " + strings.TrimSpace(text)
			continue
		case strings.HasPrefix(text, "State ") || strings.HasPrefix(text, "Netid "):
			continue // the header, when ss ran without -H
		}
		lines = append(lines, line{i + 1, text})
	}
	socks := make([]Socket, 0, len(lines))
	for _, l := range lines {
		s, err := parseSSLine(l.text)
		if err != nil {
			return nil, fmt.Errorf("parse ss line %d: %w", l.n, err)
		}
		socks = append(socks, s)
	}
	return socks, nil
}

func parseSSLine(text string) (Socket, error) {
	var s Socket
	si := strings.LastIndex(text, "skmem:(")
	if si < 0 {
		return s, fmt.Errorf("no skmem:(...) in %q (run ss with -m)", clip(text))
	}
	head := text[:si]
	if ui := strings.Index(head, "users:("); ui >= 0 {
		pids, name, rest, err := parseUsers(head[ui+len("users:("):])
		if err != nil {
			return s, err
		}
		s.PIDs, s.Process = pids, name
		// With -e as well, uid:, ino: and sk: follow users:(...); a
		// process name may hold "ino:", so only what follows its end counts.
		head = head[:ui] + " " + rest
	}
	f := strings.Fields(head)
	if len(f) > 0 && isNetid(f[0]) {
		f = f[1:] // ss prints a Netid column when asked for several socket types
	}
	if len(f) < 5 {
		return s, fmt.Errorf("want state, Recv-Q, Send-Q, local and peer address before skmem, got %q", clip(head))
	}
	s.State = f[0]
	var err error
	if s.Local, s.Port, err = splitAddrPort(f[3]); err != nil {
		return s, err
	}
	for _, x := range f[5:] { // ss -e: ino:78944 sk:104d cgroup:/ <->
		if v, ok := strings.CutPrefix(x, "ino:"); ok {
			if s.Inode, err = strconv.ParseUint(v, 10, 64); err != nil {
				return s, fmt.Errorf("ino %q is not a number", clip(v))
			}
		}
	}
	end := strings.IndexByte(text[si:], ')')
	if end < 0 {
		return s, fmt.Errorf("skmem:( has no closing parenthesis")
	}
	mem, err := parseSkmem(text[si+len("skmem:(") : si+end])
	if err != nil {
		return s, err
	}
	for _, k := range []string{"r", "rb", "t", "tb", "d"} {
		if _, ok := mem[k]; !ok {
			return s, fmt.Errorf("skmem has no %s field", k)
		}
	}
	s.Rmem, s.Rcvbuf, s.Wmem, s.Sndbuf, s.Drops = mem["r"], mem["rb"], mem["t"], mem["tb"], mem["d"]
	return s, nil
}

func isNetid(s string) bool {
	switch s {
	case "udp", "tcp", "raw", "u_dgr", "u_str", "u_seq", "p_raw", "p_dgr", "nl", "sctp", "mptcp":
		return true
	}
	return false
}

// splitAddrPort splits ss's "addr:port" at the last colon: 127.0.0.1:7788,
// [::1]:7788, *:7788, 127.0.0.53%lo:7788, [fe80::1]%eth0:123.
func splitAddrPort(s string) (string, int, error) {
	i := strings.LastIndexByte(s, ':')
	if i < 0 {
		return "", 0, fmt.Errorf("local address %q has no port", clip(s))
	}
	addr, ps := s[:i], s[i+1:]
	port, err := strconv.Atoi(ps)
	if err != nil || port < 0 || port > 65535 || ps[0] == '+' {
		return "", 0, fmt.Errorf("local port %q is not a number from 0 to 65535 (run ss with -n)", clip(ps))
	}
	if strings.HasPrefix(addr, "[") {
		j := strings.IndexByte(addr, ']')
		if j < 0 {
			return "", 0, fmt.Errorf("local address %q has no closing bracket", clip(s))
		}
		addr = addr[1:j] + addr[j+1:]
	}
	if addr == "" {
		return "", 0, fmt.Errorf("local address %q is empty", clip(s))
	}
	return addr, port, nil
}

// parseSkmem parses "r0,rb425984,t0,tb212992,f0,w0,o0,bl0,d0".
func parseSkmem(s string) (map[string]uint64, error) {
	m := map[string]uint64{}
	for _, item := range strings.Split(s, ",") {
		i := strings.IndexFunc(item, func(r rune) bool { return r >= '0' && r <= '9' })
		if i <= 0 {
			return nil, fmt.Errorf("skmem item %q is not a name and a number", clip(item))
		}
		name := item[:i]
		for _, r := range name {
			if r < 'a' || r > 'z' {
				return nil, fmt.Errorf("skmem item %q is not a name and a number", clip(item))
			}
		}
		v, err := strconv.ParseUint(item[i:], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("skmem item %q is not a name and a number", clip(item))
		}
		if _, dup := m[name]; dup {
			return nil, fmt.Errorf("skmem has %s twice", name)
		}
		m[name] = v
	}
	return m, nil
}

// parseUsers parses the inside of users:(...), e.g.
// ("relayd",pid=123,fd=3),("relayd",pid=124,fd=3)), and returns what
// follows its closing parenthesis. A process name may hold any character,
// so a name ends at the `",pid=` that follows it.
func parseUsers(s string) ([]int, string, string, error) {
	var pids []int
	var first string
	for {
		if !strings.HasPrefix(s, `("`) {
			return nil, "", "", fmt.Errorf("users: want (\"name\",pid=N,...), got %q", clip(s))
		}
		s = s[2:]
		end := strings.Index(s, `",pid=`)
		if end < 0 {
			return nil, "", "", fmt.Errorf("users: no pid after process name in %q", clip(s))
		}
		name := s[:end]
		s = s[end+len(`",pid=`):]
		n := 0
		for n < len(s) && s[n] >= '0' && s[n] <= '9' {
			n++
		}
		pid, err := strconv.Atoi(s[:n])
		if err != nil || pid <= 0 {
			return nil, "", "", fmt.Errorf("users: pid %q of %q is not a positive number", clip(s), clip(name))
		}
		s = s[n:]
		// Skip the rest of this entry (",fd=3" and anything newer ss adds).
		closing := strings.IndexByte(s, ')')
		if closing < 0 {
			return nil, "", "", fmt.Errorf("users: entry for pid %d is not closed", pid)
		}
		s = s[closing+1:]
		if first == "" {
			first = name
		}
		if !containsInt(pids, pid) {
			pids = append(pids, pid)
		}
		switch {
		case strings.HasPrefix(s, ","):
			s = s[1:]
		case strings.HasPrefix(strings.TrimLeft(s, " "), ")"):
			return pids, first, strings.TrimLeft(s, " ")[1:], nil
		default:
			return nil, "", "", fmt.Errorf("users: want ',' or ')' after pid %d, got %q", pid, clip(s))
		}
	}
}

func containsInt(xs []int, x int) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

// FilterPort returns the sockets bound to local port port.
func FilterPort(socks []Socket, port int) []Socket {
	var out []Socket
	for _, s := range socks {
		if s.Port == port {
			out = append(out, s)
		}
	}
	return out
}

func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}
