package rollout

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"time"

	"github.com/relayctl/relayctl/plans"
	"github.com/relayctl/relayctl/tune"
)

// A window runs on the host by itself (docs/recovery.md, "A cut
// connection"). The window phase sends its ops behind a detach Op that
// carries a Window: the host runs them in a process of its own, outside
// the SSH session, which holds the host lock until the window has ended
// and then waits for the run's word, a verdict Op: keep, or undo with the
// run's rollback behind it. When the session is gone (relayctl or its
// connection) the host ends the window by itself: a window that stopped
// is rolled back; one that did not is read back against its HostChecks
// until they hold (kept) or Judge runs out (rolled back). The journal's
// last line says which (Journal.End), and the next run reads it.

// Window is a detached window's program: the ops after its detach Op in
// one Run call, and what the host needs to end the window by itself.
type Window struct {
	ID string // 16 hex digits: names the host's process (relayctl-window-ID)
	// Rollback: a rollback of its own (the window it undoes has ended):
	// the host awaits no word and judges nothing.
	Rollback bool
	Await    time.Duration // how long the host waits for the run's word after the ops, while the session lives
	Judge    time.Duration // how long the host's own read-back may take
	Stable   time.Duration // how long it must hold, the same relay process
	Observe  *Query        // how the host reads itself back
	Checks   []HostCheck   // what that reading must show
	// Undo are the rollbacks the host may run by itself; UndoAt says which
	// (1 on; 0 for none) follows a stop at each op of the window, and, as
	// its last entry, a read-back that did not hold.
	Undo   [][]Op
	UndoAt []int
}

// HostCheck is one check the host makes of its own reading when it ends a
// window by itself, few and simple on purpose: the run, when it is there,
// reads the host back in full (checksOf) and is the authority.
//
//	sysctl KEY VALUE  /proc/sys/KEY reads VALUE (blanks squeezed)
//	link TARGET       the current link points at TARGET
//	pid OLD DIR       the relay runs as a pid other than OLD (- any), from the folder DIR (- any)
//	rb WANT           every socket of that pid on the relay's port has rb WANT (and there is one)
type HostCheck struct {
	Kind string
	Args []string
}

// Validate checks a host check's words before they reach the host.
func (c HostCheck) Validate() error {
	n := map[string]int{"sysctl": 2, "link": 1, "pid": 2, "rb": 1}[c.Kind]
	if n == 0 || len(c.Args) != n {
		return fmt.Errorf("host check %q with %d words", c.Kind, len(c.Args))
	}
	for _, a := range c.Args {
		if err := validField(a); err != nil {
			return fmt.Errorf("host check %s: %w", c.Kind, err)
		}
	}
	switch c.Kind {
	case "sysctl":
		return tune.ValidKey(c.Args[0])
	case "link":
		return plans.ValidHostPath(c.Args[0])
	case "pid":
		if c.Args[0] != "-" && !digits(c.Args[0]) {
			return fmt.Errorf("host check pid: bad pid %q", c.Args[0])
		}
		if c.Args[1] != "-" {
			return plans.ValidHostPath(c.Args[1])
		}
	case "rb":
		if !digits(c.Args[0]) {
			return fmt.Errorf("host check rb: bad value %q", c.Args[0])
		}
	}
	return nil
}

func digits(s string) bool {
	_, err := strconv.ParseUint(s, 10, 64)
	return err == nil
}

// Validate checks a window's program for n ops: every part is one the
// host can carry out with nobody to ask.
func (w *Window) Validate(ops []Op) error {
	if len(w.ID) != 16 || !isHex(w.ID) {
		return fmt.Errorf("detach: bad window id %q", w.ID)
	}
	if !w.Rollback {
		if w.Observe == nil || len(w.UndoAt) != len(ops)+1 {
			return fmt.Errorf("detach: a window needs its read-back and a rollback for each of its %d ops and its checks", len(ops))
		}
		if err := w.Observe.Validate(); err != nil {
			return fmt.Errorf("detach: %w", err)
		}
	}
	for _, c := range w.Checks {
		if err := c.Validate(); err != nil {
			return fmt.Errorf("detach: %w", err)
		}
	}
	for _, i := range w.UndoAt {
		if i < 0 || i > len(w.Undo) {
			return fmt.Errorf("detach: rollback %d of %d", i, len(w.Undo))
		}
	}
	for _, u := range w.Undo {
		if err := windowOps(u); err != nil {
			return err
		}
	}
	return windowOps(ops)
}

// windowOps checks ops a host runs by itself: each valid, none that needs
// the run between them (a keep's bytes, an answer the run checks), none of
// the session's own.
func windowOps(ops []Op) error {
	for _, o := range ops {
		if err := o.Validate(); err != nil {
			return err
		}
		switch {
		case o.Offer || o.EndsBatch():
			return fmt.Errorf("detach: %s needs relayctl between it and the next op", o.Kind)
		case o.Kind == "lock" || o.Kind == "unlock" || o.Kind == "detach" || o.Kind == "verdict" || o.Kind == "begin" || o.Kind == "commit" || o.Kind == "clear" || o.Kind == "reopen":
			return fmt.Errorf("detach: %s is the session's, not a window's", o.Kind)
		}
	}
	return nil
}

func isHex(s string) bool {
	_, err := hex.DecodeString(s)
	return err == nil
}

// windowID names a window's process on the host.
func windowID() string {
	b := make([]byte, 8)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// detachOp is the Op whose Run call's later ops the host runs as window w.
func detachOp(w *Window) Op { return Op{Kind: "detach", Args: []string{w.ID}, Window: w} }

// Verdicts: the run's word to a window that waits for it.
const (
	VerdictKeep = "keep" // the run's read-back held: the window ends, kept
	VerdictUndo = "undo" // roll it back: the ops after the verdict are the rollback
)

func verdictOp(word string) Op { return op("verdict", word) }
