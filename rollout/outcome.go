package rollout

import (
	"errors"
	"strings"
	"time"

	"github.com/relayctl/relayctl/plans"
)

// Outcome is how one host ended. Each is distinct on purpose: Ansible lumps
// unreachable and failed together (ansible#3845), and an operator needs to
// know which hosts were touched.
type Outcome string

// Outcomes of a host, in the order the recap lists them.
const (
	Applied     Outcome = "applied"     // changed and verified by read-back
	Unchanged   Outcome = "unchanged"   // already as planned: no restart
	RolledBack  Outcome = "rolled back" // the window failed; the old state is back and verified
	Failed      Outcome = "failed"      // see State for where the host is
	Refused     Outcome = "refused"     // nothing changed: stale or edited plan, lock, journal, window, blocked, unsafe folders, drain deadline (abort)
	Skipped     Outcome = "skipped"     // left for a later run: its players had not gone at the drain deadline (skip)
	Unreachable Outcome = "unreachable" // no connection
	NotStarted  Outcome = "not started" // an earlier failure or an interrupt stopped the fleet first
	Staged      Outcome = "staged"      // relayctl stage: staged for the window; nothing in force changed
	// NotPlanned: unreachable when the plan was made, so the plan has
	// nothing for it and apply leaves it alone; the next plan reads it.
	// Not "unreachable" (this run could not connect) nor "not started"
	// (this run stopped before it).
	NotPlanned Outcome = "not planned"
)

// Outcomes lists every outcome in recap order.
var Outcomes = []Outcome{Applied, Unchanged, Staged, RolledBack, Failed, Refused, Skipped, Unreachable, NotStarted, NotPlanned}

// What to do next for a host that did not end as planned: each names a
// command that can make progress, or says what must change first so that
// it can (the CLI's hints, one per kind: cmd/relayctl/hints.go).
const (
	NextResume    = "resume"     // apply PLAN --resume goes on with it as it is
	NextFix       = "fix"        // fix on the host what its reason names, then --resume
	NextNewPlan   = "new plan"   // the plan has nothing valid for it now (drifted, edited, not read): plan again, review, apply that
	NextUnblock   = "unblock"    // blocked in the plan: fix what the blockers name, then plan again
	NextSpec      = "fix spec"   // the spec's values or release failed there (a value the kernel refused, a release that did not read back): --resume would fail the same way; fix the spec, plan again
	NextRejected  = "rejected"   // a soak judged the release a regression, or a host left by a rollout where it (or the spec's values) failed: the rollout of it is over; a fixed release, or relayctl rollback of the hosts it changed
	NextOtherPlan = "other plan" // a run of another plan stopped in its window: that plan's --resume
	NextWait      = "wait"       // another apply holds it, it is outside the window, or its soak had no traffic: later, --resume
	NextPlayers   = "players"    // its players had not gone at the drain deadline: --resume when they have
	NextJournal   = "journal"    // a journal that cannot be read: check the host, then --resume --clear-journal
	NextUndo      = "undo"       // its rollback failed, in between: --resume --recover rollback undoes what is left
)

// Nexts lists every next, in the order the hints say them (the table
// test walks them): a plan whose release or values failed first, since
// that decides what every other way on is worth.
var Nexts = []string{NextSpec, NextRejected, NextResume, NextFix, NextNewPlan, NextUnblock, NextOtherPlan, NextWait, NextPlayers, NextJournal, NextUndo}

// rejects reports whether a host that ended with next rejects the plan's
// release for the rest of its rollout: a soak judged it a regression, or
// it (or the spec's values) failed there and was rolled back. Either way
// --resume would put the same release on the same hosts again.
func rejects(next string) bool { return next == NextRejected || next == NextSpec }

// nextFor is what to do next after an outcome, as a rule; an ending whose
// cause says otherwise sets its own (ending.because).
func nextFor(out Outcome, state string) string {
	switch out {
	case Applied, Unchanged, Staged:
		return ""
	case Skipped:
		return NextPlayers
	case NotStarted, Unreachable:
		return NextResume
	case NotPlanned:
		return NextNewPlan
	case Failed:
		switch {
		case strings.HasPrefix(state, "unknown"):
			return NextResume // the journal on the host says where it stopped: --resume recovers it
		case strings.HasPrefix(state, "in between"):
			return NextUndo
		}
	}
	return NextFix
}

