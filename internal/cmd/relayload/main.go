// Command relayload measures relayd's forwarding rate on loopback with and
// without batching, in the same run: it starts the given relayd binary once
// per batch setting (RELAYD_BATCH in its environment), drives it with full
// lobbies of eight (fan-out 7) and 120-byte datagrams for a fixed time,
// and reads relayd's /status and its CPU time from /proc/PID/stat. With
// -baseline, a second relayd binary (an older release) runs interleaved
// with the first, so that both meet the same busy spells of a shared
// machine; each is spoken to in its own wire version, read from its
// capability marker (join=cookie/1: version 2, with the join handshake).
//
// Output: one line per run, then the medians, the ratios and the CPU per
// million forwarded datagrams, on stdout. scripts/relayd-load.sh builds and
// runs it.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/relayctl/relayctl/relay/capability"
	"github.com/relayctl/relayctl/relay/server"
	"github.com/relayctl/relayctl/relay/server/loadgen"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "relayload: error: %v\n", err)
		os.Exit(1)
	}
}

type sample struct {
	batch              int
	fwdPerSec, txPerS  float64
	cpuSec, cpuPerMFwd float64
	drops              uint64
	seconds            float64
}

// binary is one relayd under measure.
type binary struct {
	name, path string
	wire       int
}

func run(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("relayload", flag.ContinueOnError)
	relayd := fs.String("relayd", "", "relayd `binary` to measure (required)")
	baseline := fs.String("baseline", "", "a second relayd `binary` (an older release) measured in the same run, interleaved")
	batchList := fs.String("batches", "64,1", "RELAYD_BATCH `settings` to measure, comma separated")
	seconds := fs.Float64("seconds", 10, "how long each run sends")
	runs := fs.Int("runs", 3, "runs per batch setting; the report gives medians")
	lobbies := fs.Int("lobbies", 4, "full lobbies of 8")
	datagram := fs.Int("datagram", 120, "UDP payload `bytes` per datagram, 24-byte header included")
	window := fs.Int("window", 512, "most datagrams in flight")
	rcvbuf := fs.Int("so-rcvbuf", 4194304, "relayd's --so-rcvbuf (with --so-rcvbuf-force), so the window fits")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *relayd == "" {
		return errors.New("want -relayd PATH")
	}
	batches, err := parseBatches(*batchList)
	if err != nil {
		return err
	}
	bins := []string{*relayd}
	if *baseline != "" {
		bins = append(bins, *baseline)
	}
	var measured []binary
	for i, path := range bins {
		b, err := inspect(path, map[bool]string{false: "relayd", true: "baseline"}[i > 0])
		if err != nil {
			return err
		}
		measured = append(measured, b)
		fmt.Fprintf(stdout, "%s: %s, wire version %d\n", b.name, b.path, b.wire)
	}
	fmt.Fprintf(stdout, "%d lobbies of 8 (fan-out 7), %d-byte datagrams, window %d, %gs per run\n", *lobbies, *datagram, *window, *seconds)
	fmt.Fprintf(stdout, "%-9s %-6s %-4s %12s %12s %10s %14s %8s\n", "relayd", "batch", "run", "fwd/s", "tx/s", "relay cpu", "cpu s/M fwd", "drops")
	samples := map[string][]sample{}
	// Interleave the binaries and settings so that a busy spell on the
	// shared machine hits all alike.
	for r := 1; r <= *runs; r++ {
		for _, b := range batches {
			for _, bin := range measured {
				s, err := measure(bin.path, b, *rcvbuf, loadgen.Options{Lobbies: *lobbies, Size: 8, Datagram: *datagram, Window: *window, Wire: bin.wire},
					time.Duration(*seconds*float64(time.Second)))
				if err != nil {
					return fmt.Errorf("%s run %d batch %d: %w", bin.name, r, b, err)
				}
				key := fmt.Sprintf("%s/%d", bin.name, b)
				samples[key] = append(samples[key], s)
				fmt.Fprintf(stdout, "%-9s %-6d %-4d %12.0f %12.0f %9.2fs %14.3f %8d\n", bin.name, b, r, s.fwdPerSec, s.txPerS, s.cpuSec, s.cpuPerMFwd, s.drops)
			}
		}
	}
	report(stdout, *runs, measured, batches, samples)
	return nil
}

// report prints the medians and the ratios between settings and binaries.
func report(w io.Writer, runs int, bins []binary, batches []int, samples map[string][]sample) {
	med := map[string]sample{}
	fmt.Fprintf(w, "\nmedians of %d runs:\n", runs)
	for _, bin := range bins {
		for _, b := range batches {
			key := fmt.Sprintf("%s/%d", bin.name, b)
			var fwd, tx, cpuM []float64
			for _, s := range samples[key] {
				fwd, tx, cpuM = append(fwd, s.fwdPerSec), append(tx, s.txPerS), append(cpuM, s.cpuPerMFwd)
			}
			m := sample{batch: b, fwdPerSec: median(fwd), txPerS: median(tx), cpuPerMFwd: median(cpuM)}
			med[key] = m
			fmt.Fprintf(w, "  %-8s batch=%-3d %10.0f forwarded datagrams/s (%.0f copies/s out), %.3f relayd CPU seconds per million forwarded\n",
				bin.name, b, m.fwdPerSec, m.txPerS, m.cpuPerMFwd)
		}
	}
	for _, bin := range bins {
		if slices.Contains(batches, 64) && slices.Contains(batches, 1) {
			a, b := med[bin.name+"/64"], med[bin.name+"/1"]
			fmt.Fprintf(w, "  %-8s ratio batch=64 / batch=1: %.2fx forwarded/s, %.2fx CPU per forwarded datagram\n",
				bin.name, a.fwdPerSec/b.fwdPerSec, a.cpuPerMFwd/b.cpuPerMFwd)
		}
	}
	if len(bins) == 2 {
		for _, b := range batches {
			n, o := med[fmt.Sprintf("%s/%d", bins[0].name, b)], med[fmt.Sprintf("%s/%d", bins[1].name, b)]
			fmt.Fprintf(w, "  batch=%-3d relayd / baseline: %.3fx forwarded/s, %.3fx CPU per forwarded datagram\n",
				b, n.fwdPerSec/o.fwdPerSec, n.cpuPerMFwd/o.cpuPerMFwd)
		}
	}
}

