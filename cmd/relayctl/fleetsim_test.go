package main

// The fleet simulator (make bench-sim, docs/bench-fleet.md): relayctl plan
// and relayctl apply as they are, the CLI included, on fleets of 1,000 to
// 50,000 simulated hosts (rollouttest.Sim with a network: latency, jitter,
// each host's own link, and the controller's uplink, which every host's
// upload shares, with the SSH channel's window; and injected failures).
// Only the host is simulated: the inventory, the planner, the plan file,
// the release's forms for the wire, the waves, the ledger, the receipts and
// the live fleet view (on a pseudo-terminal) are relayctl's. The bytes the
// uplink carries are the ones the engine sends (its requests and their
// payloads, each upload in the form the host takes).
//
// It is a benchmark, not a test: it asserts nothing about time. One size
// per process (peak RSS is a process's high-water mark):
//
//	FLEETSIM_HOSTS=10000 go test -run '^$' -bench FleetSim -benchtime 1x ./cmd/relayctl
//
// Settings (environment): FLEETSIM_HOSTS (1000), FLEETSIM_REGIONS
// (hosts/200, at least 1), FLEETSIM_PARALLEL (200), FLEETSIM_LATENCY
// (20ms), FLEETSIM_JITTER (10ms), FLEETSIM_BANDWIDTH (each host's own link,
// bytes/s, 100e6), FLEETSIM_UPLINK_GBIT (the controller's uplink, Gbit/s,
// 1; 0 for none), FLEETSIM_WINDOW (an SSH channel's window, bytes,
// 2097152), FLEETSIM_RESTART (a relay's restart, 70ms), FLEETSIM_CONNECT
// (round trips to connect: TCP, the SSH key exchange and authentication,
// the session's channel and exec; 8), FLEETSIM_PREVIOUS
// (1: every host keeps the release before in its store, and relayctl
// shipped it, so an upgrade goes as a patch; 0: the release goes
// compressed), FLEETSIM_DECODERS (what the hosts decode an upload with,
// gzip,zstd,zstd-patch; "" for nothing: the release goes as it is),
// FLEETSIM_ARTIFACT_FILE and FLEETSIM_PREVIOUS_FILE (the two
// releases: bench-sim.sh builds relayd at two commits; without them, the
// test binary's last FLEETSIM_ARTIFACT bytes, 9,000,000, and a few edits
// of them: fine for the engine's costs, not for the sizes of patches),
// FLEETSIM_FAIL (share of hosts whose upload fails, 0.002),
// FLEETSIM_UNREACHABLE (0.001), FLEETSIM_OUT (a file for the result as
// JSON), FLEETSIM_HEAPPROFILE (a heap profile written when the apply's
// walk ends).

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/relayctl/relayctl/rollout"
	"github.com/relayctl/relayctl/rollout/rollouttest"
	"github.com/relayctl/relayctl/uplink"
)

// simConfig is one simulated fleet.
type simConfig struct {
	Hosts, Regions, Parallel   int
	Connect                    int // round trips to connect to a host
	Latency, Jitter, Restart   time.Duration
	Bandwidth                  int64
	UplinkGbit                 float64
	Window                     int
	Previous                   bool
	Decoders                   []string // what every simulated host decodes an upload with
	Artifact                   int
	ArtifactFile, PreviousFile string
	Fail, Unreachable          float64
}

// simResult is what one run measured.
type simResult struct {
	Config simConfig
	Plan   phaseCost
	Apply  phaseCost
	// The apply's fleet walk (the receipt's ms) against the least the
	// network allows with no engine at all (lowerBound).
	WalkSeconds, BoundSeconds float64
	Waves                     int
	Outcomes                  map[string]int
	// What the apply put through the uplink, a host: everything, and the
	// release alone (its receipts' upload records), against the release's
	// size; the forms the hosts took, and the plan's review's line.
	UplinkPerHost, ReleasePerHost float64
	ReleaseBytes                  int
	Forms                         map[string]int
	ReviewUplink                  string
	// Bytes the engine keeps per host once its fleet walk is done (the
	// report: each host's account, receipt summary, steps, timeline).
	RetainedPerHost int64
	// The simulated hosts' own memory, part of the peak RSS above.
	SimMiB float64
	// Ledger saves: how many, their median and 99th percentile, all of
	// them together, and the bytes of the last one.
	LedgerSaves                   int
	LedgerMedianUS, LedgerP99US   float64
	LedgerTotalSeconds            float64
	LedgerLastBytes               int
	PlanBytes, ReviewBytes        int64
	ReceiptJSONBytes, ReceiptMD   int64
	LiveViewBytes, ApplyStdout    int64
	ReviewLines, ReceiptMDLines   int
	InventoryBytes, LedgerOnDisk  int64
	GoVersion, Started, Load      string
	CPUs                          int
	HeapAfterPlanMiB, HeapEndMiB  float64
	GCCycles                      uint32
	PlanRoundTripsPerHost         float64
	ApplyRoundTripsPerHost        float64
	UnreachableHosts, FailedHosts int
}