// failureNext is what to do next after a window that failed and was
// rolled back, by its cause: a soak's verdict, a value the kernel refused,
// the relay switched to the planned release and config that did not read
// back (--resume would do exactly the same again), or the host's own
// trouble (a rename, a full disk), which --resume gets past once fixed.
func failureNext(err error, switchedOrReadBack bool) string {
	var sf *soakFailed
	var rv *refusedValue
	var oe *OpError
	switch {
	case errors.As(err, &sf) && sf.r.Verdict == SoakRegression:
		return NextRejected
	case errors.As(err, &sf):
		return NextWait // too little traffic to judge: later, with players
	case errors.As(err, &rv), errors.As(err, &oe) && oe.Op.specValue:
		return NextSpec
	case switchedOrReadBack:
		return NextSpec
	}
	return NextFix
}

// refusedValue is a spec's value the host refused: the kernel would not
// take it, or reads back another.
type refusedValue struct{ err error }

func (e *refusedValue) Error() string { return e.err.Error() }
func (e *refusedValue) Unwrap() error { return e.err }

// What became of a window a dead run left unfinished; or one the host
// ended by itself (window.go) when its run's connection was lost: for
// either, the one command that converges is the plan's apply --resume,
// which reads the host's journal and files the receipt.
const (
	RecoveryCompleted        = "completed after a crash"
	RecoveryRolledBack       = "rolled back after a crash"
	RecoveryCompletedByHost  = "completed by the host after the connection was lost"
	RecoveryRolledBackByHost = "rolled back by the host after the connection was lost"
)

// Host states after an apply: a failed apply leaves each host as it was or
// as planned, and says which; anything else is named exactly.
const (
	StateAsWas     = "as it was"
	StateAsPlanned = "as planned"
)

// StepRecord is one step as it ran.
type StepRecord struct {
	Phase  string `json:"phase"`
	Kind   string `json:"kind"`
	Key    string `json:"key,omitempty"`
	Title  string `json:"title,omitempty"`
	Status string `json:"status"` // done, failed
	Detail string `json:"detail,omitempty"`
	Millis int64  `json:"ms"` // since the host's apply started
}

// HostAccount is how one host's apply went, as its receipt tells it (the
// receipt adds summaries of what was read: receipt.go).
type HostAccount struct {
	Host    string `json:"host"`
	Address string `json:"address"`
	// SSH is how the host was reached: the remote user, the key it
	// accepted and its host key (absent for a host never reached).
	SSH *SSHIdentity `json:"ssh,omitempty"`
	// Started and Ended are when relayctl began and finished with the
	// host (UTC, RFC 3339 to the millisecond, relayctl's clock).
	Started string            `json:"started,omitempty"`
	Ended   string            `json:"ended,omitempty"`
	Labels  map[string]string `json:"labels,omitempty"` // from the inventory (the plan's)
	// ReleasePlanned is the release the plan puts the host on (its host
	// plan's: a rollback plan's from the host's record), absent for a
	// plan that ships none or a host it holds as unreachable.
	ReleasePlanned string        `json:"release_planned,omitempty"`
	Outcome        Outcome       `json:"outcome"`
	State          string        `json:"state"` // as it was, as planned, or what exactly
	Reason         string        `json:"reason,omitempty"`
	Drift          []plans.Drift `json:"drift,omitempty"`
	Journal        string        `json:"journal,omitempty"` // an unfinished run's journal, when that refused us
	// OtherPlan is the plan whose run stopped inside its window on the
	// host, when that refused this run (next: other plan): its name and
	// checksum, by which the hint finds its file.
	OtherPlan *PlanRef `json:"other_plan,omitempty"`
	// DeadRun is the owner of a dead run whose lock this run found free
	// and took; Recovery what became of its unfinished window.
	DeadRun  string `json:"dead_run,omitempty"`
	Recovery string `json:"recovery,omitempty"` // RecoveryCompleted, RecoveryRolledBack, …ByHost
	// Next is what the operator does next for a host that did not end as
	// planned (Nexts), or runs a release its soak rejected.
	Next    string `json:"next,omitempty"`
	UnitLog string `json:"unit_log,omitempty"` // systemd's journal of the relay when the window failed
	// RelayLog is the end of the relay's log (relay.service.log, command
	// manager) when a read-back found the relay not running: its last words.
	RelayLog string `json:"relay_log,omitempty"`
	// ExpectedRB is the read-back the plan promises.
	ExpectedRB   int   `json:"rb_expected"`
	WindowMillis int64 `json:"window_ms"` // relay stopped → new socket verified, on the host's clock
	Restarts     int   `json:"restarts"`
	Handoffs     int   `json:"handoffs"`
	// The players: what the relay held when the window began (at the drain
	// gate, or when observed), how long the gate waited, and how many
	// players the switch cut (a restart cuts every lobby; a handoff none).
	PlayersAtWindow *plans.Players `json:"players_at_window,omitempty"`
	DrainWaitMillis int64          `json:"drain_wait_ms,omitempty"`
	PlayersCut      *int           `json:"players_cut,omitempty"`
	HandoffGapUS    *int64         `json:"handoff_gap_us,omitempty"` // the relay's own: old's last read → new's first
	// Soak is the watch of the relay's drop counters after the window,
	// for a host that soaked: the rates before and after, and the verdict.
	Soak       *SoakResult  `json:"soak,omitempty"`
	RoundTrips int          `json:"round_trips"`
	Steps      []StepRecord `json:"steps"`
	// Timeline is where the host's time went, phase by phase, on
	// relayctl's clock (ms since the host's apply started).
	Timeline []Phase `json:"timeline,omitempty"`
	Verify   []Check `json:"verify,omitempty"`
	Wave     int     `json:"wave,omitempty"`
	// BytesUploaded counts the file bytes relayctl sent to the host
	// (release, config, drop-in; not the receipt): 0 when all of it was
	// staged ahead.
	BytesUploaded int64 `json:"bytes_uploaded"`
	// Upload is how the release crossed the uplink, when it was sent.
	Upload     *UploadRecord `json:"upload,omitempty"`
	TowardPlan []plans.Drift `json:"toward_plan,omitempty"` // facts that moved toward the plan since it was made (staged ahead)
	FromLedger string        `json:"from_ledger,omitempty"` // not touched: its outcome is an earlier run's (apply --resume)
	// Pruned are the old releases and store entries removed after the
	// window (HostPlan.Release.Prune); PruneError why some were not (the
	// host stays applied; the next plan lists them again).
	Pruned     []string `json:"pruned,omitempty"`
	PruneError string   `json:"prune_error,omitempty"`
	// Undo is, for an applied host, what its window changed: what
	// relayctl rollback goes back to (the host keeps the window's
	// backups beside its copy of this receipt).
	Undo *plans.Undo `json:"undo,omitempty"`
}

