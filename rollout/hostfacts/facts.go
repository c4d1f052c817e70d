package hostfacts

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/relayctl/relayctl/plans"
	"github.com/relayctl/relayctl/relay/sockstat"
	"github.com/relayctl/relayctl/rollout"
	"github.com/relayctl/relayctl/uplink"
)

// frameSet is observe's sections by name.
type frameSet map[string]Frame

// text is a section's output, trimmed, when its command succeeded.
func (by frameSet) text(name string) (string, bool) {
	fr, ok := by[name]
	if !ok || fr.Status != 0 {
		return "", false
	}
	return strings.TrimSpace(string(fr.Data)), true
}

// data is a section's output as it is, when its command succeeded.
func (by frameSet) data(name string) []byte {
	if fr, ok := by[name]; ok && fr.Status == 0 {
		return fr.Data
	}
	return nil
}

// FactsFromFrames interprets the sections.
func FactsFromFrames(frames []Frame, q rollout.Query) (*plans.Facts, error) {
	by := frameSet{}
	for _, fr := range frames {
		by[fr.Name] = fr
	}
	f := &plans.Facts{Sysctls: map[string]plans.SysctlFact{}, SysctlFiles: []plans.ConfFile{}}
	var ok bool
	if f.Kernel, ok = by.text("kernel"); !ok {
		return nil, fmt.Errorf("%w: no kernel version", errFrame)
	}
	f.Hostname, _ = by.text("hostname")
	f.Arch = by.arch()
	if c, ok := by.text("clock"); ok {
		f.ClockNanos, _ = strconv.ParseInt(c, 10, 64)
	}
	mode, _ := by.text("netns-probe")
	f.InitialNetns = mode == "644"
	if err := by.sysctls(f, q.Keys); err != nil {
		return nil, err
	}
	by.sysctlFiles(f, frames)
	by.release(f, q.Paths)
	if err := by.files(f, q); err != nil {
		return nil, err
	}
	f.Service = serviceFact(by)
	if f.Service.Running {
		f.Release.RunningExe, _ = by.text("relay-exe")
		self, _ := by.text("netns-self")
		if ns, ok := by.text("relay-netns"); ok {
			f.Socket.OwnNetns = ns != self
		}
	}
	if fr, ok := by["relay-status"]; ok {
		f.RelayStatus = parseStatus(fr)
	}
	switch {
	case q.LastApply:
		f.LastApply = by.lastApply()
	case q.UndoOf != "":
		f.Undo = by.undo(q.UndoOf)
	}
	return f, by.socket(f, q.Port)
}

// arch is the host's machine as the agent read it from uname(2), if it
// is a machine name (letters, digits, _ and -, as x86_64 or aarch64): ""
// otherwise.
func (by frameSet) arch() string {
	a, ok := by.text("arch")
	if !ok || len(a) > 32 || strings.Trim(a, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") != "" {
		return ""
	}
	return a
}

// undo is the host's newest receipt of the plan with checksum sum that
// records what its window changed, as observe found it (a file under the
// state folder, read only where root alone could have written it), and
// the backups beside it; nil when there is none. The record is decoded
// strictly into plans.Undo; the planner checks what it says.
func (by frameSet) undo(sum string) *plans.UndoFact {
	name, ok := by.text("undo-name")
	data := by.data("undo-receipt")
	if !ok || data == nil || plans.ValidReceiptName(name) != nil || len(data) > plans.MaxHostFile {
		return nil
	}
	var r struct {
		Checksum string      `json:"plan_checksum"`
		Outcome  string      `json:"outcome"`
		Undo     *plans.Undo `json:"undo"`
	}
	if err := json.Unmarshal(data, &r); err != nil || r.Checksum != sum || r.Undo == nil {
		return nil
	}
	u := &plans.UndoFact{Receipt: name, Checksum: r.Checksum, Outcome: plans.Visible(clipped(r.Outcome)), Undo: r.Undo, Backups: []string{}}
	for _, b := range strings.Fields(string(by.data("undo-backups"))) {
		if plans.ValidBackupName(b) == nil && len(u.Backups) < 64 {
			u.Backups = append(u.Backups, b)
		}
	}
	return u
}

func clipped(s string) string {
	if len(s) > 32 {
		return s[:32]
	}
	return s
}

