package rollout

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/relayctl/relayctl/plans"
)

// recoverPhase reads the journal a dead run left on the host (journal.go)
// and decides what this run does about it:
//
//   - a run that stopped before its window changed nothing in force: its
//     journal is archived and the apply goes on as usual;
//   - a run of this plan that stopped inside its window is recovered, by
//     the policy (plans.RecoverComplete, the default, or RecoverRollback):
//     completed (the window's remaining steps from where the journal
//     stopped, the switch if it had not happened, the read-back) or rolled
//     back (every change the journal shows undone from the backups its
//     stage took). The facts the journal explains are not drift: the steps
//     are the plan's, not derived again from the host in between;
//   - a journal of another plan, or one that cannot be read, refuses the
//     host, in between, with the command that recovers it (that plan's
//     --resume), unless --clear-journal archives it.
//
// A window the host ended by itself (the journal's window line: window.go)
// is not done again: one it kept is completed (read back, committed), one
// it rolled back is read back as it was and committed so. The same reading
// serves this run when it lost its connection inside its own window and
// read the host again (resync.go): then the journal is its own.
type recoverPhase struct{}

func (recoverPhase) title() string         { return "recover" }
func (recoverPhase) runs(hr *hostRun) bool { return hr.current().Journal != "" }

func (recoverPhase) run(ctx context.Context, hr *hostRun) *ending {
	raw := hr.current().Journal
	j, err := ReadJournal(raw)
	if err == nil && hr.now != nil && !j.Window && !j.Rollback {
		return nil // this run's window never began: its stage stands, and the window runs
	}
	switch {
	case err != nil:
		if hr.o.ClearJournal {
			return hr.archive(ctx, "an unreadable journal, archived at your request (--clear-journal)")
		}
		hr.res.Journal = raw
		return end(Refused, "unknown: an earlier run left a journal that cannot be read",
			fmt.Sprintf("%v; it ends with: %s; check the host (relayctl verify PLAN), then apply with --clear-journal", err, plans.Visible(lastLine(raw)))).because(NextJournal)
	case j.Ended != "" || !j.Window && !j.Rollback:
		return hr.archive(ctx, "an earlier apply stopped before its window (nothing in force changed); its journal is archived")
	case j.Checksum != hr.p.Checksum:
		if hr.o.ClearJournal {
			return hr.archive(ctx, fmt.Sprintf("the journal of plan %s (%s), which stopped inside its window, archived at your request (--clear-journal)", plans.Visible(j.Plan), plans.Visible(j.Checksum)))
		}
		hr.res.Journal, hr.res.OtherPlan = raw, &PlanRef{Plan: j.Plan, Checksum: j.Checksum}
		return end(Refused, "in between: an apply of plan "+plans.Visible(j.Plan)+" stopped inside its window",
			fmt.Sprintf("an apply of plan %s (checksum %s) stopped inside its window on this host: finish or undo it with that plan, relayctl apply THAT_PLAN --resume; or check the host, then apply with --clear-journal",
				plans.Visible(j.Plan), plans.Visible(j.Checksum))).because(NextOtherPlan)
	case hr.o.StageOnly:
		hr.res.Journal = raw
		return end(Refused, "in between: an apply of this plan stopped inside its window",
			"an apply of this plan stopped inside its window; relayctl apply PLAN --resume finishes it (nothing is staged meanwhile)").because(NextResume)
	}
	return hr.recover(j)
}

// archive files an earlier run's journal and stage folder away, and goes on.
func (hr *hostRun) archive(ctx context.Context, why string) *ending {
	hr.pr.say(hr.h.Host, "%s", why)
	if err := hr.host.Run(ctx, []Op{op("clear")}, nil); err != nil {
		return end(Failed, StateAsWas, "archive the earlier journal: "+err.Error())
	}
	hr.current().Journal = ""
	return nil
}

