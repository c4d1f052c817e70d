// Command restartimpact measures what restarting relayd costs the players,
// for a plain restart (relay-service restart) and a handoff
// (relay-service handoff), and for the windows relayctl apply opens (a
// plain restart, a drain gate forced at its deadline, a drain gate that
// waits until the players have left, a handoff), on one lab host in one
// run (docs/restart.md).
//
// Each measurement is one bench step of synthetic lobbies through the lab
// host's relayd; --at into the step the next release is switched in: for
// the relay-service modes its link flipped and its config, with the next
// SO_RCVBUF, written before the step, then the mode's relay-service
// command; for the relayctl modes (apply-*) a spec of the next release and
// SO_RCVBUF planned right before the step, then relayctl apply, whose
// receipt gives the window, the drain wait and the players cut. Per
// measurement it prints the
// bench's own accounting (datagrams lost per direction, duplicates, ICMP
// errors at the players), the kernel's counters of the relay's network
// namespace (Udp NoPorts, Icmp OutDestUnreachs, RcvbufErrors), the lobbies
// and players the relay forgot (its own log), the gap with no socket bound,
// the gap between the last read of the old process and the first of the
// new one, and the socket's inode and rb before and after; then the
// median of each figure per mode.
//
// It runs inside the relay's network namespace, beside relayd, so that the
// kernel counters it reads are the relay's and nobody else's:
//
//	ip netns exec NS restartimpact --lab DIR --release 1.9.0=PATH --release 1.9.1=PATH --relayctl PATH
//
// relayctl runs in the network namespace of the host's sshd (nsenter),
// which it reaches over SSH as an operator would.
//
// scripts/restart-impact.sh starts the lab, builds the releases and runs it.
//
// Output: the tables on stdout (or JSON with --json); progress on stderr.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/relayctl/relayctl/internal/lab"
	"github.com/relayctl/relayctl/plans"
	"github.com/relayctl/relayctl/relay/bench"
	"github.com/relayctl/relayctl/relay/server"
	"github.com/relayctl/relayctl/relay/sockstat"
	"github.com/relayctl/relayctl/rollout"
	"github.com/relayctl/relayctl/tune"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintf(os.Stderr, "restartimpact: error: %v\n", err)
		os.Exit(1)
	}
}

// Where relayd listens on the lab host, and its handoff socket (under
// /opt/relay, private to the host).
const (
	relayAddr     = "127.0.0.1:7788"
	controlAddr   = "127.0.0.1:7789"
	handoffSocket = "/opt/relay/run/handoff.sock"
)

type release struct{ version, path string }

// idleTimeout is the relay's; idleWait, the pause between measurements,
// outlasts it (relayd expires a player within a quarter of the timeout).
const (
	idleTimeout = 2 * time.Second
	idleWait    = idleTimeout * 3 / 2
)

type options struct {
	lab           string
	host          string
	relayctl      string
	releases      []release
	rcvbufs       []int
	modes         []string
	runs          int
	players       int
	step          time.Duration
	at            time.Duration
	hz            int
	drainDeadline time.Duration
	drainPoll     time.Duration
	jsonOut       bool
}