// lastApply is the newest receipt with a read-back, as observe found it:
// a file relayctl wrote, but read as untrusted as any host output (bounded
// there, decoded strictly into the few fields verify uses). nil when there
// is none or it does not read as a receipt.
func (by frameSet) lastApply() *plans.LastApply {
	name, ok := by.text("last-apply-name")
	data := by.data("last-apply")
	if !ok || data == nil || len(name) > 200 || plans.ValidHostPath("/"+name) != nil || len(data) > plans.MaxHostFile {
		return nil
	}
	var r struct {
		Plan     string              `json:"plan"`
		Checksum string              `json:"plan_checksum"`
		Outcome  string              `json:"outcome"`
		Drops    *plans.DropCounters `json:"drops_after"`
	}
	if err := json.Unmarshal(data, &r); err != nil || r.Drops == nil || len(r.Plan) > 64 || len(r.Checksum) > 80 || len(r.Outcome) > 32 {
		return nil
	}
	return &plans.LastApply{Receipt: name, Plan: plans.Visible(r.Plan), Checksum: plans.Visible(r.Checksum), Outcome: plans.Visible(r.Outcome), Drops: *r.Drops}
}

// servicePIDs are the processes whose sockets are the service's: the
// unit's cgroup, or the one process found.
func (by frameSet) servicePIDs(main int) []int {
	var pids []int
	if d := by.data("service-pids"); d != nil {
		for _, w := range strings.Fields(string(d)) {
			if n, err := strconv.Atoi(w); err == nil && n > 0 && len(pids) < 4096 {
				pids = append(pids, n)
			}
		}
	}
	if main > 0 && !slices.Contains(pids, main) {
		pids = append(pids, main)
	}
	return pids
}

// sysctls are the runtime values of the query's keys.
func (by frameSet) sysctls(f *plans.Facts, keys []string) error {
	for _, k := range keys {
		fr, ok := by["sysctl "+k]
		if !ok {
			return fmt.Errorf("%w: sysctl %s missing", errFrame, k)
		}
		if fr.Status != 0 {
			f.Sysctls[k] = plans.SysctlFact{}
			continue
		}
		w, _ := by.text("sysctl-writable " + k)
		f.Sysctls[k] = plans.SysctlFact{Exists: true, Value: strings.TrimRight(string(fr.Data), "\n"), Writable: w == "yes"}
	}
	return nil
}

// sysctlFiles are the sysctl.d files, in observe's order, and the ones it
// did not read.
func (by frameSet) sysctlFiles(f *plans.Facts, frames []Frame) {
	for _, fr := range frames {
		if p, ok := strings.CutPrefix(fr.Name, "file "); ok && fr.Status == 0 {
			switch {
			case len(fr.Data) > plans.MaxHostFile:
				f.SkippedFiles = append(f.SkippedFiles, fmt.Sprintf("%s is larger than %d bytes", p, plans.MaxHostFile))
			case plans.ValidHostPath(p) != nil:
				f.SkippedFiles = append(f.SkippedFiles, "a file name with unusual characters")
			default:
				f.SysctlFiles = append(f.SysctlFiles, plans.ConfFile{Path: p, Content: string(fr.Data)})
			}
		}
		if d, ok := strings.CutPrefix(fr.Name, "skipped "); ok {
			f.SkippedFiles = append(f.SkippedFiles, "in "+d+": "+strings.TrimSpace(string(fr.Data)))
		}
	}
}

// release is where the current link points and the releases installed.
func (by frameSet) release(f *plans.Facts, paths plans.PlanPaths) {
	if raw, ok := by.text("current-link"); ok {
		f.Release.CurrentRaw = raw
		f.Release.Current = plans.ReleaseOf(paths, raw)
		if plans.ValidVersion(f.Release.Current) != nil {
			f.Release.Current = ""
		}
	}
	if list, ok := by.text("store"); ok {
		for _, sha := range strings.Fields(list) {
			if len(sha) == 64 && strings.Trim(sha, "0123456789abcdef") == "" {
				f.Release.Stored = append(f.Release.Stored, sha)
			}
		}
	}
	f.Release.Decoders = by.decoders()
	if list, ok := by.text("releases"); ok {
		for _, v := range strings.Fields(list) {
			if plans.ValidVersion(v) == nil {
				f.Release.Installed = append(f.Release.Installed, v)
			}
		}
		sort.Strings(f.Release.Installed)
	}
}

