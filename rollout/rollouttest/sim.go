package rollouttest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/relayctl/relayctl/plans"
	"github.com/relayctl/relayctl/relay/config"
	"github.com/relayctl/relayctl/rollout"
	"github.com/relayctl/relayctl/tune"
	"github.com/relayctl/relayctl/uplink"
)

// Sim is a relay host in memory: its files, sysctls, release link and
// relay process, changed by the primitives apply sends, and observed as
// facts. When the relay restarts it reads its config and gets the receive
// buffer the kernel rule gives, as relayd does.
type Sim struct {
	mu       sync.Mutex
	Name     string
	Sysctls  map[string]string
	Files    map[string]string // path → content (sysctl.d files, the relay config)
	Link     string            // the current link's target, "" for none
	Releases map[string]bool   // versions installed
	// Stored are the release store's entries (sha256), the newest first,
	// as observe lists them; Decoders what the host decodes an upload
	// with (package wire: gzip on a stock host).
	Stored   []string
	Decoders []string
	PID      int    // 0: the relay is not running
	RB       uint64 // the relay socket's rb
	Inode    uint64 // the relay socket's inode: a restart makes a new socket, a handoff keeps it
	Exe      string // the running relay's executable
	Journal  string // the journal of the run in progress, or of a run that died
	Owner    string // the lock's owner file: a dead run's, while no session holds it
	Paths    plans.PlanPaths
	// Key and HostKey stand for the SSH key the host accepts and its host
	// key, for tests of what receipts record of them.
	Key, HostKey string
	// Receipts are the receipts filed on the host, oldest first.
	Receipts []SimReceipt

	// The relay's /status beyond its players: Status makes it answer
	// (it does with Players or a Load too); Handoff ("unix/1") on
	// HandoffSocket and FDStore ("systemd/1") are what the running relay
	// offers, FDStoreMax the unit's store (a restart then keeps the socket
	// and its counters, as relayd through systemd's store does); FromPID
	// and SocketFrom are what the relay says of its start.
	Status        bool
	Handoff       string
	HandoffSocket string
	FDStore       string
	FDStoreMax    int
	FromPID       int
	SocketFrom    string

	// Faults.
	LockBusy bool
	FailOp   string // a primitive kind that fails with the host's message FailMsg
	FailMsg  string // what the host says when FailOp fails
	IgnoreRB bool   // the restarted relay keeps the default buffer
	// HoldsAnyway: the host's own read-back (a window's read-back op)
	// says it held whatever it read, as a host agent that disagrees with
	// relayctl's checks would.
	HoldsAnyway    bool
	DropIn         string        // a primitive kind at which the connection is lost, before it is done (in a window the host does it still)
	CrashAfter     string        // a primitive kind after which the connection is lost (it was done)
	WindowDies     bool          // a window's process dies with the connection (as after a reboot): its journal is left unfinished
	StopAfterCrash bool          // the relay dies with the connection (after a DropIn or CrashAfter in a window)
	RestartAt      int           // the relay restarts by itself (a new socket) on this sample of the run, counted from 1
	InWindow       chan struct{} `json:"-"` // closed when the restart is reached
	ReleaseIn      chan struct{} `json:"-"` // the restart waits for it
	// Crashes is a release (its version) whose relay dies soon after it
	// starts: it reads back as planned once, and is gone at the next
	// reading, its last words appended to RelayLog; Reads counts the
	// readings since it started.
	Crashes string
	Reads   int
	// RelayLog is what the relay wrote to its log (relay.service.log),
	// whose last lines relay-log answers; "" is no such file.
	RelayLog string
	// Fetch is what the host gets for a release url (nil: no network).
	Fetch func(url string) ([]byte, error) `json:"-"`
	// RefuseDial: the client refuses the connection (a host key that
	// changed), with these words.
	RefuseDial string
	// RefuseValue is "KEY VALUE", a sysctl write the kernel refuses
	// (EINVAL), as one it has rules for that relayctl does not know.
	RefuseValue string

	// Load is the traffic the relay's socket receives, by the version of
	// the release the relay runs ("" for any other): it moves the drop
	// counters every reading shows (observe and sample), by real time.
	Load  map[string]*SimLoad
	drops simDrops

	Restarts int
	Handoffs int
	Samples  int                // sample primitives received
	Draining bool               // the relay refuses new lobbies (relay-drain POST)
	Players  []int              // what /status reports, one reading after another; the last repeats
	Ops      []rollout.Op       `json:"-"` // every primitive received, in order
	Uploaded int                // bytes of uploads received (every form sent, as on the wire)
	Wire     int                // bytes of every request received: lines, data, words
	Fetched  int                // bytes the host fetched from a url
	Backups  map[string]*string // what backup kept, by name (nil: the file was absent)
	// The backups an applied window left beside its receipt
	// (RECEIPT.backups), by receipt name (without .json).
	Kept map[string]map[string]*string
	// ReleaseSHA is each installed release's program's sha256.
	ReleaseSHA map[string]string
	locked     bool
	lost       bool       // the session's connection is lost: nothing but a new lock
	win        *simWindow // a window waiting for the run's word
	ended      string     // how the last window ended
	// readBack is the last window's own read-back (its read-back op), which
	// a commit with read-back completes the receipt with; filed are the
	// journals filed with receipts, by name, for a reopen.
	readBack *rollout.HostReadBack
	filed    map[string]string
	trips    int
	needs    int // the Run's keeps that answered NEED: a round trip each

	// For the fleet simulator (net.go): Net makes each round trip take
	// time; Lean keeps no list of the primitives and large files by their
	// sha256 alone.
	Net  *Net `json:"-"`
	Lean bool `json:"-"`
}

