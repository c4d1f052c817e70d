package bench

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Preflight is what the bench machine can carry, checked before anything is
// sent: the first 400-player run of the incident died on the bench box's
// file-descriptor limit and read exactly like a relay fault (mistake 3).
type Preflight struct {
	Players    int    `json:"players"`
	FDsNeeded  uint64 `json:"fds_needed"`
	FDsOpen    int    `json:"fds_open"`
	NoFile     uint64 `json:"rlimit_nofile"`      // soft limit, after raising it
	NoFileHard uint64 `json:"rlimit_nofile_hard"` // hard limit
	PortLow    int    `json:"port_low"`
	PortHigh   int    `json:"port_high"`
	PortsInUse int    `json:"ports_in_use"`
	CPUs       int    `json:"cpus"`
}

// fdMargin covers what the process holds besides the player sockets: the
// epoll descriptor, the control-plane connection, an SSH session, a plot file.
const fdMargin = 16

// PreflightError is a refusal: the limit is the bench machine's.
type PreflightError struct {
	Err  error
	Hint string
}

func (e *PreflightError) Error() string { return e.Err.Error() }
func (e *PreflightError) Unwrap() error { return e.Err }

// Paths read by the preflight; tests do not change them, they are named
// here so the report can say where a number came from.
const (
	portRangePath = "/proc/sys/net/ipv4/ip_local_port_range"
	procUDP       = "/proc/self/net/udp"
	procUDP6      = "/proc/self/net/udp6"
	procStat      = "/proc/stat"
)

// RunPreflight checks the bench machine for players sockets. It raises the
// soft RLIMIT_NOFILE to the hard limit when the soft one is short, and
// refuses with a *PreflightError when the machine still cannot carry them.
func RunPreflight(players int) (Preflight, error) {
	p := Preflight{Players: players, CPUs: runtime.NumCPU()}
	open, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return p, fmt.Errorf("count open files: %w", err)
	}
	p.FDsOpen = len(open)
	p.FDsNeeded = uint64(p.FDsOpen) + uint64(players) + fdMargin

	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil {
		return p, fmt.Errorf("read RLIMIT_NOFILE: %w", err)
	}
	// The soft limit is only a default: raise it to the hard one. (The Go
	// runtime already raises it to hard-1 at start, so the soft limit the
	// user set is not visible here any more.)
	if rl.Cur < rl.Max {
		raised := unix.Rlimit{Cur: rl.Max, Max: rl.Max}
		if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &raised); err != nil {
			return p, fmt.Errorf("raise RLIMIT_NOFILE to %d: %w", rl.Max, err)
		}
		rl = raised
	}
	p.NoFile, p.NoFileHard = rl.Cur, rl.Max
	if rl.Cur < p.FDsNeeded {
		return p, &PreflightError{
			Err: fmt.Errorf("the bench machine cannot open %d sockets: RLIMIT_NOFILE is %d (hard %d); this limit is on the machine running the bench, not on the relay",
				players, rl.Cur, rl.Max),
			Hint: fmt.Sprintf("raise it with ulimit -n %d (or LimitNOFILE= in a unit)", suggestNoFile(p.FDsNeeded)),
		}
	}

	lo, hi, err := readPortRange(portRangePath)
	if err != nil {
		return p, err
	}
	p.PortLow, p.PortHigh = lo, hi
	inUse, err := udpPortsInRange(lo, hi, procUDP, procUDP6)
	if err != nil {
		return p, err
	}
	p.PortsInUse = inUse
	if free := hi - lo + 1 - inUse; free < players {
		return p, &PreflightError{
			Err: fmt.Errorf("the bench machine cannot bind %d UDP ports: ip_local_port_range %d-%d has %d free (%d in use); this limit is on the machine running the bench, not on the relay",
				players, lo, hi, max(free, 0), inUse),
			Hint: "widen it with sysctl -w net.ipv4.ip_local_port_range='1024 65000'",
		}
	}
	return p, nil
}

// suggestNoFile rounds the need up to a power of two, at least 4096.
func suggestNoFile(need uint64) uint64 {
	s := uint64(4096)
	for s < need {
		s *= 2
	}
	return s
}

func readPortRange(path string) (int, int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, 0, fmt.Errorf("read ephemeral port range: %w", err)
	}
	return parsePortRange(string(b))
}

func parsePortRange(s string) (int, int, error) {
	f := strings.Fields(s)
	if len(f) != 2 {
		return 0, 0, fmt.Errorf("parse ephemeral port range %q: want two numbers", strings.TrimSpace(s))
	}
	lo, err1 := strconv.Atoi(f[0])
	hi, err2 := strconv.Atoi(f[1])
	if err1 != nil || err2 != nil || lo < 1 || hi > 65535 || lo > hi {
		return 0, 0, fmt.Errorf("parse ephemeral port range %q: want LOW HIGH within 1-65535", strings.TrimSpace(s))
	}
	return lo, hi, nil
}

// udpPortsInRange counts distinct local UDP ports in [lo, hi] already bound
// in this network namespace; the kernel will not hand them out again.
func udpPortsInRange(lo, hi int, paths ...string) (int, error) {
	seen := map[int]bool{}
	for _, path := range paths {
		f, err := os.Open(path)
		if errors.Is(err, os.ErrNotExist) {
			continue // no IPv6
		}
		if err != nil {
			return 0, fmt.Errorf("count bound UDP ports: %w", err)
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if port, ok := localPort(sc.Text()); ok && port >= lo && port <= hi {
				seen[port] = true
			}
		}
		err = sc.Err()
		f.Close()
		if err != nil {
			return 0, fmt.Errorf("count bound UDP ports: read %s: %w", path, err)
		}
	}
	return len(seen), nil
}

// localPort reads the local port of one /proc/net/udp line
// ("  12: 0100007F:1E6C 00000000:0000 07 ..."); the header line yields false.
func localPort(line string) (int, bool) {
	f := strings.Fields(line)
	if len(f) < 2 {
		return 0, false
	}
	i := strings.LastIndexByte(f[1], ':')
	if i < 0 {
		return 0, false
	}
	v, err := strconv.ParseUint(f[1][i+1:], 16, 16)
	if err != nil {
		return 0, false
	}
	return int(v), true
}

// machineCPU is the first line of /proc/stat, in clock ticks.
type machineCPU struct{ busy, idle uint64 }

func readMachineCPU(path string) (machineCPU, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return machineCPU{}, fmt.Errorf("read machine cpu: %w", err)
	}
	return parseMachineCPU(string(b))
}

// parseMachineCPU reads "cpu  user nice system idle iowait irq softirq
// steal guest guest_nice"; guest time is already inside user and nice.
func parseMachineCPU(s string) (machineCPU, error) {
	line, _, _ := strings.Cut(s, "\n")
	f := strings.Fields(line)
	if len(f) < 5 || f[0] != "cpu" {
		return machineCPU{}, fmt.Errorf("parse /proc/stat: first line %q is not the cpu total", line)
	}
	var c machineCPU
	for i, v := range f[1:min(len(f), 9)] {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return machineCPU{}, fmt.Errorf("parse /proc/stat: field %d %q: %w", i+1, v, err)
		}
		if i == 3 || i == 4 { // idle, iowait
			c.idle += n
		} else {
			c.busy += n
		}
	}
	return c, nil
}

// busySince is the busy share of the CPU time between o and c.
func (c machineCPU) busySince(o machineCPU) float64 {
	busy, idle := c.busy-o.busy, c.idle-o.idle
	if busy+idle == 0 {
		return 0
	}
	return float64(busy) / float64(busy+idle)
}
