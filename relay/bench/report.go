package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// Report is the result of a run; its JSON form is versioned by Format.
type Report struct {
	Format      int          `json:"format"`
	Started     time.Time    `json:"started"`
	Config      ConfigReport `json:"config"`
	Preflight   Preflight    `json:"preflight"`
	BenchRcvBuf int          `json:"bench_socket_rb"` // receive buffer the kernel granted each player socket
	Calibration *Calibration `json:"calibration,omitempty"`
	Steps       []Step       `json:"steps"`
	Knee        Knee         `json:"knee"`
	Model       *Model       `json:"model,omitempty"` // the sizing model's prediction, when the relay's rb is known
	Gate        *GateResult  `json:"gate,omitempty"`
	Stopped     string       `json:"stopped,omitempty"`
	Samples     []Sample     `json:"samples"`
}

// ConfigReport is the run's configuration as the report shows it.
type ConfigReport struct {
	Relay        string  `json:"relay"`
	Control      string  `json:"control"`
	LobbySize    int     `json:"lobby_size"`
	PacketSize   int     `json:"packet_size"`
	Hz           int     `json:"hz"`
	JitterMS     float64 `json:"jitter_ms"`
	Players      string  `json:"players"`
	StepSeconds  float64 `json:"step_seconds"`
	Interval     float64 `json:"interval_seconds"`
	Threshold    float64 `json:"threshold"`
	LobbyBase    uint32  `json:"lobby_base"`
	MaxLagTicks  float64 `json:"max_lag_ticks"`
	MaxUnsentPct float64 `json:"max_unsent_pct"`
	Gate         *Gate   `json:"gate,omitempty"`
	// Sources are the addresses the players sent from; none: the kernel's
	// choice.
	Sources []string `json:"sources,omitempty"`
}

func reportConfig(c Config) ConfigReport {
	r := ConfigReport{
		Relay: c.Relay, Control: c.Control, LobbySize: c.LobbySize, PacketSize: c.PacketSize,
		Hz: c.Hz, JitterMS: float64(c.Jitter) / float64(time.Millisecond), Players: c.Ramp.String(),
		StepSeconds: c.StepDuration.Seconds(), Interval: c.Interval.Seconds(), Threshold: c.Threshold,
		LobbyBase: c.LobbyBase, MaxLagTicks: MaxLagTicks, MaxUnsentPct: 100 * MaxUnsentFraction,
	}
	if c.Gate.Players > 0 {
		g := c.Gate
		r.Gate = &g
	}
	for _, a := range c.playerSources() {
		r.Sources = append(r.Sources, a.String())
	}
	return r
}

// WriteJSON writes the report as one indented JSON document.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(r); err != nil {
		return fmt.Errorf("write report json: %w", err)
	}
	return nil
}

// Header is the lines above the table: the run, the bench machine, and
// the bench's own ceiling, so a reader knows when the bench is the limit.
func (r *Report) Header() []string {
	c := r.Config
	pf := r.Preflight
	h := []string{
		fmt.Sprintf("relay %s (control %s): lobbies of %d (each datagram forwarded to %d), %d-byte datagrams at %d Hz, jitter %gms, %gs per step",
			c.Relay, c.Control, c.LobbySize, c.LobbySize-1, c.PacketSize, c.Hz, c.JitterMS, c.StepSeconds),
		fmt.Sprintf("bench machine: %d CPUs, RLIMIT_NOFILE %d (hard %d, needs %d), ephemeral ports %d-%d (%d in use), player socket rb %d",
			pf.CPUs, pf.NoFile, pf.NoFileHard, pf.FDsNeeded, pf.PortLow, pf.PortHigh, pf.PortsInUse, r.BenchRcvBuf),
	}
	if cal := r.Calibration; cal != nil {
		line := fmt.Sprintf("bench ceiling: sends %s datagrams/s, receives %s/s (%.1fs at full speed through this relay, %d players)",
			si(cal.SendPPS), si(cal.RecvPPS), cal.Seconds, cal.Players)
		if cal.BenchDrops > 0 {
			line += fmt.Sprintf("; the bench's own sockets dropped %d", cal.BenchDrops)
		}
		if cal.RelayLimited {
			line += fmt.Sprintf("; the relay dropped %d then, so the receive figure is the relay's and only a lower bound for the bench", cal.RelayDrops)
		}
		h = append(h, line)
	} else {
		h = append(h, "bench ceiling: not measured (--calibrate 0)")
	}
	if best := r.highestValid(); best != nil {
		h = append(h, fmt.Sprintf("bench kept up to: %d players, %s datagrams/s sent, %s/s received, %.2f of %d CPUs (the highest valid step of this run)",
			best.Players, si(best.PlannedInPPS), si(float64(best.Received)/best.Seconds), best.BenchCPU, pf.CPUs))
	}
	if r.Model != nil {
		h = append(h, r.Model.Prediction)
	}
	if g := c.Gate; g != nil {
		h = append(h, fmt.Sprintf("gate: %s? judged on every step up to %d players: each valid, loss within %g%%", g, g.Players, 100*c.Threshold))
	}
	h = append(h, fmt.Sprintf("a step is invalid when the senders' p99 lag exceeds %g tick, more than %g%% of planned datagrams go unsent, or the bench's own sockets drop",
		c.MaxLagTicks, c.MaxUnsentPct))
	return h
}