func run(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("restartimpact", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	fs.StringVar(&o.lab, "lab", "", "the lab's directory (relaylab up --dir)")
	fs.StringVar(&o.host, "host", "lab-1", "the lab host")
	fs.Func("release", "`VERSION=PATH` of a relayd build; give two, switched in turn", func(v string) error {
		ver, path, ok := strings.Cut(v, "=")
		if !ok || ver == "" || path == "" {
			return fmt.Errorf("want VERSION=PATH, got %q", v)
		}
		o.releases = append(o.releases, release{ver, path})
		return nil
	})
	rcvbufs := fs.String("rcvbuf", "2097152,4194304", "RELAYD_SO_RCVBUF of the releases, in turn: each switch ships the next")
	modes := fs.String("modes", strings.Join(allModes, ","), "what each measurement does at --at: none (a baseline), restart, handoff (relay-service), "+
		"apply-restart, apply-drain-force, apply-drain-wait, apply-handoff (relayctl apply)")
	fs.StringVar(&o.relayctl, "relayctl", "", "the relayctl binary, for the apply-* modes")
	fs.DurationVar(&o.drainDeadline, "drain-deadline", 2*time.Second, "apply-drain-force: the gate's deadline (it ends inside the step)")
	fs.DurationVar(&o.drainPoll, "drain-poll", 200*time.Millisecond, "apply-drain-*: how often the gate reads the relay's players")
	fs.IntVar(&o.runs, "runs", 3, "rounds of every mode, interleaved")
	fs.IntVar(&o.players, "players", 64, "players (lobbies of 8)")
	fs.DurationVar(&o.step, "step", 12*time.Second, "length of each bench step")
	fs.DurationVar(&o.at, "at", 5*time.Second, "when in the step the switch starts")
	fs.IntVar(&o.hz, "hz", 60, "datagrams per player per second")
	fs.BoolVar(&o.jsonOut, "json", false, "write every measurement as JSON instead of the tables")
	if err := fs.Parse(args); err != nil {
		return err
	}
	for _, v := range strings.Split(*rcvbufs, ",") {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			return fmt.Errorf("--rcvbuf: %q is not a byte count", v)
		}
		o.rcvbufs = append(o.rcvbufs, n)
	}
	o.modes = strings.Split(*modes, ",")
	for _, m := range o.modes {
		if !slices.Contains(allModes, m) {
			return fmt.Errorf("--modes: unknown mode %q (%s)", m, strings.Join(allModes, ", "))
		}
		if isApplyMode(m) && o.relayctl == "" {
			return fmt.Errorf("--modes: %s runs relayctl apply: give --relayctl PATH", m)
		}
	}
	if o.lab == "" || len(o.releases) != 2 || o.runs < 1 || o.at >= o.step {
		return errors.New("usage: restartimpact --lab DIR --release V1=PATH --release V2=PATH [--relayctl PATH] [--runs N] [--players N] [--step D] [--at D] [--modes " + strings.Join(allModes, ",") + "]")
	}
	if slices.Contains(o.modes, modeApplyDrainForce) && o.at+o.drainDeadline >= o.step {
		return fmt.Errorf("--drain-deadline %v: the forced window must come inside the step (--at %v, --step %v)", o.drainDeadline, o.at, o.step)
	}
	l, err := lab.Load(o.lab)
	if err != nil {
		return err
	}
	h := l.Host(o.host)
	if h == nil {
		return fmt.Errorf("no host %q in %s", o.host, o.lab)
	}
	if err := inNetns(h.RelayNetns); err != nil {
		return err
	}
	m := &meter{o: o, l: l, h: h, log: stderr}
	if err := m.install(0); err != nil {
		return err
	}
	if _, err := h.Exec(context.Background(), lab.ServiceScript, "start"); err != nil {
		return err
	}
	var results []result
	for r := 1; r <= o.runs; r++ {
		for _, mode := range o.modes {
			res, err := m.measure(r, mode)
			if err != nil {
				return fmt.Errorf("run %d, %s: %w", r, mode, err)
			}
			results = append(results, res)
		}
	}
	if o.jsonOut {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(results)
	}
	return writeTables(stdout, o, results)
}

// inNetns checks that this process runs in the relay's network namespace.
func inNetns(name string) error {
	if name == "" {
		return errors.New("the lab host's relay has no network namespace of its own: start the lab without --no-relay-netns")
	}
	var self, want syscall.Stat_t
	if err := syscall.Stat("/proc/self/ns/net", &self); err != nil {
		return err
	}
	if err := syscall.Stat(filepath.Join("/run/netns", name), &want); err != nil {
		return err
	}
	if self.Ino != want.Ino || self.Dev != want.Dev {
		return fmt.Errorf("run me inside the relay's network namespace: ip netns exec %s %s ARGS", name, os.Args[0])
	}
	return nil
}

type meter struct {
	o    options
	l    *lab.Lab
	h    *lab.Host
	log  io.Writer
	next int // index of the release and buffer the next switch ships
	runs int // bench runs so far, for fresh lobby ids
}

func (m *meter) config(i int) string {
	// A short idle timeout, so the players of one measurement have left
	// the relay before the next (idleWait), and the lobbies cut are the
	// measurement's own.
	return fmt.Sprintf("RELAYD_LISTEN=0.0.0.0:7788\nRELAYD_CONTROL=%s\nRELAYD_SO_RCVBUF=%d\nRELAYD_HANDOFF_SOCKET=%s\nRELAYD_IDLE_TIMEOUT=%s\n",
		controlAddr, m.o.rcvbufs[i%len(m.o.rcvbufs)], handoffSocket, idleTimeout) + lab.BenchExempt
}

