// Package config is relayd's configuration: its defaults, the environment
// file relayctl writes (one KEY=VALUE a line, also usable as a systemd
// EnvironmentFile), and the same keys read from the process environment.
//
// relayd reads its configuration once, at start; a change takes effect at
// the next restart.
package config

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/relayctl/relayctl/relay/lobby"
)

// DefaultPath is where relayd looks for its config file when --config is
// not given.
const DefaultPath = "/etc/relay/relayd.env"

// Limits of the numeric keys.
const (
	MaxSORcvbuf    = math.MaxInt32 / 2 // the kernel caps here before doubling into an int
	MaxBatch       = 1024              // UIO_MAXIOV, the most recvmmsg/sendmmsg take
	MaxIdleTimeout = 24 * time.Hour
	// MaxPlayersPerSource bounds the per-source limits: more than the
	// largest table holds would be no limit at all.
	MaxPlayersPerSource = lobby.MaxMaxLobbies
)

// Config is everything relayd can be told.
type Config struct {
	Listen        string        // UDP, IPv4 address:port
	Control       string        // TCP, loopback address:port
	SORcvbuf      int           // bytes to ask with setsockopt; 0 leaves the kernel default
	SORcvbufForce bool          // use SO_RCVBUFFORCE, which ignores net.core.rmem_max
	LobbySize     int           // players per lobby
	MaxLobbies    int           // lobby ids are 0 <= id < MaxLobbies
	IdleTimeout   time.Duration // a silent player is removed after this long
	Batch         int           // datagrams per recvmmsg/sendmmsg; 1 turns batching off
	// HandoffSocket is the Unix socket where a running relayd hands its UDP
	// socket and lobby table to a new one started with the same config; ""
	// turns handoff off (docs/relayd.md, "Handoff").
	HandoffSocket string
	// MaxPlayersPerAddr and MaxPlayersPerNet bound the players one IPv4
	// address, and one /24, may hold across all lobbies, so that no single
	// source can squat the relay's lobbies (docs/relayd.md, "Who may join").
	MaxPlayersPerAddr int
	MaxPlayersPerNet  int
	// ExemptSources are IPv4 prefixes held to no limit on the players
	// they hold across lobbies, comma separated in canonical form; none by
	// default. Every process on the relay host can send from its
	// loopback, so exempting it would let any local user squat the
	// lobbies: a bench opts in with the addresses it sends from. No source,
	// exempt or not, may hold every seat of a lobby.
	ExemptSources string
}

// Default returns the configuration relayd uses when nothing is set.
func Default() Config {
	return Config{
		Listen:      "0.0.0.0:7788",
		Control:     "127.0.0.1:7789",
		LobbySize:   8,
		MaxLobbies:  4096,
		IdleTimeout: 30 * time.Second,
		Batch:       64,

		MaxPlayersPerAddr: 16,
		MaxPlayersPerNet:  64,
	}
}

// Exempt returns ExemptSources as prefixes; a Config that passed Validate
// has only valid ones.
func (c Config) Exempt() []netip.Prefix {
	ps, _ := parsePrefixes(c.ExemptSources)
	return ps
}

// key is one setting: its name in files and the environment, how to set it
// from text (validating it), and how to render it.
type key struct {
	name   string
	set    func(c *Config, v string) error
	render func(c Config) string
}

// keys is the fixed order Render writes.
var keys = []key{
	{"RELAYD_LISTEN", func(c *Config, v string) error { c.Listen = v; return checkListen(v) },
		func(c Config) string { return c.Listen }},
	{"RELAYD_CONTROL", func(c *Config, v string) error { c.Control = v; return checkControl(v) },
		func(c Config) string { return c.Control }},
	{"RELAYD_SO_RCVBUF", func(c *Config, v string) (err error) { c.SORcvbuf, err = parseInt(v, 0, MaxSORcvbuf); return },
		func(c Config) string { return strconv.Itoa(c.SORcvbuf) }},
	{"RELAYD_SO_RCVBUF_FORCE", func(c *Config, v string) (err error) { c.SORcvbufForce, err = parseBool(v); return },
		func(c Config) string { return strconv.FormatBool(c.SORcvbufForce) }},
	{"RELAYD_LOBBY_SIZE", func(c *Config, v string) (err error) {
		c.LobbySize, err = parseInt(v, lobby.MinSize, lobby.MaxSize)
		return
	},
		func(c Config) string { return strconv.Itoa(c.LobbySize) }},
	{"RELAYD_MAX_LOBBIES", func(c *Config, v string) (err error) { c.MaxLobbies, err = parseInt(v, 1, lobby.MaxMaxLobbies); return },
		func(c Config) string { return strconv.Itoa(c.MaxLobbies) }},
	{"RELAYD_IDLE_TIMEOUT", func(c *Config, v string) (err error) { c.IdleTimeout, err = parseDuration(v); return },
		func(c Config) string { return c.IdleTimeout.String() }},
	{"RELAYD_BATCH", func(c *Config, v string) (err error) { c.Batch, err = parseInt(v, 1, MaxBatch); return },
		func(c Config) string { return strconv.Itoa(c.Batch) }},
	{"RELAYD_HANDOFF_SOCKET", func(c *Config, v string) error { c.HandoffSocket = v; return checkHandoffSocket(v) },
		func(c Config) string { return c.HandoffSocket }},
	{"RELAYD_MAX_PLAYERS_PER_ADDR", func(c *Config, v string) (err error) {
		c.MaxPlayersPerAddr, err = parseInt(v, 1, MaxPlayersPerSource)
		return
	},
		func(c Config) string { return strconv.Itoa(c.MaxPlayersPerAddr) }},
	{"RELAYD_MAX_PLAYERS_PER_NET", func(c *Config, v string) (err error) {
		c.MaxPlayersPerNet, err = parseInt(v, 1, MaxPlayersPerSource)
		return
	},
		func(c Config) string { return strconv.Itoa(c.MaxPlayersPerNet) }},
	{"RELAYD_EXEMPT_SOURCES", func(c *Config, v string) error {
		ps, err := parsePrefixes(v)
		c.ExemptSources = joinPrefixes(ps)
		return err
	},
		func(c Config) string { return c.ExemptSources }},
}

