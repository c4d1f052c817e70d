package rollout

import (
	"context"
	"errors"
	"sync"

	"github.com/relayctl/relayctl/plans"
)

// Conn is an open connection to one host.
type Conn interface {
	Runner
	Close() error
	Address() string // host:port actually dialled
	User() string    // the remote user
}

// Dialer opens a connection to a host named as in a spec.
type Dialer interface {
	Dial(ctx context.Context, host string) (Conn, error)
}

// refusal marks a connection the client refused to make (a changed or
// unknown host key, failed authentication): the host is reachable, and
// nothing was done to it.
type refusal struct{ err error }

func (r *refusal) Error() string { return r.err.Error() }
func (r *refusal) Unwrap() error { return r.err }

// Refusal wraps a dial error that is a refusal, not unreachability.
func Refusal(err error) error { return &refusal{err} }

// IsRefusal reports whether err was wrapped by Refusal.
func IsRefusal(err error) bool {
	var r *refusal
	return errors.As(err, &r)
}

// HostError is a failure on one host, kept apart from the others so a fleet
// operation reports every host.
type HostError struct {
	Host        string
	Unreachable bool // the connection could not be made (or was lost)
	Err         error
}

func (e *HostError) Error() string { return e.Host + ": " + e.Err.Error() }
func (e *HostError) Unwrap() error { return e.Err }

// ObserveAll observes every host, up to parallel at a time, one connection
// each. Facts come back in the order of hosts; a host that failed has nil
// facts and an error in errs at the same index.
func ObserveAll(ctx context.Context, d Dialer, hosts []string, q Query, parallel int) ([]*plans.Facts, []error) {
	if parallel < 1 {
		parallel = 1
	}
	facts := make([]*plans.Facts, len(hosts))
	errs := make([]error, len(hosts))
	sem := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	for i, h := range hosts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			c, err := d.Dial(ctx, h)
			if err != nil {
				errs[i] = &HostError{Host: h, Unreachable: true, Err: err}
				return
			}
			defer c.Close()
			f, err := Observe(ctx, c, h, c.Address(), c.User(), q)
			if err != nil {
				errs[i] = &HostError{Host: h, Err: err}
				return
			}
			facts[i] = f
		}()
	}
	wg.Wait()
	return facts, errs
}
