package rollout_test

// A run that dies leaves its journal on the host; the next apply reads it
// and finishes or undoes the dead run's window (rollout/phase_recover.go).
// Each test kills a run at one place (the Sim loses the connection before
// or after a primitive), then runs the one recovery command, apply again,
// and checks the host ends as planned or as it was, never in between, with
// outcome words that say so.

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
	r1 := applyFake(t, context.Background(), d, p, 1)
	o := rollout.ApplyOptions{Artifact: artifact, VerifyTimeout: 300 * time.Millisecond, Rollout: &plans.Resolved{Waves: plans.DefaultWaves, Recover: policy}}
	r2, err := rollout.Apply(context.Background(), d, checked(t, p), o)
	if err != nil {
		t.Fatal(err)
	}
	return r1.Hosts[0], r2.Hosts[0]
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
		{"in the window after a sysctl: complete", func(s *rollouttest.Sim) { s.CrashAfter = "sysctl" }, "unknown", plans.RecoverComplete,
			true, rollout.RecoveryCompleted, 1, 1, rollout.Applied, ""},
		{"in the window after a sysctl: rollback", func(s *rollouttest.Sim) { s.CrashAfter = "sysctl" }, "unknown", plans.RecoverRollback,
			false, rollout.RecoveryRolledBack, 0, 0, rollout.RolledBack, "stopped inside its window"},
		{"after a file was put in place: complete", func(s *rollouttest.Sim) { s.CrashAfter = "rename" }, "unknown", plans.RecoverComplete,
			true, rollout.RecoveryCompleted, 1, 1, rollout.Applied, ""},
		{"after a file was put in place: rollback", func(s *rollouttest.Sim) { s.CrashAfter = "rename" }, "unknown", plans.RecoverRollback,
			false, rollout.RecoveryRolledBack, 0, 0, rollout.RolledBack, ""},
		{"after the release switched: complete", func(s *rollouttest.Sim) { s.CrashAfter = "link" }, "unknown", plans.RecoverComplete,
			true, rollout.RecoveryCompleted, 1, 1, rollout.Applied, ""},
		{"after the release switched: rollback", func(s *rollouttest.Sim) { s.CrashAfter = "link" }, "unknown", plans.RecoverRollback,
			false, rollout.RecoveryRolledBack, 0, 0, rollout.RolledBack, ""},
		{"after the restart, before the read-back: complete", func(s *rollouttest.Sim) { s.CrashAfter = "restart" }, "unknown", plans.RecoverComplete,
			true, rollout.RecoveryCompleted, 1, 0, rollout.Applied, ""},
		{"after the restart, before the read-back: rollback", func(s *rollouttest.Sim) { s.CrashAfter = "restart" }, "unknown", plans.RecoverRollback,
			false, rollout.RecoveryRolledBack, 2, 1, rollout.RolledBack, ""},
		{"in the restart (before it ran)", func(s *rollouttest.Sim) { s.DropIn = "restart" }, "unknown", plans.RecoverComplete,
			true, rollout.RecoveryCompleted, 1, 1, rollout.Applied, ""},
		{"during commit", func(s *rollouttest.Sim) { s.DropIn = "commit" }, "", plans.RecoverComplete,
			true, rollout.RecoveryCompleted, 1, 0, rollout.Applied, ""},
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
	sims[0].CrashAfter = "link"
	applyFake(t, context.Background(), d, p, 1)
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