// optional are the keys Render writes only when they differ from the
// default, so that configs rendered before the keys existed do not change.
var optional = map[string]bool{"RELAYD_HANDOFF_SOCKET": true, "RELAYD_MAX_PLAYERS_PER_ADDR": true,
	"RELAYD_MAX_PLAYERS_PER_NET": true, "RELAYD_EXEMPT_SOURCES": true}

func lookup(name string) (key, bool) {
	for _, k := range keys {
		if k.name == name {
			return k, true
		}
	}
	return key{}, false
}

// Keys returns the names of every setting, in the order Render writes them.
func Keys() []string {
	names := make([]string, len(keys))
	for i, k := range keys {
		names[i] = k.name
	}
	return names
}

// Parse reads an environment file over Default(). filename is used in
// errors only, which name file:line and the key.
func Parse(r io.Reader, filename string) (Config, error) {
	c := Default()
	seen := map[string]int{}
	sc := bufio.NewScanner(r)
	line := 0
	for sc.Scan() {
		line++
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		name, value, ok := strings.Cut(text, "=")
		if !ok {
			return Config{}, fmt.Errorf("%s:%d: want KEY=VALUE, got %q", filename, line, text)
		}
		name, value = strings.TrimSpace(name), unquote(strings.TrimSpace(value))
		k, ok := lookup(name)
		if !ok {
			return Config{}, fmt.Errorf("%s:%d: unknown key %q (known: %s)", filename, line, name, strings.Join(Keys(), ", "))
		}
		if first, dup := seen[name]; dup {
			return Config{}, fmt.Errorf("%s:%d: %s: set twice (first at line %d)", filename, line, name, first)
		}
		seen[name] = line
		if err := k.set(&c, value); err != nil {
			return Config{}, fmt.Errorf("%s:%d: %s: %w", filename, line, name, err)
		}
	}
	if err := sc.Err(); err != nil {
		return Config{}, fmt.Errorf("read %s: %w", filename, err)
	}
	return c, nil
}

// unquote strips one pair of matching quotes, as systemd does for an
// EnvironmentFile, so both readers see the same value.
func unquote(v string) string {
	if len(v) >= 2 && (v[0] == '"' || v[0] == '\'') && v[len(v)-1] == v[0] {
		return v[1 : len(v)-1]
	}
	return v
}

// Load reads the config file at path over Default(). A missing file is an
// error only when mustExist is set (the path was given explicitly).
func Load(path string, mustExist bool) (Config, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) && !mustExist {
		return Default(), nil
	}
	if err != nil {
		return Config{}, fmt.Errorf("open config: %w", err)
	}
	defer f.Close()
	return Parse(f, path)
}

// FromEnv applies the RELAYD_* variables of environ (as os.Environ returns
// it) over c. An unknown RELAYD_ variable is an error, so that a misspelt
// key is not silently ignored.
func FromEnv(c Config, environ []string) (Config, error) {
	for _, kv := range environ {
		name, value, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, "RELAYD_") {
			continue
		}
		k, ok := lookup(name)
		if !ok {
			return Config{}, fmt.Errorf("environment: unknown variable %s (known: %s)", name, strings.Join(Keys(), ", "))
		}
		if err := k.set(&c, value); err != nil {
			return Config{}, fmt.Errorf("environment: %s: %w", name, err)
		}
	}
	return c, nil
}

