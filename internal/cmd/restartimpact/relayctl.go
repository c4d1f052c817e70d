package main

// The relayctl modes: the switch is `relayctl apply`, as an operator runs
// it, of a plan made right before the step from a spec written for the
// measurement (the next release and SO_RCVBUF, the mode's drain gate and
// handoff command). relayctl reaches the lab host over SSH with the lab's
// ssh_config, known_hosts and identity.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/relayctl/relayctl/internal/lab"
	"github.com/relayctl/relayctl/plans"
	"github.com/relayctl/relayctl/rollout"
)

// The modes that go through relayctl apply.
const (
	modeApplyRestart    = "apply-restart"     // a plain restart window
	modeApplyDrainForce = "apply-drain-force" // a drain gate whose deadline ends in the step: on_deadline force
	modeApplyDrainWait  = "apply-drain-wait"  // a drain gate that waits until the players have left
	modeApplyHandoff    = "apply-handoff"     // relay.service.handoff: the socket and lobbies handed over
)

var allModes = []string{"none", "restart", "handoff", modeApplyRestart, modeApplyDrainForce, modeApplyDrainWait, modeApplyHandoff}

func isApplyMode(mode string) bool { return strings.HasPrefix(mode, "apply-") }

// wantSwitch is how the mode's plan must switch the relay; a plan that
// says otherwise (a handoff fallen back to a restart) would measure the
// wrong thing.
func wantSwitch(mode string) string {
	if mode == modeApplyHandoff {
		return plans.SwitchHandoff
	}
	return plans.SwitchRestart
}

// drainWaitDeadline is the waiting gate's deadline: the rest of the step,
// then the relay's expiry of the players who left, with a wide margin
// (at the deadline the gate aborts, and the measurement fails).
func (o options) drainWaitDeadline() time.Duration {
	return o.step - o.at + 4*idleTimeout + 30*time.Second
}

// spec is the measurement's spec: release and buffer i, and the mode's
// drain gate and handoff command. Every path in it is this program's own
// or the lab host's fixed layout; the version names a release built by
// scripts/restart-impact.sh.
func (m *meter) spec(i int, mode string) string {
	r := m.o.releases[i%len(m.o.releases)]
	var b strings.Builder
	fmt.Fprintf(&b, `name: restart-impact
hosts:
  - %s
relay:
  port: 7788
  control: %s
  so_rcvbuf: %d
  handoff_socket: %s
  release:
    version: %s
    artifact: %s
  service:
    manager: command
    start: [%s, start]
    stop: [%s, stop]
    pid_file: %s
`, m.h.Name, controlAddr, m.o.rcvbufs[i%len(m.o.rcvbufs)], handoffSocket, r.version, r.path,
		lab.ServiceScript, lab.ServiceScript, lab.RelayPIDFile)
	switch mode {
	case modeApplyHandoff:
		fmt.Fprintf(&b, "    handoff: [%s, handoff]\n", lab.ServiceScript)
	case modeApplyDrainForce:
		fmt.Fprintf(&b, "drain: {max_players: 0, deadline: %s, poll: %s, on_deadline: force, no_new_lobbies: true}\n", m.o.drainDeadline, m.o.drainPoll)
	case modeApplyDrainWait:
		fmt.Fprintf(&b, "drain: {max_players: 0, deadline: %s, poll: %s, on_deadline: abort, no_new_lobbies: true}\n", m.o.drainWaitDeadline(), m.o.drainPoll)
	}
	return b.String()
}

// relayctl runs the relayctl binary with the lab's SSH files, in the
// network namespace of the host's sshd (this process runs in the relay's,
// where the sshd cannot be reached), and returns its exit status and
// output.
func (m *meter) relayctl(ctx context.Context, args ...string) (int, string, error) {
	argv := append([]string{"-t", strconv.Itoa(m.h.SSHDPID), "-n", "--", m.o.relayctl}, args...)
	argv = append(argv, "--ssh-config", m.l.SSHConfig, "--known-hosts", m.l.KnownHosts, "--identity", m.l.Identity)
	cmd := exec.CommandContext(ctx, "nsenter", argv...)
	var env []string
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "SSH_AUTH_SOCK=") { // the lab's identity only
			env = append(env, e)
		}
	}
	cmd.Env = append(env, "NO_COLOR=1")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), string(out), nil
	}
	if err != nil {
		return 0, string(out), fmt.Errorf("run relayctl %s: %w", args[0], err)
	}
	return 0, string(out), nil
}