// SimLoad is what a relay's socket receives, per second.
type SimLoad struct {
	Datagrams  float64 // arriving at the relay socket, read or dropped
	Drops      float64 // of those, dropped (ss d, RcvbufErrors, InErrors, rx_drops)
	OtherDrops float64 // dropped on another socket of the namespace: RcvbufErrors and InErrors only
	Unseen     float64 // of Drops, not seen by the relay's rx_drops
	Players    []int   // what /status reports, one reading after another; the last repeats
	// Established is what /status reports as players_established, in step
	// with Players; nil: a relay that does not report it (an older relayd).
	Established []int
	// Strangers are the datagrams per second read from addresses that are
	// no members (joins, spoofed data): read, never forwarded.
	Strangers float64
	// Forwarded is the players' data the relay forwards per second over
	// the span ending at each reading, one reading after another (the
	// last repeats); nil: every datagram read but the strangers'.
	Forwarded []float64
}

// simDrops are the counters the load moves: the socket's (d, the relay's
// rx and rx_drops) start again with a new socket; the namespace's do not.
type simDrops struct {
	at                                      time.Time
	socketD, relayRx, relayDrops, forwarded float64
	rcvbufErrors, inDatagrams               float64
}

// load is the traffic of the release the relay runs, nil for none.
func (s *Sim) load() *SimLoad {
	if s.PID == 0 || s.Load == nil {
		return nil
	}
	if l, ok := s.Load[path.Base(path.Dir(s.Exe))]; ok {
		return l
	}
	return s.Load[""]
}

// advance moves the counters by the load over the time since the last
// reading.
func (s *Sim) advance() {
	now := time.Now()
	dt := now.Sub(s.drops.at).Seconds()
	if s.drops.at.IsZero() {
		dt = 0
	}
	s.drops.at = now
	l := s.load()
	if l == nil {
		return
	}
	s.drops.socketD += l.Drops * dt
	s.drops.relayRx += (l.Datagrams - l.Drops) * dt
	s.drops.relayDrops += (l.Drops - l.Unseen) * dt
	s.drops.rcvbufErrors += (l.Drops + l.OtherDrops) * dt
	s.drops.inDatagrams += (l.Datagrams - l.Drops) * dt
	fwd := l.Datagrams - l.Drops - l.Strangers
	if len(l.Forwarded) > 0 {
		fwd = l.Forwarded[0]
		if len(l.Forwarded) > 1 {
			l.Forwarded = l.Forwarded[1:]
		}
	}
	s.drops.forwarded += fwd * dt
}

// players is what /status reports now: its players, and its established
// players when the load says.
func (s *Sim) players() (int, *int, bool) {
	var est *int
	if l := s.load(); l != nil && len(l.Established) > 0 {
		n := l.Established[0]
		est = &n
		if len(l.Established) > 1 {
			l.Established = l.Established[1:]
		}
	}
	seq := s.Players
	if l := s.load(); l != nil && len(l.Players) > 0 {
		seq = l.Players
	}
	if len(seq) == 0 {
		return 0, est, s.load() != nil
	}
	n := seq[0]
	if len(seq) > 1 {
		seq = seq[1:]
	}
	if l := s.load(); l != nil && len(l.Players) > 0 {
		l.Players = seq
	} else {
		s.Players = seq
	}
	return n, est, true
}

// counters is a reading of the drop counters, as sample answers.
func (s *Sim) counters() plans.DropCounters {
	s.advance()
	d := s.drops
	ns := uint64(d.rcvbufErrors)
	c := plans.DropCounters{SSDrops: uint64(d.socketD), ProcUDPDrops: uint64(d.socketD), RcvbufErrors: ns, InErrors: ns,
		InDatagrams: uint64(d.inDatagrams), SocketInode: s.Inode, Sockets: 1, PID: s.PID, ClockNanos: time.Now().UnixNano()}
	if n, est, ok := s.players(); ok {
		rx, drops, fwd := uint64(d.relayRx), uint64(d.relayDrops), uint64(d.forwarded)
		c.RelayRxPackets, c.RelayRxDrops, c.RelayForwarded, c.Players, c.PlayersEstablished = &rx, &drops, &fwd, &n, est
	}
	return c
}

