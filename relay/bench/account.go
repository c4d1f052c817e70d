package bench

import (
	"fmt"
	"time"
)

// Counters are the relay's /status counters, as relayd serves them. The
// bench decodes its own copy so it works against any relay that serves the
// same JSON, not only relayd.
type Counters struct {
	RxPackets uint64 `json:"rx_packets"`
	RxBytes   uint64 `json:"rx_bytes"`
	TxPackets uint64 `json:"tx_packets"`
	TxBytes   uint64 `json:"tx_bytes"`
	RxDrops   uint64 `json:"rx_drops"` // the kernel's drops on the relay socket (relayd reads them with SO_RXQ_OVFL)
	Malformed uint64 `json:"malformed"`
	Forwarded uint64 `json:"forwarded"`
	LobbyFull uint64 `json:"lobby_full"`
	// JoinsRx: join datagrams among RxPackets (relayd since wire version
	// 2): the handshake, not data, so not counted as read.
	JoinsRx uint64 `json:"joins_rx"`
}

// sat is a - b, or 0 when a counter went backwards (the relay restarted)
// instead of a huge unsigned number.
func sat(a, b uint64) uint64 {
	if a < b {
		return 0
	}
	return a - b
}

// Sub returns c - o, field by field; a counter that went backwards (the
// relay restarted) yields 0 rather than a huge unsigned number.
func (c Counters) Sub(o Counters) Counters {
	d := sat
	return Counters{
		RxPackets: d(c.RxPackets, o.RxPackets),
		RxBytes:   d(c.RxBytes, o.RxBytes),
		TxPackets: d(c.TxPackets, o.TxPackets),
		TxBytes:   d(c.TxBytes, o.TxBytes),
		RxDrops:   d(c.RxDrops, o.RxDrops),
		Malformed: d(c.Malformed, o.Malformed),
		Forwarded: d(c.Forwarded, o.Forwarded),
		LobbyFull: d(c.LobbyFull, o.LobbyFull),
		JoinsRx:   d(c.JoinsRx, o.JoinsRx),
	}
}

// restarted reports whether any counter of c is below o's.
func (c Counters) restarted(o Counters) bool {
	return c.RxPackets < o.RxPackets || c.TxPackets < o.TxPackets || c.RxDrops < o.RxDrops
}

// Validity rule (docs/bench.md): a step is a measurement of the relay only if
// the bench kept its own schedule and kept up with its own receiving.
const (
	// MaxLagTicks: the p99 of the senders' lag must stay under half a tick,
	// or the relay saw a different load than the one planned.
	MaxLagTicks = 0.5
	// MaxUnsentFraction: at most 0.1 % of planned datagrams may go unsent
	// (too late or refused by the bench's own kernel).
	MaxUnsentFraction = 0.001
)

// StepInput is everything measured during one step.
type StepInput struct {
	Players   int
	Lobbies   []int // members of each lobby in this step
	Schedule  *Schedule
	Sends     Sends
	Relay     Counters // delta over the step
	RelayErr  error    // the control plane did not answer; Relay is then unknown
	Received  uint64   // datagrams the players received that belong to this step
	Late      uint64   // datagrams of this step that arrived after it was closed
	Foreign   uint64   // datagrams the players received that were not this run's
	BenchDrop uint64   // datagrams the kernel dropped on the players' own sockets
	DropsErr  error    // BenchDrop could not be read
	Latency   Hist
	BenchCPU  time.Duration // CPU time the bench process used during the sends
	// MachineBusy is the share of the bench machine's CPU time that was busy
	// during the sends, every process counted (from /proc/stat).
	MachineBusy float64
	Kernel      *KernelDelta // the relay host's kernel counters, with --ssh
	KernelErr   error        // reading them failed
	Impact      Impact       // restarts of the relay, the bench's own count, ICMP errors
}