// plan writes the spec of release i for mode and plans it, and checks the
// plan switches the relay the mode's way. It returns the plan's path.
func (m *meter) plan(ctx context.Context, runN, i int, mode string) (string, *plans.HostPlan, error) {
	dir := filepath.Join(m.o.lab, "restartimpact")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", nil, fmt.Errorf("make spec folder: %w", err)
	}
	base := filepath.Join(dir, fmt.Sprintf("run%d-%s", runN, mode))
	if err := os.WriteFile(base+".yaml", []byte(m.spec(i, mode)), 0o600); err != nil {
		return "", nil, fmt.Errorf("write spec: %w", err)
	}
	// Releases alternate, so every other plan is a downgrade.
	code, out, err := m.relayctl(ctx, "plan", base+".yaml", "--out", base+".plan", "--allow-downgrade", "--detailed-exitcode")
	if err != nil {
		return "", nil, err
	}
	if code != 2 {
		return "", nil, fmt.Errorf("relayctl plan %s.yaml: exit %d, want 2 (changes):\n%s", base, code, out)
	}
	b, err := os.ReadFile(base + ".plan")
	if err != nil {
		return "", nil, fmt.Errorf("read plan: %w", err)
	}
	var p plans.Plan
	if err := json.Unmarshal(b, &p); err != nil || len(p.Hosts) != 1 {
		return "", nil, fmt.Errorf("read plan %s.plan: want one host: %v", base, err)
	}
	h := p.Hosts[0]
	if h.Switch != wantSwitch(mode) {
		return "", nil, fmt.Errorf("relayctl plan: the window would %s (%s), %s measures a %s", h.Switch, h.SwitchWhy, mode, wantSwitch(mode))
	}
	return base + ".plan", h, nil
}

// applied is what one relayctl apply did, by its receipt.
type applied struct {
	took    time.Duration
	receipt rollout.HostReceipt
}

// apply applies the plan and reads its receipt; anything but an applied
// host is an error, with relayctl's own words.
func (m *meter) apply(ctx context.Context, plan string) (applied, error) {
	start := time.Now()
	code, out, err := m.relayctl(ctx, "apply", plan)
	a := applied{took: time.Since(start)}
	if err != nil {
		return a, err
	}
	fmt.Fprintf(m.log, "%s", out)
	if code != 0 {
		return a, fmt.Errorf("relayctl apply: exit %d", code)
	}
	rc, err := readReceipt(plan + ".receipt.json")
	if err != nil {
		return a, err
	}
	if rc.Outcome != rollout.Applied {
		return a, fmt.Errorf("relayctl apply: %s, want applied: %s", rc.Outcome, rc.Reason)
	}
	a.receipt = rc
	return a, nil
}

func readReceipt(path string) (rollout.HostReceipt, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return rollout.HostReceipt{}, fmt.Errorf("read receipt: %w", err)
	}
	var rc rollout.FleetReceipt
	if err := json.Unmarshal(b, &rc); err != nil || len(rc.Hosts) != 1 {
		return rollout.HostReceipt{}, fmt.Errorf("read receipt %s: want one host: %v", path, err)
	}
	return rc.Hosts[0], nil
}

// fromReceipt copies relayctl's account of the window into the result.
func fromReceipt(a applied, res *result) {
	rc := a.receipt
	res.ApplyMS = ms(a.took)
	res.WindowMS = float64(rc.WindowMillis)
	res.DrainWaitMS = float64(rc.DrainWaitMillis)
	res.ReceiptRestarts, res.ReceiptHandoffs = rc.Restarts, rc.Handoffs
	res.ReceiptRbExpected, res.ReceiptRbAfter = rc.ExpectedRB, rc.RBAfter
	if p := rc.PlayersAtWindow; p != nil {
		res.ReceiptPlayersAtWindow = p.Players
	}
	if rc.PlayersCut != nil {
		res.ReceiptPlayersCut = *rc.PlayersCut
	}
	if rc.HandoffGapUS != nil {
		res.ReceiptHandoffGapMS = float64(*rc.HandoffGapUS) / 1000
	}
	res.Timeline = rc.Timeline
}
