package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"

	"github.com/relayctl/relayctl/relay/bench"
	"github.com/relayctl/relayctl/rollout/sshrun"
)

// benchSSHFlags are the shared SSH flags that apply to one host; --parallel
// does not, and a flag the bench would ignore is not offered.
func benchSSHFlags() []cli.Flag {
	var fs []cli.Flag
	for _, f := range sshFlags() {
		if f.Names()[0] != "parallel" {
			fs = append(fs, f)
		}
	}
	return fs
}

func benchCommand(e *env) *cli.Command {
	d := bench.Defaults()
	return &cli.Command{
		Name:      "bench",
		Usage:     "drive synthetic lobbies through a relay and report, honestly, where it stops",
		ArgsUsage: " ",
		Description: `Opens lobbies of --lobby-size players through the relay, one UDP socket per
player, each sending --packet-size byte datagrams at --hz on a schedule fixed in
advance (open-loop: nothing the relay does slows the senders). The relay sends
each datagram to every other member of its lobby, so a lobby of 8 carries one
datagram in and 7 out.

For every step of --players it reports planned, sent, read by the relay (its
/status counters on --control), sent by the relay and received by the players,
loss per direction and where it was counted, one-way latency p50/p95/p99, and
how late the senders were against their schedule. A step whose senders fell
behind is marked invalid: it measured the bench, not the relay. The knee is the
first step with loss.

A relay restart inside a step (its /status pid or started_at changed) is
reported with the lobbies and players it cut; the loss of that step is counted
per direction by the bench itself (which members got each datagram) and the
step is not the knee. A handoff (relayd's handoff_from_pid) keeps the relay's
counters exact. ICMP errors the player sockets got while the relay's port had
no socket are counted too.

Before sending anything it checks the bench machine (file descriptors, ephemeral
ports, CPUs) and refuses if this machine cannot carry the load. It then
measures its own ceiling (--calibrate) and prints it in the header.

When the relay reports its receive buffer (relayd's /status, or ss with
--ssh), the header states the sizing model's prediction (with aligned ticks
the burst is one datagram per player, so loss starts once players exceed the
datagrams rb holds) and the report says whether the knee agreed.

A capacity gate (--gate N, or --promise P --factor F for N = P × F, the rule
"a region must carry twice what is promised") makes the run a check: the
ramp runs to the gate (to the end of --players when it is given), and the
report ends with the verdict on every step up to the gate.

The table goes to stdout (or the report as JSON with --json), progress to
stderr. Exit status: 0 when the run completed (whatever it found) or the
relay carried the gate; 4 when the relay fell short of the gate (a valid
step up to it lost more than --loss-threshold); 1 on an error, or when the
bench itself was the limit before the gate was decided (an invalid step, or
loss at the bench's calibrated ceiling).

Examples:
  relayctl bench --relay 127.0.0.1:7788 --control 127.0.0.1:7789
  relayctl bench --relay 10.0.0.5:7788 --control 10.0.0.5:7789 --players 8:400:8 --step-duration 10s --plot bench.svg
  relayctl bench --relay 127.0.0.1:7788 --control 127.0.0.1:7789 --lobby-size 4 --players 64 --json > bench.json
  relayctl bench --relay relay-ash-1:7788 --control relay-ash-1:7789 --ssh relay-ash-1 --players 8:160:8
  relayctl bench --relay 127.0.0.1:7788 --control 127.0.0.1:7789 --promise 100 --factor 2 --step-duration 3s
  relayctl bench --relay 127.0.0.1:7788 --control 127.0.0.1:7789 --gate 200 --players 40:480:40`,
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "relay", Usage: "the relay's UDP address, `HOST:PORT`", DefaultText: requiredText},
			&cli.StringFlag{Name: "control", Usage: "the relay's control plane, `HOST:PORT` or URL (GET /status)", DefaultText: requiredText},
			&cli.IntFlag{Name: "lobby-size", Value: d.LobbySize, Usage: "players per lobby; each datagram is forwarded to the other lobby-size - 1"},
			&cli.IntFlag{Name: "packet-size", Value: d.PacketSize, Usage: "datagram size in `BYTES`, the 24-byte header included"},
			&cli.IntFlag{Name: "hz", Value: d.Hz, Usage: "datagrams per player per second (the tick rate)"},
			&cli.DurationFlag{Name: "jitter", Value: d.Jitter, Usage: "spread each player's send within the tick by a fixed offset in [0, jitter)"},
			&cli.StringFlag{Name: "players", Value: d.Ramp.String(), Usage: "players per step: `N` or FROM:TO:STEP"},
			&cli.DurationFlag{Name: "step-duration", Value: d.StepDuration, Usage: "how long each step sends"},
			&cli.DurationFlag{Name: "interval", Value: d.Interval, Usage: "how often the relay's control plane is read during a step"},
			&cli.DurationFlag{Name: "calibrate", Value: d.Calibrate, Usage: "length of the full-speed run that measures the bench itself; 0 skips it"},
			&cli.IntFlag{Name: "after-knee", Value: d.AfterKnee, Usage: "steps still run after the knee; -1 runs the whole ramp"},
			&cli.Float64Flag{Name: "loss-threshold", Value: d.Threshold * 100, Usage: "loss in `PERCENT` of planned deliveries above which a step is the knee"},
			&cli.UintFlag{Name: "lobby-base", Value: uint(d.LobbyBase), Usage: "first lobby id the bench uses"},
			&cli.StringFlag{Name: "source", Usage: "this machine's IPv4 `ADDRS` the players send from, in turn, comma separated: relayd lets no address hold every seat of a lobby", DefaultText: "127.0.0.1,127.0.0.2 for a relay on loopback, else the kernel's choice"},
			&cli.Int64Flag{Name: "seed", Value: d.Seed, Usage: "seed of the jitter offsets, so a schedule can be repeated"},
			&cli.BoolFlag{Name: "json", Usage: "write the report as JSON on stdout instead of the table"},
			&cli.BoolFlag{Name: "wide", Usage: "the table with every counter of every step (planned, forwarded, relay tx, p50, p95, CPU); it fits 100 columns without"},
			&cli.StringFlag{Name: "json-out", Usage: "also write the report as JSON to `FILE`, beside the table (what --plot-before reads)"},
			&cli.StringSliceFlag{Name: "plot", Usage: "write a chart of loss and relay packet rate against players, the knee and the gate marked, to `FILE` (.png or .svg; repeatable)"},
			&cli.StringFlag{Name: "plot-before", Usage: "draw the run in this JSON report `FILE` (--json or --json-out of an earlier bench) on the same chart, as before; this run is after"},
			&cli.StringFlag{Name: "ssh", Usage: "also read the relay host's kernel counters (ss d, /proc/net/udp drops, RcvbufErrors) over SSH from `HOST` and show whether they agree with the relay's"},
			&cli.IntFlag{Name: "relay-pid", Usage: "with --ssh: the relay's `PID` on its host, when ss -p in the SSH login's namespace cannot find it (a relay in a container)"},
			&cli.IntFlag{Name: "gate", Usage: "capacity gate: exit 0 only if the relay carries these `PLAYERS` (every step up to them valid, loss within --loss-threshold), 4 if it falls short"},
			&cli.IntFlag{Name: "promise", Usage: "capacity gate from the promised `PLAYERS`: the gate is promise × --factor"},
			&cli.Float64Flag{Name: "factor", Value: 2, Usage: "with --promise: how many times the promise the relay must carry"},
		}, benchSSHFlags()...),
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return fmt.Errorf("bench takes no arguments, got %q", c.Args().First())
			}
			cfg := d
			cfg.Relay = c.String("relay")
			cfg.Control = c.String("control")
			cfg.LobbySize = c.Int("lobby-size")
			cfg.PacketSize = c.Int("packet-size")
			cfg.Hz = c.Int("hz")
			cfg.Jitter = c.Duration("jitter")
			r, err := bench.ParseRamp(c.String("players"))
			if err != nil {
				return err
			}
			cfg.Ramp = r
			if cfg.Gate, err = benchGate(c); err != nil {
				return err
			}
			if g := cfg.Gate.Players; g > 0 && !c.IsSet("players") {
				// The ramp runs to the gate.
				cfg.Ramp = bench.Ramp{From: min(d.Ramp.From, g), To: g, Step: d.Ramp.Step}
			}
			cfg.StepDuration = c.Duration("step-duration")
			cfg.Interval = c.Duration("interval")
			cfg.Calibrate = c.Duration("calibrate")
			cfg.AfterKnee = c.Int("after-knee")
			cfg.Threshold = c.Float64("loss-threshold") / 100
			if c.Uint("lobby-base") > 1<<32-1 {
				return fmt.Errorf("lobby base %d: above the 32-bit lobby id", c.Uint("lobby-base"))
			}
			cfg.LobbyBase = uint32(c.Uint("lobby-base"))
			if c.IsSet("source") {
				if cfg.Sources, err = bench.ParseSources(c.String("source")); err != nil {
					return err
				}
			}
			cfg.Seed = c.Int64("seed")
			if err := cfg.Validate(); err != nil {
				return err
			}
			// Every output is checked before the ramp spends minutes.
			out, err := benchOutputs(c)
			if err != nil {
				return err
			}

			ctx, stop := signal.NotifyContext(c.Context, os.Interrupt)
			defer stop()
			pl := newProgressLine(e.stderr)
			opt := bench.Options{
				Progress: pl.progress,
				StepDone: pl.stepDone,
			}
			if c.IsSet("relay-pid") && c.String("ssh") == "" {
				return errors.New("--relay-pid needs --ssh")
			}
			if host := c.String("ssh"); host != "" {
				_, portText, err := net.SplitHostPort(cfg.Relay)
				if err != nil {
					return fmt.Errorf("relay address %s: %w", cfg.Relay, err)
				}
				port, err := strconv.Atoi(portText)
				if err != nil {
					return fmt.Errorf("relay address %s: port %q is not a number", cfg.Relay, portText)
				}
				client, err := sshrun.Dial(ctx, host, sshOptions(c))
				if err != nil {
					return fmt.Errorf("%s: connect: %w", host, err)
				}
				defer client.Close()
				opt.Kernel = &bench.SSHKernel{Runner: client, Port: port, PID: c.Int("relay-pid")}
			}
			rep, err := bench.Run(ctx, cfg, opt)
			pl.finish()
			if err != nil && rep == nil {
				var pe *bench.PreflightError
				if errors.As(err, &pe) {
					return withHint(pe, pe.Hint)
				}
				if errors.Is(err, syscall.ECONNREFUSED) {
					return withHint(err, fmt.Sprintf("nothing listens at --control %s: start the relay, or give the address its control plane serves /status on (relayd: RELAYD_CONTROL, 127.0.0.1:7789 by default)", cfg.Control))
				}
				return err
			}
			// Interrupted: the steps completed so far are still reported,
			// and the run still ends in an error.
			runErr := err
			if err := out.write(e, rep); err != nil {
				return err
			}
			if errors.Is(runErr, context.Canceled) {
				return errors.New("bench interrupted: the steps completed before it are reported")
			}
			if runErr != nil {
				return fmt.Errorf("bench: %w", runErr)
			}
			return gateExit(rep.Gate)
		},
	}
}

