package rollout_test

// A run that dies leaves its journal on the host; the next apply reads it
// and finishes or undoes the dead run's window (rollout/phase_recover.go).
// Each test kills a run at one place (the Sim loses the connection before
// or after a primitive, and the run does not come back), then runs the one
// recovery command, apply again, and checks the host ends as planned or as
// it was, never in between, with outcome words that say so. The window
// goes on on the host by itself and ends there (window.go), unless its
// process dies too (WindowDies: the host rebooted, say).

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/relayctl/relayctl/plans"
	"github.com/relayctl/relayctl/rollout"
	"github.com/relayctl/relayctl/rollout/rollouttest"
)

// crashThenRecover applies p until the Sim crashes as set, then applies it
// again with policy, and returns both reports.
func crashThenRecover(t *testing.T, d rollouttest.Dialer, p *plans.Plan, policy string) (first, second *rollout.HostResult) {
	t.Helper()
	r1 := applyOnce(t, d, p)
	if s := d[p.Hosts[0].Host].(*rollouttest.Sim); !s.WindowDies && strings.HasPrefix(r1.Hosts[0].State, "unknown: the connection was lost inside the window; the host ends") {
		if e := s.WindowEnd(); e == nil {
			t.Errorf("the host did not end its window by itself; its journal:\n%s", s.Journal)
		}
	}
	o := rollout.ApplyOptions{Artifact: artifact, VerifyTimeout: 300 * time.Millisecond, Rollout: &plans.Resolved{Waves: plans.DefaultWaves, Recover: policy}}
	r2, err := rollout.Apply(context.Background(), d, checked(t, p), o)
	if err != nil {
		t.Fatal(err)
	}
	return r1.Hosts[0], r2.Hosts[0]
}

