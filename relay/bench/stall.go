package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/relayctl/relayctl/relay/sockstat"
	"github.com/relayctl/relayctl/tune"
)

// The stall probe checks the sizing model (tune.DatagramsHeld,
// docs/sizing.md) against a real relay: players send on aligned ticks, the
// relay's reading is stopped for exactly StallTicks ticks, and the relay
// socket's kernel counters say how many datagrams it kept and dropped,
// next to what the model predicted.
//
// The stop falls half a tick after a tick's sends and the resume half a
// tick before the next tick after the stall, so exactly StallTicks bursts
// arrive while the relay is stopped, with half a tick of slack for the
// timing of either edge; a trial whose edges missed that slack is invalid.

// StallConfig is one probe against one relay (one receive buffer).
type StallConfig struct {
	Relay      string // UDP address of the relay
	Control    string // its control plane, for the counters and its rb
	LobbySize  int
	PacketSize int
	Hz         int
	StallTicks int   // bursts that arrive while the relay is stopped
	Players    []int // player counts to try, ascending
	LobbyBase  uint32
	Sources    []netip.Addr // as Config.Sources
}

// StallTarget stops and resumes the relay's reading, and reads its socket's
// kernel counters (rx_queue and drops) while it is stopped.
type StallTarget interface {
	Pause() error  // returns once the relay has stopped reading
	Resume() error // the relay reads again
	Socket() (sockstat.UDPSocket, error)
}

// ProcessTarget stops a relay process on this machine with SIGSTOP and
// reads its socket from /proc/PID/net/udp (its own network namespace).
// SIGSTOP stops every thread at once and takes effect within microseconds,
// far inside the half tick of slack; a read-pause flag in the relay would
// stop only its reader, after the batch it is reading.
type ProcessTarget struct {
	PID  int
	Port int // the relay's UDP port
}

// Pause sends SIGSTOP and waits until every thread of the process is
// stopped.
func (p ProcessTarget) Pause() error {
	if err := syscall.Kill(p.PID, syscall.SIGSTOP); err != nil {
		return fmt.Errorf("stop relay %d: %w", p.PID, err)
	}
	deadline := time.Now().Add(time.Second)
	for {
		stopped, err := allStopped(p.PID)
		if err != nil {
			return fmt.Errorf("stop relay %d: %w", p.PID, err)
		}
		if stopped {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("stop relay %d: its threads did not all stop within 1s", p.PID)
		}
		time.Sleep(20 * time.Microsecond)
	}
}

// Resume sends SIGCONT.
func (p ProcessTarget) Resume() error {
	if err := syscall.Kill(p.PID, syscall.SIGCONT); err != nil {
		return fmt.Errorf("resume relay %d: %w", p.PID, err)
	}
	return nil
}

// Socket reads the relay's bound socket from /proc/PID/net/udp.
func (p ProcessTarget) Socket() (sockstat.UDPSocket, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/udp", p.PID))
	if err != nil {
		return sockstat.UDPSocket{}, fmt.Errorf("read relay socket: %w", err)
	}
	rows, err := sockstat.ParseProcNetUDP(b)
	if err != nil {
		return sockstat.UDPSocket{}, fmt.Errorf("read relay socket: %w", err)
	}
	var found []sockstat.UDPSocket
	for _, r := range rows {
		if r.LocalPort == p.Port && r.RemotePort == 0 {
			found = append(found, r)
		}
	}
	if len(found) != 1 {
		return sockstat.UDPSocket{}, fmt.Errorf("read relay socket: %d bound sockets on port %d in /proc/%d/net/udp, want 1", len(found), p.Port, p.PID)
	}
	return found[0], nil
}

// allStopped reports whether every thread of pid is in state T (stopped).
func allStopped(pid int) (bool, error) {
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
	if err != nil || len(tasks) == 0 {
		return false, fmt.Errorf("list threads of %d: %v", pid, err)
	}
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			return false, err
		}
		// "tid (comm) S ...": the state follows the last ')'.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 || i+2 >= len(s) {
			return false, fmt.Errorf("parse %s: %q", t, s)
		}
		if st := s[i+2]; st != 'T' && st != 't' {
			return false, nil
		}
	}
	return true, nil
}

