package main

import (
	"context"
	"errors"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/relayctl/relayctl/rollout"
	"github.com/relayctl/relayctl/rollout/sshrun"
)

// sshFlags are shared by every command that talks to hosts.
func sshFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "known-hosts", Usage: "known_hosts `FILE` to check host keys against (default ~/.ssh/known_hosts)"},
		&cli.BoolFlag{Name: "accept-new-host-keys", Usage: "trust hosts not yet in known_hosts and record their keys (a changed key is still refused)"},
		&cli.StringSliceFlag{Name: "identity", Aliases: []string{"i"}, Usage: "private key `FILE` (repeatable); ssh-agent is used too when SSH_AUTH_SOCK is set"},
		&cli.StringFlag{Name: "ssh-config", Usage: "ssh_config `FILE` for host aliases (default ~/.ssh/config)"},
		&cli.DurationFlag{Name: "connect-timeout", Value: 10 * time.Second, Usage: "give up connecting to a host after this long"},
		&cli.DurationFlag{Name: "command-timeout", Value: 60 * time.Second, Usage: "give up on one remote command after this long"},
		&cli.IntFlag{Name: "parallel", Value: 10, Usage: "hosts worked on at once"},
	}
}

func sshOptions(c *cli.Context) sshrun.Options {
	return sshrun.Options{
		KnownHosts:        c.String("known-hosts"),
		AcceptNewHostKeys: c.Bool("accept-new-host-keys"),
		Identities:        c.StringSlice("identity"),
		SSHConfig:         c.String("ssh-config"),
		ConnectTimeout:    c.Duration("connect-timeout"),
		CommandTimeout:    c.Duration("command-timeout"),
	}
}

// sshDialer opens hosts with the transport.
type sshDialer struct{ opts sshrun.Options }

func (d sshDialer) Dial(ctx context.Context, host string) (rollout.Conn, error) {
	c, err := sshrun.Dial(ctx, host, d.opts)
	switch {
	case errors.Is(err, sshrun.ErrHostKeyChanged), errors.Is(err, sshrun.ErrUnknownHost),
		errors.Is(err, sshrun.ErrHostKeyRevoked), errors.Is(err, sshrun.ErrAuth), errors.Is(err, sshrun.ErrSudoPassword):
		return nil, rollout.Refusal(err)
	case err != nil:
		return nil, err
	}
	return sshConn{c}, nil
}

type sshConn struct{ *sshrun.Client }

func (c sshConn) Address() string { return c.Target().Addr() }
func (c sshConn) User() string    { return c.Target().User }

var _ rollout.Dialer = sshDialer{}
