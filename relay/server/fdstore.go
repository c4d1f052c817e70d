package server

import (
	"errors"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/relayctl/relayctl/relay/fdstore"
	"github.com/relayctl/relayctl/relay/handoff"
	"github.com/relayctl/relayctl/relay/lobby"
)

// Where a process got its UDP socket (Status.SocketFrom).
const (
	SocketBound   = "bound"   // it bound the socket itself
	SocketHandoff = "handoff" // from the relayd before it, over the handoff socket
	SocketFDStore = "fdstore" // from systemd's file-descriptor store
)

// What the state this process restored from the store was (Status.FDStoreState).
const (
	StateFinal    = "final"    // saved by a relayd as it stopped, after its last read
	StatePeriodic = "periodic" // the last periodic save of a relayd that did not stop cleanly
)

// How often the state in the store is brought up to date: at most every
// stateCheckEvery when the lobbies change (a player joins or leaves), and
// every stateRefresh while anyone plays, so that a crash restart finds
// idle times at most that old.
const (
	stateCheckEvery = 250 * time.Millisecond
	stateRefresh    = time.Second
)

// Option changes how New starts the relay.
type Option func(*Server)

// WithSystemd gives New what systemd passed at start (fdstore.Inherited)
// and the unit's file-descriptor store; store nil means relayd cannot use
// one and why says why (fdstore.FromEnviron's error). New takes the UDP
// socket and the state from files when they fit, and keeps both in the
// store.
func WithSystemd(files []fdstore.File, store *fdstore.Store, why error) Option {
	return func(s *Server) {
		s.sd = &systemd{files: files, store: store, why: why}
		if store != nil {
			s.sd.keeper = fdstore.NewKeeper(store, "", 0) // until a stored state says otherwise
		}
	}
}

// systemd is what this process does with systemd's fd store.
type systemd struct {
	files []fdstore.File
	store *fdstore.Store // nil: not used
	why   error          // why store is nil

	found    *fdstore.Found // the state restored, nil if none
	stateAge time.Duration  // its age when restored
	keeper   *fdstore.Keeper

	saves   atomic.Uint64
	savedAt atomic.Int64 // Unix ns of the last save
	errMu   sync.Mutex
	lastErr string // the last failure to keep something in the store
}

func (d *systemd) fail(s *Server, what string, err error) {
	d.errMu.Lock()
	defer d.errMu.Unlock()
	msg := what + ": " + err.Error()
	if msg != d.lastErr { // the same failure again says nothing new
		s.log.Error("fd store: "+what, "err", err)
	}
	d.lastErr = msg
}

func (d *systemd) err() string {
	d.errMu.Lock()
	defer d.errMu.Unlock()
	return d.lastErr
}

// using reports whether this process keeps its socket and state in the store.
func (s *Server) usingStore() bool { return s.sd != nil && s.sd.store != nil }

// keepStateLoop brings the state in the store up to date until stop.
func (s *Server) keepStateLoop(stop <-chan struct{}) {
	tick := time.NewTicker(stateCheckEvery)
	defer tick.Stop()
	last, lastSave := s.membership(), time.Now()
	force := !s.sd.keeper.Holds() // no state in the store yet
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		m := s.membership()
		if !force && m == last && (m.players == 0 || time.Since(lastSave) < stateRefresh) {
			continue
		}
		st, err := s.stateNow()
		if err == nil {
			_, _, err = s.saveState(st, false)
		} else {
			s.sd.fail(s, "encode the lobby table", err)
		}
		force = force && err != nil
		last, lastSave = m, time.Now()
	}
}

// membership changes whenever a player joins or leaves: a join adds a
// player, a leave is an expiry.
type membership struct {
	lobbies, players int
	expired          uint64
}

func (s *Server) membership() membership {
	s.mu.Lock()
	defer s.mu.Unlock()
	return membership{s.table.Lobbies(), s.table.Players(), s.c.expired.Load()}
}

