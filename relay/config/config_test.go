package config

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want func(c *Config)
	}{
		{name: "empty", in: "", want: func(*Config) {}},
		{name: "comments and blank lines", in: "# hello\n\n   \n  # indented\n", want: func(*Config) {}},
		{
			name: "every key",
			in: "RELAYD_LISTEN=127.0.0.1:9000\nRELAYD_CONTROL=127.0.0.2:9001\nRELAYD_SO_RCVBUF=4194304\n" +
				"RELAYD_SO_RCVBUF_FORCE=true\nRELAYD_LOBBY_SIZE=4\nRELAYD_MAX_LOBBIES=10\nRELAYD_IDLE_TIMEOUT=1m30s\nRELAYD_BATCH=1\n" +
				"RELAYD_MAX_PLAYERS_PER_ADDR=3\nRELAYD_MAX_PLAYERS_PER_NET=5\nRELAYD_EXEMPT_SOURCES= 192.0.2.7/32 ,10.0.0.0/8\n",
			want: func(c *Config) {
				*c = Config{Listen: "127.0.0.1:9000", Control: "127.0.0.2:9001", SORcvbuf: 4194304, SORcvbufForce: true,
					LobbySize: 4, MaxLobbies: 10, IdleTimeout: 90 * time.Second, Batch: 1,
					MaxPlayersPerAddr: 3, MaxPlayersPerNet: 5, ExemptSources: "192.0.2.7/32,10.0.0.0/8"}
			},
		},
		{name: "no exempt sources", in: "RELAYD_EXEMPT_SOURCES=", want: func(c *Config) { c.ExemptSources = "" }},
		{name: "quotes and spaces as systemd reads them", in: " RELAYD_SO_RCVBUF = \"8192\"\nRELAYD_LISTEN='0.0.0.0:1'\r\n",
			want: func(c *Config) { c.SORcvbuf = 8192; c.Listen = "0.0.0.0:1" }},
		{name: "zero leaves the kernel default", in: "RELAYD_SO_RCVBUF=0", want: func(c *Config) { c.SORcvbuf = 0 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse(strings.NewReader(tt.in), "relayd.env")
			if err != nil {
				t.Fatalf("got error %v, want nil", err)
			}
			want := Default()
			tt.want(&want)
			if got != want {
				t.Errorf("got %+v, want %+v", got, want)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"no equals", "RELAYD_BATCH 4", "relayd.env:1: want KEY=VALUE"},
		{"unknown key", "\n# x\nRELAYD_BATCHES=4", "relayd.env:3: unknown key \"RELAYD_BATCHES\""},
		{"lower case key", "relayd_batch=4", "relayd.env:1: unknown key"},
		{"duplicate", "RELAYD_BATCH=4\nRELAYD_BATCH=8", "relayd.env:2: RELAYD_BATCH: set twice (first at line 1)"},
		{"batch zero", "RELAYD_BATCH=0", "relayd.env:1: RELAYD_BATCH: want a decimal integer from 1 to 1024, got \"0\""},
		{"batch too big", "RELAYD_BATCH=1025", "RELAYD_BATCH: want a decimal integer from 1 to 1024"},
		{"rcvbuf negative", "RELAYD_SO_RCVBUF=-1", "RELAYD_SO_RCVBUF: want a decimal integer from 0 to 1073741823"},
		{"rcvbuf with unit", "RELAYD_SO_RCVBUF=4M", "RELAYD_SO_RCVBUF: want a decimal integer"},
		{"rcvbuf leading plus", "RELAYD_SO_RCVBUF=+5", "RELAYD_SO_RCVBUF: want a decimal integer"},
		{"force yes", "RELAYD_SO_RCVBUF_FORCE=yes", "RELAYD_SO_RCVBUF_FORCE: want true or false, got \"yes\""},
		{"lobby size 1", "RELAYD_LOBBY_SIZE=1", "RELAYD_LOBBY_SIZE: want a decimal integer from 2 to 256"},
		{"max lobbies 0", "RELAYD_MAX_LOBBIES=0", "RELAYD_MAX_LOBBIES: want a decimal integer from 1 to 1048576"},
		{"idle no unit", "RELAYD_IDLE_TIMEOUT=30", "RELAYD_IDLE_TIMEOUT: want a Go duration"},
		{"idle negative", "RELAYD_IDLE_TIMEOUT=-1s", "RELAYD_IDLE_TIMEOUT: want a Go duration"},
		{"listen ipv6", "RELAYD_LISTEN=[::]:7788", "RELAYD_LISTEN: want an IPv4 address and port"},
		{"listen no port", "RELAYD_LISTEN=0.0.0.0", "RELAYD_LISTEN: want an IPv4 address and port"},
		{"listen hostname", "RELAYD_LISTEN=localhost:7788", "RELAYD_LISTEN: want an IPv4 address and port"},
		{"control public", "RELAYD_CONTROL=0.0.0.0:7789", "RELAYD_CONTROL: want a loopback address and port"},
		{"handoff relative", "RELAYD_HANDOFF_SOCKET=run/handoff.sock", "RELAYD_HANDOFF_SOCKET: want a clean absolute path"},
		{"handoff dotdot", "RELAYD_HANDOFF_SOCKET=/run/relayd/../handoff.sock", "RELAYD_HANDOFF_SOCKET: want a clean absolute path"},
		{"handoff root", "RELAYD_HANDOFF_SOCKET=/", "RELAYD_HANDOFF_SOCKET: want a clean absolute path"},
		{"handoff too long", "RELAYD_HANDOFF_SOCKET=/run/" + strings.Repeat("x", 110), "a Unix socket path takes at most 107"},
		{"per address 0", "RELAYD_MAX_PLAYERS_PER_ADDR=0", "RELAYD_MAX_PLAYERS_PER_ADDR: want a decimal integer from 1 to 1048576"},
		{"per net too big", "RELAYD_MAX_PLAYERS_PER_NET=1048577", "RELAYD_MAX_PLAYERS_PER_NET: want a decimal integer from 1 to 1048576"},
		{"exempt host bits", "RELAYD_EXEMPT_SOURCES=127.0.0.1/8", "prefix 127.0.0.1/8 has bits set past its length: did you mean 127.0.0.0/8?"},
		{"exempt ipv6", "RELAYD_EXEMPT_SOURCES=::1/128", "RELAYD_EXEMPT_SOURCES: want IPv4 prefixes"},
		{"exempt bare address", "RELAYD_EXEMPT_SOURCES=192.0.2.7", "want IPv4 prefixes like 127.0.0.0/8,192.0.2.10/32"},
		{"exempt empty item", "RELAYD_EXEMPT_SOURCES=10.0.0.0/8,,", "got \"\""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse(strings.NewReader(tt.in), "relayd.env")
			if err == nil {
				t.Fatalf("got nil error, want one containing %q", tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got error %q, want it to contain %q", err, tt.want)
			}
		})
	}
}

// TestNoExemptSourcesByDefault: every process on the relay host can send
// from its loopback, so no source is spared the per-source limits unless
// the operator names it.
func TestNoExemptSourcesByDefault(t *testing.T) {
	if ps := Default().Exempt(); len(ps) != 0 {
		t.Errorf("the default config exempts %v, want no source", ps)
	}
	c, err := Parse(strings.NewReader("RELAYD_LISTEN=0.0.0.0:7788\n"), "relayd.env")
	if err != nil || c.ExemptSources != "" {
		t.Errorf("a file without RELAYD_EXEMPT_SOURCES: %q, %v; want none exempt", c.ExemptSources, err)
	}
}

func TestRenderRoundTrip(t *testing.T) {
	configs := []Config{
		Default(),
		{Listen: "10.1.2.3:1", Control: "127.0.0.1:0", SORcvbuf: MaxSORcvbuf, SORcvbufForce: true,
			LobbySize: 256, MaxLobbies: 1 << 20, IdleTimeout: 1500 * time.Millisecond, Batch: 1024,
			HandoffSocket: "/run/relayd/handoff.sock", MaxPlayersPerAddr: 1, MaxPlayersPerNet: MaxPlayersPerSource, ExemptSources: ""},
		{Listen: "10.1.2.3:1", Control: "127.0.0.1:0", LobbySize: 2, MaxLobbies: 1, IdleTimeout: time.Second, Batch: 1,
			MaxPlayersPerAddr: 16, MaxPlayersPerNet: 64, ExemptSources: "127.0.0.0/8,192.0.2.0/24"},
	}
	for _, c := range configs {
		out := c.Render()
		if !bytes.HasPrefix(out, []byte("# written by relayctl; relayd reads it at start")) {
			t.Errorf("got header %q, want the relayctl header", bytes.SplitN(out, []byte("\n"), 2)[0])
		}
		if !bytes.Equal(out, c.Render()) {
			t.Errorf("Render is not deterministic")
		}
		got, err := Parse(bytes.NewReader(out), "rendered")
		if err != nil {
			t.Fatalf("parse rendered %q: %v", out, err)
		}
		if got != c {
			t.Errorf("got %+v, want %+v", got, c)
		}
	}
}

func TestRenderOrder(t *testing.T) {
	want := "# written by relayctl; relayd reads it at start, so restart relayd to apply a change\n" +
		"RELAYD_LISTEN=0.0.0.0:7788\nRELAYD_CONTROL=127.0.0.1:7789\nRELAYD_SO_RCVBUF=0\nRELAYD_SO_RCVBUF_FORCE=false\n" +
		"RELAYD_LOBBY_SIZE=8\nRELAYD_MAX_LOBBIES=4096\nRELAYD_IDLE_TIMEOUT=30s\nRELAYD_BATCH=64\n"
	if got := string(Default().Render()); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

func TestValidate(t *testing.T) {
	if err := Default().Validate(); err != nil {
		t.Errorf("default: got %v, want nil", err)
	}
	tests := []struct {
		name   string
		change func(c *Config)
		want   string
	}{
		{"empty listen", func(c *Config) { c.Listen = "" }, "RELAYD_LISTEN"},
		{"public control", func(c *Config) { c.Control = "192.0.2.1:7789" }, "RELAYD_CONTROL"},
		{"negative rcvbuf", func(c *Config) { c.SORcvbuf = -1 }, "RELAYD_SO_RCVBUF"},
		{"zero idle", func(c *Config) { c.IdleTimeout = 0 }, "RELAYD_IDLE_TIMEOUT"},
		{"zero batch", func(c *Config) { c.Batch = 0 }, "RELAYD_BATCH"},
		{"huge lobby", func(c *Config) { c.LobbySize = 1000 }, "RELAYD_LOBBY_SIZE"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Default()
			tt.change(&c)
			err := c.Validate()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want an error naming %s", err, tt.want)
			}
		})
	}
}

