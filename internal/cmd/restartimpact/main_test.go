package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/relayctl/relayctl/internal/lab"
	"github.com/relayctl/relayctl/plans"
)

// Log lines as relayd writes them (slog's text handler), trimmed.
const restartLog = `time=2026-11-30T19:21:05.120Z level=INFO msg="socket closed" at=2026-11-30T19:21:05.120000000Z lobbies=8 players=64 rx_packets=19776 last_read_at=2026-11-30T19:21:05.110000000Z
time=2026-11-30T19:21:05.140Z level=INFO msg="relayd started" version=1.9.1 pid=14418 listen=0.0.0.0:7788 control=127.0.0.1:7789 socket_inode=183546 handoff_socket=/opt/relay/run/handoff.sock socket_bound_at=2026-11-30T19:21:05.145400000Z
time=2026-11-30T19:21:05.160Z level=INFO msg="first datagram read" at=2026-11-30T19:21:05.159800000Z
`

const handoffLog = `time=2026-11-30T19:21:20.001Z level=INFO msg="handed over" to_pid=14617 lobbies=8 players=64 rx_packets=20001 last_read_at=2026-11-30T19:21:20.000000000Z
time=2026-11-30T19:21:20.002Z level=INFO msg="relayd started" version=1.9.0 pid=14617 handoff_from_pid=14501 handoff_from_version=1.9.1 lobbies_restored=8 players_restored=64 handoff_pause_us=190
time=2026-11-30T19:21:20.016Z level=INFO msg="first datagram read" at=2026-11-30T19:21:20.016500000Z handoff_gap_us=16500
`

// A restart after the players left (a drain gate that waited): nothing
// held, nothing restored, no datagram after it; the old process's first
// read came in the same step.
const drainedLog = `time=2026-11-30T19:21:00.300Z level=INFO msg="first datagram read" at=2026-11-30T19:21:00.300000000Z
time=2026-11-30T19:21:19.300Z level=INFO msg="socket closed" at=2026-11-30T19:21:19.300000000Z lobbies=0 players=0 rx_packets=40000 last_read_at=2026-11-30T19:21:12.000000000Z
time=2026-11-30T19:21:19.330Z level=INFO msg="relayd started" version=1.9.1 pid=14418 listen=0.0.0.0:7788 control=127.0.0.1:7789 socket_inode=183546 handoff_socket=/opt/relay/run/handoff.sock socket_bound_at=2026-11-30T19:21:19.322000000Z
`

func TestFromLog(t *testing.T) {
	stepStart := time.Date(2026, 11, 30, 19, 21, 0, 0, time.UTC)
	gap := func(r result) float64 {
		if r.ReadGapMS == nil {
			return -1
		}
		return *r.ReadGapMS
	}
	var r result
	if err := fromLog(restartLog, stepStart, &r); err != nil {
		t.Fatal(err)
	}
	if r.LobbiesCut != 8 || r.PlayersCut != 64 || r.UnboundMS != 25.4 || gap(r) != 49.8 || r.PauseMS != 0 || r.SwitchAtS != 5.12 {
		t.Errorf("restart: got %+v", r)
	}
	r = result{}
	if err := fromLog(handoffLog, stepStart, &r); err != nil {
		t.Fatal(err)
	}
	if r.LobbiesCut != 0 || r.PlayersCut != 0 || r.UnboundMS != 0 || gap(r) != 16.5 || r.PauseMS != 0.19 || r.SwitchAtS != 20.001 {
		t.Errorf("handoff: got %+v", r)
	}
	r = result{}
	if err := fromLog(drainedLog, stepStart, &r); err != nil {
		t.Fatal(err)
	}
	if r.LobbiesCut != 0 || r.PlayersCut != 0 || r.UnboundMS != 22 || r.ReadGapMS != nil || r.SwitchAtS != 19.3 {
		t.Errorf("after a drain: got %+v, read gap %v", r, gap(r))
	}
	if err := fromLog("level=INFO msg=\"relayd started\"\n", stepStart, &r); err == nil || !strings.Contains(err.Error(), "want the old relayd's stop line") {
		t.Errorf("a log without the switch: got %v", err)
	}
}