// NewSim is the incident's host: the 212,992-byte defaults, release 1.7.0
// running, a relay config that asks for no buffer.
func NewSim(name string) *Sim {
	cfg := config.Default()
	cfg.Listen = "0.0.0.0:7788"
	return &Sim{
		Name:       name,
		Sysctls:    map[string]string{"net.core.rmem_max": "212992", "net.core.rmem_default": "212992"},
		Files:      map[string]string{plans.DefaultPaths.RelayConfig: string(cfg.Render())},
		Link:       "/opt/relay/releases/1.7.0",
		Releases:   map[string]bool{"1.7.0": true},
		Decoders:   []string{uplink.Gzip},
		PID:        100,
		RB:         212992,
		Inode:      1,
		Exe:        "/opt/relay/releases/1.7.0/relayd",
		Paths:      plans.PlanPaths(plans.DefaultPaths),
		Backups:    map[string]*string{},
		Kept:       map[string]map[string]*string{},
		ReleaseSHA: map[string]string{"1.7.0": plans.SHA256("sim relayd 1.7.0")},
	}
}

var _ rollout.Host = (*Sim)(nil)

// Address is the Sim's name with the SSH port.
func (s *Sim) Address() string { return s.Name + ":22" }

// User is root.
func (s *Sim) User() string { return "root" }

// Identity is the Sim's keys: its Key and HostKey, as a test set them
// ("" for none: a Sim has no SSH).
func (s *Sim) Identity() rollout.SSHIdentity {
	return rollout.SSHIdentity{User: "root", Key: s.Key, HostKey: s.HostKey}
}

// RoundTrips counts the Run calls (each one batch, one round trip).
func (s *Sim) RoundTrips() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.trips
}

// Close ends the session: a lock not released stays behind, as on a real
// host.
func (s *Sim) Close() error {
	s.mu.Lock()
	w := s.win
	s.locked, s.lost = false, false
	s.mu.Unlock()
	if w != nil {
		s.judge(w) // the session is gone: the window ends by itself
	}
	return nil
}

// Facts is what observe would read.
func (s *Sim) Facts() *plans.Facts {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.crash()
	f := &plans.Facts{Host: s.Name, Address: s.Name + ":22", User: "root", Kernel: "6.18.44", InitialNetns: true,
		Sysctls: map[string]plans.SysctlFact{}, SysctlFiles: []plans.ConfFile{}, ClockNanos: time.Now().UnixNano(), Journal: s.Journal}
	for k, v := range s.Sysctls {
		f.Sysctls[k] = plans.SysctlFact{Exists: true, Value: v, Writable: true}
	}
	var names []string
	for p := range s.Files {
		names = append(names, p)
	}
	sort.Strings(names)
	for _, p := range names {
		if p == s.Paths.RelayConfig {
			f.Config = plans.FileFact{Exists: true, Content: s.Files[p]}
		} else if strings.HasSuffix(p, ".conf") && !strings.Contains(p, ".relayctl-") {
			f.SysctlFiles = append(f.SysctlFiles, plans.ConfFile{Path: p, Content: s.Files[p]})
		}
	}
	f.Release.CurrentRaw = s.Link
	f.Release.Current = plans.ReleaseOf(s.Paths, s.Link)
	for v, there := range s.Releases {
		if there {
			f.Release.Installed = append(f.Release.Installed, v)
		}
	}
	sort.Strings(f.Release.Installed)
	f.Release.Stored = append([]string(nil), s.Stored...)
	f.Release.Decoders = append([]string(nil), s.Decoders...)
	if s.PID > 0 {
		f.Service = plans.ServiceFact{Running: true, PID: s.PID, FDStoreMax: s.FDStoreMax}
		c := s.counters()
		if c.Players != nil || s.Status {
			f.RelayStatus = s.status(c)
		}
		f.Release.RunningExe = s.Exe
		f.Socket = plans.SocketFact{Found: true, Port: 7788, Rcvbuf: s.RB, Inode: s.Inode, Drops: c.SSDrops, ProcUDPDrops: c.ProcUDPDrops,
			RcvbufErrors: c.RcvbufErrors, InErrors: c.InErrors, InDatagrams: c.InDatagrams, Sockets: 1}
	} else {
		f.Service = plans.ServiceFact{Detail: "not running"}
		f.Socket = plans.SocketFact{Port: 7788}
	}
	return f
}