// applyOnce applies p with a run that does not dial a host again once it
// lost it: as relayctl killed would.
func applyOnce(t *testing.T, d rollouttest.Dialer, p *plans.Plan) *rollout.Report {
	t.Helper()
	rep, err := rollout.Apply(context.Background(), d, checked(t, p), rollout.ApplyOptions{Artifact: artifact, VerifyTimeout: 300 * time.Millisecond, Reconnects: -1})
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// dies is a crash at a place where the window's process dies too.
func dies(crash func(*rollouttest.Sim)) func(*rollouttest.Sim) {
	return func(s *rollouttest.Sim) {
		crash(s)
		s.WindowDies = true
	}
}

// asPlanned and asWas say whether the Sim is as the plan promised or as it
// was before (the incident's host).
func asPlanned(s *rollouttest.Sim) bool {
	return s.RB == 8388608 && s.Link == "/opt/relay/releases/1.8.0" && s.Sysctls["net.core.rmem_max"] == "8388608" && s.PID > 0
}

func asWas(s *rollouttest.Sim) bool {
	_, dropIn := s.Files["/etc/sysctl.d/90-relayctl.conf"]
	return s.RB == 212992 && s.Link == "/opt/relay/releases/1.7.0" && s.Sysctls["net.core.rmem_max"] == "212992" && !dropIn && s.PID > 0
}

func TestRecoveryFromEveryPlace(t *testing.T) {
	tests := []struct {
		name            string
		crashAt         func(*rollouttest.Sim)
		firstState      string // a prefix of the dead run's state
		policy          string
		planned         bool // the host ends as planned (else as it was)
		recovery        string
		restartsInAll   int // the Sim's, both runs
		restartsSecond  int // the recovering run's receipt
		outcome         rollout.Outcome
		reasonOrJournal string
	}{
		{"before the window", func(s *rollouttest.Sim) { s.CrashAfter = "place-release" }, "as it was", plans.RecoverComplete,
			true, "", 1, 1, rollout.Applied, ""},
		{"in the window after a sysctl: complete", dies(func(s *rollouttest.Sim) { s.CrashAfter = "sysctl" }), "unknown", plans.RecoverComplete,
			true, rollout.RecoveryCompleted, 1, 1, rollout.Applied, ""},
		{"in the window after a sysctl: rollback", dies(func(s *rollouttest.Sim) { s.CrashAfter = "sysctl" }), "unknown", plans.RecoverRollback,
			false, rollout.RecoveryRolledBack, 0, 0, rollout.RolledBack, "stopped inside its window"},
		{"after a file was put in place: complete", dies(func(s *rollouttest.Sim) { s.CrashAfter = "rename" }), "unknown", plans.RecoverComplete,
			true, rollout.RecoveryCompleted, 1, 1, rollout.Applied, ""},
		{"after a file was put in place: rollback", dies(func(s *rollouttest.Sim) { s.CrashAfter = "rename" }), "unknown", plans.RecoverRollback,
			false, rollout.RecoveryRolledBack, 0, 0, rollout.RolledBack, ""},
		{"after the release switched: complete", dies(func(s *rollouttest.Sim) { s.CrashAfter = "link" }), "unknown", plans.RecoverComplete,
			true, rollout.RecoveryCompleted, 1, 1, rollout.Applied, ""},
		{"after the release switched: rollback", dies(func(s *rollouttest.Sim) { s.CrashAfter = "link" }), "unknown", plans.RecoverRollback,
			false, rollout.RecoveryRolledBack, 0, 0, rollout.RolledBack, ""},
		{"after the restart, before the read-back: complete", dies(func(s *rollouttest.Sim) { s.CrashAfter = "restart" }), "unknown", plans.RecoverComplete,
			true, rollout.RecoveryCompleted, 1, 0, rollout.Applied, ""},
		{"after the restart, before the read-back: rollback", dies(func(s *rollouttest.Sim) { s.CrashAfter = "restart" }), "unknown", plans.RecoverRollback,
			false, rollout.RecoveryRolledBack, 2, 1, rollout.RolledBack, ""},
		{"in the restart (before it ran)", dies(func(s *rollouttest.Sim) { s.DropIn = "restart" }), "unknown", plans.RecoverComplete,
			true, rollout.RecoveryCompleted, 1, 1, rollout.Applied, ""},
		// The window's restart marked done, and no relay running (it died
		// since): completing starts the planned release and reads it back.
		{"after the restart, the relay gone since: complete", dies(func(s *rollouttest.Sim) { s.CrashAfter = "restart"; s.StopAfterCrash = true }), "unknown", plans.RecoverComplete,
			true, rollout.RecoveryCompleted, 2, 1, rollout.Applied, ""},
		{"during commit", func(s *rollouttest.Sim) { s.DropIn = "commit" }, "unknown", plans.RecoverComplete,
			true, rollout.RecoveryCompleted, 1, 0, rollout.Applied, ""},
		// The window goes on on the host without the run, and ends there:
		// kept, since its read-back holds.
		{"after a sysctl, the host goes on: complete", func(s *rollouttest.Sim) { s.CrashAfter = "sysctl" }, "unknown", plans.RecoverComplete,
			true, rollout.RecoveryCompletedByHost, 1, 0, rollout.Applied, ""},
		{"after a sysctl, the host goes on: rollback", func(s *rollouttest.Sim) { s.CrashAfter = "sysctl" }, "unknown", plans.RecoverRollback,
			false, rollout.RecoveryRolledBack, 2, 1, rollout.RolledBack, ""},
		{"in the restart, the host goes on", func(s *rollouttest.Sim) { s.DropIn = "restart" }, "unknown", plans.RecoverComplete,
			true, rollout.RecoveryCompletedByHost, 1, 0, rollout.Applied, ""},
		// ... and rolled back there, since its read-back does not hold.
		{"in the restart, a release that does not hold", func(s *rollouttest.Sim) { s.DropIn = "restart"; s.IgnoreRB = true }, "unknown", plans.RecoverComplete,
			false, rollout.RecoveryRolledBackByHost, 2, 0, rollout.RolledBack, "the host rolled its window back by itself after the connection was lost: read-back: ss rb"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, p, sims := fleet(t, 1, "")
			s := sims[0]
			tt.crashAt(s)
			first, second := crashThenRecover(t, d, p, tt.policy)
			if tt.firstState != "" && !strings.HasPrefix(first.State, tt.firstState) {
				t.Errorf("the dead run said %s (%s): %s; want its state to begin %q", first.Outcome, first.State, first.Reason, tt.firstState)
			}
			if first.Outcome == rollout.Refused && strings.HasPrefix(first.State, StateAsWasPrefix) && s.Journal != "" && strings.Contains(s.Journal, "start window") {
				t.Errorf("a host whose window had begun was called %q", first.State)
			}
			if second.Outcome != tt.outcome || second.Recovery != tt.recovery || !strings.Contains(second.Reason, tt.reasonOrJournal) {
				t.Errorf("recovery: %s (%s) %q, recovery %q; want %s, recovery %q", second.Outcome, second.State, second.Reason, second.Recovery, tt.outcome, tt.recovery)
			}
			if tt.planned && !asPlanned(s) || !tt.planned && !asWas(s) {
				t.Errorf("the host is in between: rb %d, link %s, rmem_max %s, files %v (want planned %v)", s.RB, s.Link, s.Sysctls["net.core.rmem_max"], s.Files, tt.planned)
			}
			if s.Restarts != tt.restartsInAll || second.Restarts != tt.restartsSecond {
				t.Errorf("restarts: %d in all, %d by the recovery; want %d and %d", s.Restarts, second.Restarts, tt.restartsInAll, tt.restartsSecond)
			}
			if s.Journal != "" || s.Owner != "" {
				t.Errorf("after the recovery the host keeps a journal %q or a lock owner %q", s.Journal, s.Owner)
			}
			if second.DeadRun == "" && tt.firstState != "" {
				t.Error("the recovering run does not say it found a dead run's lock")
			}
			// A third apply has nothing to do.
			if r := applyFake(t, context.Background(), d, p, 1); tt.planned && r.Hosts[0].Outcome != rollout.Unchanged {
				t.Errorf("a third apply: %s (%s), want unchanged", r.Hosts[0].Outcome, r.Hosts[0].Reason)
			}
		})
	}
}