// Step is the report of one step. Every "per player" figure and the planned
// rates derive from planned counts, never from what happened to be sent, so
// no figure can rise because the relay or the bench failed (mistake 2).
type Step struct {
	Players    int     `json:"players"`
	Lobbies    int     `json:"lobbies"`
	FanOut     float64 `json:"fan_out"` // mean copies of each datagram the relay must send
	Seconds    float64 `json:"seconds"`
	Planned    uint64  `json:"planned"` // datagrams the schedule planned
	Sent       uint64  `json:"sent"`    // datagrams the players sent
	Unsent     uint64  `json:"unsent"`  // planned but never sent (late or refused by the bench's kernel)
	RelayKnown bool    `json:"relay_known"`
	RelayRx    uint64  `json:"relay_rx"`    // data datagrams the relay read (its joins not counted)
	RelayDrop  uint64  `json:"relay_drops"` // dropped in the relay socket's receive buffer
	RelayTx    uint64  `json:"relay_tx"`    // copies the relay sent
	Forwarded  uint64  `json:"forwarded"`
	Malformed  uint64  `json:"malformed"`
	LobbyFull  uint64  `json:"lobby_full"`
	// PlannedDeliveries is what the players receive if nothing is lost:
	// every planned datagram once to each other member of its lobby.
	PlannedDeliveries uint64 `json:"planned_deliveries"`
	Received          uint64 `json:"received"` // copies the players received in time
	Late              uint64 `json:"late"`
	BenchDrops        uint64 `json:"bench_drops"` // dropped on the players' own sockets

	// Loss per direction, each with where it was counted.
	LossIn         uint64  `json:"loss_in"`          // player→relay: sent − relay rx
	LossInAtRelay  uint64  `json:"loss_in_at_relay"` // of which the relay's socket dropped (rx_drops)
	LossOut        uint64  `json:"loss_out"`         // relay→players: relay tx − received
	LossOutAtBench uint64  `json:"loss_out_at_bench"`
	Loss           uint64  `json:"loss"`     // planned deliveries − received
	LossPct        float64 `json:"loss_pct"` // of planned deliveries

	LatencyP50 time.Duration `json:"latency_p50_ns"`
	LatencyP95 time.Duration `json:"latency_p95_ns"`
	LatencyP99 time.Duration `json:"latency_p99_ns"`
	LagP50     time.Duration `json:"lag_p50_ns"`
	LagP99     time.Duration `json:"lag_p99_ns"`
	LagMax     time.Duration `json:"lag_max_ns"`

	// Planned rates: the load the relay was offered, from the schedule.
	PlannedInPPS  float64 `json:"planned_in_pps"`
	PlannedOutPPS float64 `json:"planned_out_pps"`
	// Measured relay rate (rx+tx per second), from its own counters.
	RelayPPS float64 `json:"relay_pps"`
	// PerPlayerDelivered is the fraction of a player's planned incoming
	// datagrams that arrived; it is bounded by 1 by construction.
	PerPlayerDelivered float64 `json:"per_player_delivered"`

	// BenchCPU is the CPUs the bench process kept busy during the step
	// (CPU time over the step's length): near the machine's count, the
	// bench and whatever shares the machine compete with the relay.
	BenchCPU float64 `json:"bench_cpu"`
	// MachineBusy is the share of the bench machine's CPU time that was
	// busy, every process counted (the relay too, when it runs there).
	MachineBusy float64 `json:"machine_busy"`

	// NearBenchCeiling: the planned rates reach the bench's calibrated
	// ceiling, so loss here may be the bench machine's, not the relay's.
	NearBenchCeiling bool `json:"near_bench_ceiling"`

	Valid   bool     `json:"valid"`
	Invalid []string `json:"invalid,omitempty"` // why the step is not a measurement of the relay
	Notes   []string `json:"notes,omitempty"`

	Kernel *KernelDelta `json:"kernel,omitempty"`

	Impact // restarts of the relay during the step and what the players saw of them (restart.go)
}