// benchOut is where a run's report goes besides stdout: --json-out, the
// charts of --plot, and the earlier run --plot-before draws beside it.
type benchOut struct {
	json, wide bool
	jsonOut    string
	plots      []string
	before     *bench.Report
}

// benchOutputs reads and checks the output flags before the ramp runs.
func benchOutputs(c *cli.Context) (*benchOut, error) {
	o := &benchOut{json: c.Bool("json"), wide: c.Bool("wide"), jsonOut: c.String("json-out"), plots: c.StringSlice("plot")}
	if o.json && o.wide {
		return nil, errors.New("--wide is a width of the table; --json has every counter already")
	}
	for _, p := range o.plots {
		if err := bench.PlotFormat(p); err != nil {
			return nil, err
		}
	}
	if o.jsonOut != "" {
		f, err := os.CreateTemp(filepath.Dir(o.jsonOut), ".relayctl-report-*")
		if err != nil {
			return nil, fmt.Errorf("--json-out %s: cannot write there: %w", o.jsonOut, err)
		}
		f.Close()
		os.Remove(f.Name())
	}
	if file := c.String("plot-before"); file != "" {
		if len(o.plots) == 0 {
			return nil, errors.New("--plot-before needs --plot: the chart to draw both runs on")
		}
		data, err := readRegular(file, 64<<20)
		if err != nil {
			return nil, fmt.Errorf("--plot-before: %w", err)
		}
		o.before = &bench.Report{}
		if err := json.Unmarshal(data, o.before); err != nil || o.before.Format == 0 || len(o.before.Steps) == 0 {
			return nil, withHint(fmt.Errorf("--plot-before %s: not the JSON report of a bench run with steps", file), "write one with relayctl bench ... --json-out before.json")
		}
	}
	return o, nil
}

