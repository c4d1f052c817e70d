package sshrun

import (
	"context"
	"errors"

	"github.com/relayctl/relayctl/rollout"
	"github.com/relayctl/relayctl/rollout/shellhost"
)

// Dialer opens hosts for rollout over SSH. A connection the client refused
// to make (an unknown or changed host key, failed authentication, a sudo
// that wants a password) is a rollout.Refusal: the host is reachable and
// nothing was done to it; any other failure is unreachability.
type Dialer struct {
	Options Options
	// Targets are where a host is dialled when that is not its name: an
	// inventory host's [user@]address[:port], by the host's name.
	Targets map[string]string
}

var _ shellhost.Dialer = Dialer{}

// Dial connects to host as a spec names it, or to its target.
func (d Dialer) Dial(ctx context.Context, host string) (shellhost.Conn, error) {
	if t, ok := d.Targets[host]; ok {
		host = t
	}
	c, err := Dial(ctx, host, d.Options)
	switch {
	case errors.Is(err, ErrHostKeyChanged), errors.Is(err, ErrUnknownHost),
		errors.Is(err, ErrHostKeyRevoked), errors.Is(err, ErrAuth), errors.Is(err, ErrSudoPassword):
		return nil, rollout.Refusal(err)
	case err != nil:
		return nil, err
	}
	return conn{c}, nil
}

type conn struct{ *Client }

func (c conn) Address() string { return c.Target().Addr() }
func (c conn) User() string    { return c.Target().User }
func (c conn) Identity() rollout.SSHIdentity {
	return rollout.SSHIdentity{User: c.Target().User, Key: c.UserKey(), HostKey: c.HostKey()}
}
