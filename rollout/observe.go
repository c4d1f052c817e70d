package rollout

import (
	"bytes"
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/relayctl/relayctl/plans"
	"github.com/relayctl/relayctl/relay/sockstat"
)

//go:embed observe.sh
var observeScript string

// Query says what to observe on a host: which sysctls, where the relay
// lives and how to find its process. Everything in it is validated before
// it reaches the host, and quoted.
type Query struct {
	Keys    []string
	Port    int
	Control string // the relay's control address, "" to not read /status
	Paths   plans.PlanPaths
	Service plans.PlanService
}

// QueryFor builds the query a plan of spec needs.
func QueryFor(s *plans.Spec) Query {
	return Query{Keys: s.ReadKeys(), Port: s.Relay.Port, Control: s.Relay.Control,
		Paths: plans.PlanPaths(s.Paths), Service: s.Relay.Service.Plan()}
}

// QueryForPlan rebuilds the query a plan was made with, for apply and verify.
func QueryForPlan(p *plans.Plan) Query {
	return Query{Keys: p.ReadKeys(), Port: p.Relay.Port, Control: p.Relay.Control, Paths: p.Paths, Service: p.Relay.Service}
}

// command returns the remote command line for the observe script (which
// travels on stdin). Every word is validated first, then quoted.
func (q Query) command(boundary string) (string, error) {
	for _, k := range q.Keys {
		if strings.ContainsAny(k, ", ") || k == "" {
			return "", fmt.Errorf("observe: bad sysctl key %q", k)
		}
	}
	for _, p := range []string{q.Paths.Current, q.Paths.Releases, q.Paths.RelayConfig, q.Paths.StateDir} {
		if err := plans.ValidHostPath(p); err != nil {
			return "", fmt.Errorf("observe: %w", err)
		}
	}
	if q.Port < 1 || q.Port > 65535 {
		return "", fmt.Errorf("observe: bad port %d", q.Port)
	}
	if q.Control != "" && !controlRe.MatchString(q.Control) {
		return "", fmt.Errorf("observe: bad control address %q", q.Control)
	}
	argv := []string{"sh", "-s", "--", boundary, strconv.Itoa(q.Port), q.Paths.Current, q.Paths.Releases, q.Paths.RelayConfig, q.Paths.StateDir,
		q.Service.Manager, q.Service.Name, strings.Join(q.Keys, ","), q.Control}
	if q.Service.Manager == "command" {
		argv = append(argv, q.Service.PID...)
	}
	return Command(argv...), nil
}

// Observe gathers a host's facts in one command (one SSH session).
func Observe(ctx context.Context, r Runner, host, address, user string, q Query) (*plans.Facts, error) {
	boundary, err := newBoundary()
	if err != nil {
		return nil, err
	}
	cmd, err := q.command(boundary)
	if err != nil {
		return nil, err
	}
	var out, errb bytes.Buffer
	if err := r.Run(ctx, cmd, strings.NewReader(observeScript), &out, &errb); err != nil {
		return nil, fmt.Errorf("observe: %w", err)
	}
	frames, err := ParseFrames(out.Bytes(), boundary)
	if err != nil {
		return nil, fmt.Errorf("observe: %w", err)
	}
	f, err := FactsFromFrames(frames, q)
	if err != nil {
		return nil, fmt.Errorf("observe: %w", err)
	}
	f.Host, f.Address, f.User = host, address, user
	return f, nil
}

// Frame is one section of the observe script's output.
type Frame struct {
	Name   string
	Status int
	Data   []byte
}

var (
	errFrame  = errors.New("malformed observe output")
	controlRe = regexp.MustCompile(`^[0-9.]+:[0-9]{1,5}$`)
)

// newBoundary is a frame marker no host output can guess.
func newBoundary() (string, error) {
	var r [12]byte
	if _, err := rand.Read(r[:]); err != nil {
		return "", fmt.Errorf("observe: %w", err)
	}
	return "@@relayctl-" + hex.EncodeToString(r[:]), nil
}

// ParseFrames splits the observe script's output into its sections:
// "BOUNDARY NAME\n", the output, "\nBOUNDARY end STATUS\n". Host output is
// untrusted: anything outside that shape is an error.
func ParseFrames(b []byte, boundary string) ([]Frame, error) {
	var out []Frame
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
		out = append(out, Frame{Name: name, Status: st, Data: data})
		b = b[nl+1:]
	}
	return out, nil
}

func clip(s string) string {
	if len(s) > 60 {
		return s[:60] + "…"
	}
	return s
}