// highestValid is the largest valid step, which the bench demonstrably
// carried on this machine beside the relay.
func (r *Report) highestValid() *Step {
	var best *Step
	for i := range r.Steps {
		if r.Steps[i].Valid {
			best = &r.Steps[i]
		}
	}
	return best
}

// TableWidth is the widest row of WriteTable's table (the --wide table and
// the JSON carry the rest).
const TableWidth = 100

// WriteTable writes the human report: the header, one row per step within
// TableWidth columns, with the counters that tell where loss happened
// (WriteWideTable has every counter), then the notes and the verdicts.
func (r *Report) WriteTable(w io.Writer) error { return r.writeTable(w, false) }

// WriteWideTable is WriteTable with every counter of every step: planned,
// forwarded, relay tx, p50 and p95, the bench's CPU and the machine's.
func (r *Report) WriteWideTable(w io.Writer) error { return r.writeTable(w, true) }

func (r *Report) writeTable(w io.Writer, wide bool) error {
	var b strings.Builder
	// The sentences above and below the table stay one line each, to be
	// grepped (the gate's verdict) and wrapped by the terminal.
	line := func(s string) { b.WriteString(s + "\n") }
	for _, l := range r.Header() {
		line(l)
	}
	b.WriteString("\n")
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	if wide {
		fmt.Fprintln(tw, "players\tlobbies\tplanned\tsent\trelay rx\trelay drops\tforwarded\trelay tx\treceived\tloss in\tloss out\tloss %\tp50\tp95\tp99\tlag p99\tbench cpu\tmachine busy\tvalid\t")
	} else {
		fmt.Fprintln(tw, "players\tsent\trelay rx\tdrops\treceived\tloss in\tloss out\tloss %\tp99\tlag p99\tvalid\t")
	}
	for _, s := range r.Steps {
		relay := func(v uint64) string {
			if !s.RelayKnown {
				return "?"
			}
			return fmt.Sprint(v)
		}
		valid := "yes"
		if !s.Valid {
			valid = "NO"
		} else if s.NearBenchCeiling {
			valid = "ceiling"
		}
		if wide {
			fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%.3f\t%s\t%s\t%s\t%s\t%.2f\t%.0f%%\t%s\t\n",
				s.Players, s.Lobbies, s.Planned, s.Sent, relay(s.RelayRx), relay(s.RelayDrop), relay(s.Forwarded), relay(s.RelayTx),
				s.Received, relay(s.LossIn), relay(s.LossOut), s.LossPct,
				ms(s.LatencyP50), ms(s.LatencyP95), ms(s.LatencyP99), ms(s.LagP99), s.BenchCPU, 100*s.MachineBusy, valid)
			continue
		}
		fmt.Fprintf(tw, "%d\t%d\t%s\t%s\t%d\t%s\t%s\t%.3f\t%s\t%s\t%s\t\n",
			s.Players, s.Sent, relay(s.RelayRx), relay(s.RelayDrop), s.Received, relay(s.LossIn), relay(s.LossOut), s.LossPct,
			ms(s.LatencyP99), ms(s.LagP99), valid)
	}
	tw.Flush()
	b.WriteString("\n")
	for _, s := range r.Steps {
		for _, why := range s.Invalid {
			line(fmt.Sprintf("%d players: invalid: %s", s.Players, why))
		}
		for _, n := range s.Notes {
			line(fmt.Sprintf("%d players: %s", s.Players, n))
		}
	}
	line(r.Knee.Summary)
	if r.Model != nil && r.Model.Check != "" {
		line(r.Model.Check)
	}
	if r.Stopped != "" {
		line(r.Stopped)
	}
	if r.Gate != nil {
		line(r.Gate.Summary)
	}
	if _, err := io.WriteString(w, b.String()); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	return nil
}

func ms(d time.Duration) string {
	return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond))
}

// si prints a rate with a k or M suffix.
func si(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.2fM", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.1fk", v/1e3)
	}
	return fmt.Sprintf("%.0f", v)
}