func parseBatches(v string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > 1024 {
			return nil, fmt.Errorf("-batches %q: want settings from 1 to 1024 separated by commas", v)
		}
		out = append(out, n)
	}
	return out, nil
}

// inspect reads a relayd binary's capability marker for its wire version.
func inspect(path, name string) (binary, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return binary{}, fmt.Errorf("read %s: %w", name, err)
	}
	caps, err := capability.Capabilities(b)
	if err != nil {
		return binary{}, fmt.Errorf("%s %s: %w", name, path, err)
	}
	wire := 1
	if capability.Has(caps, capability.Join) {
		wire = 2
	}
	return binary{name: name, path: path, wire: wire}, nil
}

func median(v []float64) float64 {
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

var startLine = regexp.MustCompile(`msg="relayd started".* listen=(\S+) control=(\S+)`)

// measure starts relayd with RELAYD_BATCH=batch, loads it for d and stops
// it with SIGTERM.
func measure(relayd string, batch, rcvbuf int, o loadgen.Options, d time.Duration) (sample, error) {
	empty := filepath.Join(os.TempDir(), fmt.Sprintf("relayload-%d.env", os.Getpid()))
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		return sample{}, err
	}
	defer os.Remove(empty)
	cmd := exec.Command(relayd, "--config", empty, "--listen", "127.0.0.1:0", "--control", "127.0.0.1:0",
		"--so-rcvbuf", strconv.Itoa(rcvbuf), "--so-rcvbuf-force")
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "RELAYD_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "RELAYD_BATCH="+strconv.Itoa(batch))
	if o.Wire != 1 {
		// The load's senders all send from the relay's own address (its
		// observers from another): exempt it from the per-address count,
		// as a bench opts in. A relayd of wire version 1 has no such
		// limits, nor the key.
		cmd.Env = append(cmd.Env, "RELAYD_EXEMPT_SOURCES=127.0.0.1/32")
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return sample{}, err
	}
	if err := cmd.Start(); err != nil {
		return sample{}, fmt.Errorf("start relayd: %w", err)
	}
	defer func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	}()
	sc := bufio.NewScanner(stderr)
	var listen, control string
	for sc.Scan() {
		if m := startLine.FindStringSubmatch(sc.Text()); m != nil {
			listen, control = m[1], m[2]
			break
		}
	}
	if listen == "" {
		return sample{}, errors.New("relayd exited before its start line")
	}
	go io.Copy(io.Discard, stderr)
	o.Relay, err = netip.ParseAddrPort(listen)
	if err != nil {
		return sample{}, err
	}
	l, err := loadgen.Dial(o)
	if err != nil {
		return sample{}, err
	}
	defer l.Close()
	for {
		st, err := status(control)
		if err != nil {
			return sample{}, err
		}
		if st.Players == o.Lobbies*o.Size {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	st0, err := status(control)
	if err != nil {
		return sample{}, err
	}
	cpu0, err := cpuSeconds(cmd.Process.Pid)
	if err != nil {
		return sample{}, err
	}
	res, err := l.Run(context.Background(), 0, d)
	if err != nil {
		return sample{}, err
	}
	st1, err := status(control)
	if err != nil {
		return sample{}, err
	}
	cpu1, err := cpuSeconds(cmd.Process.Pid)
	if err != nil {
		return sample{}, err
	}
	fwd := float64(st1.Counters.Forwarded - st0.Counters.Forwarded)
	secs := res.Elapsed.Seconds()
	return sample{
		batch:      batch,
		fwdPerSec:  fwd / secs,
		txPerS:     float64(st1.Counters.TxPackets-st0.Counters.TxPackets) / secs,
		cpuSec:     cpu1 - cpu0,
		cpuPerMFwd: (cpu1 - cpu0) / (fwd / 1e6),
		drops:      st1.Counters.RxDrops,
		seconds:    secs,
	}, nil
}

func status(control string) (server.Status, error) {
	var st server.Status
	resp, err := http.Get("http://" + control + "/status")
	if err != nil {
		return st, fmt.Errorf("get status: %w", err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return st, fmt.Errorf("decode status: %w", err)
	}
	return st, nil
}

// clockTicks is USER_HZ, the unit of /proc/PID/stat times: 100 on every
// Linux architecture Go supports.
const clockTicks = 100

// cpuSeconds returns the process's user+system CPU time.
func cpuSeconds(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("read cpu time: %w", err)
	}
	// Fields after the command name, which may contain spaces: state is
	// field 3, utime 14 and stime 15.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("parse /proc/%d/stat: %d fields after the name", pid, len(f))
	}
	ut, err1 := strconv.ParseUint(f[11], 10, 64)
	st, err2 := strconv.ParseUint(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("parse /proc/%d/stat: %w", pid, err)
	}
	return float64(ut+st) / clockTicks, nil
}