// phaseCost is one command's cost.
type phaseCost struct {
	WallSeconds   float64
	CPUSeconds    float64 // user + system, the whole process
	CPUMsPerHost  float64
	PeakRSSMiB    float64 // the process's high-water mark during the command
	ExitCode      int
	StderrExcerpt string `json:",omitempty"`
}

func simEnvInt(k string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(k)); err == nil {
		return v
	}
	return def
}

func simEnvFloat(k string, def float64) float64 {
	if v, err := strconv.ParseFloat(os.Getenv(k), 64); err == nil {
		return v
	}
	return def
}

// simEnvList is a comma-separated list ("" for none).
func simEnvList(k, def string) []string {
	v, ok := os.LookupEnv(k)
	if !ok {
		v = def
	}
	var out []string
	for _, w := range strings.Split(v, ",") {
		if w = strings.TrimSpace(w); w != "" {
			out = append(out, w)
		}
	}
	return out
}

func simEnvDuration(k string, def time.Duration) time.Duration {
	if v, err := time.ParseDuration(os.Getenv(k)); err == nil {
		return v
	}
	return def
}

func simConfigFromEnv() simConfig {
	c := simConfig{
		Hosts: simEnvInt("FLEETSIM_HOSTS", 1000), Parallel: simEnvInt("FLEETSIM_PARALLEL", 200),
		Latency: simEnvDuration("FLEETSIM_LATENCY", 20*time.Millisecond), Jitter: simEnvDuration("FLEETSIM_JITTER", 10*time.Millisecond),
		Restart: simEnvDuration("FLEETSIM_RESTART", 70*time.Millisecond), Connect: simEnvInt("FLEETSIM_CONNECT", 8),
		Bandwidth: int64(simEnvFloat("FLEETSIM_BANDWIDTH", 100e6)), Artifact: simEnvInt("FLEETSIM_ARTIFACT", 9_000_000),
		UplinkGbit: simEnvFloat("FLEETSIM_UPLINK_GBIT", 1), Window: simEnvInt("FLEETSIM_WINDOW", rollouttest.DefaultWindow),
		Previous: simEnvInt("FLEETSIM_PREVIOUS", 1) == 1, Decoders: simEnvList("FLEETSIM_DECODERS", "gzip,zstd,zstd-patch"),
		ArtifactFile: os.Getenv("FLEETSIM_ARTIFACT_FILE"), PreviousFile: os.Getenv("FLEETSIM_PREVIOUS_FILE"),
		Fail: simEnvFloat("FLEETSIM_FAIL", 0.002), Unreachable: simEnvFloat("FLEETSIM_UNREACHABLE", 0.001),
	}
	c.Regions = simEnvInt("FLEETSIM_REGIONS", max(1, c.Hosts/200))
	return c
}