// status is what the relay's /status says, with the counters c.
func (s *Sim) status(c plans.DropCounters) *plans.RelayStatusFact {
	st := &plans.RelayStatusFact{Read: true, Version: plans.ReleaseOf(s.Paths, s.Link), PID: s.PID, SORcvbufEffective: int(s.RB), SocketInode: s.Inode,
		Handoff: s.Handoff, HandoffSocket: s.HandoffSocket, FDStore: s.FDStore, HandoffFromPID: s.FromPID, SocketFrom: s.SocketFrom}
	if s.SocketFrom == "fdstore" {
		st.FDStoreState = "final"
	}
	if c.Players != nil {
		st.Players, st.Lobbies = *c.Players, (*c.Players+7)/8
		st.RxDrops, st.RxPackets = *c.RelayRxDrops, *c.RelayRxPackets
		st.Forwarded, st.PlayersEstablished = *c.RelayForwarded, c.PlayersEstablished
	}
	return st
}

// Clone copies the facts, for a plan made from them.
func Clone(f *plans.Facts) *plans.Facts {
	b, _ := json.Marshal(f)
	var c plans.Facts
	json.Unmarshal(b, &c)
	return &c
}

// errLost is a lost connection, as the transport reports it.
type errLost struct{}

func (errLost) Error() string { return "ssh: connection lost" }

// Run carries out ops in order (rollout.Host), stopping at the first that
// fails, with the faults the Sim was given.
func (s *Sim) Run(ctx context.Context, ops []rollout.Op, each func(int, rollout.Result) error) error {
	s.mu.Lock()
	s.trips++
	s.needs = 0
	s.mu.Unlock()
	sent, restarts := 0, false
	defer func() {
		// A keep that answered NEED waited a round trip for its bytes (the
		// agent's offer): before the trip that carried them.
		s.mu.Lock()
		needs := s.needs
		s.trips += needs
		s.Wire += sent
		s.mu.Unlock()
		for range needs {
			s.Net.trip(ctx, 0, false)
		}
		s.Net.trip(ctx, sent, restarts)
	}()
	if err := rollout.ValidateRun(ops); err != nil {
		return err
	}
	for i := 0; i < len(ops); i++ {
		o := ops[i]
		sent += requestBytes(o)
		restarts = restarts || o.Kind == "restart" || o.Kind == "handoff"
		if o.Encloses() {
			j := rollout.Enclosed(ops, i)
			for _, w := range ops[i+1 : j] {
				sent += requestBytes(w)
				restarts = restarts || w.Kind == "restart" || w.Kind == "handoff"
			}
			if err := s.enclose(i, ops[:j], each); err != nil {
				return err
			}
			i = j - 1
			continue
		}
		var r rollout.Result
		var err error
		if o.Kind == "verdict" {
			r, err = s.verdictKeep(o)
		} else {
			r, err = s.step(o, false)
		}
		if rollout.IsConnLost(err) {
			s.sessionLost()
		}
		if err != nil {
			return err
		}
		sent += r.Sent
		r.At = time.Now()
		if each != nil {
			if err := each(i, r); err != nil {
				return err
			}
		}
	}
	return nil
}

// step carries out one primitive for the run's session, or for the host's
// window (the window's process holds the lock, and the faults that cut the
// run off are windowOps').
func (s *Sim) step(o rollout.Op, window bool) (rollout.Result, error) {
	if o.Kind == "restart" && s.InWindow != nil {
		close(s.InWindow)
		<-s.ReleaseIn
		s.InWindow = nil
	}
	s.mu.Lock()
	lost := s.lost && o.Kind != "lock" && !window
	if lost || !window && o.Kind == s.DropIn {
		if !lost && !s.Lean {
			s.Ops = append(s.Ops, o)
		}
		s.DropIn, s.lost, s.locked = "", true, false // the session is gone; its lock owner file stays
		s.mu.Unlock()
		return rollout.Result{}, rollout.ConnLost(errLost{})
	}
	s.mu.Unlock()
	r, err := s.one(o, window)
	if err == nil && !window && o.Kind == s.CrashAfter {
		s.mu.Lock()
		s.CrashAfter, s.lost, s.locked = "", true, false // done, then the connection is lost
		s.mu.Unlock()
		return rollout.Result{}, rollout.ConnLost(errLost{})
	}
	return r, err
}