// recovery is a window a dead run of this plan left unfinished, or this
// run's own after a lost connection (sameRun).
type recovery struct {
	journal  *Journal
	policy   string // plans.RecoverComplete or RecoverRollback
	ran      []step // the window steps the journal shows begun, in order
	switched bool   // the relay switch was done
	// down: the switch was done but no relay runs: completing starts the
	// planned release (the window's end made to hold).
	down       bool
	rolledBack bool // the journal shows the window rolled back to its end
	sameRun    bool
}

// words are what the receipt says of a recovered window that ended in out.
func (rec *recovery) words(out Outcome) string {
	end := rec.journal.End
	byHost := end != nil && end.By == ByHost
	switch {
	case byHost && end.Verdict == EndKept && out == Applied:
		return RecoveryCompletedByHost
	case byHost && end.Verdict == EndRolledBack && out == RolledBack:
		return RecoveryRolledBackByHost
	case rec.sameRun && rec.journal.End != nil:
		return "" // this run's own word, kept: nothing was recovered
	case out == Applied:
		return RecoveryCompleted
	case out == RolledBack:
		return RecoveryRolledBack
	}
	return ""
}

// rolledBackByHost: the host rolled the window back by its own judgement,
// with nobody's word: its read-back did not hold, or a step failed.
func (rec *recovery) rolledBackByHost() bool {
	return rec.rolledBack && rec.journal.End != nil && rec.journal.End.By == ByHost
}

// errCrashed says where a dead run stopped.
func errCrashed(j *Journal) error {
	return errors.New("an earlier run of this plan stopped inside its window; its journal ends with: " + plans.Visible(lastLine(j.Last)))
}

// recover sets this run up to finish or undo the dead run's window: its
// steps are the plan's own (the host's facts are in between, which the
// journal explains), nothing is staged again, the gate is passed.
func (hr *hostRun) recover(j *Journal) *ending {
	rec := hr.newRecovery(j)
	if !rec.sameRun {
		hr.h = hr.stored
	}
	hr.st = steps(hr.p, hr.h, stepInput{artifact: hr.o.Artifact, fetchTimeout: hr.o.FetchTimeout}, false)
	for i, s := range hr.st {
		d := s.describe()
		if d.Phase != plans.PhaseWindow {
			continue
		}
		if _, ok := j.Step(d.Kind, d.Title); ok {
			rec.ran = append(rec.ran, s)
			hr.started = i + 1
			// Switched: its primitive is done, whether or not its step's
			// end line made it into the journal.
			rec.switched = rec.switched || s.traits().switches && len(rec.recoveredOps(s)) == 0
		}
	}
	rec.down = rec.switched && !hr.current().Service.Running
	if rec.sameRun {
		hr.countHostSwitches(rec)
	}
	hr.rec, hr.gate = rec, hr.res.Before
	what := "completing it"
	switch {
	case rec.rolledBack:
		what = "reading back the old state it restored"
		hr.failure, hr.inWindow = errHostRolledBack(j.End), true
	case rec.policy == plans.RecoverRollback:
		what = "rolling it back"
		if hr.failure == nil {
			hr.failure = errCrashed(j)
		}
		hr.inWindow = true
	case rec.down:
		what = "completing it: the relay is not running, so the planned release is started"
	}
	if e := hr.windowForSwitch(); e != nil && rec.policy != plans.RecoverRollback {
		return e
	}
	hr.res.Journal = hr.current().Journal
	who := "an earlier run of this plan stopped inside its window"
	if rec.sameRun {
		who = "back on the host after the lost connection: its window"
	}
	hr.pr.say(hr.h.Host, "%s after %d step(s) (%s): %s", who, len(rec.ran), plans.Visible(lastLine(j.Last)), what)
	return nil
}

// countHostSwitches counts in this run's receipt the relay switches its
// window's process made after the connection was lost: the window's, and
// its rollback's.
func (hr *hostRun) countHostSwitches(rec *recovery) {
	if rec.switched && !hr.switchCounted {
		hr.countSwitch(rec.ran)
	}
	if !rec.rolledBack {
		return
	}
	for _, c := range rec.journal.Undone {
		switch c.Primitive {
		case "restart":
			hr.res.Restarts++
		case "handoff":
			hr.res.Handoffs++
		}
	}
}