func BenchmarkFleetSim(b *testing.B) {
	cfg := simConfigFromEnv()
	for range b.N {
		res := runFleetSim(b, cfg)
		b.ReportMetric(res.Apply.CPUMsPerHost, "apply-cpu-ms/host")
		b.ReportMetric(res.Apply.PeakRSSMiB, "apply-peak-MiB")
		b.ReportMetric(res.WalkSeconds/res.BoundSeconds, "walk/bound")
		b.ReportMetric(res.UplinkPerHost, "uplink-B/host")
		b.ReportMetric(float64(res.RetainedPerHost), "retained-B/host")
		b.ReportMetric(res.LedgerMedianUS, "ledger-save-µs")
		fmt.Println(res.summary())
		if out := os.Getenv("FLEETSIM_OUT"); out != "" {
			body, _ := json.MarshalIndent(res, "", "  ")
			if err := os.WriteFile(out, body, 0o644); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// simFleet is the simulated hosts, by name, and what was injected; the
// uplink they share, and the releases.
type simFleet struct {
	sims          map[string]*rollouttest.Sim
	names         []string
	unreachable   []string
	failing       []string
	uplink        *rollouttest.Uplink
	release, prev []byte
}

func runFleetSim(b *testing.B, cfg simConfig) simResult {
	dir := b.TempDir()
	b.Setenv("XDG_CACHE_HOME", filepath.Join(dir, "cache"))
	fl := buildSimFleet(b, cfg, dir)
	res := simResult{Config: cfg, GoVersion: runtime.Version(), Started: time.Now().UTC().Format(time.RFC3339), CPUs: runtime.NumCPU(),
		UnreachableHosts: len(fl.unreachable), FailedHosts: len(fl.failing)}
	res.InventoryBytes = fileSize(filepath.Join(dir, "inventory", "hosts.ini"))
	d := rollouttest.Dialer{}
	for name, s := range fl.sims {
		d[name] = s
	}
	testHosts = d
	defer func() { testHosts = nil }()
	plan := filepath.Join(dir, "fleet.plan")
	spec := filepath.Join(dir, "fleet.yaml")
	p := strconv.Itoa(cfg.Parallel)

	res.Plan = measure(cfg.Hosts, func(stdout, stderr io.Writer) int {
		return run([]string{"relayctl", "plan", spec, "--out", plan, "--parallel", p}, nil, stdout, stderr)
	}, io.Discard)
	res.HeapAfterPlanMiB = heapMiB()
	trips := 0
	for _, s := range fl.sims {
		trips += s.RoundTrips()
		s.Net.Reset()
	}
	res.PlanRoundTripsPerHost = float64(trips) / float64(cfg.Hosts)
	for _, name := range fl.unreachable { // gone between plan and apply
		delete(d, name)
	}
	for _, name := range fl.failing {
		fl.sims[name].FailOp, fl.sims[name].FailMsg = "keep", "cp: error writing: No space left on device"
	}

	sent := fl.uplink.Bytes()
	rep, saves := res.applyFleet(b, plan, p)
	res.UplinkPerHost = float64(fl.uplink.Bytes()-sent) / float64(cfg.Hosts)
	res.HeapEndMiB = heapMiB()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	res.GCCycles = ms.NumGC
	res.SimMiB = float64(deepSize(fl.sims)) / (1 << 20)
	if rep == nil {
		b.Fatalf("apply: exit %d, no report", res.Apply.ExitCode)
	}
	res.fromReport(rep, fl, cfg)
	res.fromSaves(saves)
	res.PlanBytes, res.ReviewBytes = fileSize(plan), fileSize(plan+".md")
	res.ReceiptJSONBytes, res.ReceiptMD = fileSize(plan+".receipt.json"), fileSize(plan+".receipt.md")
	res.LedgerOnDisk = fileSize(plan + ".ledger.json")
	res.ReviewLines, res.ReceiptMDLines = lines(plan+".md"), lines(plan+".receipt.md")
	res.ReviewUplink = reviewLine(plan+".md", "- Uplink: ")
	if l, err := os.ReadFile("/proc/loadavg"); err == nil {
		res.Load = strings.Join(strings.Fields(string(l))[:3], " ")
	}
	return res
}

// applyFleet runs relayctl apply with its live view on a pseudo-terminal,
// listening to each ledger save and taking the report when the walk ends.
func (res *simResult) applyFleet(b *testing.B, plan, parallel string) (*rollout.Report, []time.Duration) {
	var saves []time.Duration
	var mu sync.Mutex
	testLedgerSave = func(n int, took time.Duration) {
		mu.Lock()
		saves = append(saves, took)
		res.LedgerLastBytes = n
		mu.Unlock()
	}
	var rep *rollout.Report
	testApplied = func(r *rollout.Report) {
		rep = r
		res.RetainedPerHost = deepSize(r) / int64(max(1, len(r.Hosts)))
		if f := os.Getenv("FLEETSIM_HEAPPROFILE"); f != "" { // what is live once every host is done
			if out, err := os.Create(f); err == nil {
				runtime.GC()
				pprof.WriteHeapProfile(out)
				out.Close()
			}
		}
	}
	defer func() { testLedgerSave, testApplied = nil, nil }()
	tty, out := simPTY(b)
	var stdout countWriter
	res.Apply = measure(res.Config.Hosts, func(_, stderr io.Writer) int {
		return run([]string{"relayctl", "apply", plan, "--parallel", parallel, "--verify-timeout", "2s"}, nil, &stdout, stderr)
	}, tty)
	tty.Close()
	res.LiveViewBytes = out()
	res.ApplyStdout = stdout.n.Load()
	return rep, saves
}

// buildSimFleet writes the inventory (regions of hosts, each with its own
// ansible_host), the spec and the release, and makes the Sims: hosts with
// gzip and zstd, each keeping the release before in its store (with
// cfg.Previous, which relayctl then has in its cache, as if it had shipped
// it), all behind the one uplink.
func buildSimFleet(b *testing.B, cfg simConfig, dir string) *simFleet {
	fl := &simFleet{sims: map[string]*rollouttest.Sim{}, uplink: &rollouttest.Uplink{Rate: int64(cfg.UplinkGbit * 1e9 / 8), Window: cfg.Window}}
	fl.release, fl.prev = simReleases(b, cfg)
	if cfg.Previous {
		c, err := uplink.OpenCache(filepath.Join(dir, "cache", "relayctl"))
		if err != nil {
			b.Fatal(err)
		}
		if err := c.PutRelease(fl.prev); err != nil {
			b.Fatal(err)
		}
	}
	var ini strings.Builder
	per := (cfg.Hosts + cfg.Regions - 1) / cfg.Regions
	n := 0
	failEvery, unreachEvery := every(cfg.Fail), every(cfg.Unreachable)
	for r := 1; r <= cfg.Regions && n < cfg.Hosts; r++ {
		region := fmt.Sprintf("r%03d", r)
		fmt.Fprintf(&ini, "[%s]\n", region)
		for i := 1; i <= per && n < cfg.Hosts; i++ {
			n++
			name := fmt.Sprintf("relay-%05d.%s", i, region)
			fmt.Fprintf(&ini, "%s ansible_host=10.%d.%d.%d\n", name, r%250, i/250, i%250+1)
			s := rollouttest.NewSim(name)
			s.Lean = true
			s.Decoders = cfg.Decoders
			if cfg.Previous {
				s.StoreRelease(fl.prev)
			}
			s.Net = rollouttest.NewNet(name, cfg.Latency, cfg.Jitter, cfg.Bandwidth)
			s.Net.Uplink, s.Net.Restart, s.Net.Connect = fl.uplink, cfg.Restart, cfg.Connect
			fl.sims[name] = s
			fl.names = append(fl.names, name)
			switch {
			case i == 1: // each region's canary does its job
			case unreachEvery > 0 && n%unreachEvery == unreachEvery/2:
				fl.unreachable = append(fl.unreachable, name)
			case failEvery > 0 && n%failEvery == 0:
				fl.failing = append(fl.failing, name)
			}
		}
		fmt.Fprintf(&ini, "[%s:vars]\nregion=%s\n", region, region)
	}
	ini.WriteString("[relays:children]\n")
	for r := 1; r <= cfg.Regions; r++ {
		fmt.Fprintf(&ini, "r%03d\n", r)
	}
	spec := `name: fleetsim
hosts:
  inventory: inventory/hosts.ini
  pattern: relays
  labels: [region]
sysctl:
  net.core.rmem_max: 8388608
relay:
  port: 7788
  so_rcvbuf: 4194304
  release: {version: 1.8.0, artifact: relayd}
  service:
    manager: command
    start: [/opt/relay/bin/relay-service, start]
    stop: [/opt/relay/bin/relay-service, stop]
    pid_file: /opt/relay/run/relayd.pid
rollout:
  by: region
  waves: [1, 100%]
  max_failures: 2%
  max_unreachable: 2%
`
	for file, body := range map[string][]byte{"inventory/hosts.ini": []byte(ini.String()), "fleet.yaml": []byte(spec), "relayd": fl.release} {
		path := filepath.Join(dir, file)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(path, body, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	return fl
}

// simReleases are the release the fleet is sent and the one before it:
// the files given, else the test binary's bytes and a few edits of them.
func simReleases(b *testing.B, cfg simConfig) (release, prev []byte) {
	if cfg.ArtifactFile == "" {
		prev, release, err := rollouttest.TwoReleases(cfg.Artifact)
		if err != nil {
			b.Fatal(err)
		}
		return release, prev
	}
	release, err := os.ReadFile(cfg.ArtifactFile)
	if err == nil {
		prev, err = os.ReadFile(cfg.PreviousFile)
	}
	if err != nil {
		b.Fatal(err)
	}
	return release, prev
}

func every(share float64) int {
	if share <= 0 {
		return 0
	}
	return max(2, int(1/share))
}

// measure runs one command with the process's peak RSS reset first.
func measure(hosts int, cmd func(stdout, stderr io.Writer) int, stderr io.Writer) phaseCost {
	runtime.GC()
	debug.FreeOSMemory()
	os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) // the high-water mark starts again from here
	var errs tailWriter
	w := io.Writer(&errs)
	if f, ok := stderr.(*os.File); ok {
		w = f // a terminal: relayctl must see it as one
	}
	u0 := cpuNow()
	t0 := time.Now()
	stop := traceRSS(t0)
	code := cmd(io.Discard, w)
	stop()
	c := phaseCost{WallSeconds: time.Since(t0).Seconds(), CPUSeconds: (cpuNow() - u0).Seconds(), ExitCode: code, PeakRSSMiB: peakRSSMiB()}
	c.CPUMsPerHost = c.CPUSeconds * 1000 / float64(hosts)
	if code != 0 && code != 2 {
		c.StderrExcerpt = errs.String()
	}
	return c
}

func cpuNow() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// peakRSSMiB is VmHWM: the process's resident high-water mark since the
// last clear_refs.
func peakRSSMiB() float64 {
	b, _ := os.ReadFile("/proc/self/status")
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			kb, _ := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			return float64(kb) / 1024
		}
	}
	return 0
}

func heapMiB() float64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return float64(ms.HeapAlloc) / (1 << 20)
}

// fromReport counts the outcomes, the uplink's bytes of the release and
// the forms it went in, and works out the lower bound.
func (res *simResult) fromReport(rep *rollout.Report, fl *simFleet, cfg simConfig) {
	res.Outcomes, res.Forms = map[string]int{}, map[string]int{}
	var release int64
	for _, h := range rep.Hosts {
		res.Outcomes[string(h.Outcome)]++
		if u := h.Upload; u != nil {
			release += u.Bytes
			res.Forms[u.Form]++
		}
	}
	res.ReleaseBytes = len(fl.release)
	res.ReleasePerHost = float64(release) / float64(max(1, len(rep.Hosts)))
	res.Waves = len(rep.Waves)
	res.WalkSeconds = float64(rep.Millis) / 1000
	res.BoundSeconds = lowerBound(rep, fl, cfg).Seconds()
	trips := 0
	for _, s := range fl.sims {
		trips += s.RoundTrips()
	}
	res.ApplyRoundTripsPerHost = float64(trips)/float64(cfg.Hosts) - res.PlanRoundTripsPerHost
}

// lowerBound is the least the fleet walk could take on this network with
// no engine at all: the waves one after the other, as the plan runs them,
// each at least its waveBound.
func lowerBound(rep *rollout.Report, fl *simFleet, cfg simConfig) time.Duration {
	var total time.Duration
	for _, w := range rep.Waves {
		var hosts [][]rollouttest.Trip
		for _, h := range w.Hosts {
			hosts = append(hosts, fl.sims[h].Net.Trips())
		}
		total += waveBound(hosts, cfg)
	}
	return total
}

// waveBound is the least a wave's hosts take: each host at least its own
// round trips (their latencies), its restart and its bytes at what its
// connection moves (its own link, a window a round trip), parallel at a
// time; and the wave at least as long as its uploads take through the
// uplink, from the earliest any host can send one (after the fewest round
// trips any makes before its upload) to the least any needs after it.
func waveBound(hosts [][]rollouttest.Trip, cfg simConfig) time.Duration {
	var own []time.Duration
	var uploads float64
	pre, post := time.Duration(math.MaxInt64), time.Duration(math.MaxInt64)
	for _, trips := range hosts {
		if len(trips) == 0 {
			continue // unreachable: it never connected
		}
		up := 0
		for i, t := range trips {
			if t.Sent > trips[up].Sent {
				up = i
			}
		}
		var mine, before, after time.Duration
		for i, t := range trips {
			d := t.Latency
			if t.Restart {
				d += cfg.Restart
			}
			if i < up {
				before += d
			} else {
				after += d
			}
			mine += d + crossing(t, cfg)
		}
		own = append(own, mine)
		uploads += float64(trips[up].Sent)
		pre, post = min(pre, before), min(post, after)
	}
	if len(own) == 0 {
		return 0
	}
	b := makespan(own, cfg.Parallel)
	if cfg.UplinkGbit > 0 {
		b = max(b, pre+time.Duration(uploads/(cfg.UplinkGbit*1e9/8)*float64(time.Second))+post)
	}
	return b
}

// crossing is the least time a round trip's bytes take on its own
// connection: its host's link, and a window a round trip.
func crossing(t rollouttest.Trip, cfg simConfig) time.Duration {
	rate := math.Inf(1)
	if cfg.Bandwidth > 0 {
		rate = float64(cfg.Bandwidth)
	}
	if cfg.Window > 0 && t.Latency > 0 {
		rate = min(rate, float64(cfg.Window)/t.Latency.Seconds())
	}
	return time.Duration(float64(t.Sent) / rate * float64(time.Second))
}

// makespan is the time hosts taking took, started in order, parallel at
// a time, each as soon as a slot is free.
func makespan(took []time.Duration, parallel int) time.Duration {
	free := make([]time.Duration, min(parallel, max(1, len(took))))
	for _, d := range took {
		i := 0
		for j := range free {
			if free[j] < free[i] {
				i = j
			}
		}
		free[i] += d
	}
	return slices.Max(free)
}

func (res *simResult) fromSaves(saves []time.Duration) {
	res.LedgerSaves = len(saves)
	if len(saves) == 0 {
		return
	}
	var total time.Duration
	for _, s := range saves {
		total += s
	}
	slices.Sort(saves)
	res.LedgerMedianUS = float64(saves[len(saves)/2]) / 1e3
	res.LedgerP99US = float64(saves[len(saves)*99/100]) / 1e3
	res.LedgerTotalSeconds = total.Seconds()
}

func (res simResult) summary() string {
	c := res.Config
	var b strings.Builder
	fmt.Fprintf(&b, "fleetsim %d hosts in %d regions, --parallel %d, latency %v + jitter %v, %d round trips to connect, restart %v, hosts' links %.0f MB/s, uplink %g Gbit/s, window %d KiB, release %d bytes (%s), %d failing and %d unreachable (%s, %d CPUs, load %s)\n",
		c.Hosts, c.Regions, c.Parallel, c.Latency, c.Jitter, c.Connect, c.Restart, float64(c.Bandwidth)/1e6, c.UplinkGbit, c.Window>>10, res.ReleaseBytes, map[bool]string{true: "an upgrade: the hosts keep the one before", false: "no release before"}[c.Previous],
		res.FailedHosts, res.UnreachableHosts, res.GoVersion, res.CPUs, res.Load)
	fmt.Fprintf(&b, "  plan:  %.1f s wall, %.2f ms CPU/host, peak RSS %.0f MiB, exit %d; plan file %.1f MB, review %.1f MB (%d lines)\n",
		res.Plan.WallSeconds, res.Plan.CPUMsPerHost, res.Plan.PeakRSSMiB, res.Plan.ExitCode, mb(res.PlanBytes), mb(res.ReviewBytes), res.ReviewLines)
	fmt.Fprintf(&b, "  apply: %.1f s wall (fleet walk %.1f s, lower bound %.1f s: %.3f×), %d waves, %.2f ms CPU/host, peak RSS %.0f MiB (simulated hosts %.1f MiB of it), exit %d, %s\n",
		res.Apply.WallSeconds, res.WalkSeconds, res.BoundSeconds, res.WalkSeconds/res.BoundSeconds, res.Waves, res.Apply.CPUMsPerHost, res.Apply.PeakRSSMiB, res.SimMiB, res.Apply.ExitCode, outcomesText(res.Outcomes))
	fmt.Fprintf(&b, "  uplink: %.0f B/host in all (%.1f%% of the release), the release %.0f B/host (%.1f%%), forms %v; the review: %s\n",
		res.UplinkPerHost, 100*res.UplinkPerHost/float64(res.ReleaseBytes), res.ReleasePerHost, 100*res.ReleasePerHost/float64(res.ReleaseBytes), res.Forms, res.ReviewUplink)
	fmt.Fprintf(&b, "  kept after the walk: %d B/host; ledger: %d saves, median %.1f µs, p99 %.0f µs, %.2f s in all, last %d B; receipt %.1f MB JSON, %.1f KB Markdown (%d lines); live view %.1f KB\n",
		res.RetainedPerHost, res.LedgerSaves, res.LedgerMedianUS, res.LedgerP99US, res.LedgerTotalSeconds, res.LedgerLastBytes, mb(res.ReceiptJSONBytes), float64(res.ReceiptMD)/1e3, res.ReceiptMDLines, float64(res.LiveViewBytes)/1e3)
	if e := res.Apply.StderrExcerpt + res.Plan.StderrExcerpt; e != "" {
		fmt.Fprintf(&b, "  stderr: %s\n", e)
	}
	return b.String()
}

func outcomesText(m map[string]int) string {
	var parts []string
	for _, o := range rollout.Outcomes {
		if n := m[string(o)]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, o))
		}
	}
	return strings.Join(parts, ", ")
}