// StallTrial is one player count.
type StallTrial struct {
	Players int `json:"players"`
	Queued  int `json:"queued"` // datagrams sent while the relay was stopped: players × stall ticks
	// Predicted is the model's drops: what Queued exceeds of the datagrams
	// rb holds (tune.DatagramsHeld), from an empty queue.
	Predicted int `json:"predicted_drops"`
	// Dropped is what the relay socket's kernel counter (/proc/net/udp
	// drops) counted while the relay was stopped; Kept is the datagrams
	// queued when it resumed (rx_queue / truesize).
	Dropped uint64 `json:"dropped"`
	Kept    uint64 `json:"kept"`
	// QueueAtStop is the bytes still queued when the relay stopped: 0 when
	// it had drained the tick before, as the model assumes.
	QueueAtStop uint64 `json:"rx_queue_at_stop"`
	// DroppedAfter is drops after the resume, while the relay drained the
	// queue with the next ticks arriving: a cost the model does not count.
	DroppedAfter uint64 `json:"dropped_after_resume"`
	// RelayDrops is the relay's own rx_drops over the trial (SO_RXQ_OVFL).
	RelayDrops uint64        `json:"relay_rx_drops"`
	Stopped    time.Duration `json:"stopped_ns"` // stop confirmed → resume sent
	// StopLatency is SIGSTOP sent → every thread seen stopped.
	StopLatency time.Duration `json:"stop_latency_ns"`
	Attempts    int           `json:"attempts"`
	Valid       bool          `json:"valid"`
	Invalid     []string      `json:"invalid,omitempty"`
}

// StallResult is a probe: the model's prediction and each trial.
type StallResult struct {
	Rcvbuf     int           `json:"rb"`
	PacketSize int           `json:"packet_size"`
	Hz         int           `json:"hz"`
	StallTicks int           `json:"stall_ticks"`
	Stall      time.Duration `json:"stall_ns"` // StallTicks / Hz
	Truesize   int           `json:"truesize"`
	Held       int           `json:"held"` // the model: datagrams rb holds
	// PredictedOnset is the fewest players whose stalled bursts overflow
	// rb by the model: Held / StallTicks + 1.
	PredictedOnset int `json:"predicted_onset_players"`
	// MeasuredOnset is the fewest players whose trial dropped, 0 if none.
	MeasuredOnset int `json:"measured_onset_players"`
	// MeasuredHeld is the most datagrams the socket kept in any trial:
	// what rb really holds from an empty queue.
	MeasuredHeld uint64       `json:"measured_held"`
	Trials       []StallTrial `json:"trials"`
}

// stallTag marks the probe's datagrams.
const stallTag = 0x7fff_fffd

// stallAttempts bounds the retries of a trial whose edges missed their
// slack (a busy machine delayed the sender or the stop).
const stallAttempts = 4

// RunStall runs the probe: for each player count, ticks before the stall,
// the stall, ticks after, then the counters.
func RunStall(ctx context.Context, cfg StallConfig, target StallTarget) (*StallResult, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	top := cfg.Players[len(cfg.Players)-1]
	if _, err := RunPreflight(top); err != nil {
		return nil, err
	}
	ctrl := NewControl(cfg.Control, controlTimeout)
	rctx, cancel := context.WithTimeout(ctx, controlTimeout)
	rb, err := ctrl.Rcvbuf(rctx)
	cancel()
	if err != nil {
		return nil, err
	}
	if rb <= 0 {
		return nil, errors.New("the relay's /status does not say its receive buffer (so_rcvbuf_effective)")
	}
	f, err := openFleet(cfg.Relay, Config{Relay: cfg.Relay, Sources: cfg.Sources}.playerSources(), top, cfg.LobbySize, cfg.PacketSize, cfg.LobbyBase, rand.Uint32(), 1)
	if err != nil {
		return nil, err
	}
	defer f.close()
	r := &runner{
		cfg: Config{LobbySize: cfg.LobbySize, PacketSize: cfg.PacketSize, LobbyBase: cfg.LobbyBase, Hz: cfg.Hz},
		clk: RealClock{}, sendClk: threadClock{}, ctrl: ctrl, f: f,
	}
	res := &StallResult{
		Rcvbuf: rb, PacketSize: cfg.PacketSize, Hz: cfg.Hz, StallTicks: cfg.StallTicks,
		Stall:    time.Duration(cfg.StallTicks) * time.Second / time.Duration(cfg.Hz),
		Truesize: tune.Truesize(cfg.PacketSize),
		Held:     tune.DatagramsHeld(rb, cfg.PacketSize),
	}
	res.PredictedOnset = res.Held/cfg.StallTicks + 1
	joined := 0
	for _, n := range cfg.Players {
		if err := r.join(ctx, joined, n); err != nil {
			return res, err
		}
		joined = n
		var t StallTrial
		for attempt := 1; attempt <= stallAttempts; attempt++ {
			t, err = r.stallTrial(ctx, cfg, target, n)
			t.Attempts = attempt
			if err != nil || t.Valid {
				break
			}
			time.Sleep(200 * time.Millisecond) // let a burst of other work pass
		}
		if err != nil {
			return res, err
		}
		t.Predicted = max(0, t.Queued-res.Held)
		res.Trials = append(res.Trials, t)
		if t.Valid {
			res.MeasuredHeld = max(res.MeasuredHeld, t.Kept)
			if t.Dropped > 0 && res.MeasuredOnset == 0 {
				res.MeasuredOnset = n
			}
		}
	}
	return res, nil
}