// write prints the report (the table, or JSON) and writes the files.
func (o *benchOut) write(e *env, rep *bench.Report) error {
	var err error
	switch {
	case o.json:
		err = rep.WriteJSON(e.stdout)
	case o.wide:
		err = rep.WriteWideTable(e.stdout)
	default:
		err = rep.WriteTable(e.stdout)
	}
	if err != nil {
		return err
	}
	if o.jsonOut != "" {
		var b bytes.Buffer
		if err := rep.WriteJSON(&b); err != nil {
			return err
		}
		if err := writeFileAtomic(o.jsonOut, b.Bytes(), 0o644); err != nil {
			return err
		}
		fmt.Fprintf(e.stderr, "relayctl: wrote %s\n", o.jsonOut)
	}
	runs := []bench.PlotRun{{Report: rep}}
	if o.before != nil {
		runs = []bench.PlotRun{{Label: "before", Report: o.before}, {Label: "after", Report: rep}}
	}
	for _, p := range o.plots {
		if err := bench.WritePlot(p, runs...); err != nil {
			return err
		}
		fmt.Fprintf(e.stderr, "relayctl: wrote %s\n", p)
	}
	return nil
}

// benchGate reads --gate, or --promise and --factor.
func benchGate(c *cli.Context) (bench.Gate, error) {
	switch {
	case c.IsSet("gate") && (c.IsSet("promise") || c.IsSet("factor")):
		return bench.Gate{}, errors.New("--gate and --promise/--factor: give the gate in players, or the promise and the factor, not both")
	case c.IsSet("factor") && !c.IsSet("promise"):
		return bench.Gate{}, errors.New("--factor needs --promise")
	case c.IsSet("promise"):
		return bench.GateFromPromise(c.Int("promise"), c.Float64("factor"))
	case c.IsSet("gate"):
		if g := c.Int("gate"); g < 2 {
			return bench.Gate{}, fmt.Errorf("gate %d players: want at least 2", g)
		}
		return bench.Gate{Players: c.Int("gate")}, nil
	}
	return bench.Gate{}, nil
}