func mb(n int64) float64 { return float64(n) / 1e6 }

func fileSize(p string) int64 {
	st, err := os.Stat(p)
	if err != nil {
		return 0
	}
	return st.Size()
}

// reviewLine is the text after prefix on the first line of a review that
// starts with it.
func reviewLine(p, prefix string) string {
	b, _ := os.ReadFile(p)
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, prefix); ok {
			return v
		}
	}
	return ""
}

func lines(p string) int {
	b, _ := os.ReadFile(p)
	return strings.Count(string(b), "\n")
}

// simPTY is a pseudo-terminal: the slave, for relayctl's stderr (so it
// draws its live fleet view), and a func that closes the master and says
// how many bytes were drawn.
func simPTY(b *testing.B) (*os.File, func() int64) {
	m, s := openPTY(b)
	unix.IoctlSetWinsize(int(s.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: 50, Col: 160})
	var c countWriter
	done := make(chan struct{})
	go func() { io.Copy(&c, m); close(done) }()
	// (The drawn view is counted, not kept.)
	return s, func() int64 {
		m.Close()
		<-done
		return c.n.Load()
	}
}

type countWriter struct{ n atomic.Int64 }

func (c *countWriter) Write(p []byte) (int, error) { c.n.Add(int64(len(p))); return len(p), nil }

// tailWriter keeps the last 2 KB written.
type tailWriter struct {
	mu sync.Mutex
	b  []byte
}

func (t *tailWriter) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > 2048 {
		t.b = t.b[len(t.b)-2048:]
	}
	return len(p), nil
}

func (t *tailWriter) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}

// traceRSS prints the process's RSS every half second to stderr while a
// command runs, when FLEETSIM_RSS_TRACE is set: where the peak is.
func traceRSS(t0 time.Time) func() {
	if os.Getenv("FLEETSIM_RSS_TRACE") == "" {
		return func() {}
	}
	quit := make(chan struct{})
	go func() {
		t := time.NewTicker(500 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-t.C:
				b, _ := os.ReadFile("/proc/self/status")
				for _, l := range strings.Split(string(b), "\n") {
					if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
						fmt.Fprintf(os.Stderr, "rss %5.1fs %s\n", time.Since(t0).Seconds(), strings.TrimSpace(v))
					}
				}
			}
		}
	}()
	return func() { close(quit) }
}
