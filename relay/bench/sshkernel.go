package bench

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/relayctl/relayctl/relay/sockstat"
	"github.com/relayctl/relayctl/rollout/shellhost"
)

// SSHKernel reads the relay socket's kernel counters on the relay host
// through a shellhost.Runner (the SSH transport): d from ss -m, the drops
// column of /proc/PID/net/udp and RcvbufErrors of /proc/PID/net/snmp. The
// reads happen in the relay process's network namespace (nsenter -t PID -n
// for ss; /proc/PID/net is already that namespace's view), which is also
// what a relay in a container needs.
type SSHKernel struct {
	Runner shellhost.Runner
	Port   int // the relay's UDP port
	PID    int // the relay process; 0 finds it from ss -p on the first read
}

var _ KernelReader = (*SSHKernel)(nil)

// sectionMark separates the outputs of the three reads in one command.
const sectionMark = "--relayctl-bench-section--"

// ReadKernel reads the three counters once.
func (k *SSHKernel) ReadKernel(ctx context.Context) (KernelSnapshot, error) {
	if k.PID == 0 {
		pid, err := k.findPID(ctx)
		if err != nil {
			return KernelSnapshot{}, err
		}
		k.PID = pid
	}
	pid := strconv.Itoa(k.PID)
	cmd := shellhost.Command("nsenter", "-t", pid, "-n", "ss", "-H", "-O", "-u", "-l", "-n", "-m", k.filter()) +
		" && echo " + sectionMark + " && " + shellhost.Command("cat", "/proc/"+pid+"/net/udp") +
		" && echo " + sectionMark + " && " + shellhost.Command("cat", "/proc/"+pid+"/net/snmp")
	var out, errb bytes.Buffer
	if err := k.Runner.Run(ctx, cmd, nil, &out, &errb); err != nil {
		return KernelSnapshot{}, fmt.Errorf("read kernel counters of relay pid %d: %w", k.PID, err)
	}
	parts := strings.Split(out.String(), sectionMark+"\n")
	if len(parts) != 3 {
		return KernelSnapshot{}, fmt.Errorf("read kernel counters of relay pid %d: got %d sections of output, want 3", k.PID, len(parts))
	}
	return parseKernel([]byte(parts[0]), []byte(parts[1]), []byte(parts[2]), k.Port)
}

func (k *SSHKernel) filter() string { return "sport = :" + strconv.Itoa(k.Port) }

// findPID asks ss which process holds the port, in the SSH login's
// network namespace.
func (k *SSHKernel) findPID(ctx context.Context) (int, error) {
	var out, errb bytes.Buffer
	cmd := shellhost.Command("ss", "-H", "-O", "-u", "-l", "-n", "-m", "-p", k.filter())
	if err := k.Runner.Run(ctx, cmd, nil, &out, &errb); err != nil {
		return 0, fmt.Errorf("find the relay process: %w", err)
	}
	socks, err := sockstat.ParseSS(out.Bytes())
	if err != nil {
		return 0, fmt.Errorf("find the relay process: %w", err)
	}
	for _, s := range sockstat.FilterPort(socks, k.Port) {
		if len(s.PIDs) > 0 {
			return s.PIDs[0], nil
		}
	}
	return 0, fmt.Errorf("find the relay process: no process holds UDP port %d in the SSH login's network namespace (a relay in another namespace needs --relay-pid)", k.Port)
}

// parseKernel reads the relay socket with sockstat.ReadBack, the same
// reading relayctl's observe makes, summing the counters of every bound
// socket on the port: a relay may hold more than one (SO_REUSEPORT), and
// each drops on its own.
func parseKernel(ss, udp, snmp []byte, port int) (KernelSnapshot, error) {
	r, err := sockstat.ReadBack(ss, udp, snmp, port)
	if err != nil {
		return KernelSnapshot{}, err
	}
	if !r.Found {
		return KernelSnapshot{}, fmt.Errorf("parse ss: no UDP socket on port %d", port)
	}
	return KernelSnapshot{SSDrops: r.Drops, ProcDrops: r.ProcUDPDrops, RcvbufErrors: r.RcvbufErrors, RcvBuf: r.Rcvbuf}, nil
}
