package rollouttest

import (
	"strconv"
	"strings"

	"github.com/relayctl/relayctl/rollout"
	"github.com/relayctl/relayctl/tune"
)

// The Sim's detached window, as the host agent's window process runs it: the ops
// after a detach run on the host whatever becomes of the connection (a
// DropIn or CrashAfter among them cuts the run off, not the window, unless
// WindowDies); then the window waits for the run's verdict, and when the
// session is lost first it ends by itself: a window that stopped is rolled
// back, one that did not is kept if its host checks hold on the Sim, else
// rolled back. Each end is a journal line as the agent writes it.

// simWindow is a window in flight on the Sim.
type simWindow struct {
	w        *rollout.Window
	stop     int                     // the op of the window that failed (0-based), -1 for none
	msg      string                  // what it said
	readBack *rollout.ReadBackResult // its own read-back's verdict, when it had one
}

// enclose runs a detach's or a verdict's ops (ops[i] and the rest), with
// the answers to each as Run gives them.
func (s *Sim) enclose(i int, ops []rollout.Op, each func(int, rollout.Result) error) error {
	o := ops[i]
	s.mu.Lock()
	if !s.Lean {
		s.Ops = append(s.Ops, o)
	}
	switch {
	case s.lost:
		s.mu.Unlock()
		return rollout.ConnLost(errLost{})
	case !s.locked:
		s.mu.Unlock()
		return &rollout.OpError{Op: o, Msg: "run on host: the host is not locked"}
	case o.Kind == "verdict" && s.win == nil:
		end := s.ended
		s.mu.Unlock()
		return &rollout.OpError{Op: o, Msg: "the window on the host ended by itself: " + end}
	case o.Kind == "detach":
		s.win, s.ended = &simWindow{w: o.Window, stop: -1}, ""
	}
	s.mu.Unlock()
	word := ""
	if o.Kind == "verdict" {
		word = o.Args[0]
	}
	if err := answer(each, i, rollout.Result{}); err != nil {
		return err
	}
	stop, msg, err := s.windowOps(i+1, ops, each)
	switch {
	case word == rollout.VerdictUndo && stop >= 0:
		s.endWindow("rollback-failed by=controller why=" + msg)
	case word == rollout.VerdictUndo:
		s.endWindow("rolled-back by=controller")
	case o.Window.Rollback && stop >= 0:
		s.endWindow("rollback-failed by=controller why=" + msg)
	case o.Window.Rollback:
		s.endWindow("rolled-back by=controller")
	default:
		s.mu.Lock()
		if s.win != nil {
			s.win.stop, s.win.msg = stop, msg
		}
		s.mu.Unlock()
	}
	if rollout.IsConnLost(err) {
		s.sessionLost()
	}
	return err
}

// verdictKeep is a verdict keep: the window waiting for it ends, kept.
func (s *Sim) verdictKeep(o rollout.Op) (rollout.Result, error) {
	s.mu.Lock()
	if !s.Lean {
		s.Ops = append(s.Ops, o)
	}
	lost, waiting, end := s.lost, s.win != nil, s.ended
	if o.Kind == s.DropIn {
		s.DropIn, lost = "", true
	}
	s.mu.Unlock()
	switch {
	case lost:
		s.sessionLost()
		return rollout.Result{}, rollout.ConnLost(errLost{})
	case !waiting:
		return rollout.Result{}, &rollout.OpError{Op: o, Msg: "the window on the host ended by itself: " + end}
	}
	if why := s.refusesKeep(); why != "" {
		return rollout.Result{}, &rollout.OpError{Op: o, Msg: why}
	}
	s.endWindow("kept by=controller")
	return rollout.Result{Value: "kept by=controller"}, nil
}

// refusesKeep is why the window waiting takes no keep ("" when it does):
// it stopped, or its own read-back did not hold. It goes on waiting.
func (s *Sim) refusesKeep() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch w := s.win; {
	case w.stop >= 0:
		return "the window stopped: " + w.msg
	case w.readBack != nil && !w.readBack.Held:
		return "the window's own read-back does not hold: " + w.readBack.Why
	}
	return ""
}