// Account turns one step's measurements into its report.
func Account(in StepInput) Step {
	s := Step{
		Players:    in.Players,
		Lobbies:    len(in.Lobbies),
		Seconds:    in.Schedule.Duration().Seconds(),
		Planned:    in.Schedule.Planned(),
		Sent:       in.Sends.Sent,
		Unsent:     in.Sends.Planned - in.Sends.Sent,
		Received:   in.Received,
		Late:       in.Late,
		BenchDrops: in.BenchDrop,
		Kernel:     in.Kernel,
		Impact:     in.Impact,
	}
	var perTickIn, perTickOut uint64
	for _, m := range in.Lobbies {
		perTickIn += uint64(m)
		perTickOut += uint64(m) * uint64(m-1)
	}
	ticks := uint64(in.Schedule.Ticks)
	s.PlannedDeliveries = perTickOut * ticks
	if perTickIn > 0 {
		s.FanOut = float64(perTickOut) / float64(perTickIn)
	}
	s.PlannedInPPS = float64(s.Planned) / s.Seconds
	s.BenchCPU = in.BenchCPU.Seconds() / s.Seconds
	s.MachineBusy = in.MachineBusy
	s.PlannedOutPPS = float64(s.PlannedDeliveries) / s.Seconds
	if s.PlannedDeliveries > 0 {
		s.PerPlayerDelivered = float64(min(s.Received, s.PlannedDeliveries)) / float64(s.PlannedDeliveries)
	}
	if s.Received < s.PlannedDeliveries {
		s.Loss = s.PlannedDeliveries - s.Received
	}
	if s.PlannedDeliveries > 0 {
		s.LossPct = 100 * float64(s.Loss) / float64(s.PlannedDeliveries)
	}
	s.LatencyP50 = in.Latency.Quantile(0.50)
	s.LatencyP95 = in.Latency.Quantile(0.95)
	s.LatencyP99 = in.Latency.Quantile(0.99)
	s.LagP50 = in.Sends.Lag.Quantile(0.50)
	s.LagP99 = in.Sends.Lag.Quantile(0.99)
	s.LagMax = in.Sends.Lag.Max()

	if in.RelayErr == nil {
		s.RelayKnown = true
		s.RelayRx = sat(in.Relay.RxPackets, in.Relay.JoinsRx)
		s.RelayDrop = in.Relay.RxDrops
		s.RelayTx = in.Relay.TxPackets
		s.Forwarded = in.Relay.Forwarded
		s.Malformed = in.Relay.Malformed
		s.LobbyFull = in.Relay.LobbyFull
		if s.Sent > s.RelayRx {
			s.LossIn = s.Sent - s.RelayRx
		}
		s.LossInAtRelay = min(s.RelayDrop, s.LossIn)
		if s.RelayTx > s.Received {
			s.LossOut = s.RelayTx - s.Received
		}
		s.LossOutAtBench = min(s.BenchDrops, s.LossOut)
		s.RelayPPS = float64(s.RelayRx+s.RelayTx) / s.Seconds
		if s.Malformed > 0 {
			s.Notes = append(s.Notes, fmt.Sprintf("the relay counted %d malformed datagrams", s.Malformed))
		}
		if s.LobbyFull > 0 {
			s.Notes = append(s.Notes, fmt.Sprintf("the relay refused %d datagrams as lobby full: is its lobby size below --lobby-size?", s.LobbyFull))
		}
	} else {
		s.Notes = append(s.Notes, fmt.Sprintf("relay counters unknown: %v", in.RelayErr))
	}
	switch {
	case in.KernelErr != nil:
		s.Notes = append(s.Notes, fmt.Sprintf("kernel counters unavailable: %v", in.KernelErr))
	case in.Kernel != nil && s.RelayKnown:
		s.Notes = append(s.Notes, "relay host: "+in.Kernel.Agreement(s.RelayDrop))
	}
	if in.Foreign > 0 {
		s.Notes = append(s.Notes, fmt.Sprintf("%d datagrams received that this run did not send", in.Foreign))
	}
	s.Notes = append(s.Notes, in.Impact.notes()...)
	s.Invalid = invalidReasons(in.Schedule, in.Sends, in.BenchDrop, in.Impact.SendRefused)
	if in.DropsErr != nil {
		// Unknown is not zero: without it the step cannot show that the
		// bench kept up with its receiving.
		s.Invalid = append(s.Invalid, fmt.Sprintf("the bench's own socket drops are unknown: %v", in.DropsErr))
	}
	s.Valid = len(s.Invalid) == 0
	return s
}

// invalidReasons applies the validity rule: the step measured the bench,
// not the relay, when the senders fell behind their schedule, left planned
// datagrams unsent, or the bench's own sockets dropped what the relay sent.
//
// A send the player's kernel refused with ECONNREFUSED (an ICMP error: the
// relay's port had no socket) is loss the relay caused, not the bench
// falling behind, so it does not count towards the unsent limit.
func invalidReasons(sch *Schedule, sends Sends, benchDrops, refused uint64) []string {
	var why []string
	if lag, limit := sends.Lag.Quantile(0.99), time.Duration(MaxLagTicks*float64(sch.Period())); lag > limit {
		why = append(why, fmt.Sprintf("senders fell behind: p99 schedule lag %v exceeds half a tick (%v)", lag.Round(time.Microsecond), limit.Round(time.Microsecond)))
	}
	if unsent := sends.Planned - sends.Sent - min(refused, sends.Errors); float64(unsent) > MaxUnsentFraction*float64(sends.Planned) {
		msg := fmt.Sprintf("%d of %d planned datagrams not sent (%d too late, %d refused)", unsent, sends.Planned, sends.Unsent, sends.Errors)
		if sends.FirstErr != nil {
			msg += ": " + sends.FirstErr.Error()
		}
		why = append(why, msg)
	}
	if benchDrops > 0 {
		why = append(why, fmt.Sprintf("the bench's own sockets dropped %d datagrams: its receivers fell behind", benchDrops))
	}
	return why
}