// Set applies one KEY=VALUE setting by its key name, as the file and the
// environment do. relayd's flags use it so that all three agree.
func (c *Config) Set(name, value string) error {
	k, ok := lookup(name)
	if !ok {
		return fmt.Errorf("unknown key %q", name)
	}
	if err := k.set(c, value); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

// Get returns the value of one key as the file would hold it, or "" for an
// unknown key.
func (c Config) Get(name string) string {
	if k, ok := lookup(name); ok {
		return k.render(c)
	}
	return ""
}

// Validate checks every field, for a Config built in code rather than
// parsed.
func (c Config) Validate() error {
	for _, k := range keys {
		var probe Config
		if err := k.set(&probe, k.render(c)); err != nil {
			return fmt.Errorf("%s: %w", k.name, err)
		}
	}
	return nil
}

// Render writes c as an environment file that Parse reads back to c: a
// header comment, then every key in a fixed order. The optional keys
// (RELAYD_HANDOFF_SOCKET and the per-source limits) are written only when
// they differ from the default, so configs rendered before they existed do
// not change.
func (c Config) Render() []byte {
	var b strings.Builder
	b.WriteString("# written by relayctl; relayd reads it at start, so restart relayd to apply a change\n")
	def := Default()
	for _, k := range keys {
		if optional[k.name] && k.render(c) == k.render(def) {
			continue
		}
		b.WriteString(k.name)
		b.WriteByte('=')
		b.WriteString(k.render(c))
		b.WriteByte('\n')
	}
	return []byte(b.String())
}

func parseInt(v string, lo, hi int) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi || strconv.Itoa(n) != v {
		return 0, fmt.Errorf("want a decimal integer from %d to %d, got %q", lo, hi, v)
	}
	return n, nil
}

func parseBool(v string) (bool, error) {
	switch v {
	case "true":
		return true, nil
	case "false":
		return false, nil
	}
	return false, fmt.Errorf("want true or false, got %q", v)
}

func parseDuration(v string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 || d > MaxIdleTimeout {
		return 0, fmt.Errorf("want a Go duration more than 0 and at most %v (like 30s), got %q", MaxIdleTimeout, v)
	}
	return d, nil
}

// checkListen accepts an IPv4 address and port: relayd listens with udp4
// so that its counters are the IPv4 ones in /proc/net/udp and snmp.
func checkListen(v string) error {
	ap, err := netip.ParseAddrPort(v)
	if err != nil || !ap.Addr().Is4() {
		return fmt.Errorf("want an IPv4 address and port like 0.0.0.0:7788, got %q", v)
	}
	return nil
}

// MaxSocketPath is the longest Unix socket path: sun_path holds 108 bytes
// with the terminating NUL.
const MaxSocketPath = 107

// checkHandoffSocket accepts "" (no handoff) or a clean absolute path short
// enough for a Unix socket. Whether its folder is safe is checked when
// relayd starts, on the host it runs on.
func checkHandoffSocket(v string) error {
	if v == "" {
		return nil
	}
	if !filepath.IsAbs(v) || filepath.Clean(v) != v || strings.ContainsAny(v, "\x00\n") || filepath.Dir(v) == v {
		return fmt.Errorf("want a clean absolute path like /run/relayd/handoff.sock, or nothing, got %q", v)
	}
	if len(v) > MaxSocketPath {
		return fmt.Errorf("path %q is %d bytes, a Unix socket path takes at most %d", v, len(v), MaxSocketPath)
	}
	return nil
}

// parsePrefixes reads a comma-separated list of IPv4 prefixes in
// canonical form (10.0.0.0/8, not 10.1.2.3/8), "" for none.
func parsePrefixes(v string) ([]netip.Prefix, error) {
	var ps []netip.Prefix
	for f := range strings.SplitSeq(v, ",") {
		f = strings.TrimSpace(f)
		if f == "" && strings.TrimSpace(v) == "" {
			break
		}
		p, err := netip.ParsePrefix(f)
		switch {
		case err != nil || !p.Addr().Is4():
			return nil, fmt.Errorf("want IPv4 prefixes like 127.0.0.0/8,192.0.2.10/32 separated by commas, or nothing, got %q", f)
		case p != p.Masked():
			return nil, fmt.Errorf("prefix %s has bits set past its length: did you mean %s?", p, p.Masked())
		}
		ps = append(ps, p)
	}
	return ps, nil
}

func joinPrefixes(ps []netip.Prefix) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, ",")
}

// checkControl accepts a loopback address and port: the control plane has
// no authentication, so it must not be reachable from the network.
func checkControl(v string) error {
	ap, err := netip.ParseAddrPort(v)
	if err != nil || !ap.Addr().IsLoopback() {
		return fmt.Errorf("want a loopback address and port like 127.0.0.1:7789, got %q", v)
	}
	return nil
}