// one carries out one primitive, or fails it as the Sim's faults say.
func (s *Sim) one(o rollout.Op, window bool) (rollout.Result, error) {
	if o.Kind == "observe" {
		f := s.Facts()
		if o.Query != nil && o.Query.UndoOf != "" && !o.Query.LastApply {
			f.Undo = s.undo(o.Query.UndoOf)
		}
		return rollout.Result{Facts: f}, nil
	}
	if o.Kind == "sample" {
		return s.sample(o)
	}
	if o.Kind == "read-back" {
		return s.readBackOp(o, window)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.Lean {
		s.Ops = append(s.Ops, o)
	}
	switch {
	case o.Kind == s.FailOp:
		s.jlog("fail " + s.FailMsg)
		return rollout.Result{}, &rollout.OpError{Op: o, Msg: s.FailMsg}
	case o.Kind != "lock" && o.Kind != "observe" && o.Kind != "receipts" && !s.locked && !window:
		return rollout.Result{}, fmt.Errorf("run on host: the host is not locked")
	}
	r, err := s.apply(o)
	if err != nil {
		if errors.Is(err, rollout.ErrLocked) {
			return rollout.Result{}, err
		}
		s.jlog("fail " + err.Error())
		return rollout.Result{}, &rollout.OpError{Op: o, Msg: err.Error()}
	}
	if o.Mutates() {
		s.jlog("ok " + o.Kind + " " + o.Args[0])
	}
	if o.Kind != "keep" && o.Kind != "fetch" {
		r.Sent = len(o.Data) // a keep's upload says its own (store)
	}
	return r, nil
}

// sample reads the drop counters of the relay process the op names, as
// the agent does: a relay gone is the host's error.
func (s *Sim) sample(o rollout.Op) (rollout.Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.Ops = append(s.Ops, o)
	if !s.locked {
		return rollout.Result{}, fmt.Errorf("run on host: the host is not locked")
	}
	if o.Kind == s.FailOp {
		return rollout.Result{}, &rollout.OpError{Op: o, Msg: s.FailMsg}
	}
	if pid, _ := strconv.Atoi(o.Args[0]); pid != s.PID || s.PID == 0 {
		return rollout.Result{}, &rollout.OpError{Op: o, Msg: "the relay (pid " + o.Args[0] + ") is not running"}
	}
	s.Samples++
	if s.Samples == s.RestartAt {
		s.restart() // as Restart=on-failure would: another process, another socket
		s.Restarts--
	}
	c := s.counters()
	return rollout.Result{Drops: &c}, nil
}

// Sampled is how many samples the Sim has answered, safe to call while an
// apply runs.
func (s *Sim) Sampled() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.Samples
}

// jlog appends a line to the journal, as the host agent does (rollout/journal.go).
func (s *Sim) jlog(text string) {
	if s.Journal == "" && !strings.HasPrefix(text, "begin ") {
		return // no run begun: nothing to note (as the agent, before begin)
	}
	s.Journal += time.Now().UTC().Format("2006-01-02T15:04:05.000000000Z") + " " + text + "\n"
}

// apply carries out one primitive on the in-memory host.
func (s *Sim) apply(o rollout.Op) (rollout.Result, error) {
	switch o.Kind {
	case "lock":
		if s.LockBusy {
			return rollout.Result{}, fmt.Errorf("%w: relayctl devel (pid 1 on elsewhere), plan other", rollout.ErrLocked)
		}
		dead := s.Owner
		s.locked, s.lost, s.Owner = true, false, o.Args[0]
		return rollout.Result{Value: dead}, nil
	case "unlock":
		s.locked, s.Owner = false, ""
		if w := s.win; w != nil { // the session ends: the window ends by itself
			s.mu.Unlock()
			s.judge(w)
			s.mu.Lock()
		}
	case "begin":
		s.Backups = map[string]*string{}
		s.Journal = ""
		s.jlog("begin plan=" + o.Args[0] + " checksum=" + o.Args[1])
	case "step":
		s.jlog(o.Args[0])
	case "commit":
		if err := s.completeReceipt(&o); err != nil {
			return rollout.Result{}, err
		}
		s.keep(o)
		if s.filed == nil {
			s.filed = map[string]string{}
		}
		s.filed[o.Args[0]] = s.Journal
		s.Journal, s.Backups = "", map[string]*string{} // filed with the receipt
		s.fileReceipt(o)
	case "reopen":
		return rollout.Result{}, s.reopen(o.Args[0])
	case "detach", "verdict":
		return rollout.Result{}, fmt.Errorf("%s alone: its window's ops come after it", o.Kind)
	case "record":
		s.fileReceipt(o)
	case "receipts":
		return s.receipts(o), nil
	case "check-release":
		if sum, ok := s.ReleaseSHA[path.Base(o.Args[0])]; !ok || sum != o.Args[1] {
			return rollout.Result{}, fmt.Errorf("the release already in %s is not the one reviewed: %s/relayd has sha256 %s, want %s", o.Args[0], o.Args[0], orNone(sum), o.Args[1])
		}
	case "release-sum":
		if sum, ok := s.ReleaseSHA[path.Base(o.Args[0])]; ok && s.Releases[path.Base(o.Args[0])] {
			return rollout.Result{Value: sum + " - "}, nil
		}
	case "restore-kept":
		return rollout.Result{}, s.restoreKept(o)
	case "dir", "file-ok", "link-ok", "exec-ok", "daemon-reload", "clear-fdstore":
	case "clear":
		s.Journal, s.Backups = "", map[string]*string{}
	case "keep", "fetch":
		return s.store(o)
	case "rename", "remove", "link", "place-release", "backup", "restore", "backup-link", "restore-link":
		return rollout.Result{}, s.file(o)
	case "relay-log":
		if s.RelayLog == "" {
			return rollout.Result{}, fmt.Errorf("%s: No such file or directory", o.Args[0])
		}
		lines := strings.Split(strings.TrimRight(s.RelayLog, "\n"), "\n")
		return rollout.Result{Value: strings.Join(lines[max(0, len(lines)-20):], "\n")}, nil
	case "sysctl", "restart", "handoff", "stop", "relay-drain", "unit-log", "clock", "reload", "reload-or-restart":
		if o.Kind == "sysctl" && s.RefuseValue == o.Args[0]+" "+o.Args[1] {
			return rollout.Result{}, fmt.Errorf("the kernel refused %s = %s (Invalid argument); it reads %s", o.Args[0], o.Args[1], s.Sysctls[o.Args[0]])
		}
		return s.relay(o), nil
	case "prune":
		return s.prune(o), nil
	default:
		return rollout.Result{}, fmt.Errorf("unknown request %s", o.Kind)
	}
	return rollout.Result{}, nil
}