// newRecovery decides what a run does with a journal's window: what the
// host ended it with, else the policy (a dead run's rollback, a run that
// was rolling back, decided already).
func (hr *hostRun) newRecovery(j *Journal) *recovery {
	rec := &recovery{journal: j, policy: hr.o.Rollout.Recover, sameRun: hr.now != nil}
	if rec.sameRun {
		rec.policy = plans.RecoverComplete // this run was applying
	}
	switch end := j.End; {
	case end != nil && end.Verdict == EndRolledBack:
		rec.rolledBack = true
	case end != nil && end.Verdict == EndRollbackFailed, j.Rollback && end == nil, hr.undoing:
		rec.policy = plans.RecoverRollback
	}
	return rec
}

// errHostRolledBack is the reason of a window the host rolled back.
func errHostRolledBack(e *WindowEnd) error {
	if e.By == ByHost {
		return errors.New("the host rolled its window back by itself after the connection was lost: " + plans.Visible(e.Why))
	}
	return errors.New("the window was rolled back")
}

// windowForSwitch refuses to complete a window outside the plan's window
// when the relay switch is still to come: completing restarts the relay.
func (hr *hostRun) windowForSwitch() *ending {
	w := hr.p.Window
	if w == nil || hr.o.IgnoreWindow || hr.rec.switched || hr.rec.sameRun || hr.rec.rolledBack {
		return nil
	}
	nb, _ := plans.ParseWindowTime(w.NotBefore)
	na, _ := plans.ParseWindowTime(w.NotAfter)
	if now := hr.o.Now(); now.Before(nb) || now.After(na) {
		return end(Refused, "in between: an apply of this plan stopped inside its window, before the relay switched",
			fmt.Sprintf("completing it would switch the relay outside the plan's window %s to %s (now %s): relayctl apply PLAN --resume --recover rollback undoes it now, or wait for the window (or --ignore-window)",
				w.NotBefore, w.NotAfter, now.UTC().Format(time.RFC3339))).because(NextWait)
	}
	return nil
}

// recoveredOps are a window step's primitives that still have to run to
// complete the dead run's window: none for a step it did, all for one it
// never began, and for the one it was in, those after the changes its
// journal shows made (a check before a change is run again).
func (rec *recovery) recoveredOps(s step) []Op {
	d := s.describe()
	js, ok := rec.journal.Step(d.Kind, d.Title)
	st, starts := s.(starter)
	switch {
	case !ok:
		return s.do()
	case rec.down && starts && s.traits().switches:
		return st.start() // done, but no relay runs: start the planned release
	case js.Done:
		return nil
	}
	ops, done := s.do(), js.Changes
	for len(ops) > 0 {
		o := ops[0]
		switch {
		case !o.Mutates():
		case len(done) > 0 && len(o.Args) > 0 && o.Kind == done[0].Primitive && o.Args[0] == done[0].Arg:
			done = done[1:]
		default:
			return ops
		}
		ops = ops[1:]
	}
	return ops
}

// plannedBefore is the host as the plan observed it, for the checks of a
// rollback after a crash: this run's own reading is the host in between.
func plannedBefore(h *plans.HostPlan) *plans.Facts {
	f := &plans.Facts{Host: h.Host, Sysctls: map[string]plans.SysctlFact{}}
	for _, c := range h.Sysctls {
		f.Sysctls[c.Key] = plans.SysctlFact{Exists: true, Value: c.Current, Writable: c.Writable}
	}
	f.Release.CurrentRaw = h.Previous.CurrentLink
	f.Service.Running = h.Previous.RelayRunning
	f.Socket = plans.SocketFact{Found: h.Readback.CurrentFound, Port: h.Readback.Port, Rcvbuf: h.Readback.Current}
	return f
}
