package rollout

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// The host's journal (STATE_DIR/journal) is a write-ahead log of one apply:
// the agent appends a line before each step starts and after it is done,
// and one for every change as soon as it is made, whatever became of
// relayctl meanwhile. A run that dies leaves it behind, and the next apply
// reads it (recover.go) to finish that run's window or to undo it. Lines
// are "TIME TEXT", TEXT one of:
//
//	begin plan=NAME checksum=CHECKSUM   a run began (its stage)
//	start KIND: TITLE / done KIND: TITLE a step began / was done
//	start window / start rollback       the window / a rollback began
//	ok PRIMITIVE ARG                     a change was made
//	fail MESSAGE                         a primitive failed
//	window VERDICT by=BY [pid=PID] [why=WHY]
//	                                     the window ended (window.go): kept,
//	                                     rolled-back or rollback-failed, by
//	                                     the host alone or the run's word;
//	                                     a window the host kept alone names
//	                                     the relay process its read-back held
//	end OUTCOME                          the run filed its receipt
//
// The journal is host output: read strictly, bounded (observe reads at most
// plans.MaxJournal bytes of it), and anything else is an error.

// Journal is a journal read back.
type Journal struct {
	Plan, Checksum string
	// Window and Rollback: the window began; a rollback began.
	Window, Rollback bool
	// Steps are the steps that began, in order, each with whether it was
	// done and the changes made while it ran.
	Steps []JournalStep
	// End is how the last window ended on the host, nil while it has
	// not (window.go); Undone the changes of the last rollback.
	End    *WindowEnd
	Undone []JournalChange
	// Ended is the outcome of a run that filed its receipt ("" if none).
	Ended string
	Last  string // the last line, for messages
}

// WindowEnd is a window's end as its journal line says it.
type WindowEnd struct {
	Verdict string // EndKept, EndRolledBack or EndRollbackFailed
	By      string // ByHost (it decided by itself) or ByController (the run's word)
	Why     string // what made the host roll back
	// PID is the relay process a window the host kept alone held for the
	// read-back's StableFor (0 when the line names none): relayctl that
	// reads the same process back need not hold it again (readback.go).
	PID int
}

// How a window ended, and who decided.
const (
	EndKept           = "kept"
	EndRolledBack     = "rolled-back"
	EndRollbackFailed = "rollback-failed"
	ByHost            = "host"
	ByController      = "controller"
)

// JournalStep is one step as the journal tells it.
type JournalStep struct {
	Kind, Title string
	Done        bool
	Changes     []JournalChange // ok lines while it ran
}

// JournalChange is one change made: the primitive and its first argument.
type JournalChange struct{ Primitive, Arg string }

// errJournal is a journal that is not one relayctl's agent writes.
var errJournal = errors.New("malformed journal")

// ReadJournal reads a journal's text.
func ReadJournal(text string) (*Journal, error) {
	j := &Journal{}
	var open *JournalStep // the step begun and not done yet
	for n, line := range strings.Split(strings.TrimRight(text, "\n"), "\n") {
		if line == "" {
			continue
		}
		stamp, rest, ok := strings.Cut(line, " ")
		if !ok || !journalTime(stamp) {
			return nil, fmt.Errorf("%w: line %d has no time: %q", errJournal, n+1, clip(line))
		}
		j.Last = line
		var err error
		if open, err = j.entry(rest, open); err != nil {
			return nil, fmt.Errorf("%w: line %d: %v", errJournal, n+1, err)
		}
	}
	if j.Checksum == "" && (len(j.Steps) > 0 || j.Window) {
		return nil, fmt.Errorf("%w: steps without a begin line", errJournal)
	}
	return j, nil
}

// entry reads one line's text; open is the step begun and not yet done.
func (j *Journal) entry(text string, open *JournalStep) (*JournalStep, error) {
	word, rest, _ := strings.Cut(text, " ")
	switch word {
	case "begin":
		plan, sum, ok := strings.Cut(rest, " ")
		plan, okp := strings.CutPrefix(plan, "plan=")
		sum, oks := strings.CutPrefix(sum, "checksum=")
		if !ok || !okp || !oks || plan == "" || sum == "" || j.Checksum != "" {
			return nil, fmt.Errorf("bad begin %q", clip(rest))
		}
		j.Plan, j.Checksum = plan, sum
	case "start":
		switch rest {
		case "window":
			j.Window, j.End = true, nil
			return nil, nil
		case "rollback":
			j.Rollback, j.End, j.Undone = true, nil, nil
			return nil, nil
		}
		kind, title, ok := strings.Cut(rest, ": ")
		if !ok || kind == "" || title == "" || strings.Contains(kind, " ") {
			return nil, fmt.Errorf("bad start %q", clip(rest))
		}
		j.Steps = append(j.Steps, JournalStep{Kind: kind, Title: title})
		return &j.Steps[len(j.Steps)-1], nil
	case "done":
		if open == nil || rest != open.Kind+": "+open.Title {
			return nil, fmt.Errorf("done %q without its start", clip(rest))
		}
		open.Done = true
		return nil, nil
	case "ok":
		prim, arg, _ := strings.Cut(rest, " ")
		if _, known := primitive(prim); !known {
			return nil, fmt.Errorf("a change by %q, which is no primitive", clip(prim))
		}
		switch {
		case open != nil:
			open.Changes = append(open.Changes, JournalChange{Primitive: prim, Arg: arg})
		case j.Rollback:
			j.Undone = append(j.Undone, JournalChange{Primitive: prim, Arg: arg})
		}
	case "fail":
	case "window":
		end, err := windowEnd(rest)
		if err != nil || !j.Window {
			return nil, fmt.Errorf("bad window end %q", clip(rest))
		}
		j.End = end
		return nil, nil
	case "end":
		j.Ended = rest
	default:
		return nil, fmt.Errorf("unknown entry %q", clip(text))
	}
	return open, nil
}