// install stages release and buffer i: the link and config the next start
// or handoff reads; the running relayd is not touched.
func (m *meter) install(i int) error {
	r := m.o.releases[i%len(m.o.releases)]
	return m.h.InstallRelay(context.Background(), lab.RelayInstall{Binary: r.path, Version: r.version, Config: m.config(i)})
}

// result is one measurement.
type result struct {
	Run  int    `json:"run"`
	Mode string `json:"mode"`

	// The bench's own accounting.
	PlannedDeliveries uint64          `json:"planned_deliveries"`
	Received          uint64          `json:"received"`
	Loss              uint64          `json:"loss"`       // deliveries
	LostIn            uint64          `json:"lost_in"`    // datagrams no member got
	LostOut           uint64          `json:"lost_out"`   // copies missing
	Duplicates        uint64          `json:"duplicates"` // copies received twice
	SendRefused       uint64          `json:"send_refused"`
	ICMPErrors        uint64          `json:"icmp_errors"` // at the players (IP_RECVERR)
	ICMPPlayers       int             `json:"icmp_players"`
	Valid             bool            `json:"valid"`
	Restarts          []bench.Restart `json:"restarts"`
	Notes             []string        `json:"notes,omitempty"` // the bench's, and why a step is invalid

	// The relay's namespace, from its kernel.
	NoPorts         uint64 `json:"kernel_udp_noports"`
	OutDestUnreachs uint64 `json:"kernel_icmp_out_dest_unreachs"`
	InDestUnreachs  uint64 `json:"kernel_icmp_in_dest_unreachs"`
	RcvbufErrors    uint64 `json:"kernel_udp_rcvbuf_errors"`

	// The relay's own account (its log).
	LobbiesAtSwitch int      `json:"lobbies_at_switch"`
	PlayersAtSwitch int      `json:"players_at_switch"`
	LobbiesRestored int      `json:"lobbies_restored"`
	PlayersRestored int      `json:"players_restored"`
	LobbiesCut      int      `json:"lobbies_cut"`
	PlayersCut      int      `json:"players_cut"`
	UnboundMS       float64  `json:"unbound_ms"`            // no socket bound: closed → bound again
	PauseMS         float64  `json:"pause_ms"`              // handoff: nobody read the socket (old stopped → new allowed to)
	ReadGapMS       *float64 `json:"read_gap_ms,omitempty"` // last read by the old process → first by the new; nil when no datagram came after the switch
	SwitchAtS       float64  `json:"switch_at_s"`           // when the old process stopped, in seconds into the step
	WindowMS        float64  `json:"window_ms"`             // the relay-service command; apply-*: the receipt's window_ms

	// relayctl apply (apply-* modes): the plan's switch and the receipt.
	Switch                 string          `json:"switch,omitempty"`
	ApplyMS                float64         `json:"apply_ms,omitempty"` // the whole relayctl apply
	DrainWaitMS            float64         `json:"drain_wait_ms,omitempty"`
	ReceiptPlayersAtWindow int             `json:"receipt_players_at_window"`
	ReceiptPlayersCut      int             `json:"receipt_players_cut"`
	ReceiptHandoffGapMS    float64         `json:"receipt_handoff_gap_ms,omitempty"`
	ReceiptRestarts        int             `json:"receipt_restarts"`
	ReceiptHandoffs        int             `json:"receipt_handoffs"`
	ReceiptRbExpected      int             `json:"receipt_rb_expected,omitempty"`
	ReceiptRbAfter         uint64          `json:"receipt_rb_after,omitempty"`
	Timeline               []rollout.Phase `json:"timeline,omitempty"`

	OldPID            int    `json:"old_pid"`
	NewPID            int    `json:"new_pid"`
	InodeBefore       uint64 `json:"inode_before"`
	InodeAfter        uint64 `json:"inode_after"`
	RbBefore          uint64 `json:"rb_before"`
	RbAfter           uint64 `json:"rb_after"`
	RbPlanned         int    `json:"rb_planned"`
	StatusRcvbufAfter int    `json:"status_so_rcvbuf_effective_after"`
	StatusInodeAfter  uint64 `json:"status_socket_inode_after"`
}