// gateExit picks the exit status of a gated run: 0 carried, 4 the relay
// fell short, 1 undecided (the bench was the limit, or the gate was not
// reached). The verdict itself is the report's last line.
func gateExit(g *bench.GateResult) error {
	switch {
	case g == nil || g.Passed():
		return nil
	case g.Verdict == bench.GateRelayShort:
		return &exitCode{code: exitShort}
	}
	return &exitCode{code: 1, err: errors.New(g.Summary)}
}

// progressLine writes the progress of a run to stderr: rewritten in place on
// a terminal, one line per reading otherwise (a log file gets every line).
type progressLine struct {
	mu    sync.Mutex
	w     io.Writer
	tty   bool
	width int
}

func newProgressLine(w io.Writer) *progressLine {
	p := &progressLine{w: w}
	if f, ok := w.(*os.File); ok {
		if _, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS); err == nil {
			p.tty = true
		}
	}
	return p
}

func (p *progressLine) write(line string, final bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.tty {
		fmt.Fprintln(p.w, line)
		return
	}
	pad := ""
	if n := p.width - len(line); n > 0 {
		pad = strings.Repeat(" ", n)
	}
	end := ""
	if final {
		end = "\n"
		p.width = 0
	} else {
		p.width = len(line)
	}
	fmt.Fprintf(p.w, "\r%s%s%s", line, pad, end)
}

func (p *progressLine) progress(g bench.Progress) {
	relay := fmt.Sprintf("relay rx %d drops %d tx %d", g.Relay.RxPackets, g.Relay.RxDrops, g.Relay.TxPackets)
	if g.RelayErr != nil {
		relay = "relay counters: " + g.RelayErr.Error()
	}
	p.write(fmt.Sprintf("bench: step %d/%d, %d players, %.1fs/%.1fs: sent %d of %d planned, %s, players received %d",
		g.Step+1, g.Steps, g.Players, g.Elapsed.Seconds(), g.Duration.Seconds(), g.Sent, g.Planned, relay, g.Received), false)
}

func (p *progressLine) stepDone(i int, s bench.Step) {
	v := "valid"
	if !s.Valid {
		v = "INVALID: " + strings.Join(s.Invalid, "; ")
	}
	line := fmt.Sprintf("bench: %d players: loss %.3f%% (in %d, out %d), p99 %v, %s",
		s.Players, s.LossPct, s.LossIn, s.LossOut, s.LatencyP99.Round(10e3), v)
	if !s.RelayKnown && s.Census {
		line = fmt.Sprintf("bench: %d players: loss %.3f%% (bench's own count: in %d, out %d), p99 %v, %s",
			s.Players, s.LossPct, s.LostIn, s.LostOut, s.LatencyP99.Round(10e3), v)
	}
	for _, r := range s.Restarts {
		line += "; " + r.String()
	}
	if s.ICMPErrors > 0 {
		line += fmt.Sprintf("; %d ICMP errors on %d player sockets", s.ICMPErrors, s.ICMPPlayers)
	}
	p.write(line, true)
}

func (p *progressLine) finish() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tty && p.width > 0 {
		fmt.Fprintln(p.w)
	}
}
