package hostfacts

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/relayctl/relayctl/plans"
)

// serviceFact reads what systemd or the pid file said about the relay.
func serviceFact(by frameSet) plans.ServiceFact {
	var s plans.ServiceFact
	if fr, ok := by["systemd"]; ok {
		props := map[string]string{}
		for _, l := range strings.Split(string(fr.Data), "\n") {
			if k, v, ok := strings.Cut(l, "="); ok {
				props[k] = v
			}
		}
		s.Restarts, _ = strconv.Atoi(props["NRestarts"])
		s.FDStoreMax, _ = strconv.Atoi(props["FileDescriptorStoreMax"])
		s.FDStored, _ = strconv.Atoi(props["NFileDescriptorStore"])
		s.InvocationID = props["InvocationID"]
		s.ActiveState, s.SubState = plans.Visible(Clip(props["ActiveState"])), plans.Visible(Clip(props["SubState"]))
		if props["LoadState"] == "not-found" {
			s.UnitMissing = true
			s.Detail = "unit not found"
		} else if fr.Status != 0 {
			s.Detail = Clip(strings.TrimSpace(string(fr.Data)))
		} else {
			s.Detail = props["ActiveState"] + "/" + props["SubState"]
		}
	}
	if fr, ok := by["found-by"]; ok {
		text := ClipTo(strings.TrimSpace(string(fr.Data)), 300)
		if fr.Status == 0 {
			s.FoundBy = text
		} else {
			s.Detail = "cannot tell: nothing names the relay's process (a pid file or a systemd unit), and " + text + "; name it with --pid-file or --systemd-unit"
		}
	}
	if fr, ok := by["pidfile-untrusted"]; ok {
		s.Detail = ClipTo(strings.TrimSpace(string(fr.Data)), 300)
	}
	if fr, ok := by["untrusted-pid"]; ok {
		pid, exe, _ := strings.Cut(strings.TrimSpace(string(fr.Data)), " ")
		s.Detail = "pid " + ClipTo(pid, 20) + " runs " + ClipTo(exe, 200) + ", which is not the service's program (relay.release.program, or a release): not read back"
	}
	if fr, ok := by["service"]; ok {
		if pid, err := strconv.Atoi(strings.TrimSpace(string(fr.Data))); err == nil && pid > 0 {
			s.Running, s.PID = true, pid
			if s.ActiveState == "" || s.ActiveState == "active" || s.ActiveState == "reloading" {
				s.Detail = ""
			}
		} else if s.Detail == "" {
			s.Detail = "not running"
		}
	}
	s.Detail, s.FoundBy = plans.Visible(s.Detail), plans.Visible(s.FoundBy)
	return s
}

