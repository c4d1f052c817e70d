package shellhost

import (
	"bytes"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/relayctl/relayctl/plans"
	"github.com/relayctl/relayctl/rollout"
	"github.com/relayctl/relayctl/tune"
)

// MaxObserveOutput bounds what one observe may print: every file in it is
// bounded on the host already, this is the last line of defence.
const MaxObserveOutput = 16 << 20

// args are observe's words for the query: the request's argv lines.
func args(q rollout.Query) ([]string, error) {
	if err := q.Validate(); err != nil {
		return nil, err
	}
	a := []string{strconv.Itoa(q.Port), q.Paths.Current, q.Paths.Releases, q.Paths.RelayConfig, q.Paths.StateDir,
		q.Service.Manager, q.Service.Name, q.Service.PIDFile, strings.Join(q.Keys, ","), q.Control, strconv.Itoa(plans.MaxHostFile), unitDropIn(q.Service),
		orDash(q.Program), orDash(strings.Join(q.Files, ",")), "-"}
	switch {
	case q.LastApply:
		a[len(a)-1] = "last-apply"
	case q.UndoOf != "":
		a[len(a)-1] = "undo:" + strings.TrimPrefix(q.UndoOf, "sha256:")
	}
	return append(a, tune.SysctlDirs...), nil
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// unitDropIn is the drop-in relayctl owns for a systemd relay, or "-".
func unitDropIn(s plans.PlanService) string {
	if s.Manager != "systemd" {
		return "-"
	}
	return plans.UnitDropInPath(s.Name)
}

// observeCall is one observe: a fresh frame boundary, its words, and how
// to read its framed answer into facts.
type observeCall struct {
	q                   rollout.Query
	boundary            string
	args                []string
	host, address, user string
}

func newObserveCall(q rollout.Query, host, address, user string) (*observeCall, error) {
	boundary, err := newBoundary()
	if err != nil {
		return nil, err
	}
	a, err := args(q)
	if err != nil {
		return nil, err
	}
	return &observeCall{q: q, boundary: boundary, args: a, host: host, address: address, user: user}, nil
}

// facts parses what observe answered.
func (c *observeCall) facts(out []byte) (*plans.Facts, error) {
	if len(out) > MaxObserveOutput {
		return nil, fmt.Errorf("observe: the host printed more than %d bytes", MaxObserveOutput)
	}
	frames, err := ParseFrames(out, c.boundary)
	if err != nil {
		return nil, fmt.Errorf("observe: %w", err)
	}
	f, err := FactsFromFrames(frames, c.q)
	if err != nil {
		return nil, fmt.Errorf("observe: %w", err)
	}
	f.Host, f.Address, f.User = c.host, c.address, c.user
	if err := plans.ValidateFacts(f); err != nil {
		return nil, fmt.Errorf("observe: %w", err)
	}
	return f, nil
}

// limitedBuffer keeps at most max bytes and notes that more came.
type limitedBuffer struct {
	bytes.Buffer
	max  int
	over bool
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if room := b.max - b.Len(); len(p) > room {
		b.over = true
		if room > 0 {
			b.Buffer.Write(p[:room])
		}
		return len(p), nil
	}
	return b.Buffer.Write(p)
}

// Frame is one section of the observe script's output.
type Frame struct {
	Name   string
	Status int
	Data   []byte
}

var errFrame = errors.New("malformed observe output")

// ErrForgedFrame is host output that carries the frame marker, or a frame
// seen twice: something on the host tried to write facts of its own.
var ErrForgedFrame = errors.New("forged observe output")

// newBoundary is a frame marker no host output can guess.
func newBoundary() (string, error) {
	var r [16]byte
	if _, err := rand.Read(r[:]); err != nil {
		return "", fmt.Errorf("observe: %w", err)
	}
	return "@@relayctl-" + hex.EncodeToString(r[:]), nil
}

// ParseFrames splits the observe script's output into its sections:
// "BOUNDARY NAME\n", the output, "\nBOUNDARY end STATUS\n". Host output is
// untrusted: anything outside that shape is an error, and so are a frame
// name seen twice and a section whose output holds the boundary (which
// only a host that learnt the secret could print).
func ParseFrames(b []byte, boundary string) ([]Frame, error) {
	var out []Frame
	seen := map[string]bool{}
	open := []byte(boundary + " ")
	closing := []byte("\n" + boundary + " end ")
	for len(b) > 0 {
		if !bytes.HasPrefix(b, open) {
			return nil, fmt.Errorf("%w: unexpected text %q", errFrame, clip(string(b)))
		}
		nl := bytes.IndexByte(b, '\n')
		if nl < 0 {
			return nil, fmt.Errorf("%w: header without newline", errFrame)
		}
		name := string(b[len(open):nl])
		b = b[nl+1:]
		end := bytes.Index(b, closing)
		if end < 0 {
			return nil, fmt.Errorf("%w: section %q does not end", errFrame, clip(name))
		}
		data := b[:end]
		b = b[end+len(closing):]
		nl = bytes.IndexByte(b, '\n')
		if nl < 0 {
			return nil, fmt.Errorf("%w: section %q: end without newline", errFrame, clip(name))
		}
		st, err := strconv.Atoi(string(b[:nl]))
		if err != nil || st < 0 || st > 255 {
			return nil, fmt.Errorf("%w: section %q: bad status %q", errFrame, clip(name), clip(string(b[:nl])))
		}
		if bytes.Contains(data, []byte(boundary)) {
			return nil, fmt.Errorf("%w: section %q holds the frame marker", ErrForgedFrame, clip(name))
		}
		if seen[name] {
			return nil, fmt.Errorf("%w: section %q appears twice", ErrForgedFrame, clip(name))
		}
		seen[name] = true
		out = append(out, Frame{Name: name, Status: st, Data: data})
		b = b[nl+1:]
	}
	return out, nil
}

func clip(s string) string { return clipTo(s, 60) }

func clipTo(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

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
		s.ActiveState, s.SubState = plans.Visible(clip(props["ActiveState"])), plans.Visible(clip(props["SubState"]))
		if props["LoadState"] == "not-found" {
			s.UnitMissing = true
			s.Detail = "unit not found"
		} else if fr.Status != 0 {
			s.Detail = clip(strings.TrimSpace(string(fr.Data)))
		} else {
			s.Detail = props["ActiveState"] + "/" + props["SubState"]
		}
	}
	if fr, ok := by["found-by"]; ok {
		text := clipTo(strings.TrimSpace(string(fr.Data)), 300)
		if fr.Status == 0 {
			s.FoundBy = text
		} else {
			s.Detail = "cannot tell: nothing names the relay's process (a pid file or a systemd unit), and " + text + "; name it with --pid-file or --systemd-unit"
		}
	}
	if fr, ok := by["pidfile-untrusted"]; ok {
		s.Detail = clipTo(strings.TrimSpace(string(fr.Data)), 300)
	}
	if fr, ok := by["untrusted-pid"]; ok {
		pid, exe, _ := strings.Cut(strings.TrimSpace(string(fr.Data)), " ")
		s.Detail = "pid " + clipTo(pid, 20) + " runs " + clipTo(exe, 200) + ", which is not the service's program (relay.release.program, or a release): not read back"
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
		return &plans.RelayStatusFact{Error: plans.Visible(clip(strings.TrimSpace(string(data))))}
	}
	if bytes.HasPrefix(data, []byte("HTTP/")) {
		head, body, ok := bytes.Cut(data, []byte("\r\n\r\n"))
		if !ok {
			return &plans.RelayStatusFact{Error: "truncated HTTP answer"}
		}
		if line, _, _ := bytes.Cut(head, []byte("\r\n")); !bytes.Contains(line, []byte(" 200 ")) {
			return &plans.RelayStatusFact{Error: plans.Visible(clip(string(line)))}
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
		return &plans.RelayStatusFact{Error: "status is not JSON: " + plans.Visible(clip(err.Error()))}
	}
	if len(st.Version) > 64 || plans.ValidVersion(st.Version) != nil && st.Version != "devel" {
		return &plans.RelayStatusFact{Error: "status has no valid version: " + plans.Visible(clip(st.Version))}
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