// store is keep and fetch: bytes by their sha256, kept when there already.
func (s *Sim) store(o rollout.Op) (rollout.Result, error) {
	a := o.Args
	if c, ok := s.Files[a[0]]; ok && contentSHA(c) == a[1] {
		return rollout.Result{Value: "kept"}, nil
	}
	var r rollout.Result
	var got string
	if o.Kind == "fetch" {
		if s.Fetch == nil {
			return rollout.Result{}, fmt.Errorf("fetch %s: Could not resolve host (nothing was written)", a[2])
		}
		data, err := s.Fetch(a[2])
		if err != nil {
			return rollout.Result{}, fmt.Errorf("fetch %s: %v (nothing was written)", a[2], err)
		}
		s.Fetched += len(data)
		if got = s.sum(data); got != a[1] {
			return rollout.Result{}, fmt.Errorf("the file fetched from %s has sha256 %s, want %s (nothing was written)", a[2], got, a[1])
		}
		s.keepFile(a[0], data, got)
		return rollout.Result{Value: "fetch " + strconv.Itoa(len(data))}, nil
	}
	data, r := s.unpack(o)
	s.Uploaded += r.Sent
	if got = s.sum(data); got != a[1] {
		return rollout.Result{}, fmt.Errorf("the bytes received for %s have sha256 %s, want %s", a[0], got, a[1])
	}
	s.keepFile(a[0], data, got)
	r.Value = "sent " + strconv.Itoa(len(data))
	return r, nil
}

// sum is the sha256 of bytes the Sim received.
func (s *Sim) sum(data []byte) string {
	if s.Lean {
		return sumOf(data)
	}
	return plans.SHA256(string(data))
}

// keepFile writes a file the Sim received: a lean Sim keeps large ones by
// their sha256 alone. A file in the release store is its newest entry.
func (s *Sim) keepFile(path string, data []byte, sha string) {
	if s.Lean && len(data) >= leanSize {
		s.Files[path] = leanPrefix + sha
	} else {
		s.Files[path] = string(data)
	}
	store := s.Paths.Releases + "/.sha256/"
	if rest, ok := strings.CutPrefix(path, store); ok && strings.HasPrefix(rest, sha+"/") {
		s.Stored = append([]string{sha}, slices.DeleteFunc(s.Stored, func(x string) bool { return x == sha })...)
	}
}

// file carries out a primitive on the Sim's files, releases and link.
func (s *Sim) file(o rollout.Op) error {
	a := o.Args
	switch o.Kind {
	case "rename":
		c, ok := s.Files[a[0]]
		if !ok {
			return fmt.Errorf("rename %s: no such file", a[0])
		}
		s.Files[a[1]] = c
		delete(s.Files, a[0])
	case "remove":
		delete(s.Files, a[0])
	case "link":
		s.Link = a[1]
	case "place-release":
		if c, ok := s.Files[a[1]]; !ok || contentSHA(c) != a[2] {
			return fmt.Errorf("%s is not a regular file", a[1])
		}
		s.Releases[path.Base(a[0])] = true
		if s.ReleaseSHA == nil {
			s.ReleaseSHA = map[string]string{}
		}
		s.ReleaseSHA[path.Base(a[0])] = a[2]
	case "backup":
		if c, ok := s.Files[a[0]]; ok {
			s.Backups[a[1]] = &c
		} else {
			s.Backups[a[1]] = nil
		}
	case "restore":
		if c := s.Backups[a[1]]; c != nil {
			s.Files[a[0]] = *c
		} else {
			delete(s.Files, a[0])
		}
	case "backup-link":
		l := s.Link
		s.Backups[a[1]] = &l
	case "restore-link":
		l := s.Backups[a[1]]
		if l == nil {
			return fmt.Errorf("restore-link %s: nothing backed up as %s", a[0], a[1])
		}
		s.Link = *l
	}
	return nil
}