func (m *meter) measure(runN int, mode string) (result, error) {
	res := result{Run: runN, Mode: mode}
	ctx := context.Background()
	time.Sleep(idleWait)
	before, err := status()
	if err != nil {
		return res, err
	}
	sockBefore, err := relaySocket()
	if err != nil {
		return res, err
	}
	res.OldPID, res.InodeBefore, res.RbBefore = before.PID, sockBefore.Inode, sockBefore.Rcvbuf
	var plan string
	switch {
	case isApplyMode(mode):
		var hp *plans.HostPlan
		if plan, hp, err = m.plan(ctx, runN, m.next+1, mode); err != nil {
			return res, err
		}
		res.Switch = hp.Switch
	case mode != "none":
		if err := m.install(m.next + 1); err != nil {
			return res, err
		}
	}
	k0, err := readKernel()
	if err != nil {
		return res, err
	}
	logPath, err := m.h.Path(lab.RelayLog)
	if err != nil {
		return res, err
	}
	offset := fileSize(logPath)

	cfg := bench.Defaults()
	cfg.Relay, cfg.Control = relayAddr, controlAddr
	cfg.Ramp = bench.Ramp{From: m.o.players, To: m.o.players, Step: 1}
	cfg.StepDuration, cfg.Hz = m.o.step, m.o.hz
	cfg.Interval = 250 * time.Millisecond
	cfg.Calibrate = 0
	// relayd keeps a player 30 s after its last datagram: every run takes
	// lobby ids of its own.
	m.runs++
	cfg.LobbyBase = uint32(m.runs * ((m.o.players+7)/8 + 1))

	switched := make(chan error, 1)
	var windowStart, windowEnd, stepStart time.Time
	var did applied
	started := false
	opt := bench.Options{Progress: func(p bench.Progress) {
		if stepStart.IsZero() {
			stepStart = time.Now().Add(-p.Elapsed)
		}
		if started || p.Elapsed < m.o.at {
			return
		}
		started = true
		if mode == "none" {
			switched <- nil
			return
		}
		go func() {
			if isApplyMode(mode) {
				var err error
				did, err = m.apply(ctx, plan)
				switched <- err
				return
			}
			windowStart = time.Now()
			out, err := m.h.Exec(ctx, lab.ServiceScript, mode)
			windowEnd = time.Now()
			fmt.Fprintf(m.log, "restartimpact: run %d %s: %s", runN, mode, out)
			switched <- err
		}()
	}}
	fmt.Fprintf(m.log, "restartimpact: run %d, %s: %d players for %v, switch at %v\n", runN, mode, m.o.players, m.o.step, m.o.at)
	rep, err := bench.Run(ctx, cfg, opt)
	if err != nil {
		return res, fmt.Errorf("bench: %w", err)
	}
	if !started {
		return res, errors.New("the step never reached --at: no progress reading")
	}
	// The waiting drain gate opens after the step, once the players have
	// gone: the switch may still be under way.
	if err := <-switched; err != nil {
		return res, fmt.Errorf("%s: %w", mode, err)
	}
	switch {
	case isApplyMode(mode):
		m.next++
		fromReceipt(did, &res)
	case mode != "none":
		m.next++
		res.WindowMS = ms(windowEnd.Sub(windowStart))
	}
	k1, err := readKernel()
	if err != nil {
		return res, err
	}
	after, err := status()
	if err != nil {
		return res, err
	}
	sockAfter, err := relaySocket()
	if err != nil {
		return res, err
	}
	s := rep.Steps[0]
	res.PlannedDeliveries, res.Received, res.Loss = s.PlannedDeliveries, s.Received, s.Loss
	res.LostIn, res.LostOut, res.Duplicates, res.SendRefused = s.LostIn, s.LostOut, s.Duplicates, s.SendRefused
	res.ICMPErrors, res.ICMPPlayers, res.Valid, res.Restarts = s.ICMPErrors, s.ICMPPlayers, s.Valid, s.Restarts
	for _, why := range s.Invalid {
		res.Notes = append(res.Notes, "invalid: "+why)
	}
	res.Notes = append(res.Notes, s.Notes...)
	res.NoPorts = k1.noPorts - k0.noPorts
	res.OutDestUnreachs = k1.outUnreach - k0.outUnreach
	res.InDestUnreachs = k1.inUnreach - k0.inUnreach
	res.RcvbufErrors = k1.rcvbufErrors - k0.rcvbufErrors
	res.NewPID, res.InodeAfter, res.RbAfter = after.PID, sockAfter.Inode, sockAfter.Rcvbuf
	res.StatusRcvbufAfter, res.StatusInodeAfter = after.SORcvbufEffective, after.SocketInode
	rmemMax, rmemDefault := readInt("/proc/sys/net/core/rmem_max"), readInt("/proc/sys/net/core/rmem_default")
	res.RbPlanned = tune.ExpectRcvbuf(m.o.rcvbufs[m.next%len(m.o.rcvbufs)], false, rmemMax, rmemDefault).Effective
	if mode != "none" {
		if err := fromLog(readFrom(logPath, offset), stepStart, &res); err != nil {
			return res, fmt.Errorf("read the relay's log: %w", err)
		}
	}
	return res, nil
}