func TestFromEnv(t *testing.T) {
	base := Default()
	base.Batch = 8
	got, err := FromEnv(base, []string{"HOME=/root", "RELAYD_SO_RCVBUF=4194304", "RELAYDX=1", "RELAYD_LISTEN=127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	want := base
	want.SORcvbuf, want.Listen = 4194304, "127.0.0.1:1"
	if got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
	if _, err := FromEnv(base, []string{"RELAYD_SO_RCVBUFF=1"}); err == nil || !strings.Contains(err.Error(), "unknown variable RELAYD_SO_RCVBUFF") {
		t.Errorf("misspelt variable: got %v, want unknown variable error", err)
	}
	if _, err := FromEnv(base, []string{"RELAYD_BATCH=x"}); err == nil || !strings.Contains(err.Error(), "environment: RELAYD_BATCH") {
		t.Errorf("bad value: got %v, want error naming environment: RELAYD_BATCH", err)
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.env")
	if got, err := Load(missing, false); err != nil || got != Default() {
		t.Errorf("missing default file: got %+v, %v; want defaults, nil", got, err)
	}
	if _, err := Load(missing, true); err == nil || !strings.Contains(err.Error(), "open config") {
		t.Errorf("missing explicit file: got %v, want open config error", err)
	}
	p := filepath.Join(dir, "relayd.env")
	if err := os.WriteFile(p, []byte("RELAYD_BATCH=2\nRELAYD_BOGUS=1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(p, true); err == nil || !strings.Contains(err.Error(), p+":2: unknown key \"RELAYD_BOGUS\"") {
		t.Errorf("got %v, want error naming %s:2 and the key", err, p)
	}
}

func FuzzParse(f *testing.F) {
	f.Add(string(Default().Render()))
	f.Add("RELAYD_SO_RCVBUF=4194304\n# c\n\nRELAYD_SO_RCVBUF_FORCE=true\n")
	f.Add("RELAYD_IDLE_TIMEOUT=\"1h2m3.5s\"\nRELAYD_LISTEN='127.0.0.1:0'")
	f.Add("RELAYD_BATCH=1\nRELAYD_BATCH=2")
	f.Add("=\n==\nRELAYD_LOBBY_SIZE=")
	f.Add("RELAYD_EXEMPT_SOURCES=10.0.0.0/8, 192.0.2.7/32\nRELAYD_MAX_PLAYERS_PER_ADDR=3\nRELAYD_MAX_PLAYERS_PER_NET=9")
	f.Add("RELAYD_EXEMPT_SOURCES=\nRELAYD_MAX_PLAYERS_PER_NET=0")
	f.Fuzz(func(t *testing.T, in string) {
		c, err := Parse(strings.NewReader(in), "fuzz")
		if err != nil {
			if !strings.HasPrefix(err.Error(), "fuzz:") && !strings.HasPrefix(err.Error(), "read fuzz:") {
				t.Fatalf("error %q does not name the file", err)
			}
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("parsed config does not validate: %v", err)
		}
		again, err := Parse(bytes.NewReader(c.Render()), "rendered")
		if err != nil {
			t.Fatalf("parse rendered: %v", err)
		}
		if again != c {
			t.Fatalf("round trip: got %+v, want %+v", again, c)
		}
	})
}

func TestGet(t *testing.T) {
	c := Default()
	c.IdleTimeout = 90 * time.Second
	for _, tt := range []struct{ key, want string }{
		{"RELAYD_LISTEN", "0.0.0.0:7788"},
		{"RELAYD_IDLE_TIMEOUT", "1m30s"},
		{"RELAYD_SO_RCVBUF_FORCE", "false"},
		{"RELAYD_NOPE", ""},
	} {
		if got := c.Get(tt.key); got != tt.want {
			t.Errorf("Get(%s): got %q, want %q", tt.key, got, tt.want)
		}
	}
}