// relay carries out a primitive on the kernel's values and the relay.
func (s *Sim) relay(o rollout.Op) rollout.Result {
	now := rollout.Result{Value: strconv.FormatInt(time.Now().UnixNano(), 10)}
	switch o.Kind {
	case "sysctl":
		s.Sysctls[o.Args[0]] = o.Args[1]
		return rollout.Result{Value: o.Args[1]}
	case "restart":
		pid, inode, kept := s.PID, s.Inode, s.drops
		s.restart()
		s.SocketFrom = "bound"
		if s.FDStore != "" && s.FDStoreMax > 0 && pid != 0 {
			s.Inode, s.drops, s.FromPID, s.SocketFrom = inode, kept, pid, "fdstore" // the socket from systemd's store
		}
	case "handoff":
		s.Handoffs++
		pid, inode, kept := s.PID, s.Inode, s.drops
		s.restart()
		s.Restarts--
		s.Inode, s.drops, s.FromPID = inode, kept, pid // the same socket, and relayd carries its counters on
	case "relay-drain":
		s.Draining = o.Args[2] == "POST"
	case "stop":
		s.PID = 0
	case "reload", "reload-or-restart":
		if s.PID == 0 {
			s.restart()
			break
		}
		pid, inode, restarts := s.PID, s.Inode, s.Restarts
		s.restart()
		s.PID, s.Inode, s.Restarts = pid, inode, restarts
	case "unit-log":
		return rollout.Result{Value: "relayd: error: bad config"}
	}
	return now
}

// SimReceipt is a receipt filed on a Sim.
type SimReceipt struct {
	Name string // NAME.json
	Body string
}

// fileReceipt files a commit's or record's receipt and keeps the newest KEEP,
// as the host agent does.
func (s *Sim) fileReceipt(o rollout.Op) {
	body := string(o.Data)
	if s.Lean {
		body = "" // the fleet simulator's hosts keep the name alone
	}
	s.Receipts = append(s.Receipts, SimReceipt{Name: o.Args[0] + ".json", Body: body})
	sort.SliceStable(s.Receipts, func(i, j int) bool { return s.Receipts[i].Name < s.Receipts[j].Name })
	if keep, _ := strconv.Atoi(o.Args[2]); len(s.Receipts) > keep {
		s.Receipts = s.Receipts[len(s.Receipts)-keep:]
	}
}

// receipts answers the newest N receipts, newest first, framed as
// the host agent frames them.
func (s *Sim) receipts(o rollout.Op) rollout.Result {
	n, _ := strconv.Atoi(o.Args[0])
	var b strings.Builder
	for i := len(s.Receipts) - 1; i >= 0 && n > 0; i, n = i-1, n-1 {
		fmt.Fprintf(&b, "%s %d\n%s", s.Receipts[i].Name, len(s.Receipts[i].Body), s.Receipts[i].Body)
	}
	return rollout.Result{Value: b.String()}
}

// keep keeps an applied window's backups beside its receipt, as the
// agent's commit does.
func (s *Sim) keep(o rollout.Op) {
	if o.Args[1] != "applied" {
		return
	}
	if s.Kept == nil {
		s.Kept = map[string]map[string]*string{}
	}
	s.Kept[o.Args[0]] = s.Backups
}

// undo is the newest receipt of the plan with checksum sum that records
// what its window changed, as observe reads it.
func (s *Sim) undo(sum string) *plans.UndoFact {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := len(s.Receipts) - 1; i >= 0; i-- {
		var r struct {
			Checksum string      `json:"plan_checksum"`
			Outcome  string      `json:"outcome"`
			Undo     *plans.Undo `json:"undo"`
		}
		if json.Unmarshal([]byte(s.Receipts[i].Body), &r) != nil || r.Checksum != sum || r.Undo == nil {
			continue
		}
		name := strings.TrimSuffix(s.Receipts[i].Name, ".json")
		f := &plans.UndoFact{Receipt: name, Checksum: r.Checksum, Outcome: r.Outcome, Undo: r.Undo, Backups: []string{}}
		for b := range s.Kept[name] {
			f.Backups = append(f.Backups, b)
		}
		sort.Strings(f.Backups)
		return f
	}
	return nil
}

