package main

import (
	"strings"
	"testing"
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

func TestFromLog(t *testing.T) {
	var r result
	if err := fromLog(restartLog, &r); err != nil {
		t.Fatal(err)
	}
	if r.LobbiesCut != 8 || r.PlayersCut != 64 || r.UnboundMS != 25.4 || r.ReadGapMS != 49.8 || r.PauseMS != 0 {
		t.Errorf("restart: got %+v", r)
	}
	r = result{}
	if err := fromLog(handoffLog, &r); err != nil {
		t.Fatal(err)
	}
	if r.LobbiesCut != 0 || r.PlayersCut != 0 || r.UnboundMS != 0 || r.ReadGapMS != 16.5 || r.PauseMS != 0.19 {
		t.Errorf("handoff: got %+v", r)
	}
	if err := fromLog("level=INFO msg=\"relayd started\"\n", &r); err == nil || !strings.Contains(err.Error(), "want the old relayd's stop line") {
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
