package lab

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// A partition: a network that drops a host's traffic without a word (no
// reset, no ICMP), its sshd and every process on it alive. The lab makes
// one with two iptables rules in the machine's INPUT chain, which every
// loopback packet passes on its way in: one drops what is sent to the
// host's sshd (its address and port), the other what that sshd sends.
// Nothing else on the machine is touched: other hosts, other labs and the
// relays' own traffic go on.

// RequireIptables is Require for a test that partitions a host: without
// iptables it fails when CI=true and skips otherwise.
func RequireIptables(t testing.TB) {
	t.Helper()
	Require(t)
	if _, err := exec.LookPath("iptables"); err != nil {
		err = fmt.Errorf("%w: iptables not found (Debian package: iptables)", ErrPrerequisite)
		if os.Getenv("CI") == "true" {
			t.Fatalf("lab: %v", err)
		}
		t.Skipf("lab: %v (set CI=true to make this a failure)", err)
	}
}

// partitionComment marks the lab's rules in iptables -S.
const partitionComment = "relayctl-lab-partition"

// partitionRules are the two rules that cut h off, as iptables arguments
// after the chain.
func (h *Host) partitionRules() ([][]string, error) {
	if h.SSHDNetns != "" {
		return nil, fmt.Errorf("%s: partition: its sshd is in a network namespace of its own, reached over a veth; only a loopback host can be cut off", h.Name)
	}
	port := strconv.Itoa(h.Port)
	mark := []string{"-m", "comment", "--comment", partitionComment + " " + h.Addr, "-j", "DROP"}
	return [][]string{
		append([]string{"-p", "tcp", "-d", h.HostName, "--dport", port}, mark...),
		append([]string{"-p", "tcp", "-s", h.HostName, "--sport", port}, mark...),
	}, nil
}

// Partition drops every packet to and from h's sshd, both directions,
// until the heal it returns is called; the test's cleanup heals too,
// however the test ends. A heal removes exactly the rules Partition
// added, once.
func (h *Host) Partition(t testing.TB) (heal func() error) {
	t.Helper()
	rules, err := h.partitionRules()
	if err != nil {
		t.Fatal(err)
	}
	var added [][]string
	var once sync.Once
	var healErr error
	heal = func() error {
		once.Do(func() {
			for _, r := range added {
				healErr = errors.Join(healErr, iptables(append([]string{"-D", "INPUT"}, r...)...))
			}
		})
		return healErr
	}
	t.Cleanup(func() {
		if err := heal(); err != nil {
			t.Errorf("%s: heal the partition: %v", h.Name, err)
		}
	})
	for _, r := range rules {
		if err := iptables(append([]string{"-I", "INPUT"}, r...)...); err != nil {
			t.Fatalf("%s: partition: %v", h.Name, err)
		}
		added = append(added, r)
	}
	return heal
}

// Partitioned is whether the machine holds a partition rule of h's.
func (h *Host) Partitioned() (bool, error) {
	out, err := exec.Command("iptables", "-w", "-S", "INPUT").CombinedOutput()
	if err != nil {
		return false, fmt.Errorf("iptables -S INPUT: %v: %s", err, strings.TrimSpace(string(out)))
	}
	return strings.Contains(string(out), partitionComment+" "+h.Addr), nil
}

func iptables(args ...string) error {
	out, err := exec.Command("iptables", append([]string{"-w"}, args...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("iptables %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
