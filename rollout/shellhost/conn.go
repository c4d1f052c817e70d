package shellhost

import (
	"context"
	"io"
	"strconv"

	"github.com/relayctl/relayctl/rollout"
)

// Runner runs one command on one host. cmd is passed to the remote shell as
// is, so callers build it only from constants and values quoted with
// shellquote; data travels on stdin. A non-zero remote exit status is
// returned as an error that errors.As can turn into *ExitError.
type Runner interface {
	Run(ctx context.Context, cmd string, stdin io.Reader, stdout, stderr io.Writer) error
}

// ExitError is a command that ran on the host and exited non-zero.
type ExitError struct {
	Status int
	Stderr string // the tail of what it printed on stderr, for messages
}

func (e *ExitError) Error() string {
	if e.Stderr != "" {
		return "exit status " + strconv.Itoa(e.Status) + ": " + e.Stderr
	}
	return "exit status " + strconv.Itoa(e.Status)
}

type noCommandTimeout struct{}

// WithoutCommandTimeout marks ctx for a command that lives as long as the
// whole apply (the host lock): a transport skips its per-command timeout.
func WithoutCommandTimeout(ctx context.Context) context.Context {
	return context.WithValue(ctx, noCommandTimeout{}, true)
}

// CommandTimeoutDisabled reports whether ctx was marked by WithoutCommandTimeout.
func CommandTimeoutDisabled(ctx context.Context) bool {
	v, _ := ctx.Value(noCommandTimeout{}).(bool)
	return v
}

// Conn is an open connection to one host.
type Conn interface {
	Runner
	Close() error
	Address() string // host:port actually dialled
	User() string    // the remote user
	// Identity is the key the host accepted and the host key checked.
	Identity() rollout.SSHIdentity
}

// Dialer opens a connection to a host named as in a spec. A dial the
// client refused to make (a host key, authentication) is wrapped with
// rollout.Refusal.
type Dialer interface {
	Dial(ctx context.Context, host string) (Conn, error)
}