// restoreKept copies a kept backup beside its file, sha256 checked.
func (s *Sim) restoreKept(o rollout.Op) error {
	dir, name := path.Split(o.Args[0])
	receipt := strings.TrimSuffix(path.Base(dir), ".backups")
	c, ok := s.Kept[receipt][name]
	if !ok || c == nil {
		return fmt.Errorf("%s is not there (or not a regular file): the host no longer keeps that backup (nothing was written)", o.Args[0])
	}
	if sum := plans.SHA256(*c); sum != o.Args[2] {
		return fmt.Errorf("the backup %s has sha256 %s, its receipt says %s (nothing was written)", o.Args[0], sum, o.Args[2])
	}
	s.Files[o.Args[1]] = *c
	return nil
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// prune removes the releases the argv lines name (v:VERSION), never the
// one the link points at; store entries (s:SHA256) the Sim does not keep.
func (s *Sim) prune(o rollout.Op) rollout.Result {
	n := 0
	for _, w := range o.Argv {
		if v, ok := strings.CutPrefix(w, "v:"); ok && s.Releases[v] && path.Base(s.Link) != v {
			delete(s.Releases, v)
			n++
		}
	}
	return rollout.Result{Value: strconv.Itoa(n)}
}

// restart starts the release the link points at, with its config.
// crash is Crashes: the relay of that release, read once since it
// started, is gone at this reading.
func (s *Sim) crash() {
	if s.PID == 0 || s.Crashes == "" || path.Base(s.Link) != s.Crashes || s.Exe != s.Link+"/relayd" {
		return
	}
	if s.Reads++; s.Reads > 1 {
		s.RelayLog += "relayd " + s.Crashes + ": fatal error: lobby table corrupt\n"
		s.PID = 0
	}
}

func (s *Sim) restart() {
	s.advance()
	s.Reads = 0
	s.drops.socketD, s.drops.relayRx, s.drops.relayDrops, s.drops.forwarded = 0, 0, 0, 0 // a new socket, a new process
	s.Restarts++
	s.Inode++
	s.PID += 100
	s.Exe = s.Link + "/relayd"
	cfg, err := config.Parse(strings.NewReader(s.Files[s.Paths.RelayConfig]), "sim")
	if err != nil {
		cfg = config.Default()
	}
	max, _ := strconv.Atoi(s.Sysctls["net.core.rmem_max"])
	def, _ := strconv.Atoi(s.Sysctls["net.core.rmem_default"])
	s.RB = uint64(tune.ExpectRcvbuf(cfg.SORcvbuf, cfg.SORcvbufForce, max, def).Effective)
	if s.IgnoreRB {
		s.RB = uint64(def)
	}
}

// readBackOp is a window's own read-back: the Sim read by ReadBack.Judge,
// the function the host agent runs, as the read-back op's query says.
func (s *Sim) readBackOp(o rollout.Op, window bool) (rollout.Result, error) {
	if !window {
		return rollout.Result{}, &rollout.OpError{Op: o, Msg: "read-back is a window's"}
	}
	res, err := o.Judge.Judge(nil, func() (*plans.Facts, error) { return s.Facts(), nil })
	if err != nil {
		return rollout.Result{}, &rollout.OpError{Op: o, Msg: err.Error()}
	}
	s.mu.Lock()
	if s.HoldsAnyway {
		res.Held, res.Why = true, ""
	}
	s.readBack = &rollout.HostReadBack{Result: res, Keys: o.Judge.Plan.ReadKeys()}
	if s.win != nil {
		s.win.readBack = &res
	}
	s.mu.Unlock()
	return rollout.Result{Facts: res.After, ReadBack: &rollout.ReadBackResult{Held: res.Held, Why: res.Why}}, nil
}

// completeReceipt completes a commit's receipt with the window's own
// read-back, when the commit asks (its fourth word), as the agent does.
func (s *Sim) completeReceipt(o *rollout.Op) error {
	if len(o.Args) < 4 || o.Args[3] != "read-back" {
		return nil
	}
	if s.readBack == nil {
		return errors.New("no read-back of the window to complete the receipt with")
	}
	b, err := rollout.CompleteHostReceipt(o.Data, *s.readBack)
	if err != nil {
		return err
	}
	o.Data = b
	return nil
}

// reopen takes back the receipt name filed in its window's batch: its
// journal and backups the run's again, as the agent does.
func (s *Sim) reopen(name string) error {
	j, ok := s.filed[name]
	if !ok {
		return fmt.Errorf("no receipt %s to reopen", name)
	}
	for i, r := range s.Receipts {
		if r.Name == name+".json" {
			s.Receipts = append(s.Receipts[:i], s.Receipts[i+1:]...)
			break
		}
	}
	s.Journal, s.Backups = j, s.Kept[name]
	if s.Backups == nil {
		s.Backups = map[string]*string{}
	}
	delete(s.Kept, name)
	delete(s.filed, name)
	return nil
}