// status reads relayd's /status (this process is in its namespace).
func status() (server.Status, error) {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + controlAddr + "/status")
	if err != nil {
		return server.Status{}, fmt.Errorf("read relay status: %w", err)
	}
	defer resp.Body.Close()
	var st server.Status
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return server.Status{}, fmt.Errorf("decode relay status: %w", err)
	}
	return st, nil
}

// relaySocket reads the relay socket with ss -e -m: inode and rb.
func relaySocket() (sockstat.Socket, error) {
	out, err := exec.Command("ss", "-H", "-e", "-O", "-u", "-l", "-n", "-m", "sport = :7788").Output()
	if err != nil {
		return sockstat.Socket{}, fmt.Errorf("ss: %w", err)
	}
	socks, err := sockstat.ParseSS(out)
	if err != nil || len(socks) != 1 {
		return sockstat.Socket{}, fmt.Errorf("ss: %v, want one socket on port 7788 in:\n%s", err, out)
	}
	return socks[0], nil
}

type kernel struct{ noPorts, rcvbufErrors, outUnreach, inUnreach uint64 }

// readKernel reads the namespace's Udp and Icmp counters.
func readKernel() (kernel, error) {
	b, err := os.ReadFile("/proc/self/net/snmp")
	if err != nil {
		return kernel{}, err
	}
	udp, err := sockstat.ParseSNMP(b)
	if err != nil {
		return kernel{}, err
	}
	icmp, err := icmpCounters(b)
	if err != nil {
		return kernel{}, err
	}
	return kernel{noPorts: udp.NoPorts, rcvbufErrors: udp.RcvbufErrors, outUnreach: icmp["OutDestUnreachs"], inUnreach: icmp["InDestUnreachs"]}, nil
}

// icmpCounters pairs the "Icmp:" header and value lines of /proc/net/snmp.
func icmpCounters(snmp []byte) (map[string]uint64, error) {
	var rows [][]string
	for _, l := range strings.Split(string(snmp), "\n") {
		if f := strings.Fields(l); len(f) > 0 && f[0] == "Icmp:" {
			rows = append(rows, f[1:])
		}
	}
	if len(rows) != 2 || len(rows[0]) != len(rows[1]) {
		return nil, errors.New("parse snmp: want one Icmp: header line and one value line of the same length")
	}
	m := map[string]uint64{}
	for i, name := range rows[0] {
		v, err := strconv.ParseUint(rows[1][i], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("parse snmp: Icmp %s: %q is not a counter", name, rows[1][i])
		}
		m[name] = v
	}
	return m, nil
}

var logAttr = regexp.MustCompile(`(\w+)=("(?:[^"\\]|\\.)*"|\S*)`)

// logLine finds the last line with msg and returns its attributes.
func logLine(log, msg string) map[string]string {
	var found map[string]string
	for _, l := range strings.Split(log, "\n") {
		if !strings.Contains(l, `msg="`+msg+`"`) {
			continue
		}
		found = map[string]string{}
		for _, m := range logAttr.FindAllStringSubmatch(l, -1) {
			found[m[1]] = strings.Trim(m[2], `"`)
		}
	}
	return found
}

