package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/relayctl/relayctl/plans"
	"github.com/relayctl/relayctl/tune"
)

// exitShort is the exit status of a check that ran and found the promise
// not met: size --spec whose buffer does not absorb the stall, bench --gate
// whose relay did not carry the gate.
const exitShort = 4

// truesizeModel names the assumptions behind tune.Truesize, for the reader
// of size's output.
const truesizeModel = "model: IPv4 skbs received over loopback or a veth pair, measured on kernel 6.18 " +
	"(tune's TestTruesizeMeasured); a NIC's driver may charge more per datagram (page fragments of 2 or 4 KiB), hence the headroom"

func sizeCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:      "size",
		Usage:     "from a promise (players, Hz, packet size, stall) compute the receive buffer, so_rcvbuf and rmem_max it needs",
		ArgsUsage: " ",
		Description: `Prints, for a promise, the arrival rate into the relay socket (datagrams and
bytes per second), what each datagram costs in the receive buffer (skb
truesize, not payload), the burst of one aligned tick (one datagram per
player), the receive buffer (rb) that absorbs the stall, and the so_rcvbuf to
request with the net.core.rmem_max it needs: the kernel gives
rb = 2 × min(so_rcvbuf, rmem_max), silently capped. The buffer to ask for
carries --headroom on top of the need, because the truesize model is measured
on loopback and a NIC's driver may charge more.

With --spec FILE it also checks a spec: the rb its relay will read back
(relay.so_rcvbuf against net.core.rmem_max from the spec's sysctl, or
--rmem-max when the spec does not set it), the stall that rb absorbs, and
whether it meets the promise.

The model: aligned ticks (a game server's tick sends every player's datagram
at once), an empty queue when the stall starts, and a stall of d queuing
floor(d × hz) whole ticks plus the one in flight. See docs/sizing.md for how
it compares with the bench.

Output on stdout (--json for a document). Exit status: 0, or 4 when --spec's
buffer does not meet the promise; 1 on an error.

Examples:
  relayctl size --players 200 --lobby-size 8 --hz 60 --packet-size 200 --stall 50ms
  relayctl size --players 100 --json
  relayctl size --players 200 --stall 50ms --spec plans/examples/ashburn-rcvbuf.yaml
  relayctl size --players 200 --stall 50ms --spec relay.yaml --rmem-max 212992`,
		Flags: []cli.Flag{
			&cli.IntFlag{Name: "players", Usage: "players the relay must carry", DefaultText: requiredText},
			&cli.IntFlag{Name: "lobby-size", Value: 8, Usage: "players per lobby; changes the way out (copies), not the receive buffer"},
			&cli.IntFlag{Name: "hz", Value: 60, Usage: "datagrams per player per second (the tick rate)"},
			&cli.IntFlag{Name: "packet-size", Value: 200, Usage: "datagram size in `BYTES` (UDP payload, relay/wire's 24-byte header included)"},
			&cli.DurationFlag{Name: "stall", Usage: "longest time the relay may stop reading its socket without dropping (e.g. 50ms); 0: only the tick in flight"},
			&cli.Float64Flag{Name: "headroom", Value: tune.DefaultHeadroom, Usage: "`FACTOR` (at least 1) on the needed buffer, for a driver that charges more than loopback"},
			&cli.StringFlag{Name: "spec", Usage: "also check the receive buffer the spec `FILE` gives the relay"},
			&cli.IntFlag{Name: "rmem-max", Value: tune.LinuxDefaultRcvbuf, Usage: "with --spec: the hosts' net.core.rmem_max when the spec does not set it"},
			&cli.IntFlag{Name: "rmem-default", Value: tune.LinuxDefaultRcvbuf, Usage: "with --spec: the hosts' net.core.rmem_default when the spec does not set it (a relay that never asks gets it)"},
			&cli.BoolFlag{Name: "json", Usage: "write the result as JSON on stdout"},
		},
		Action: func(c *cli.Context) error { return runSize(c, e) },
	}
}

// sizeReport is size's --json document.
type sizeReport struct {
	Format   int         `json:"format"`
	Sizing   tune.Sizing `json:"sizing"`
	Truesize string      `json:"truesize_model"`
	// Default is what the Linux default buffer does for the promise.
	Default tune.Capacity `json:"default_rb"`
	Spec    *specCheck    `json:"spec,omitempty"`
}