// journalTime is the agent's time stamp: 2026-12-01T14:02:16.123Z (to the
// millisecond; earlier agents wrote nanoseconds, which read the same).
func journalTime(s string) bool {
	if len(s) < 20 || len(s) > 40 || !strings.HasSuffix(s, "Z") || s[4] != '-' || s[10] != 'T' {
		return false
	}
	for _, r := range s {
		if !(r >= '0' && r <= '9' || strings.ContainsRune("-T:.Z", r)) {
			return false
		}
	}
	return true
}

// Step finds the journal's account of a step by its kind and title, as
// the window ran it (a stage's "prepare for" lines are not it).
func (j *Journal) Step(kind, title string) (JournalStep, bool) {
	for i := len(j.Steps) - 1; i >= 0; i-- {
		if s := j.Steps[i]; s.Kind == kind && s.Title == title {
			return s, true
		}
	}
	return JournalStep{}, false
}

// windowEnd reads a window line's text: VERDICT by=BY [pid=PID] [why=WHY].
func windowEnd(text string) (*WindowEnd, error) {
	verdict, rest, _ := strings.Cut(text, " ")
	by, why, _ := strings.Cut(rest, " ")
	e := &WindowEnd{Verdict: verdict, By: strings.TrimPrefix(by, "by=")}
	if p, ok := strings.CutPrefix(why, "pid="); ok {
		var n string
		n, why, _ = strings.Cut(p, " ")
		pid, err := strconv.Atoi(n)
		if err != nil || !linuxPID(pid) || n != strconv.Itoa(pid) {
			return nil, errJournal
		}
		e.PID = pid
	}
	if why != "" {
		w, ok := strings.CutPrefix(why, "why=")
		if !ok {
			return nil, errJournal
		}
		e.Why = w
	}
	switch {
	case e.Verdict != EndKept && e.Verdict != EndRolledBack && e.Verdict != EndRollbackFailed:
		return nil, errJournal
	case e.By != ByHost && e.By != ByController || !strings.HasPrefix(by, "by="):
		return nil, errJournal
	}
	return e, nil
}

// KeptByHost is the window line's text (after "window ") for a window
// the host kept by itself, naming the relay process its read-back held
// when pid is one Linux gives; the agent and the Sim write it, and
// windowEnd reads nothing else.
func KeptByHost(pid int) string {
	if !linuxPID(pid) {
		return EndKept + " by=" + ByHost
	}
	return EndKept + " by=" + ByHost + " pid=" + strconv.Itoa(pid)
}

// linuxPID: pid is one Linux gives (1 to PID_MAX_LIMIT, 2^22).
func linuxPID(pid int) bool { return pid > 0 && pid <= 1<<22 }

// JournalNote says, for people, what a journal left on a host tells of an
// unfinished run, and the one command that finishes it ("" for none):
// verify reports it beside its checks.
func JournalNote(text string) string {
	if text == "" {
		return ""
	}
	j, err := ReadJournal(text)
	if err != nil {
		return "a run left a journal that cannot be read (" + err.Error() + "): check the host, then apply with --clear-journal"
	}
	plan := "plan " + j.Plan
	switch e := j.End; {
	case e != nil && e.By == ByHost && e.Verdict == EndKept:
		return "the window of " + plan + " was " + RecoveryCompletedByHost + "; apply --resume of that plan reads it back and files its receipt"
	case e != nil && e.By == ByHost && e.Verdict == EndRolledBack:
		return "the window of " + plan + " was " + RecoveryRolledBackByHost + " (" + e.Why + "); apply --resume of that plan reads it back and files its receipt"
	case j.Window || j.Rollback:
		return "a run of " + plan + " stopped inside its window; apply --resume of that plan finishes it"
	}
	return "a run of " + plan + " stopped before its window (nothing in force changed)"
}