// files are an unfinished run's journal and lock owner, the relay config
// and the unit drop-in.
func (by frameSet) files(f *plans.Facts, q rollout.Query) error {
	if d := by.data("journal"); d != nil {
		f.Journal = string(d)
	}
	if d := by.data("lock-owner"); d != nil {
		f.LockOwner = plans.Visible(strings.TrimSpace(string(d)))
	}
	if why, ok := by.text("relay-config-unsafe"); ok {
		f.Config = plans.FileFact{Unsafe: plans.Visible(ClipTo(why, 300))}
	}
	if fr, ok := by["relay-config"]; ok && fr.Status == 0 {
		if len(fr.Data) > plans.MaxHostFile {
			return fmt.Errorf("the relay config %s is larger than %d bytes", q.Paths.RelayConfig, plans.MaxHostFile)
		}
		f.Config = plans.FileFact{Exists: true, Content: string(fr.Data)}
	}
	for _, p := range q.Files {
		ff := plans.FileFact{}
		if why, ok := by.text("written " + p + "-unsafe"); ok {
			ff.Unsafe = plans.Visible(ClipTo(why, 300))
		} else if fr, ok := by["written "+p]; ok && fr.Status == 0 {
			if len(fr.Data) > plans.MaxHostFile {
				return fmt.Errorf("%s is larger than %d bytes", p, plans.MaxHostFile)
			}
			ff = plans.FileFact{Exists: true, Content: string(fr.Data)}
		}
		if f.Files == nil {
			f.Files = map[string]plans.FileFact{}
		}
		f.Files[p] = ff
	}
	if fr, ok := by["unit-dropin"]; ok {
		f.UnitDropIn = &plans.FileFact{}
		if fr.Status == 0 {
			if len(fr.Data) > plans.MaxHostFile {
				return fmt.Errorf("the unit drop-in %s is larger than %d bytes", unitDropIn(q.Service), plans.MaxHostFile)
			}
			*f.UnitDropIn = plans.FileFact{Exists: true, Content: string(fr.Data)}
		}
	}
	return nil
}

// socket is the relay socket read back from the kernel: ss, /proc/net/udp
// and /proc/net/snmp of the relay's network namespace.
func (by frameSet) socket(f *plans.Facts, port int) error {
	f.Socket.Port = port
	var pids []int
	if f.Service.Running {
		pids = by.servicePIDs(f.Service.PID)
	}
	r, err := sockstat.ReadBackOf(by.data("ss"), by.data("proc-net-udp"), by.data("proc-net-snmp"), port, pids)
	if err != nil {
		return err
	}
	f.Socket.Found, f.Socket.Rcvbuf, f.Socket.Drops, f.Socket.Inode = r.Found, r.Rcvbuf, r.Drops, r.Inode
	if len(r.Each) > 1 {
		for _, s := range r.Each {
			pid := 0
			if len(s.PIDs) > 0 {
				pid = s.PIDs[0]
			}
			f.Socket.All = append(f.Socket.All, plans.SocketEntry{Local: plans.Visible(Clip(s.Local)), Rcvbuf: s.Rcvbuf, Drops: s.Drops, Inode: s.Inode, PID: pid})
		}
	}
	f.Socket.ProcUDPDrops, f.Socket.RcvbufErrors, f.Socket.InErrors = r.ProcUDPDrops, r.RcvbufErrors, r.InErrors
	f.Socket.InDatagrams, f.Socket.Sockets = r.InDatagrams, r.Sockets
	return nil
}

// decoders are what the host can unpack an upload with: what the agent
// says it decodes itself (its decoders section; none when it does not say).
func (by frameSet) decoders() []string {
	list, _ := by.text("decoders")
	return agentDecoders(strings.Fields(list))
}

// agentDecoders are the encodings the agent listed that relayctl knows,
// in relayctl's order (gzip, zstd, zstd-patch); anything else is left out.
func agentDecoders(listed []string) []string {
	var d []string
	for _, enc := range []string{uplink.Gzip, uplink.Zstd, uplink.ZstdPatch} {
		if slices.Contains(listed, enc) {
			d = append(d, enc)
		}
	}
	return d
}
