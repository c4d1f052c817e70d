package rollout

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/relayctl/relayctl/plans"
)

// Host is one relay host as apply and verify use it: observe it, take its
// lock, run primitives under that lock, file the receipt. The one real
// implementation (ShellHost) runs observe.sh and agent.sh over a Runner;
// the engine's unit tests use rollouttest.Host, a fake of this interface,
// instead of matching shell strings.
type Host interface {
	// Observe gathers the host's facts (one command, read-only).
	Observe(ctx context.Context, q Query) (*plans.Facts, error)
	// Lock starts the host's agent and takes the host lock, which is held
	// until Unlock or until the connection is lost (then its owner file
	// stays behind for the next run to report). Errors wrap ErrLocked,
	// ErrStaleLock or ErrUnsafeHost.
	Lock(ctx context.Context, owner string, breakLock bool) error
	// Run sends ops to the locked agent in order and stops at the first
	// that fails, or when each returns an error; it returns the results of
	// the ops that ran.
	Run(ctx context.Context, ops []Op, each func(i int, r Result) error) error
	// Unlock releases the lock and ends the agent.
	Unlock() error
	// Address is the host:port dialled; User the remote user.
	Address() string
	User() string
	// RoundTrips is how many times relayctl waited on the host's answer:
	// each command (SSH session) started, and each batch of primitives
	// sent to the agent.
	RoundTrips() int
	Close() error
}

// HostDialer opens hosts by the names a spec gives them.
type HostDialer interface {
	DialHost(ctx context.Context, name string) (Host, error)
}

// Op is one host primitive of agent.sh (see the list at its top). Steps
// render their actions as Ops; the shell host sends them as tab-separated
// lines, a fake applies them to facts in memory.
type Op struct {
	Kind string
	Args []string
	Data []byte // recv, keep, commit: the bytes that follow the line
	// Offer sends Data only if the host lacks it: keep offers bytes by
	// their sha256 (the host answers NEED when it does not hold them, and
	// the bytes follow in a keep-data), and a host that has them already
	// (staged ahead, or the same release under another version) is sent
	// nothing.
	Offer bool
	Argv  []string // restart/stop command: the stop then start words

	// expect checks the answer (a sysctl's read-back); an error stops the
	// run there. Ops are sent in batches, so an Op with an expect ends its
	// batch unless hostChecked says the host makes the same check itself
	// and stops the batch on it (agent.sh sysctl WANT).
	expect      func(Result) error
	hostChecked bool
}

// Check runs the Op's own check of its answer, if it has one.
func (o Op) Check(r Result) error {
	if o.expect == nil {
		return nil
	}
	return o.expect(r)
}

// Result is what the agent answered to one Op.
type Result struct {
	Value string // VAL's text, or DATA's bytes
	Sent  int    // bytes of the Op's Data that went to the host
}

// OpError is an Op the host refused or failed, with the host's own words.
type OpError struct {
	Op  Op
	Msg string
}

func (e *OpError) Error() string { return e.Msg }

// Sentinel errors of the host lock and the host's folders.
var (
	ErrLocked     = errors.New("another apply holds the host lock")
	ErrStaleLock  = errors.New("a dead apply left the host lock behind")
	ErrUnsafeHost = errors.New("the host's state folder is not safe for root to write in")
)

// Primitive constructors: the only way steps build Ops, so every field is
// checked once, here, before it can reach a host.

func op(kind string, args ...string) Op { return Op{Kind: kind, Args: args} }

// validField is a value that travels as one tab-separated field.
func validField(s string) error {
	if s == "" || strings.ContainsAny(s, "\t\n\r\x00") || len(s) > 4096 {
		return fmt.Errorf("value %q is empty or contains a tab, newline or NUL", s)
	}
	return nil
}

// Validate checks an Op before it is sent.
func (o Op) Validate() error {
	if err := validField(o.Kind); err != nil {
		return err
	}
	for _, a := range o.Args {
		if err := validField(a); err != nil {
			return fmt.Errorf("%s: %w", o.Kind, err)
		}
	}
	for _, w := range o.Argv {
		if err := plans.ValidArgWord(w); err != nil {
			return fmt.Errorf("%s: %w", o.Kind, err)
		}
	}
	return nil
}
