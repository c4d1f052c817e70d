package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Options are what the caller plugs in around a run.
type Options struct {
	// Progress, if set, is called every Config.Interval during a step, from
	// another goroutine; it must not block for long.
	Progress func(Progress)
	// Kernel, if set, reads the relay host's kernel counters around each step.
	Kernel KernelReader
	// StepDone, if set, is called after each step with its report.
	StepDone func(i int, s Step)
	// Clock drives the schedule; nil is the wall clock.
	Clock Clock
}

// Progress is a reading taken during a step.
type Progress struct {
	Step     int // 0-based
	Steps    int
	Players  int
	Elapsed  time.Duration
	Duration time.Duration
	Sent     uint64
	Planned  uint64
	Received uint64
	Relay    Counters // delta since the step started
	RelayErr error
}

// Sample is one reading of the relay's control plane during the run.
type Sample struct {
	Seconds float64  `json:"t"` // since the run started
	Step    int      `json:"step"`
	Players int      `json:"players"`
	Relay   Counters `json:"relay"`
	PID     int      `json:"pid,omitempty"` // the relay process that answered
	Error   string   `json:"error,omitempty"`
}

// Calibration is the bench measuring itself: a short run at full speed
// against the relay, on this machine. Its rates tell a reader when the
// bench, not the relay, is what a step ran into.
type Calibration struct {
	Seconds    float64 `json:"seconds"`
	Players    int     `json:"players"`
	Sent       uint64  `json:"sent"`
	SendErrors uint64  `json:"send_errors"`
	SendPPS    float64 `json:"send_pps"` // datagrams per second the bench generated
	Received   uint64  `json:"received"`
	RecvPPS    float64 `json:"recv_pps"` // copies per second the players received
	RelayRx    uint64  `json:"relay_rx"`
	RelayTx    uint64  `json:"relay_tx"`
	RelayDrops uint64  `json:"relay_drops"`
	BenchDrops uint64  `json:"bench_drops"`
	// RelayLimited: the relay dropped during calibration, so RecvPPS is what
	// the relay passed, a lower bound of what the bench can receive.
	RelayLimited bool `json:"relay_limited"`
}

// NearCeiling is the fraction of the calibrated rates at which a step is
// marked as running into the bench's own ceiling.
const NearCeiling = 0.8

// MachineBusy is the share of the bench machine's CPU time, all processes,
// above which a step is marked as at the bench machine's ceiling.
const MachineBusy = 0.9

const (
	controlTimeout = 2 * time.Second
	maxJoinRounds  = 6
	joinPace       = 200 * time.Microsecond
	senderNice     = -10
	drainQuiet     = 50 * time.Millisecond
	drainMax       = 2 * time.Second
)

type runner struct {
	cfg     Config
	opt     Options
	clk     Clock
	sendClk Clock // the sender's: sleeps in the kernel on its own thread
	ctrl    *Control
	f       *fleet
	start   time.Time
	steps   []int

	mu       sync.Mutex
	samples  []Sample
	joinGen  uint32
	flushGen uint32
}