// specCheck is a spec's receive buffer against the promise.
type specCheck struct {
	File            string        `json:"file"`
	Name            string        `json:"name"`
	SoRcvbuf        int           `json:"so_rcvbuf"`
	Force           bool          `json:"so_rcvbuf_force"`
	RmemMax         int           `json:"rmem_max"`
	RmemMaxFrom     string        `json:"rmem_max_from"` // "spec" or "flag"
	RmemDefault     int           `json:"rmem_default"`
	RmemDefaultFrom string        `json:"rmem_default_from"`
	Capped          bool          `json:"capped"`
	Capacity        tune.Capacity `json:"capacity"`
}

func runSize(c *cli.Context, e *env) error {
	if c.NArg() > 0 {
		return fmt.Errorf("size takes no arguments, got %q", c.Args().First())
	}
	p := tune.Promise{
		Players:    c.Int("players"),
		LobbySize:  c.Int("lobby-size"),
		Hz:         c.Int("hz"),
		PacketSize: c.Int("packet-size"),
		Stall:      c.Duration("stall"),
	}
	if err := p.Validate(); err != nil {
		return fmt.Errorf("promise: %w", err)
	}
	h := c.Float64("headroom")
	if h < 1 || h > 100 {
		return fmt.Errorf("headroom %g: want a factor from 1 to 100", h)
	}
	rep := sizeReport{
		Format:   1,
		Sizing:   tune.Size(p, h),
		Truesize: truesizeModel,
		Default:  tune.CheckCapacity(p, tune.LinuxDefaultRcvbuf),
	}
	if file := c.String("spec"); file != "" {
		sc, err := checkSpec(file, p, c.Int("rmem-max"), c.Int("rmem-default"), c.IsSet("rmem-max"), c.IsSet("rmem-default"))
		if err != nil {
			return err
		}
		rep.Spec = sc
	} else if c.IsSet("rmem-max") || c.IsSet("rmem-default") {
		return errors.New("--rmem-max and --rmem-default need --spec")
	}
	if c.Bool("json") {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return fmt.Errorf("write json: %w", err)
		}
	} else if err := writeSize(e.stdout, rep); err != nil {
		return err
	}
	if rep.Spec != nil && !rep.Spec.Capacity.Meets {
		return &exitCode{code: exitShort}
	}
	return nil
}

// checkSpec reads the spec and computes the rb its relay will read back,
// by the kernel's rule, with rmem_max and rmem_default from the spec's
// sysctl section, or else the hosts' values given on the command line.
func checkSpec(file string, p tune.Promise, rmemMax, rmemDefault int, maxSet, defaultSet bool) (*specCheck, error) {
	data, err := readSpecFile(file)
	if err != nil {
		return nil, err
	}
	s, err := plans.ParseSpec(file, data)
	if err != nil {
		return nil, err
	}
	for _, v := range []struct {
		flag string
		n    int
	}{{"--rmem-max", rmemMax}, {"--rmem-default", rmemDefault}} {
		if v.n < tune.SockMinRcvbuf || v.n > tune.MaxRcvbuf/2 {
			return nil, fmt.Errorf("%s %d: want %d to %d bytes", v.flag, v.n, tune.SockMinRcvbuf, tune.MaxRcvbuf/2)
		}
	}
	sc := &specCheck{File: file, Name: s.Name, SoRcvbuf: s.Relay.SORcvbuf, Force: s.Relay.SORcvbufForce,
		RmemMax: rmemMax, RmemMaxFrom: "flag", RmemDefault: rmemDefault, RmemDefaultFrom: "flag"}
	for _, kv := range s.Sysctl {
		var dst *int
		var from *string
		switch kv.Key {
		case "net.core.rmem_max":
			dst, from = &sc.RmemMax, &sc.RmemMaxFrom
		case "net.core.rmem_default":
			dst, from = &sc.RmemDefault, &sc.RmemDefaultFrom
		default:
			continue
		}
		n, err := strconv.Atoi(strings.TrimSpace(kv.Value))
		if err != nil {
			return nil, &plans.SpecError{File: file, Line: kv.Line, Field: "sysctl." + kv.Key, Msg: fmt.Sprintf("%q is not an integer", kv.Value)}
		}
		*dst, *from = n, "spec"
	}
	if sc.RmemMaxFrom == "spec" && maxSet {
		return nil, fmt.Errorf("--rmem-max: %s sets net.core.rmem_max itself; the flag is for hosts whose value the spec leaves alone", file)
	}
	if sc.RmemDefaultFrom == "spec" && defaultSet {
		return nil, fmt.Errorf("--rmem-default: %s sets net.core.rmem_default itself; the flag is for hosts whose value the spec leaves alone", file)
	}
	e := tune.ExpectRcvbuf(sc.SoRcvbuf, sc.Force, sc.RmemMax, sc.RmemDefault)
	sc.Capped = e.Capped
	sc.Capacity = tune.CheckCapacity(p, e.Effective)
	return sc, nil
}