// HostResult is one host's apply as the engine ends it: its account, and
// the host as read before and after (which the receipt summarises).
type HostResult struct {
	HostAccount
	// Before and After are the host as read, while it runs; once it is
	// done only their summary is kept (readings; retain.go).
	Before, After *plans.Facts
	readings      *HostReadings
	started       time.Time // on the options' clock (a test's may be fixed)
	clock         time.Time // the real clock at the start, for the timeline
}

// Phase is one span of a host's apply: connect, lock, observe, stage,
// drain, window, read-back, commit.
type Phase struct {
	Name    string `json:"name"`
	StartMs int64  `json:"start_ms"`
	Ms      int64  `json:"ms"`
}

// PlanRef names a plan: its name and checksum.
type PlanRef struct {
	Plan     string `json:"plan"`
	Checksum string `json:"plan_checksum"`
}

// Report is the whole apply.
type Report struct {
	Plan     string        `json:"plan"`
	Checksum string        `json:"checksum"`
	Release  string        `json:"release,omitempty"` // plans.Plan.ReleaseName
	Started  string        `json:"started"`
	Millis   int64         `json:"ms"`
	Hosts    []*HostResult `json:"hosts"`
	Run      int           `json:"run,omitempty"`     // 1, then one more per apply --resume
	Only     string        `json:"only,omitempty"`    // apply --only: the hosts this run covered; Hosts holds only them
	Outside  int           `json:"outside,omitempty"` // the plan's hosts outside Only, left as the ledger had them
	Waves    []*WaveResult `json:"waves,omitempty"`
	Stopped  string        `json:"stopped,omitempty"`  // why hosts were left not started
	Approval *Approval     `json:"approval,omitempty"` // ApplyOptions.Approval
	RunInfo  RunInfo       `json:"run_info"`           // ApplyOptions.RunInfo
	Ended    string        `json:"ended,omitempty"`    // UTC, RFC 3339
}

// Succeeded is true when every host is applied or unchanged (or staged,
// for relayctl stage), those the plan has nothing for aside: whether they
// may be left out was the plan's budget's call.
func (r *Report) Succeeded() bool {
	for _, h := range r.Hosts {
		if h.Outcome != Applied && h.Outcome != Unchanged && h.Outcome != Staged && h.Outcome != NotPlanned {
			return false
		}
	}
	return true
}