func TestICMPCounters(t *testing.T) {
	snmp := "Ip: Forwarding DefaultTTL\nIp: 1 64\nIcmp: InMsgs InErrors InDestUnreachs OutMsgs OutDestUnreachs\nIcmp: 130 0 128 130 128\nIcmpMsg: InType3 OutType3\nIcmpMsg: 128 128\n"
	m, err := icmpCounters([]byte(snmp))
	if err != nil || m["OutDestUnreachs"] != 128 || m["InDestUnreachs"] != 128 {
		t.Errorf("got %v, %v", m, err)
	}
	for _, bad := range []string{"Icmp: A B\nIcmp: 1\n", "Icmp: A\n", "Icmp: A\nIcmp: x\n"} {
		if _, err := icmpCounters([]byte(bad)); err == nil {
			t.Errorf("%q: got nil error", bad)
		}
	}
}

// Every apply mode's spec is one relayctl accepts, and says what the mode
// measures: the next release and buffer, a handoff command only for the
// handoff, the drain gate's policy and deadline.
func TestSpec(t *testing.T) {
	dir := t.TempDir()
	for _, v := range []string{"1.9.0", "1.9.1"} {
		if err := os.WriteFile(filepath.Join(dir, "relayd-"+v), []byte("relayd"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	o := options{
		releases: []release{{"1.9.0", filepath.Join(dir, "relayd-1.9.0")}, {"1.9.1", filepath.Join(dir, "relayd-1.9.1")}},
		rcvbufs:  []int{2097152, 4194304}, step: 12 * time.Second, at: 5 * time.Second,
		drainDeadline: 2 * time.Second, drainPoll: 200 * time.Millisecond,
	}
	m := &meter{o: o, h: &lab.Host{Name: "lab-1"}}
	for _, tt := range []struct {
		mode             string
		handoff          bool
		onDeadline       string
		deadline         time.Duration
		wantSwitchOfPlan string
	}{
		{modeApplyRestart, false, "", 0, plans.SwitchRestart},
		{modeApplyDrainForce, false, plans.DrainForce, 2 * time.Second, plans.SwitchRestart},
		{modeApplyDrainWait, false, plans.DrainAbort, 45 * time.Second, plans.SwitchRestart},
		{modeApplyHandoff, true, "", 0, plans.SwitchHandoff},
	} {
		text := m.spec(3, tt.mode)
		s, err := plans.ParseSpec(filepath.Join(dir, "spec.yaml"), []byte(text))
		if err != nil {
			t.Fatalf("%s: %v\n%s", tt.mode, err, text)
		}
		r := s.Relay
		if s.Hosts[0] != "lab-1" || r.Release.Version != "1.9.1" || r.SORcvbuf != 4194304 || r.Control != controlAddr || r.HandoffSocket != handoffSocket {
			t.Errorf("%s: hosts %v, release %s, so_rcvbuf %d, control %s, handoff socket %s; want lab-1 shipping 1.9.1 with 4194304",
				tt.mode, s.Hosts, r.Release.Version, r.SORcvbuf, r.Control, r.HandoffSocket)
		}
		if (r.Service.Handoff != nil) != tt.handoff {
			t.Errorf("%s: handoff command %v", tt.mode, r.Service.Handoff)
		}
		switch d := s.Drain; {
		case tt.onDeadline == "" && d != nil:
			t.Errorf("%s: a drain gate %+v", tt.mode, d)
		case tt.onDeadline != "" && (d == nil || d.OnDeadline != tt.onDeadline || d.Deadline != tt.deadline || d.MaxPlayers != 0 || d.Poll != o.drainPoll || !d.NoNewLobbies):
			t.Errorf("%s: drain %+v, want on_deadline %s after %v", tt.mode, d, tt.onDeadline, tt.deadline)
		}
		if got := wantSwitch(tt.mode); got != tt.wantSwitchOfPlan {
			t.Errorf("%s: measures a %s, want %s", tt.mode, got, tt.wantSwitchOfPlan)
		}
	}
}

func TestFlags(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--lab", "x", "--release", "1=a", "--release", "2=b", "--modes", "none,apply-handoff"}, "apply-handoff runs relayctl apply: give --relayctl PATH"},
		{[]string{"--lab", "x", "--release", "1=a", "--release", "2=b", "--modes", "none,reboot"}, `unknown mode "reboot"`},
		{[]string{"--lab", "x", "--release", "1=a", "--release", "2=b", "--relayctl", "r", "--drain-deadline", "7s"}, "the forced window must come inside the step"},
	} {
		var out, errb strings.Builder
		if err := run(tt.args, &out, &errb); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: got %v, want %q", tt.args, err, tt.want)
		}
	}
}