// Run runs the preflight, then the ramp, and returns the report. A
// *PreflightError means nothing was sent. When ctx ends, Run returns the
// report of the steps completed so far together with ctx's error.
func Run(ctx context.Context, cfg Config, opt Options) (*Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	steps := cfg.steps()
	pf, err := RunPreflight(steps[len(steps)-1])
	if err != nil {
		return nil, err
	}
	r := &runner{cfg: cfg, opt: opt, clk: opt.Clock, sendClk: opt.Clock, steps: steps, ctrl: NewControl(cfg.Control, controlTimeout)}
	if r.clk == nil {
		r.clk, r.sendClk = RealClock{}, threadClock{}
	}
	if _, err := r.status(ctx); err != nil {
		return nil, fmt.Errorf("reach the relay's control plane before sending: %w", err)
	}
	var model *Model
	if opt.Kernel != nil {
		k, err := opt.Kernel.ReadKernel(ctx)
		if err != nil {
			return nil, fmt.Errorf("read the relay host's kernel counters before sending: %w", err)
		}
		if k.RcvBuf > 0 {
			model = Predict(int(k.RcvBuf), "ss on the relay host", cfg.PacketSize, cfg.Jitter, cfg.Gate.Players)
		}
	}
	if model == nil {
		// The relay's own word for its buffer; a relay that does not give
		// it gets no prediction, which is not an error.
		ctx, cancel := context.WithTimeout(ctx, controlTimeout)
		rb, err := r.ctrl.Rcvbuf(ctx)
		cancel()
		if err == nil && rb > 0 {
			model = Predict(rb, "the relay's /status", cfg.PacketSize, cfg.Jitter, cfg.Gate.Players)
		}
	}
	f, err := openFleet(cfg.Relay, cfg.playerSources(), pf.Players, cfg.LobbySize, cfg.PacketSize, cfg.LobbyBase, rand.Uint32(), len(steps))
	if err != nil {
		return nil, err
	}
	defer f.close()
	r.f = f
	r.start = time.Now()

	rep := &Report{
		Format:      1,
		Started:     r.start.UTC(),
		Config:      reportConfig(cfg),
		Preflight:   pf,
		BenchRcvBuf: f.rcvBuf,
		Model:       model,
	}
	joined := 0
	for i, n := range steps {
		if err := r.join(ctx, joined, n); err != nil {
			if ctx.Err() != nil {
				return r.finish(rep, fmt.Sprintf("interrupted before the step of %d players", n)), ctx.Err()
			}
			return nil, err
		}
		joined = n
		if i == 0 && cfg.Calibrate > 0 {
			cal, err := r.calibrate(ctx, n)
			if err != nil {
				if ctx.Err() != nil {
					return r.finish(rep, "interrupted during calibration"), ctx.Err()
				}
				return nil, err
			}
			rep.Calibration = &cal
		}
		s, err := r.step(ctx, i, n)
		if err != nil {
			// Interrupted: the step is cut short and not reported; the
			// steps before it are.
			return r.finish(rep, fmt.Sprintf("interrupted during the step of %d players, which is not reported", n)), err
		}
		markCeiling(&s, rep.Calibration, pf.CPUs)
		rep.Steps = append(rep.Steps, s)
		if opt.StepDone != nil {
			opt.StepDone(i, s)
		}
		k := FindKnee(rep.Steps, cfg.Threshold)
		if k.BenchLimit && !k.Found {
			rep.Stopped = fmt.Sprintf("stopped at %d players: the bench fell behind, later steps would measure it, not the relay", n)
			break
		}
		if k.Found && cfg.AfterKnee >= 0 && i-k.Step >= cfg.AfterKnee && i < len(steps)-1 {
			rep.Stopped = fmt.Sprintf("stopped %d steps after the knee (--after-knee)", cfg.AfterKnee)
			break
		}
	}
	return r.finish(rep, rep.Stopped), nil
}

// finish completes the report with what arrived late, the knee and the
// samples, and says why the ramp stopped.
func (r *runner) finish(rep *Report, stopped string) *Report {
	rep.Stopped = stopped
	for i := range rep.Steps {
		rep.Steps[i].Late = r.f.late[i].Load()
	}
	rep.Knee = FindKnee(rep.Steps, r.cfg.Threshold)
	if rep.Model != nil {
		rep.Model.Compare(rep.Knee, rep.Steps)
	}
	if r.cfg.Gate.Players > 0 {
		g := JudgeGate(r.cfg.Gate, rep.Steps, r.cfg.Threshold)
		rep.Gate = &g
	}
	r.mu.Lock()
	rep.Samples = r.samples
	r.mu.Unlock()
	return rep
}

func (r *runner) status(ctx context.Context) (Counters, error) {
	rd, err := r.read(ctx)
	return rd.Counters, err
}

// read reads the relay's counters and which process it is.
func (r *runner) read(ctx context.Context) (Reading, error) {
	ctx, cancel := context.WithTimeout(ctx, controlTimeout)
	defer cancel()
	return r.ctrl.Read(ctx)
}

// members lists the players of lobby l when the first n players play.
func (r *runner) members(l, n int) []int {
	lo, hi := r.f.lobbyRange(l)
	var m []int
	for p := lo; p < min(hi, n); p++ {
		m = append(m, p)
	}
	return m
}