// StateAsWasPrefix is what a host that is as it was says.
const StateAsWasPrefix = rollout.StateAsWas

// A dead run of another plan is not this plan's to finish: the host is
// refused, in between, with the command that recovers it.
func TestRecoveryOfAnotherPlansWindowIsRefused(t *testing.T) {
	d, p, sims := fleet(t, 1, "")
	sims[0].CrashAfter, sims[0].WindowDies = "link", true
	applyOnce(t, d, p)
	other := reload(t, p)
	other.Checksum = "sha256:" + strings.Repeat("9", 64) // as if another plan's run had died there
	sims[0].Journal = strings.Replace(sims[0].Journal, p.Checksum, other.Checksum, 1)
	rep := applyFake(t, context.Background(), d, p, 1)
	h := rep.Hosts[0]
	if h.Outcome != rollout.Refused || !strings.HasPrefix(h.State, "in between") || !strings.Contains(h.Reason, "relayctl apply THAT_PLAN --resume") {
		t.Errorf("got %s (%s): %s; want refused, in between, naming the recovery", h.Outcome, h.State, h.Reason)
	}
}

// A journal that is not the agent's is refused with its last line.
func TestRecoveryRefusesAnUnreadableJournal(t *testing.T) {
	d, p, sims := fleet(t, 1, "")
	sims[0].Journal = "2026-11-30T04:00:00.000000000Z start window\nsomething else\n"
	rep := applyFake(t, context.Background(), d, p, 1)
	if h := rep.Hosts[0]; h.Outcome != rollout.Refused || !strings.Contains(h.Reason, "malformed journal") || h.Journal == "" {
		t.Errorf("got %s: %s; want refused, the journal quoted", h.Outcome, h.Reason)
	}
}
