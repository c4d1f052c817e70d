package main

import (
	"io"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/relayctl/relayctl/rollout/sshrun"
)

// The keepalive flags reach the transport: not given, the transport reads
// the host's ssh_config (Options' 0); --server-alive-interval 0 turns
// keepalives off (Options' negative interval).
func TestKeepaliveFlags(t *testing.T) {
	tests := []struct {
		args      []string
		wantIv    time.Duration
		wantCount int
	}{
		{args: nil},
		{args: []string{"--server-alive-interval", "20s"}, wantIv: 20 * time.Second},
		{args: []string{"--server-alive-interval", "0"}, wantIv: -1},
		{args: []string{"--server-alive-count-max", "5"}, wantCount: 5},
		{args: []string{"--server-alive-interval", "1m", "--server-alive-count-max", "1"}, wantIv: time.Minute, wantCount: 1},
	}
	for _, tt := range tests {
		var got sshrun.Options
		app := &cli.App{Name: "t", Flags: sshFlags(), Writer: io.Discard, ErrWriter: io.Discard,
			Action: func(c *cli.Context) error { got = sshOptions(c); return nil }}
		if err := app.Run(append([]string{"t"}, tt.args...)); err != nil {
			t.Fatalf("%q: %v", tt.args, err)
		}
		if got.ServerAliveInterval != tt.wantIv || got.ServerAliveCountMax != tt.wantCount {
			t.Errorf("%q: got %v × %d, want %v × %d", tt.args, got.ServerAliveInterval, got.ServerAliveCountMax, tt.wantIv, tt.wantCount)
		}
	}
}