// FactsFromFrames interprets the sections.
func FactsFromFrames(frames []Frame, q Query) (*plans.Facts, error) {
	by := map[string]Frame{}
	for _, fr := range frames {
		by[fr.Name] = fr
	}
	text := func(name string) (string, bool) {
		fr, ok := by[name]
		if !ok || fr.Status != 0 {
			return "", false
		}
		return strings.TrimSpace(string(fr.Data)), true
	}
	f := &plans.Facts{Sysctls: map[string]plans.SysctlFact{}, SysctlFiles: []plans.ConfFile{}}
	var ok bool
	if f.Kernel, ok = text("kernel"); !ok {
		return nil, fmt.Errorf("%w: no kernel version", errFrame)
	}
	f.Hostname, _ = text("hostname")
	if c, ok := text("clock"); ok {
		f.ClockNanos, _ = strconv.ParseInt(c, 10, 64)
	}
	self, _ := text("netns-self")
	mode, _ := text("netns-probe")
	f.InitialNetns = mode == "644"

	for _, k := range q.Keys {
		fr, ok := by["sysctl "+k]
		if !ok {
			return nil, fmt.Errorf("%w: sysctl %s missing", errFrame, k)
		}
		if fr.Status != 0 {
			f.Sysctls[k] = plans.SysctlFact{}
			continue
		}
		w, _ := text("sysctl-writable " + k)
		f.Sysctls[k] = plans.SysctlFact{Exists: true, Value: strings.TrimRight(string(fr.Data), "\n"), Writable: w == "yes"}
	}
	for _, fr := range frames {
		if p, ok := strings.CutPrefix(fr.Name, "file "); ok && fr.Status == 0 {
			f.SysctlFiles = append(f.SysctlFiles, plans.ConfFile{Path: p, Content: string(fr.Data)})
		}
	}
	if raw, ok := text("current-link"); ok {
		f.Release.CurrentRaw = raw
		f.Release.Current = path.Base(raw)
	}
	if list, ok := text("releases"); ok {
		for _, v := range strings.Fields(list) {
			f.Release.Installed = append(f.Release.Installed, v)
		}
		sort.Strings(f.Release.Installed)
	}
	if fr, ok := by["journal"]; ok && fr.Status == 0 {
		f.Journal = string(fr.Data)
	}
	if fr, ok := by["lock-owner"]; ok && fr.Status == 0 {
		f.LockOwner = strings.TrimSpace(string(fr.Data))
	}
	if fr, ok := by["relay-config"]; ok && fr.Status == 0 {
		f.Config = plans.FileFact{Exists: true, Content: string(fr.Data)}
	}
	if fr, ok := by["service"]; ok {
		s := strings.TrimSpace(string(fr.Data))
		pid, err := strconv.Atoi(s)
		if fr.Status == 0 && err == nil && pid > 0 {
			f.Service = plans.ServiceFact{Running: true, PID: pid}
		} else {
			f.Service = plans.ServiceFact{Detail: clip(s)}
		}
	}
	if f.Service.Running {
		f.Release.RunningExe, _ = text("relay-exe")
		if ns, ok := text("relay-netns"); ok {
			f.Socket.OwnNetns = ns != self
		}
	}
	if fr, ok := by["relay-status"]; ok {
		f.RelayStatus = parseStatus(fr)
	}
	f.Socket.Port = q.Port
	if fr, ok := by["ss"]; ok && fr.Status == 0 {
		socks, err := sockstat.ParseSS(fr.Data)
		if err != nil {
			return nil, fmt.Errorf("read ss output: %w", err)
		}
		if s := sockstat.FilterPort(socks, q.Port); len(s) > 0 {
			f.Socket.Found = true
			f.Socket.Rcvbuf = s[0].Rcvbuf
			f.Socket.Drops = s[0].Drops
		}
	}
	if fr, ok := by["proc-net-udp"]; ok && fr.Status == 0 {
		socks, err := sockstat.ParseProcNetUDP(fr.Data)
		if err != nil {
			return nil, fmt.Errorf("read /proc/net/udp: %w", err)
		}
		for _, s := range socks {
			if s.LocalPort == q.Port {
				f.Socket.ProcUDPDrops = s.Drops
			}
		}
	}
	if fr, ok := by["proc-net-snmp"]; ok && fr.Status == 0 {
		st, err := sockstat.ParseSNMP(fr.Data)
		if err != nil {
			return nil, fmt.Errorf("read /proc/net/snmp: %w", err)
		}
		f.Socket.RcvbufErrors = st.RcvbufErrors
		f.Socket.InErrors = st.InErrors
	}
	return f, nil
}

// parseStatus reads the relay's /status answer (with HTTP headers when it
// came through bash's /dev/tcp).
func parseStatus(fr Frame) *plans.RelayStatusFact {
	data := fr.Data
	if fr.Status != 0 {
		return &plans.RelayStatusFact{Error: clip(strings.TrimSpace(string(data)))}
	}
	if bytes.HasPrefix(data, []byte("HTTP/")) {
		head, body, ok := bytes.Cut(data, []byte("\r\n\r\n"))
		if !ok {
			return &plans.RelayStatusFact{Error: "truncated HTTP answer"}
		}
		if line, _, _ := bytes.Cut(head, []byte("\r\n")); !bytes.Contains(line, []byte(" 200 ")) {
			return &plans.RelayStatusFact{Error: clip(string(line))}
		}
		data = body
	}
	var st struct {
		Version   string `json:"version"`
		PID       int    `json:"pid"`
		Requested int    `json:"so_rcvbuf_requested"`
		Effective int    `json:"so_rcvbuf_effective"`
		Counters  struct {
			RxDrops uint64 `json:"rx_drops"`
		} `json:"counters"`
	}
	if err := json.Unmarshal(data, &st); err != nil {
		return &plans.RelayStatusFact{Error: "status is not JSON: " + clip(err.Error())}
	}
	return &plans.RelayStatusFact{Read: true, Version: st.Version, PID: st.PID, SORcvbufRequested: st.Requested, SORcvbufEffective: st.Effective, RxDrops: st.Counters.RxDrops}
}
