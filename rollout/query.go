package rollout

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/relayctl/relayctl/plans"
	"github.com/relayctl/relayctl/tune"
)

// Query says what to observe on a host: which sysctls, where the relay
// lives and how to find its process. Everything in it is validated before
// it reaches the host, and quoted.
type Query struct {
	Keys    []string
	Port    int
	Control string // the relay's control address, "" to not read /status
	Paths   plans.PlanPaths
	Service plans.PlanService
	// Program is the installed program a service of release kind none
	// runs ("" for a release relayctl ships: its process runs from the
	// releases folder); Files the other files the plan writes (its
	// templates'), read as facts.
	Program string
	Files   []string
	// LastApply asks for the newest receipt on the host with a read-back
	// in it (plans.Facts.LastApply): verify's baseline.
	LastApply bool
	// UndoOf asks for the host's newest receipt of the plan with this
	// checksum that records what its window changed, and the backups kept
	// beside it (plans.Facts.Undo): a rollback of that plan. LastApply,
	// when also set, is read instead.
	UndoOf string
}

// QueryFor builds the query a plan of spec needs.
func QueryFor(s *plans.Spec) Query {
	q := Query{Keys: s.ReadKeys(), Port: s.Relay.Port, Control: s.Relay.Control,
		Paths: plans.PlanPaths(s.Paths), Service: s.Relay.Service.Plan()}
	if !s.Relay.Release.Ships() {
		q.Program = s.Relay.Release.Program
	}
	for _, t := range s.Relay.Config.Templates {
		q.Files = append(q.Files, t.Target(s.Relay.Service))
	}
	return q
}

// QueryForPlan rebuilds the query a plan was made with, for apply and verify.
func QueryForPlan(p *plans.Plan) Query {
	q := Query{Keys: p.ReadKeys(), Port: p.Relay.Port, Control: p.Relay.Control, Paths: p.Paths, Service: p.Relay.Service}
	if p.Relay.Kind == plans.ReleaseKindNone {
		q.Program = p.Relay.Program
	}
	for _, t := range p.Relay.Config.Templates {
		q.Files = append(q.Files, t.Path)
	}
	if p.Rollback != nil {
		q.UndoOf = p.Rollback.Checksum // each host's decisions are its receipt's
	}
	return q
}

// Validate checks every word of the query before it goes on a command line.
func (q Query) Validate() error {
	for _, k := range q.Keys {
		if err := tune.ValidKey(k); err != nil {
			return fmt.Errorf("observe: %w", err)
		}
	}
	for _, p := range []string{q.Paths.Current, q.Paths.Releases, q.Paths.RelayConfig, q.Paths.StateDir} {
		if err := plans.ValidHostPath(p); err != nil {
			return fmt.Errorf("observe: %w", err)
		}
	}
	for _, p := range q.Files {
		if err := plans.ValidHostPath(p); err != nil {
			return fmt.Errorf("observe: %w", err)
		}
	}
	if q.Program != "" {
		if err := plans.ValidProgram(q.Program); err != nil {
			return fmt.Errorf("observe: %w", err)
		}
	}
	if q.Port < 1 || q.Port > 65535 {
		return fmt.Errorf("observe: bad port %d", q.Port)
	}
	if q.UndoOf != "" && !plans.IsSHA256(strings.TrimPrefix(q.UndoOf, "sha256:")) || q.UndoOf != "" && !strings.HasPrefix(q.UndoOf, "sha256:") {
		return fmt.Errorf("observe: %q is not a plan checksum", q.UndoOf)
	}
	if q.Control != "" {
		if err := plans.ValidControl(q.Control); err != nil {
			return fmt.Errorf("observe: %w", err)
		}
	}
	switch q.Service.Manager {
	case "systemd":
		if err := plans.ValidUnit(q.Service.Name); err != nil {
			return fmt.Errorf("observe: %w", err)
		}
	case "command":
		if err := plans.ValidHostPath(q.Service.PIDFile); err != nil {
			return fmt.Errorf("observe: pid file: %w", err)
		}
	case "none":
	default:
		return fmt.Errorf("observe: service manager %q", q.Service.Manager)
	}
	return nil
}

// observe reads a host's facts: one observe primitive, in a session of
// its own or in the host's locked one.
func observe(ctx context.Context, h Host, q Query) (*plans.Facts, error) {
	var f *plans.Facts
	err := h.Run(ctx, []Op{observeOp(q)}, func(_ int, r Result) error {
		f = r.Facts
		return nil
	})
	if err != nil {
		return nil, err
	}
	if f == nil {
		return nil, fmt.Errorf("observe: the host answered no facts")
	}
	return f, nil
}

// ObserveAll observes every host, up to parallel at a time, one connection
// each. Facts come back in the order of hosts; a host that failed has nil
// facts and an error in errs at the same index.
func ObserveAll(ctx context.Context, d HostDialer, hosts []string, q Query, parallel int) ([]*plans.Facts, []error) {
	if parallel < 1 {
		parallel = 1
	}
	facts := make([]*plans.Facts, len(hosts))
	errs := make([]error, len(hosts))
	sem := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	for i, name := range hosts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			h, err := d.DialHost(ctx, name)
			if err != nil {
				errs[i] = &HostError{Host: name, Unreachable: true, Err: err}
				return
			}
			defer h.Close()
			f, err := observe(ctx, h, q)
			if err != nil {
				errs[i] = &HostError{Host: name, Err: err}
				return
			}
			facts[i] = f
		}()
	}
	wg.Wait()
	return facts, errs
}