func (c StallConfig) validate() error {
	switch {
	case c.Relay == "" || c.Control == "":
		return errors.New("stall probe: want the relay's address and control plane")
	case c.LobbySize < 2:
		return fmt.Errorf("stall probe: lobby size %d, want at least 2", c.LobbySize)
	case c.PacketSize < MinPacket || c.PacketSize > maxDatagram:
		return fmt.Errorf("stall probe: packet size %d: want %d to %d bytes", c.PacketSize, MinPacket, maxDatagram)
	case c.Hz < 1 || c.Hz > 1000:
		return fmt.Errorf("stall probe: hz %d: want 1 to 1000", c.Hz)
	case c.StallTicks < 1:
		return fmt.Errorf("stall probe: stall of %d ticks, want at least 1", c.StallTicks)
	case len(c.Players) == 0:
		return errors.New("stall probe: no player counts")
	}
	for i, n := range c.Players {
		if n < 1 || n > maxPlayers || (i > 0 && n <= c.Players[i-1]) {
			return fmt.Errorf("stall probe: player counts %v: want them ascending, 1 to %d", c.Players, maxPlayers)
		}
	}
	return nil
}

// Ticks of a trial around the stall: enough before it that the relay is
// in its steady state, and after it to see whether it drains in time.
const (
	ticksBefore = 2
	ticksAfter  = 3
)

