// Package rollouttest has fakes of rollout's host interface for the apply
// engine's unit tests: Host, a struct of func fields (as litestream's
// mock.ReplicaClient), and Sim, a relay host in memory that applies the
// typed primitives to its facts. Neither parses a shell command: the real
// scripts are proven against the lab hosts.
package rollouttest

import (
	"context"
	"errors"

	"github.com/relayctl/relayctl/plans"
	"github.com/relayctl/relayctl/rollout"
)

// Host implements rollout.Host with a func per method; a nil func does
// nothing and succeeds (Observe then fails: there is nothing to observe).
type Host struct {
	ObserveFunc func(ctx context.Context, q rollout.Query) (*plans.Facts, error)
	LockFunc    func(ctx context.Context, owner string, breakLock bool) error
	RunFunc     func(ctx context.Context, ops []rollout.Op, each func(int, rollout.Result) error) error
	UnlockFunc  func() error
	CloseFunc   func() error
	Addr, Login string
	Trips       int
}

var _ rollout.Host = (*Host)(nil)

// Observe calls ObserveFunc.
func (h *Host) Observe(ctx context.Context, q rollout.Query) (*plans.Facts, error) {
	h.Trips++
	if h.ObserveFunc == nil {
		return nil, errors.New("rollouttest: no ObserveFunc")
	}
	return h.ObserveFunc(ctx, q)
}

// Lock calls LockFunc.
func (h *Host) Lock(ctx context.Context, owner string, breakLock bool) error {
	h.Trips++
	if h.LockFunc == nil {
		return nil
	}
	return h.LockFunc(ctx, owner, breakLock)
}

// Run calls RunFunc.
func (h *Host) Run(ctx context.Context, ops []rollout.Op, each func(int, rollout.Result) error) error {
	if h.RunFunc == nil {
		return nil
	}
	return h.RunFunc(ctx, ops, each)
}

// Unlock calls UnlockFunc.
func (h *Host) Unlock() error {
	if h.UnlockFunc == nil {
		return nil
	}
	return h.UnlockFunc()
}

// Close calls CloseFunc.
func (h *Host) Close() error {
	if h.CloseFunc == nil {
		return nil
	}
	return h.CloseFunc()
}

// Address is Addr.
func (h *Host) Address() string { return h.Addr }

// User is Login.
func (h *Host) User() string { return h.Login }

// RoundTrips counts Observe and Lock calls.
func (h *Host) RoundTrips() int { return h.Trips }

// Dialer hands out hosts by name; a name missing from it is unreachable.
type Dialer map[string]rollout.Host

// DialHost returns the named host.
func (d Dialer) DialHost(ctx context.Context, name string) (rollout.Host, error) {
	h, ok := d[name]
	if !ok {
		return nil, errors.New("dial tcp " + name + ":22: connection refused")
	}
	return h, nil
}