// fromLog takes the relay's own account of the switch from its log: what
// the old process held and when it last read and closed, what the new one
// restored and when it bound and first read (no datagram may come after a
// drain gate that waited for the players to leave), and when the old one
// stopped, against the step's start.
func fromLog(log string, stepStart time.Time, res *result) error {
	ts := func(m map[string]string, k string) (time.Time, error) {
		return time.Parse(time.RFC3339Nano, m[k])
	}
	stop := logLine(log, "socket closed")
	handed := logLine(log, "handed over")
	if handed != nil {
		stop = handed
	}
	start := logLine(log, "relayd started")
	if stop == nil || start == nil {
		return fmt.Errorf("want the old relayd's stop line and the new one's start line; got:\n%s", log)
	}
	// The new process's first read follows its start line; one before it
	// is the old process's, when the old one first read in this step.
	first := logLine(log[strings.LastIndex(log, `msg="relayd started"`):], "first datagram read")
	res.LobbiesAtSwitch, _ = strconv.Atoi(stop["lobbies"])
	res.PlayersAtSwitch, _ = strconv.Atoi(stop["players"])
	res.LobbiesRestored, _ = strconv.Atoi(start["lobbies_restored"])
	res.PlayersRestored, _ = strconv.Atoi(start["players_restored"])
	res.LobbiesCut = res.LobbiesAtSwitch - res.LobbiesRestored
	res.PlayersCut = res.PlayersAtSwitch - res.PlayersRestored
	stopped, err := ts(stop, "time")
	if err != nil {
		return err
	}
	if !stepStart.IsZero() {
		res.SwitchAtS = stopped.Sub(stepStart).Seconds()
	}
	if first != nil {
		lastRead, err1 := ts(stop, "last_read_at")
		firstRead, err2 := ts(first, "at")
		if err := errors.Join(err1, err2); err != nil {
			return err
		}
		gap := ms(firstRead.Sub(lastRead))
		res.ReadGapMS = &gap
	}
	if handed != nil {
		us, err := strconv.ParseFloat(start["handoff_pause_us"], 64)
		if err != nil {
			return fmt.Errorf("handoff_pause_us: %w", err)
		}
		res.PauseMS = us / 1000
	} else {
		closed, err1 := ts(stop, "at")
		bound, err2 := ts(start, "socket_bound_at")
		if err := errors.Join(err1, err2); err != nil {
			return err
		}
		res.UnboundMS = ms(bound.Sub(closed))
	}
	return nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func fileSize(p string) int64 {
	fi, err := os.Stat(p)
	if err != nil {
		return 0
	}
	return fi.Size()
}

func readFrom(p string, off int64) string {
	b, err := os.ReadFile(p)
	if err != nil || int64(len(b)) < off {
		return ""
	}
	return string(b[off:])
}

func readInt(p string) int {
	b, _ := os.ReadFile(p)
	n, _ := strconv.Atoi(string(bytes.TrimSpace(b)))
	return n
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "NO"
}

func writeTables(w io.Writer, o options, rs []result) error {
	fmt.Fprintf(w, "relayd on one lab host (its own network namespace), %d players in lobbies of 8 at %d Hz, 200-byte datagrams; %v steps, the switch at %v; %d runs\n\n",
		o.players, o.hz, o.step, o.at, o.runs)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "run\tmode\tloss\tlost in\tlost out\tdup\trefused\tICMP (players)\tNoPorts\tICMP out\trcvbuf errors\tcut lobbies/players\tswitch at s\tunbound ms\tpause ms\tread gap ms\twindow ms\tsame inode\trb before\trb after\tplanned\tvalid\t")
	for _, r := range rs {
		fmt.Fprintf(tw, "%d\t%s\t%d\t%d\t%d\t%d\t%d\t%d (%d)\t%d\t%d\t%d\t%d/%d\t%s\t%.1f\t%.2f\t%s\t%.0f\t%s\t%d\t%d\t%d\t%s\t\n",
			r.Run, r.Mode, r.Loss, r.LostIn, r.LostOut, r.Duplicates, r.SendRefused, r.ICMPErrors, r.ICMPPlayers,
			r.NoPorts, r.OutDestUnreachs, r.RcvbufErrors, r.LobbiesCut, r.PlayersCut, switchAt(r), r.UnboundMS, r.PauseMS, orDash(r.ReadGapMS, "%.1f"), r.WindowMS,
			yesNo(r.InodeAfter == r.InodeBefore), r.RbBefore, r.RbAfter, r.RbPlanned, yesNo(r.Valid))
	}
	tw.Flush()
	fmt.Fprintln(w)
	for _, r := range rs {
		for _, n := range r.Notes {
			fmt.Fprintf(w, "run %d %s: %s\n", r.Run, r.Mode, n)
		}
	}
	if slices.ContainsFunc(o.modes, isApplyMode) {
		fmt.Fprintf(w, "\nrelayctl apply, by its receipt:\n")
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "run\tmode\tswitch\tplayers at window\tdrain wait ms\tplayers cut\thandoff gap ms\trestarts\thandoffs\twindow ms\tapply ms\trb after\trb expected\ttimeline ms\t")
		for _, r := range rs {
			if !isApplyMode(r.Mode) {
				continue
			}
			var phases []string
			for _, p := range r.Timeline {
				phases = append(phases, fmt.Sprintf("%s %d", p.Name, p.Ms))
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%.0f\t%d\t%.2f\t%d\t%d\t%.0f\t%.0f\t%d\t%d\t%s\t\n", r.Run, r.Mode, r.Switch,
				r.ReceiptPlayersAtWindow, r.DrainWaitMS, r.ReceiptPlayersCut, r.ReceiptHandoffGapMS, r.ReceiptRestarts, r.ReceiptHandoffs,
				r.WindowMS, r.ApplyMS, r.ReceiptRbAfter, r.ReceiptRbExpected, strings.Join(phases, ", "))
		}
		tw.Flush()
	}
	fmt.Fprintf(w, "\nmedians per mode:\n")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "mode\tloss\tlost in\tlost out\tICMP errors\tNoPorts\tplayers cut\tlobbies cut\tswitch at s\tunbound ms\tpause ms\tread gap ms\twindow ms\tdrain wait ms\tsame inode\trb as planned\t")
	for _, mode := range o.modes {
		var sel []result
		for _, r := range rs {
			if r.Mode == mode {
				sel = append(sel, r)
			}
		}
		f := func(get func(r result) float64) float64 {
			v := make([]float64, len(sel))
			for i, r := range sel {
				v[i] = get(r)
			}
			return median(v)
		}
		var gaps []float64
		for _, r := range sel {
			if r.ReadGapMS != nil {
				gaps = append(gaps, *r.ReadGapMS)
			}
		}
		readGap := "-"
		if len(gaps) > 0 {
			readGap = fmt.Sprintf("%.1f", median(gaps))
		}
		drainWait, at := "-", "-"
		if isApplyMode(mode) {
			drainWait = fmt.Sprintf("%.0f", f(func(r result) float64 { return r.DrainWaitMS }))
		}
		if mode != "none" {
			at = fmt.Sprintf("%.1f", f(func(r result) float64 { return r.SwitchAtS }))
		}
		same, planned := 0, 0
		for _, r := range sel {
			if r.InodeAfter == r.InodeBefore {
				same++
			}
			if asPlanned(r) {
				planned++
			}
		}
		fmt.Fprintf(tw, "%s\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%s\t%.1f\t%.2f\t%s\t%.0f\t%s\t%d of %d\t%d of %d\t\n", mode,
			f(func(r result) float64 { return float64(r.Loss) }), f(func(r result) float64 { return float64(r.LostIn) }),
			f(func(r result) float64 { return float64(r.LostOut) }), f(func(r result) float64 { return float64(r.ICMPErrors) }),
			f(func(r result) float64 { return float64(r.NoPorts) }), f(func(r result) float64 { return float64(r.PlayersCut) }),
			f(func(r result) float64 { return float64(r.LobbiesCut) }), at, f(func(r result) float64 { return r.UnboundMS }),
			f(func(r result) float64 { return r.PauseMS }), readGap, f(func(r result) float64 { return r.WindowMS }), drainWait,
			same, len(sel), planned, len(sel))
	}
	return tw.Flush()
}

// asPlanned: ss's rb and /status's effective buffer are what the kernel's
// rule gives the release's request; for relayctl, its plan and read-back
// say the same.
func asPlanned(r result) bool {
	ok := int(r.RbAfter) == r.RbPlanned && r.StatusRcvbufAfter == r.RbPlanned
	if isApplyMode(r.Mode) {
		ok = ok && r.ReceiptRbExpected == r.RbPlanned && int(r.ReceiptRbAfter) == r.RbPlanned
	}
	return ok
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	v = slices.Clone(v)
	slices.Sort(v)
	return v[len(v)/2]
}

func switchAt(r result) string {
	if r.Mode == "none" {
		return "-"
	}
	return fmt.Sprintf("%.1f", r.SwitchAtS)
}

func orDash(v *float64, format string) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf(format, *v)
}