// parseStatus reads the relay's /status answer (with HTTP headers when it
// came through bash's /dev/tcp). The relay writes it: it is bounded on the
// host and decoded strictly into the few fields relayctl reads.
func parseStatus(fr Frame) *plans.RelayStatusFact {
	data := fr.Data
	if fr.Status != 0 {
		return &plans.RelayStatusFact{Error: plans.Visible(Clip(strings.TrimSpace(string(data))))}
	}
	if bytes.HasPrefix(data, []byte("HTTP/")) {
		head, body, ok := bytes.Cut(data, []byte("\r\n\r\n"))
		if !ok {
			return &plans.RelayStatusFact{Error: "truncated HTTP answer"}
		}
		if line, _, _ := bytes.Cut(head, []byte("\r\n")); !bytes.Contains(line, []byte(" 200 ")) {
			return &plans.RelayStatusFact{Error: plans.Visible(Clip(string(line)))}
		}
		data = body
	}
	var st struct {
		Version     string `json:"version"`
		PID         int    `json:"pid"`
		Requested   int    `json:"so_rcvbuf_requested"`
		Effective   int    `json:"so_rcvbuf_effective"`
		SocketInode uint64 `json:"socket_inode"`
		Lobbies     int    `json:"lobbies"`
		Players     int    `json:"players"`
		Established *int   `json:"players_established"`
		Draining    bool   `json:"draining"`
		Handoff     string `json:"handoff"`
		HandoffSock string `json:"handoff_socket"`
		FromPID     int    `json:"handoff_from_pid"`
		GapUS       *int64 `json:"handoff_gap_us"`
		FromLobbies int    `json:"handoff_lobbies"`
		FromPlayers int    `json:"handoff_players"`
		FDStore     string `json:"fdstore"`
		SocketFrom  string `json:"socket_from"`
		StoreState  string `json:"fdstore_state"`
		Counters    struct {
			RxDrops   uint64 `json:"rx_drops"`
			RxPackets uint64 `json:"rx_packets"`
			Forwarded uint64 `json:"forwarded"`
		} `json:"counters"`
	}
	dec := json.NewDecoder(io.LimitReader(bytes.NewReader(data), 1<<16))
	if err := dec.Decode(&st); err != nil {
		return &plans.RelayStatusFact{Error: "status is not JSON: " + plans.Visible(Clip(err.Error()))}
	}
	if len(st.Version) > 64 || plans.ValidVersion(st.Version) != nil && st.Version != "devel" {
		return &plans.RelayStatusFact{Error: "status has no valid version: " + plans.Visible(Clip(st.Version))}
	}
	if st.PID < 0 || st.Requested < 0 || st.Effective < 0 || st.Lobbies < 0 || st.Players < 0 || st.FromPID < 0 || st.Established != nil && *st.Established < 0 {
		return &plans.RelayStatusFact{Error: "status has negative numbers"}
	}
	if len(st.Handoff) > 32 || len(st.HandoffSock) > 256 || len(st.FDStore) > 32 || len(st.SocketFrom) > 32 || len(st.StoreState) > 32 {
		return &plans.RelayStatusFact{Error: "status has an overlong handoff or fdstore field"}
	}
	if st.FromLobbies < 0 || st.FromPlayers < 0 {
		return &plans.RelayStatusFact{Error: "status has negative numbers"}
	}
	if st.Established != nil && *st.Established > st.Players {
		return &plans.RelayStatusFact{Error: fmt.Sprintf("status has %d established players of %d", *st.Established, st.Players)}
	}
	return &plans.RelayStatusFact{Read: true, Version: st.Version, PID: st.PID, SORcvbufRequested: st.Requested, SORcvbufEffective: st.Effective,
		RxDrops: st.Counters.RxDrops, RxPackets: st.Counters.RxPackets, Forwarded: st.Counters.Forwarded, SocketInode: st.SocketInode,
		Lobbies: st.Lobbies, Players: st.Players, PlayersEstablished: st.Established, Draining: st.Draining,
		Handoff: plans.Visible(st.Handoff), HandoffSocket: plans.Visible(st.HandoffSock), HandoffFromPID: st.FromPID, HandoffGapUS: st.GapUS,
		HandoffLobbies: st.FromLobbies, HandoffPlayers: st.FromPlayers,
		FDStore: plans.Visible(st.FDStore), SocketFrom: plans.Visible(st.SocketFrom), FDStoreState: plans.Visible(st.StoreState)}
}

// DropsFromFrames reads a sample's sections: the host clock, ss, the
// namespace's /proc/net/udp and snmp, and the relay's /status when it was
// asked, of relay process pid on port. A socket ss does not show has inode
// 0 (the soak reads that as a relay gone); a /status of another process
// or socket is left out (its counters are not this relay's); output that
// does not parse is an error.
func DropsFromFrames(frames []Frame, pid, port int) (*plans.DropCounters, error) {
	by := frameSet{}
	for _, fr := range frames {
		by[fr.Name] = fr
	}
	clock, ok := by.text("clock")
	if !ok {
		return nil, fmt.Errorf("%w: no clock", errFrame)
	}
	f := &plans.Facts{}
	var err error
	if f.ClockNanos, err = strconv.ParseInt(clock, 10, 64); err != nil || f.ClockNanos <= 0 {
		return nil, fmt.Errorf("%w: bad clock %q", errFrame, Clip(clock))
	}
	// Every bound socket on the port in the relay's namespace (ss without
	// -p, which would read every process's descriptors): the soak checks
	// the relay's own socket is among them, and a socket of another
	// program shows as counters that disagree.
	if err := by.socket(f, port); err != nil {
		return nil, err
	}
	f.Service = plans.ServiceFact{Running: true, PID: pid}
	if fr, ok := by["relay-status"]; ok {
		f.RelayStatus = parseStatus(fr)
	}
	if st := f.RelayStatus; st != nil && st.Read && (st.PID != pid || st.SocketInode != 0 && st.SocketInode != f.Socket.Inode) {
		f.RelayStatus = nil
	}
	c := plans.DropCountersOf(f)
	return &c, nil
}
