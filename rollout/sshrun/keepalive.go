package sshrun

import (
	"errors"
	"fmt"
	"math"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/kevinburke/ssh_config"
	"golang.org/x/crypto/ssh"
)

// A host whose network drops its traffic (a partition: its sshd and the
// agent alive, nothing arriving) would hold a session until TCP gave up:
// with nothing in flight, Go's keepalive probes (15 s idle, then 9 probes
// 15 s apart), and with data in flight the kernel's tcp_retries2, about
// 15 minutes. So the client asks the host for an answer every interval,
// as OpenSSH's ServerAliveInterval does (a keepalive@openssh.com global
// request with want-reply, which sshd answers itself, whatever its
// sessions do), and cuts the connection once it has heard nothing at all
// from the host (no answer, no byte) through count intervals in a row: a
// session on it then ends with ErrSilent, as a lost connection, which the
// engine redials within the run's budget (rollout/resync.go).

// Defaults of relayctl's keepalive (docs/cli.md says why).
const (
	DefaultServerAliveInterval = 15 * time.Second
	DefaultServerAliveCountMax = 3
)

// keepaliveRequest is OpenSSH's own, which every sshd answers (a failure,
// for a request it does not know, is an answer too).
const keepaliveRequest = "keepalive@openssh.com"

// alive is a connection's keepalive: every interval, cut after count
// silent ones. A zero interval sends none.
type alive struct {
	interval time.Duration
	count    int
}

// aliveFor is t's keepalive: o's settings (the flags), else t's
// ssh_config, else the defaults. ssh_config's ServerAliveInterval 0 is
// OpenSSH's default (none) and reads as unset: only o turns keepalives
// off. Its ServerAliveCountMax 0, with which OpenSSH cuts at the first
// unanswered keepalive, is a count of 1 here, which does the same.
func aliveFor(o Options, t Target, cfg *ssh_config.Config) (alive, error) {
	a := alive{interval: o.ServerAliveInterval, count: o.ServerAliveCountMax}
	if a.interval < 0 {
		return alive{}, nil
	}
	if a.interval == 0 {
		v, where, err := configSetting(cfg, o.SSHConfig, t.Alias, "ServerAliveInterval")
		if err != nil {
			return alive{}, err
		}
		if v != "" {
			if a.interval, err = openSSHTime(v); err != nil {
				return alive{}, fmt.Errorf("%s: ServerAliveInterval %q for %s: want seconds, or a time such as 1m30s", where, v, t.Alias)
			}
		}
	}
	if a.count <= 0 {
		v, where, err := configSetting(cfg, o.SSHConfig, t.Alias, "ServerAliveCountMax")
		if err != nil {
			return alive{}, err
		}
		if v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				return alive{}, fmt.Errorf("%s: ServerAliveCountMax %q for %s: want a whole number of keepalives, 0 or more", where, v, t.Alias)
			}
			a.count = max(n, 1)
		}
	}
	if a.interval == 0 {
		a.interval = DefaultServerAliveInterval
	}
	if a.count <= 0 {
		a.count = DefaultServerAliveCountMax
	}
	return a, nil
}

// configSetting is key's value for alias in cfg ("" when unset), as
// OpenSSH reads it (the first value given wins), and where it was given:
// "ssh config FILE line N", or the file alone for a value an Include gave.
func configSetting(cfg *ssh_config.Config, path, alias, key string) (value, where string, err error) {
	if cfg == nil {
		return "", "", nil
	}
	file, _, err := sshConfigPath(path)
	if err != nil {
		return "", "", err
	}
	where = "ssh config " + file
	for _, h := range cfg.Hosts {
		if !h.Matches(alias) {
			continue
		}
		for _, n := range h.Nodes {
			switch n := n.(type) {
			case *ssh_config.KV:
				if strings.EqualFold(n.Key, key) {
					return n.Value, fmt.Sprintf("%s line %d", where, n.Pos().Line), nil
				}
			case *ssh_config.Include:
				if v := n.Get(alias, key); v != "" {
					return v, where + " (an Include)", nil
				}
			}
		}
	}
	return "", "", nil
}

// openSSHTime reads a time as ssh_config does: numbers, each followed by
// a unit (s, m, h, d or w, in either case) or by nothing, seconds ("90",
// "1m30s", "1m30"), in all at most 2^31-1 seconds.
func openSSHTime(s string) (time.Duration, error) {
	units := map[byte]int64{'s': 1, 'm': 60, 'h': 3600, 'd': 86400, 'w': 7 * 86400}
	if s == "" {
		return 0, errors.New("empty time")
	}
	var total int64
	for s != "" {
		i := 0
		for i < len(s) && s[i] >= '0' && s[i] <= '9' && i < 10 {
			i++
		}
		if i == 0 {
			return 0, fmt.Errorf("invalid time: %q", s)
		}
		n, _ := strconv.ParseInt(s[:i], 10, 64)
		unit := int64(1)
		if i < len(s) {
			var ok bool
			if unit, ok = units[s[i]|0x20]; !ok {
				return 0, fmt.Errorf("invalid time unit: %q", s[i:])
			}
			i++
		}
		if total += n * unit; total > math.MaxInt32 {
			return 0, errors.New("time too long")
		}
		s = s[i:]
	}
	return time.Duration(total) * time.Second, nil
}

// heardConn counts the bytes read from the host: any of them, an answer
// to a keepalive or a session's output, says the host is there.
type heardConn struct {
	net.Conn
	n atomic.Int64
}

func (c *heardConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// silence counts the intervals in a row through which nothing was heard.
type silence struct {
	count  int   // how many the host may stay silent through
	missed int   // how many it has
	heard  int64 // bytes heard by the end of the last interval
}

// tick ends an interval, with heard the bytes heard so far: whether the
// host has now been silent through count intervals in a row.
func (s *silence) tick(heard int64) (cut bool) {
	if heard != s.heard {
		s.heard, s.missed = heard, 0
		return false
	}
	s.missed++
	return s.missed >= s.count
}

// keepAlive asks conn's host for an answer every interval, one request
// at a time (x/crypto holds a second behind an unanswered first anyway),
// until the connection closes; once the host has been silent through
// a.count intervals it calls cut, which closes the connection.
func keepAlive(conn ssh.Conn, heard *heardConn, a alive, cut func()) {
	closed := make(chan struct{})
	go func() {
		conn.Wait()
		close(closed)
	}()
	tick := time.NewTicker(a.interval)
	defer tick.Stop()
	var asking atomic.Bool
	s := silence{count: a.count, heard: heard.n.Load()}
	for {
		select {
		case <-closed:
			return
		case <-tick.C:
		}
		if s.tick(heard.n.Load()) {
			cut()
			return
		}
		if asking.CompareAndSwap(false, true) {
			go func() {
				// The answer is read as bytes heard; an error is a
				// closed connection, which ends the loop.
				conn.SendRequest(keepaliveRequest, true, nil)
				asking.Store(false)
			}()
		}
	}
}

// silentError is a connection cut by its keepalive.
type silentError struct {
	target Target
	a      alive
}

func (e *silentError) Error() string {
	return fmt.Sprintf("%s: %s: nothing heard through %d keepalives %s apart; the connection was cut", e.target, ErrSilent, e.a.count, e.a.interval)
}

func (e *silentError) Unwrap() error { return ErrSilent }