// join brings players [from, to) into their lobbies before a step, so the
// first tick of the step is not lost to players the relay does not know
// yet: the relay's join handshake (prove), then rounds of join datagrams.
// It is closed-loop on purpose: it is not measured. A round is complete
// when every member of each changed lobby received one join datagram from
// every other member, which proves the relay forwards between them all.
func (r *runner) join(ctx context.Context, from, to int) error {
	if from >= to {
		return nil
	}
	if err := r.prove(ctx, from, to); err != nil {
		return err
	}
	var changed [][]int
	for l := r.f.lobbyIndex(from); l <= r.f.lobbyIndex(to-1); l++ {
		changed = append(changed, r.members(l, to))
	}
	for round := 0; round < maxJoinRounds; round++ {
		r.joinGen++
		tag := joinTag | r.joinGen&^joinTag
		for _, m := range changed {
			for _, p := range m {
				r.f.joinSeen[p].Store(0)
			}
		}
		r.f.joinRound.Store(tag)
		for _, m := range changed {
			for _, p := range m {
				// Join errors show up as missing receipts below.
				_ = r.f.send(p, tag)
				// Paced: a relay with a tiny buffer must still be able to
				// take the handshake, or the ramp never starts.
				if err := r.clk.Sleep(ctx, joinPace); err != nil {
					return err
				}
			}
		}
		deadline := time.Now().Add(300 * time.Millisecond)
		for {
			if r.joined(changed) {
				return nil
			}
			if time.Now().After(deadline) {
				break
			}
			if err := r.clk.Sleep(ctx, 5*time.Millisecond); err != nil {
				return err
			}
		}
	}
	return fmt.Errorf("join players %d-%d: the relay welcomed them but did not forward between them after %d rounds", from+1, to, maxJoinRounds)
}

func (r *runner) joined(changed [][]int) bool {
	for _, m := range changed {
		for _, p := range m {
			if r.f.joinSeen[p].Load() < uint32(len(m)-1) {
				return false
			}
		}
	}
	return true
}

// drain waits until the players stop receiving: the relay has sent what it
// is going to send for this step.
func (r *runner) drain(ctx context.Context, w *window) {
	count := func() uint64 {
		var n uint64
		for i := range w.shards {
			n += w.shards[i].received.Load()
		}
		return n
	}
	end := time.Now().Add(drainMax)
	last, quietSince := count(), time.Now()
	for time.Now().Before(end) && ctx.Err() == nil {
		time.Sleep(5 * time.Millisecond)
		if n := count(); n != last {
			last, quietSince = n, time.Now()
			continue
		}
		if time.Since(quietSince) >= drainQuiet {
			return
		}
	}
}

// flush sends one datagram from player 0 and waits until the relay has read
// it, then returns the relay's counters less that datagram. The relay learns
// of its socket's drops only with the next datagram it reads (SO_RXQ_OVFL is
// stamped when a datagram is queued), so without it the drops of a step's
// last tick would be counted in the next step.
func (r *runner) flush(ctx context.Context, n int) (Reading, error) {
	pre, err := r.status(ctx)
	if err != nil {
		return Reading{}, err
	}
	r.flushGen++
	if err := r.f.send(0, joinTag|(joinTag-1)&^r.flushGen); err != nil {
		return Reading{}, fmt.Errorf("flush relay counters: %w", err)
	}
	deadline := time.Now().Add(time.Second)
	for {
		st, err := r.read(ctx)
		if err != nil {
			return Reading{}, err
		}
		if st.RxPackets > pre.RxPackets {
			// Take the flush out again: read once, forwarded to the other
			// members of lobby 0.
			copies := uint64(min(n, r.cfg.LobbySize) - 1)
			size := uint64(r.cfg.PacketSize)
			st.RxPackets--
			st.RxBytes -= size
			st.Forwarded--
			st.TxPackets -= copies
			st.TxBytes -= copies * size
			return st, nil
		}
		if time.Now().After(deadline) {
			return Reading{}, errors.New("flush relay counters: the relay did not read a datagram within 1s")
		}
		if err := r.clk.Sleep(ctx, 5*time.Millisecond); err != nil {
			return Reading{}, err
		}
	}
}