func writeSize(w io.Writer, r sizeReport) error {
	s, p := r.Sizing, r.Sizing.Promise
	var b strings.Builder
	line := func(format string, a ...any) { fmt.Fprintf(&b, format+"\n", a...) }
	line("promise: %d players in lobbies of %d at %d Hz, %d-byte datagrams, %s", p.Players, p.LobbySize, p.Hz, p.PacketSize, tune.StallPhrase(p.Stall))
	line("arrival: %d datagrams/s, %s into the relay socket; %d copies/s, %s out in full lobbies (the lobby size changes only the way out)",
		s.InPPS, mbps(s.InBytesPS), s.OutPPS, mbps(s.OutBytesPS))
	line("truesize: %d bytes of receive buffer per %d-byte datagram", s.Truesize, p.PacketSize)
	line("  %s", truesizeModel)
	line("burst: with aligned ticks the burst is one datagram per player: %d datagrams, %d bytes of buffer; the Linux default rb %d holds %d",
		s.Burst, satMul(s.Burst, s.Truesize), tune.LinuxDefaultRcvbuf, s.DefaultHeld)
	line("stall: %s at %d Hz queues %s plus the one in flight: %s, %d datagrams",
		tune.Millis(p.Stall), p.Hz, tune.Plural(s.StallTicks-1, "whole tick"), tune.Plural(s.StallTicks, "tick"), s.Queue)
	if !s.Possible {
		line("needed: rb %d, more than any socket can have (%d): shorten the stall or spread the players over more sockets or relays", s.NeedRcvbuf, tune.MaxRcvbuf)
	} else {
		line("needed: rb %d absorbs it (%d × %d, at least %d)", s.NeedRcvbuf, s.Queue, s.Truesize, tune.SockMinRcvbuf)
	}
	line("with %g× headroom: rb %d", s.Headroom, s.Rcvbuf)
	line("request: so_rcvbuf %d with net.core.rmem_max at least %d (the kernel gives rb = 2 × min(so_rcvbuf, rmem_max), capped silently)", s.Request, s.RmemMax)
	line("the Linux default: %s", r.Default.Summary())
	if sc := r.Spec; sc != nil {
		line("")
		ask := fmt.Sprintf("so_rcvbuf %d", sc.SoRcvbuf)
		switch {
		case sc.SoRcvbuf == 0:
			ask = fmt.Sprintf("a relay that never asks (so_rcvbuf 0) gets net.core.rmem_default %d (%s)", sc.RmemDefault, source(sc.RmemDefaultFrom, "--rmem-default"))
		case sc.Force:
			ask = fmt.Sprintf("so_rcvbuf %d with SO_RCVBUFFORCE (rmem_max ignored)", sc.SoRcvbuf)
		default:
			ask += fmt.Sprintf(" under net.core.rmem_max %d (%s)", sc.RmemMax, source(sc.RmemMaxFrom, "--rmem-max"))
			if sc.Capped {
				ask += ", capped silently"
			}
		}
		line("spec %s (%s): %s: rb %d", sc.File, sc.Name, ask, sc.Capacity.Rcvbuf)
		line("spec %s: %s", sc.File, sc.Capacity.Summary())
		if w := sc.Capacity.Warning(); w != "" {
			line("spec %s: %s", sc.File, w)
		}
	}
	if _, err := io.WriteString(w, b.String()); err != nil {
		return fmt.Errorf("write sizing: %w", err)
	}
	return nil
}

// source says where a sysctl value came from.
func source(from, flag string) string {
	if from == "spec" {
		return "set by the spec"
	}
	return "not in the spec: the hosts' value, " + flag
}

func satMul(a, b int) int {
	if a != 0 && b > math.MaxInt/a {
		return math.MaxInt
	}
	return a * b
}

// mbps prints bytes per second in decimal megabytes.
func mbps(n int) string {
	return fmt.Sprintf("%.2f MB/s", float64(n)/1e6)
}
