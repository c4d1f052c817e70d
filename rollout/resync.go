package rollout

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/relayctl/relayctl/plans"
)

// Once a host's window has begun, the window is the host's to finish
// (window.go): when the run loses its connection, or the window ends by
// itself before the run's word, the run does not call the host unknown.
// It reads the host again, through the session if it still stands, else
// over a new connection (DefaultReconnects tries, backing off), whose lock
// waits for the window's process to end and let it go; then it goes on
// from what the host's journal says, as a recovery of a dead run would
// (resyncPhases: the recover phase reads the journal).

// DefaultReconnects is how many times a run dials a host again after it
// lost the connection inside the window (ApplyOptions.Reconnects).
const DefaultReconnects = 5

// windowAwaitSlack is how much longer than the run's read-back (and soak)
// a window waits for the run's word while its session lives: a session
// that stands but whose run has gone quiet (a connection that hangs).
const windowAwaitSlack = 60 * time.Second

// resyncPhases go on with a host's apply once resync has read it again.
func resyncPhases() []phase {
	return []phase{recoverPhase{}, windowPhase{}, readBackPhase{}, rollbackPhase{}, commitPhase{}}
}

// lost is an ending whose truth is on the host: the window went on
// without the run, or ended by itself. It stands only if resync cannot
// reach the host again.
func lost(state, reason string) *ending {
	e := end(Failed, state, reason)
	e.lost = true
	return e
}

// stateLost is the state of a host whose window the run lost track of and
// could not reach again.
func (hr *hostRun) stateLost(where string) string {
	if !hr.awaiting {
		return "unknown: the connection was lost " + where + "; the journal on the host says how far it got"
	}
	return "unknown: the connection was lost " + where + "; the host ends its window by itself within " + seconds((hr.windowAwait() + hr.o.VerifyTimeout + hr.o.StableFor).Seconds()) +
		" (kept if its own read-back holds, else rolled back) and its journal says which"
}

// resync reads the host again after e, a lost ending. It returns nil with
// the host read (hr.now) and the run set to go on from its journal; e when
// the host could not be reached again (or another run holds it now); or
// what commit filed, when the journal went with the receipt before the
// connection did.
func (hr *hostRun) resync(ctx context.Context, e *ending) *ending {
	ctx = context.WithoutCancel(ctx)
	f, err := hr.observe(ctx)
	for try := 0; err != nil && try < hr.o.Reconnects; try++ {
		if errors.Is(err, ErrLocked) && !strings.Contains(err.Error(), hr.o.Owner) {
			return e // another run has the host now
		}
		hr.pr.say(hr.h.Host, "the connection was lost (%v); the host finishes its window by itself; dialling it again (%d of %d)", err, try+1, hr.o.Reconnects)
		time.Sleep(reconnectWait(try))
		f, err = hr.redial(ctx)
	}
	if err != nil {
		return e
	}
	hr.now = f
	switch {
	case f.Journal == "" && hr.committed != nil:
		return hr.committed
	case f.Journal == "" && hr.filedByHost(f) != nil:
		return hr.committed
	case f.Journal == "":
		return e // the window's journal is gone, and not with a receipt of this run
	}
	if !hr.undoing {
		hr.failure = nil
	}
	// The lost session's reading and the host's verdict on it go with it:
	// the window is judged again from the journal and a reading of now.
	hr.rec, hr.inWindow, hr.first, hr.hostRB, hr.awaiting, hr.outcome = nil, false, nil, nil, false, ""
	return nil
}

// reconnectWait is how long resync waits before its try-th dial.
func reconnectWait(try int) time.Duration {
	return min(250*time.Millisecond<<try, 4*time.Second)
}

// redial dials the host again, takes its lock (waiting for the window's
// process to end and let it go) and reads it.
func (hr *hostRun) redial(ctx context.Context) (*plans.Facts, error) {
	if _, gone := hr.host.(goneHost); !gone {
		hr.trips += hr.host.RoundTrips()
		hr.host.Close()
		hr.host, hr.locked = goneHost{}, false
	}
	h, err := hr.dial.DialHost(ctx, hr.h.Host)
	if err != nil {
		return nil, err
	}
	var f *plans.Facts
	locked := false
	err = h.Run(ctx, []Op{lockOp(hr.o.Owner, hr.windowAwait()+hr.o.VerifyTimeout+hr.o.StableFor), observeOp(hr.q)}, func(i int, r Result) error {
		locked = locked || i == 0
		if i == 1 {
			f = r.Facts
		}
		return nil
	})
	if !locked {
		h.Close()
		return nil, err
	}
	hr.host, hr.locked = h, true
	if err != nil {
		return nil, err
	}
	f.Host = hr.h.Host
	return f, nil
}

// windowAwait is how long the host's window waits for this run's word.
func (hr *hostRun) windowAwait() time.Duration {
	d := hr.o.VerifyTimeout + hr.o.StableFor + windowAwaitSlack
	if hr.soak != nil {
		d += hr.soak.Duration
	}
	return d
}

// current is the host as last read: again after a resync, else by the lock.
func (hr *hostRun) current() *plans.Facts {
	if hr.now != nil {
		return hr.now
	}
	return hr.res.Before
}

// goneHost stands for a session lost while resync dials a new one.
type goneHost struct{}

func (goneHost) Run(context.Context, []Op, func(int, Result) error) error {
	return ConnLost(errGone)
}
func (goneHost) Address() string       { return "" }
func (goneHost) User() string          { return "" }
func (goneHost) RoundTrips() int       { return 0 }
func (goneHost) Close() error          { return nil }
func (goneHost) Identity() SSHIdentity { return SSHIdentity{} }

var errGone = errString("the session is gone")

type errString string

func (e errString) Error() string { return string(e) }