// calibrate sends from the first step's players as fast as one sender can,
// through the relay, for Config.Calibrate, and counts what comes back: the
// most this machine generates, and receives with the relay beside it.
func (r *runner) calibrate(ctx context.Context, players int) (Calibration, error) {
	w := newWindow(calTag, shardCount)
	before, err := r.status(ctx)
	if err != nil {
		return Calibration{}, fmt.Errorf("calibrate: %w", err)
	}
	bd, err := r.f.benchDrops()
	if err != nil {
		return Calibration{}, fmt.Errorf("calibrate: %w", err)
	}
	r.f.win.Store(w)
	c := Calibration{Players: players}
	start := time.Now()
	deadline := start.Add(r.cfg.Calibrate)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		for p := range players {
			if err := r.f.send(p, calTag); err != nil {
				c.SendErrors++
				continue
			}
			c.Sent++
		}
	}
	elapsed := time.Since(start)
	for i := range w.shards {
		c.Received += w.shards[i].received.Load()
	}
	r.drain(ctx, w)
	r.f.win.Store(nil)
	after, err := r.flush(ctx, players)
	if err != nil {
		return Calibration{}, fmt.Errorf("calibrate: %w", err)
	}
	d := after.Sub(before)
	c.Seconds = elapsed.Seconds()
	c.SendPPS = float64(c.Sent) / c.Seconds
	c.RecvPPS = float64(c.Received) / c.Seconds
	c.RelayRx, c.RelayTx, c.RelayDrops = sat(d.RxPackets, d.JoinsRx), d.TxPackets, d.RxDrops
	bd2, err := r.f.benchDrops()
	if err != nil {
		return Calibration{}, fmt.Errorf("calibrate: %w", err)
	}
	c.BenchDrops = bd2 - bd
	c.RelayLimited = d.RxDrops > 0
	return c, nil
}

// step runs one step of n players.
func (r *runner) step(ctx context.Context, i, n int) (Step, error) {
	cfg := r.cfg
	sch := NewSchedule(n, cfg.Hz, cfg.StepDuration, cfg.Jitter, cfg.Seed)
	w := newWindow(uint32(i), shardCount)
	w.census = newCensus(r.f.seq, n, sch.Ticks)
	beforeRd, berr := r.read(ctx)
	before := beforeRd.Counters
	icmp0 := r.f.icmpCounts()
	var kb KernelSnapshot
	var kerr error
	if r.opt.Kernel != nil {
		kb, kerr = r.opt.Kernel.ReadKernel(ctx)
	}
	bd, bderr := r.f.benchDrops()
	cpu0 := cpuTime()
	mach0, _ := readMachineCPU(procStat)
	r.f.hs.answered.Store(0)
	r.f.win.Store(w)

	var sent atomic.Uint64
	pollCtx, stopPoll := context.WithCancel(ctx)
	var wg sync.WaitGroup
	// A little lead so the first tick is not already late when it is planned.
	start := r.clk.Now().Add(10 * time.Millisecond)
	watch := newRestartWatch(beforeRd, start)
	var refused atomic.Uint64
	wg.Add(1)
	go func() {
		defer wg.Done()
		r.poll(pollCtx, i, n, start, sch, before, berr, &sent, w, watch)
	}()
	var sends Sends
	done := make(chan struct{})
	go func() {
		defer close(done)
		// The sender has an OS thread of its own, at a raised priority where
		// the bench may have one, and sleeps in the kernel (threadClock), so
		// the kernel wakes it on time even when the Go scheduler's other
		// threads are starved by other work on the machine: measured on this
		// 2-core machine at load 15, the highest valid step doubled against
		// Go timers. Schedule lag still measures what is left.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		_ = unix.Setpriority(unix.PRIO_PROCESS, unix.Gettid(), senderNice)
		sends = sch.Run(ctx, r.sendClk, start, sch.Period(), func(p int) error {
			err := r.f.send(p, uint32(i))
			if err == nil {
				sent.Add(1)
			} else {
				w.census.failed(p, r.f.seq[p]-1)
				if isRefused(err) {
					refused.Add(1)
				}
			}
			return err
		})
	}()
	<-done
	stopPoll()
	wg.Wait()
	var attempts []uint32
	if w.census != nil {
		attempts = make([]uint32, n)
		for p := range n {
			attempts[p] = r.f.seq[p] - w.census.base[p]
		}
	}
	cpu := cpuTime() - cpu0
	mach1, merr := readMachineCPU(procStat)
	r.drain(ctx, w)
	r.f.win.Store(nil)
	received, lat := w.totals()
	bd2, bderr2 := r.f.benchDrops()
	icmp1 := r.f.icmpCounts()
	after, aerr := r.flush(ctx, n)
	if aerr == nil {
		watch.observe(after, time.Now())
	}
	impact := Impact{Restarts: watch.seen(), SendRefused: refused.Load(), Rejoined: r.f.hs.answered.Swap(0)}
	members := lobbies(n, cfg.LobbySize)
	w.census.tally(attempts, func(p int) int { return members[p/cfg.LobbySize] - 1 }, &impact)
	icmpSince(icmp0, icmp1, &impact)

	in := StepInput{
		Players:   n,
		Lobbies:   lobbies(n, cfg.LobbySize),
		Schedule:  sch,
		Sends:     sends,
		Received:  received,
		Foreign:   r.f.foreign.Swap(0),
		BenchDrop: bd2 - bd,
		DropsErr:  errors.Join(bderr, bderr2),
		Latency:   lat,
		BenchCPU:  cpu,
		Impact:    impact,
	}
	if merr == nil {
		in.MachineBusy = mach1.busySince(mach0)
	}
	switch {
	case berr != nil:
		in.RelayErr = berr
	case aerr != nil:
		in.RelayErr = aerr
	default:
		in.Relay, in.RelayErr = watch.relayDelta(beforeRd, after)
	}
	if r.opt.Kernel != nil {
		in.KernelErr = kerr
		if kerr == nil {
			ka, err := r.opt.Kernel.ReadKernel(ctx)
			if err == nil {
				d := ka.Sub(kb)
				in.Kernel = &d
			}
			in.KernelErr = err
		}
	}
	return Account(in), ctx.Err()
}