// windowOps runs ops[from:] as the host's window does: each until the
// first that fails, whatever becomes of the run's connection meanwhile (a
// DropIn or CrashAfter cuts the run off; the host goes on, unless
// WindowDies). It returns which failed (its index among them, -1 for
// none), what it said, and the error the run sees.
func (s *Sim) windowOps(from int, ops []rollout.Op, each func(int, rollout.Result) error) (int, string, error) {
	var runErr error
	cut := func() bool {
		runErr, each = rollout.ConnLost(errLost{}), nil
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.StopAfterCrash {
			s.PID = 0
		}
		if s.WindowDies { // the window's process dies with the session
			s.win, s.lost, s.locked = nil, true, false
			return true
		}
		return false
	}
	for j := from; j < len(ops); j++ {
		o := ops[j]
		if o.Kind == s.DropIn {
			s.DropIn = ""
			if cut() {
				return -1, "", runErr
			}
		}
		r, err := s.step(o, true)
		if err == nil && o.Kind == s.CrashAfter {
			s.CrashAfter = ""
			if cut() {
				return -1, "", runErr
			}
		}
		if err == nil {
			err = answer(each, j, r)
		}
		if err != nil {
			if runErr == nil {
				runErr = err
			}
			return j - from, err.Error(), runErr
		}
	}
	return -1, "", runErr
}

// answer gives the run an answer, if it still listens.
func answer(each func(int, rollout.Result) error, i int, r rollout.Result) error {
	if each == nil {
		return nil
	}
	return each(i, r)
}

// sessionLost is the session gone: a window waiting for the run's word
// ends by itself.
func (s *Sim) sessionLost() {
	s.mu.Lock()
	s.lost, s.locked = true, false
	w := s.win
	s.mu.Unlock()
	if w != nil {
		s.judge(w)
	}
}

// judge ends a window by itself, as the host does once its session is
// gone.
func (s *Sim) judge(w *simWindow) {
	why, at := "", len(w.w.UndoAt)-1
	if w.stop >= 0 {
		why, at = "window: "+w.msg, w.stop
	} else if w.readBack != nil {
		if w.readBack.Held {
			s.endWindow(rollout.KeptByHost(s.relayPID()))
			return
		}
		why = "read-back: " + w.readBack.Why
	} else if why = s.hostChecks(w.w.Checks); why == "" {
		s.endWindow(rollout.KeptByHost(s.relayPID()))
		return
	} else {
		why = "read-back: " + why
	}
	v := w.w.UndoAt[at]
	if v == 0 {
		s.endWindow("rolled-back by=host why=" + why)
		return
	}
	for _, o := range w.w.Undo[v-1] {
		if _, err := s.step(o, true); err != nil {
			s.endWindow("rollback-failed by=host why=" + why + "; rollback: " + err.Error())
			return
		}
	}
	s.endWindow("rolled-back by=host why=" + why)
}

// hostChecks are the window's checks against the Sim: what does not hold.
func (s *Sim) hostChecks(checks []rollout.HostCheck) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var bad []string
	for _, c := range checks {
		a := c.Args
		switch c.Kind {
		case "sysctl":
			if !tune.Equal(s.Sysctls[a[0]], a[1]) {
				bad = append(bad, "sysctl "+a[0]+": got "+s.Sysctls[a[0]]+", want "+a[1])
			}
		case "link":
			if s.Link != a[0] {
				bad = append(bad, "release link: got "+s.Link+", want "+a[0])
			}
		case "pid":
			switch {
			case s.PID == 0:
				bad = append(bad, "relay running: got false, want true")
			case strconv.Itoa(s.PID) == a[0]:
				bad = append(bad, "relay restarted: got the same pid "+a[0]+", want a new one")
			case a[1] != "-" && !strings.HasPrefix(s.Exe, a[1]+"/"):
				bad = append(bad, "relay runs the release in "+a[1]+": got "+s.Exe)
			}
		case "rb":
			if want, _ := strconv.ParseUint(a[0], 10, 64); s.PID == 0 || s.RB != want {
				bad = append(bad, "ss rb: got rb"+strconv.FormatUint(s.RB, 10)+", want rb"+a[0])
			}
		}
	}
	return strings.Join(bad, "; ")
}

// relayPID is the relay process the window held (0 with none running).
func (s *Sim) relayPID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.PID
}

// endWindow is the window's end, in the journal as the agent writes it.
func (s *Sim) endWindow(text string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.jlog("window " + text)
	s.win, s.ended = nil, text
}

// WindowEnd is how the Sim's last window ended, from its journal ("" while
// none has).
func (s *Sim) WindowEnd() *rollout.WindowEnd {
	s.mu.Lock()
	defer s.mu.Unlock()
	j, err := rollout.ReadJournal(s.Journal)
	if err != nil {
		return nil
	}
	return j.End
}