// stallTrial runs one trial of n players. The timeline, with P a tick:
//
//	tick 0 … tick B-1 | stop at (B-½)P | ticks B … B+S-1 | resume at (B+S-½)P | ticks B+S … B+S+A-1
func (r *runner) stallTrial(ctx context.Context, cfg StallConfig, target StallTarget, n int) (StallTrial, error) {
	t := StallTrial{Players: n, Queued: n * cfg.StallTicks}
	period := time.Second / time.Duration(cfg.Hz)
	total := ticksBefore + cfg.StallTicks + ticksAfter
	w := newWindow(stallTag, shardCount)
	before, err := r.status(ctx)
	if err != nil {
		return t, err
	}
	sock0, err := target.Socket()
	if err != nil {
		return t, err
	}
	r.f.win.Store(w)

	var stopAt, stoppedAt, resumeAt time.Time
	var atStop, atResume sockstat.UDPSocket
	var sendErr, ctlErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		// One OS thread at a raised priority, sleeping in the kernel, as
		// the bench's sender (run.go).
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		_ = unix.Setpriority(unix.PRIO_PROCESS, unix.Gettid(), senderNice)
		clk := threadClock{}
		t0 := time.Now().Add(20 * time.Millisecond)
		until := func(d time.Duration) error { return clk.Sleep(ctx, time.Until(t0.Add(d))) }
		tick := func(k int) error {
			if err := until(time.Duration(k) * period); err != nil {
				return err
			}
			for p := range n {
				if err := r.f.send(p, stallTag); err != nil && sendErr == nil {
					sendErr = fmt.Errorf("send tick %d, player %d: %w", k, p, err)
				}
			}
			return nil
		}
		half := period / 2
		for k := range ticksBefore {
			if ctlErr = tick(k); ctlErr != nil {
				return
			}
		}
		if ctlErr = until(time.Duration(ticksBefore)*period - half); ctlErr != nil {
			return
		}
		stopAt = time.Now()
		if ctlErr = target.Pause(); ctlErr != nil {
			target.Resume() // a stop that was sent but not confirmed
			return
		}
		stoppedAt = time.Now()
		if atStop, ctlErr = target.Socket(); ctlErr != nil {
			target.Resume()
			return
		}
		for k := ticksBefore; k < ticksBefore+cfg.StallTicks; k++ {
			if ctlErr = tick(k); ctlErr != nil {
				target.Resume()
				return
			}
		}
		if ctlErr = until(time.Duration(ticksBefore+cfg.StallTicks)*period - half); ctlErr != nil {
			target.Resume()
			return
		}
		atResume, ctlErr = target.Socket()
		resumeAt = time.Now()
		if err := target.Resume(); err != nil && ctlErr == nil {
			ctlErr = err
		}
		if ctlErr != nil {
			return
		}
		for k := ticksBefore + cfg.StallTicks; k < total; k++ {
			if ctlErr = tick(k); ctlErr != nil {
				return
			}
		}
	}()
	<-done
	r.drain(ctx, w)
	r.f.win.Store(nil)
	if ctlErr != nil {
		return t, ctlErr
	}
	after, err := r.flush(ctx, n)
	if err != nil {
		return t, err
	}
	sock2, err := target.Socket()
	if err != nil {
		return t, err
	}

	ts := uint64(tune.Truesize(cfg.PacketSize))
	t.QueueAtStop = atStop.RxQueue
	t.Dropped = sat(atResume.Drops, atStop.Drops)
	t.Kept = atResume.RxQueue / ts
	t.DroppedAfter = sat(sock2.Drops, atResume.Drops)
	t.RelayDrops = after.Sub(before).RxDrops
	t.Stopped = resumeAt.Sub(stoppedAt)
	t.StopLatency = stoppedAt.Sub(stopAt)

	// One thread sends the ticks, stops the relay and resumes it, in that
	// order, so the stall's bursts are sent after the stop is confirmed
	// and before the resume, even when the machine delays a step; what
	// remains to check is that the relay had drained the tick before.
	b := ticksBefore
	if t.QueueAtStop > 0 {
		t.Invalid = append(t.Invalid, fmt.Sprintf("the relay had %d bytes still queued when it stopped: it had not drained tick %d", t.QueueAtStop, b-1))
	}
	if d := sat(atStop.Drops, sock0.Drops); d > 0 {
		t.Invalid = append(t.Invalid, fmt.Sprintf("the relay socket dropped %d before the stall", d))
	}
	if sendErr != nil {
		t.Invalid = append(t.Invalid, sendErr.Error())
	}
	if got, want := t.Kept+t.Dropped, uint64(t.Queued); got != want {
		t.Invalid = append(t.Invalid, fmt.Sprintf("kept %d + dropped %d is %d, want the %d sent while stopped (another sender on the relay's port?)", t.Kept, t.Dropped, got, want))
	}
	t.Valid = len(t.Invalid) == 0
	return t, nil
}

// Table writes a probe's trials as a small table, for logs and scripts.
func (res *StallResult) Table() string {
	var b strings.Builder
	fmt.Fprintf(&b, "rb %d, %d-byte datagrams (truesize %d), %d Hz, stall %s (%v): model holds %d, predicted onset %d players; measured held %d, onset %s\n",
		res.Rcvbuf, res.PacketSize, res.Truesize, res.Hz, tune.Plural(res.StallTicks, "tick"), res.Stall, res.Held, res.PredictedOnset, res.MeasuredHeld, onset(res.MeasuredOnset))
	fmt.Fprintf(&b, "%8s %7s %9s %8s %6s %13s %11s %9s %8s\n", "players", "queued", "predicted", "dropped", "kept", "dropped after", "relay drops", "stopped", "valid")
	for _, t := range res.Trials {
		v := "yes"
		if !t.Valid {
			v = "NO: " + strings.Join(t.Invalid, "; ")
		}
		fmt.Fprintf(&b, "%8d %7d %9d %8d %6d %13d %11d %9s %8s\n", t.Players, t.Queued, t.Predicted, t.Dropped, t.Kept, t.DroppedAfter, t.RelayDrops,
			strconv.FormatFloat(float64(t.Stopped)/float64(time.Millisecond), 'f', 1, 64)+"ms", v)
	}
	return b.String()
}

func onset(n int) string {
	if n == 0 {
		return "none"
	}
	return fmt.Sprintf("%d players", n)
}