// poll reads the control plane every Interval during a step, for the
// progress line and the samples of the report.
func (r *runner) poll(ctx context.Context, i, n int, start time.Time, sch *Schedule, before Counters, berr error, sent *atomic.Uint64, w *window, watch *restartWatch) {
	t := time.NewTicker(r.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		st, err := r.read(ctx)
		if ctx.Err() != nil {
			return
		}
		s := Sample{Seconds: time.Since(r.start).Seconds(), Step: i, Players: n, Relay: st.Counters, PID: st.PID}
		if err != nil {
			s.Error = err.Error()
		} else {
			watch.observe(st, time.Now())
		}
		r.mu.Lock()
		r.samples = append(r.samples, s)
		r.mu.Unlock()
		if r.opt.Progress == nil {
			continue
		}
		p := Progress{
			Step: i, Steps: len(r.steps), Players: n,
			Elapsed: time.Since(start), Duration: sch.Duration(),
			Sent: sent.Load(), Planned: sch.Planned(),
			RelayErr: err,
		}
		for j := range w.shards {
			p.Received += w.shards[j].received.Load()
		}
		if err == nil && berr == nil {
			p.Relay = st.Counters.Sub(before)
		} else if err == nil {
			p.RelayErr = berr
		}
		r.opt.Progress(p)
	}
}

// cpuTime is the CPU time the bench process has used, all threads.
func cpuTime() time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// markCeiling notes a step whose planned rates reach the bench's own
// measured ceiling. The receive ceiling only counts when the relay did not
// drop during calibration: otherwise it is the relay's figure, not the bench's.
func markCeiling(s *Step, c *Calibration, cpus int) {
	if cpus > 0 && s.BenchCPU >= NearCeiling*float64(cpus) {
		s.NearBenchCeiling = true
		s.Notes = append(s.Notes, fmt.Sprintf("the bench itself used %.2f of the machine's %d CPUs", s.BenchCPU, cpus))
	}
	if s.MachineBusy >= MachineBusy {
		s.NearBenchCeiling = true
		s.Notes = append(s.Notes, fmt.Sprintf("the bench machine's CPUs were %.0f%% busy: the bench competed for them (with the relay, if it runs here)", 100*s.MachineBusy))
	}
	if c == nil {
		return
	}
	if c.SendPPS > 0 && s.PlannedInPPS >= NearCeiling*c.SendPPS {
		s.NearBenchCeiling = true
		s.Notes = append(s.Notes, fmt.Sprintf("planned send rate %.0f/s is at least %.0f%% of the bench's calibrated %.0f/s", s.PlannedInPPS, 100*NearCeiling, c.SendPPS))
	}
	if !c.RelayLimited && c.RecvPPS > 0 && s.PlannedOutPPS >= NearCeiling*c.RecvPPS {
		s.NearBenchCeiling = true
		s.Notes = append(s.Notes, fmt.Sprintf("planned receive rate %.0f/s is at least %.0f%% of the bench's calibrated %.0f/s", s.PlannedOutPPS, 100*NearCeiling, c.RecvPPS))
	}
}