// stateNow is the state as of now, read while the relay runs.
func (s *Server) stateNow() (handoff.State, error) {
	now := time.Now()
	s.mu.Lock()
	snap := s.table.Snapshot(now)
	s.mu.Unlock()
	table, err := lobby.EncodeTable(nil, snap, s.cfg.LobbySize)
	if err != nil {
		return handoff.State{}, err
	}
	return handoff.State{LastRead: s.lastRead.Load(), Paused: now.UnixNano(), Counters: s.counterMap(), Table: table}, nil
}

// saveState stores st in the store and returns the name it went under and
// its size.
func (s *Server) saveState(st handoff.State, final bool) (string, int, error) {
	name, size, err := s.sd.keeper.Save(fdstore.Saved{Final: final, PID: os.Getpid(), Inode: s.inode, Release: s.version, State: st})
	if err != nil {
		s.sd.fail(s, "save the state", err)
		if name == "" {
			return "", 0, err
		}
	}
	s.sd.saves.Add(1)
	s.sd.savedAt.Store(time.Now().UnixNano())
	return name, size, nil
}

// saveFinal is the last save, as relayd stops: it stops reading (the
// table and the counters are then final), saves, and waits until systemd
// has the state, so that the next process finds it.
func (s *Server) saveFinal() {
	paused, err := s.stopReading()
	st, final := paused.State, err == nil
	if !final {
		if st, err = s.stateNow(); err != nil {
			s.sd.fail(s, "encode the lobby table", err)
			return
		}
	}
	name, size, err := s.saveState(st, final)
	if err != nil {
		return
	}
	start := time.Now()
	if err := s.sd.keeper.Sync(); err != nil {
		s.sd.fail(s, "wait for systemd to take the state", err)
		return
	}
	snap, _, _ := lobby.DecodeTable(st.Table)
	s.log.Info("state kept in systemd's fd store", "fdname", name, "bytes", size, "lobbies", len(snap), "players", snap.Players(),
		"rx_packets", s.c.rxPackets.Load(), "last_read_at", unixNano(st.LastRead), "final", final,
		"barrier_us", time.Since(start).Microseconds())
}

// putConn stores a connection's socket, inside RawConn.Control so that
// the descriptor stays valid (os.File.Fd would make it blocking).
func (s *Server) putConn(name string, c syscall.Conn) error {
	raw, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var perr error
	if err := raw.Control(func(fd uintptr) { perr = s.sd.store.Put(name, int(fd)) }); err != nil {
		return err
	}
	return perr
}

// storeAttrs are the start line's words about the fd store: used or why
// not (when systemd runs relayd), and the state restored.
func (s *Server) storeAttrs() []any {
	switch {
	case s.sd == nil:
		return nil
	case s.usingStore():
		attrs := []any{"fdstore", fdstore.Protocol, "fdstore_max", s.sd.store.Max()}
		if f := s.sd.found; f != nil {
			attrs = append(attrs, "fdstore_state", stateKind(f.Saved), "fdstore_state_seq", f.Saved.Seq,
				"fdstore_state_age_us", s.sd.stateAge.Microseconds())
		}
		return attrs
	case errors.Is(s.sd.why, fdstore.ErrNoNotifySocket):
		return nil
	}
	return []any{"fdstore", "off", "fdstore_off", s.sd.why.Error()}
}

func stateKind(saved fdstore.Saved) string {
	if saved.Final {
		return StateFinal
	}
	return StatePeriodic
}

// storeStatus fills the /status fields of the fd store.
func (s *Server) storeStatus(st *Status) {
	st.SocketFrom = s.socketFrom
	d := s.sd
	switch {
	case d == nil:
		return
	case d.store == nil:
		if !errors.Is(d.why, fdstore.ErrNoNotifySocket) {
			st.FDStoreOff = d.why.Error()
		}
	default:
		st.FDStore, st.FDStoreMax = fdstore.Protocol, d.store.Max()
		st.FDStoreSaves = d.saves.Load()
		if at := d.savedAt.Load(); at > 0 {
			t := time.Unix(0, at).UTC()
			st.FDStoreSavedAt = &t
		}
	}
	if f := d.found; f != nil {
		age := d.stateAge.Microseconds()
		st.FDStoreState, st.FDStoreStateAgeUS = stateKind(f.Saved), &age
	}
	st.FDStoreError = d.err()
}
