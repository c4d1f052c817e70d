package plans

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path"
	"sort"
	"strconv"
	"strings"

	"github.com/hashicorp/go-version"

	"github.com/relayctl/relayctl/relay/config"
	"github.com/relayctl/relayctl/tune"
)

// FormatVersion is the layout version of plan files. apply refuses others.
const FormatVersion = 1

// Plan is the reviewed, one-window change for every host of a spec. Its JSON
// is byte-for-byte identical for identical inputs.
type Plan struct {
	FormatVersion  int             `json:"format_version"`
	Checksum       string          `json:"checksum"` // sha256 of this JSON with checksum ""
	Name           string          `json:"name"`
	SpecFile       string          `json:"spec_file"`
	SpecSHA256     string          `json:"spec_sha256"`
	AllowDowngrade bool            `json:"allow_downgrade"`
	Window         *PlanWindow     `json:"window,omitempty"`
	Sysctl         []PlannedSysctl `json:"sysctl"`
	Relay          PlannedRelay    `json:"relay"`
	Paths          PlanPaths       `json:"paths"`
	Hosts          []*HostPlan     `json:"hosts"`
}

// PlanWindow is the spec's restart window, RFC 3339 in UTC.
type PlanWindow struct {
	NotBefore string `json:"not_before"`
	NotAfter  string `json:"not_after"`
}

// PlannedSysctl is one key of the spec.
type PlannedSysctl struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// PlannedRelay is the relay part of the spec, as apply needs it.
type PlannedRelay struct {
	Port          int         `json:"port"`
	Control       string      `json:"control"`
	SORcvbuf      int         `json:"so_rcvbuf"`
	SORcvbufForce bool        `json:"so_rcvbuf_force"`
	Version       string      `json:"version"`
	Artifact      string      `json:"artifact"` // as written in the spec, relative to it
	SHA256        string      `json:"sha256"`
	Size          int64       `json:"size"`
	Service       PlanService `json:"service"`
}

// PlanService is how apply restarts and finds the relay.
type PlanService struct {
	Manager string   `json:"manager"`
	Name    string   `json:"name,omitempty"`
	Start   []string `json:"start,omitempty"`
	Stop    []string `json:"stop,omitempty"`
	PID     []string `json:"pid,omitempty"`
}

// PlanPaths are the host-side paths in force for this plan.
type PlanPaths struct {
	SysctlFile  string `json:"sysctl_file"`
	Releases    string `json:"releases_dir"`
	Current     string `json:"current_link"`
	RelayConfig string `json:"relay_config"`
	StateDir    string `json:"state_dir"`
}

// Host actions.
const (
	ActionChange  = "change"
	ActionNone    = "none"
	ActionBlocked = "blocked"
)

// HostPlan is what happens on one host.
type HostPlan struct {
	Host        string         `json:"host"`
	Address     string         `json:"address"`
	Kernel      string         `json:"kernel"`
	Action      string         `json:"action"`
	Fingerprint string         `json:"fingerprint"`
	Facts       []FactEntry    `json:"facts"` // what the fingerprint covers
	Blockers    []string       `json:"blockers"`
	Warnings    []string       `json:"warnings"`
	Sysctls     []SysctlChange `json:"sysctls"`
	DropIn      FileChange     `json:"drop_in"`
	Release     ReleaseChange  `json:"release"`
	Config      FileChange     `json:"relay_config"`
	Restart     bool           `json:"restart"`
	Readback    Readback       `json:"readback"`
	Steps       []Step         `json:"steps"`
	Previous    PreviousState  `json:"previous"` // what a rollback restores
}

// FactEntry is one observed fact the plan depends on.
type FactEntry struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// SysctlChange is one key on one host.
type SysctlChange struct {
	Key           string `json:"key"`
	Current       string `json:"current"`
	Planned       string `json:"planned"`
	Change        bool   `json:"change"` // the runtime value differs
	Writable      bool   `json:"writable"`
	DecidedAtBoot string `json:"decided_at_boot_by"` // path:line of the file that wins at boot
	BootValue     string `json:"boot_value"`
	Shadowed      bool   `json:"shadowed"` // our drop-in loses at boot
}

// FileChange is a file relayctl owns on the host.
type FileChange struct {
	Path    string `json:"path"`
	Change  bool   `json:"change"`
	Exists  bool   `json:"exists"`
	Planned string `json:"planned"`
}

// ReleaseChange is the relay release on one host.
type ReleaseChange struct {
	Current   string `json:"current"`
	Planned   string `json:"planned"`
	Action    string `json:"action"` // install, upgrade, downgrade, keep
	Installed bool   `json:"installed"`
}

// Readback is what the kernel will report for the relay socket.
type Readback struct {
	Port         int    `json:"port"`
	Requested    int    `json:"so_rcvbuf"`
	Force        bool   `json:"force"`
	RmemMax      int    `json:"rmem_max"`     // in force after the change
	RmemDefault  int    `json:"rmem_default"` // in force after the change
	Expected     int    `json:"expected_rb"`
	Current      uint64 `json:"current_rb"`
	CurrentFound bool   `json:"current_found"`
	CurrentDrops uint64 `json:"current_drops"`
}

// PreviousState is what the host had, for rollback and for the review.
type PreviousState struct {
	Sysctls      []PlannedSysctl `json:"sysctls"`
	DropIn       FileFact        `json:"drop_in"`
	CurrentLink  string          `json:"current_link"`
	RelayConfig  FileFact        `json:"relay_config"`
	RelayRunning bool            `json:"relay_running"`
}

// Step phases.
const (
	PhaseStage  = "stage"
	PhaseWindow = "window"
	PhaseVerify = "verify"
)

// Step is one line of the window's script: apply executes them by Kind, and
// the review, the journal and the receipt use Title.
type Step struct {
	Phase string `json:"phase"`
	Kind  string `json:"kind"`
	Key   string `json:"key,omitempty"`
	Value string `json:"value,omitempty"`
	Title string `json:"title"`
}

// Step kinds, in the order they run.
const (
	StepUploadRelease = "upload-release"
	StepCheckRelease  = "check-release"
	StepStageConfig   = "stage-config"
	StepStageDropIn   = "stage-drop-in"
	StepSetSysctl     = "set-sysctl"
	StepPersistDropIn = "persist-drop-in"
	StepSwitchRelease = "switch-release"
	StepInstallConfig = "install-config"
	StepRestart       = "restart"
	StepVerifyProcess = "verify-process"
	StepVerifySocket  = "verify-socket"
	StepVerifySysctl  = "verify-sysctl"
	StepVerifyStatus  = "verify-relay-status"
)

// Artifact is the release file as found on the machine running relayctl.
type Artifact struct {
	SHA256 string
	Size   int64
}

// Input is everything a plan is made from.
type Input struct {
	Spec           *Spec
	SpecSHA256     string
	Facts          []*Facts // one per spec host, any order
	Artifact       Artifact
	AllowDowngrade bool
}

// Make computes the plan. It fails only when the input is inconsistent
// (facts missing for a host); problems on a host become its blockers.
func Make(in Input) (*Plan, error) {
	s := in.Spec
	if in.Artifact.SHA256 == "" {
		return nil, fmt.Errorf("plan %s: the artifact's sha256 is missing", s.Name)
	}
	if s.Relay.Release.SHA256 != "" && s.Relay.Release.SHA256 != in.Artifact.SHA256 {
		return nil, &SpecError{File: s.File, Field: "relay.release.sha256",
			Msg: fmt.Sprintf("the artifact %s has sha256 %s, the spec says %s; rebuild or fix the spec", s.Relay.Release.Artifact, in.Artifact.SHA256, s.Relay.Release.SHA256)}
	}
	p := &Plan{
		FormatVersion:  FormatVersion,
		Name:           s.Name,
		SpecFile:       s.File,
		SpecSHA256:     in.SpecSHA256,
		AllowDowngrade: in.AllowDowngrade,
		Relay: PlannedRelay{
			Port: s.Relay.Port, Control: s.Relay.Control,
			SORcvbuf: s.Relay.SORcvbuf, SORcvbufForce: s.Relay.SORcvbufForce,
			Version: s.Relay.Release.Version, Artifact: s.Relay.Release.Artifact,
			SHA256: in.Artifact.SHA256, Size: in.Artifact.Size,
			Service: s.Relay.Service.Plan(),
		},
		Paths: PlanPaths(s.Paths),
	}
	if s.Window != nil {
		p.Window = &PlanWindow{
			NotBefore: s.Window.NotBefore.Format("2006-01-02T15:04:05Z07:00"),
			NotAfter:  s.Window.NotAfter.Format("2006-01-02T15:04:05Z07:00"),
		}
	}
	for _, kv := range sortedSysctl(s.Sysctl) {
		p.Sysctl = append(p.Sysctl, kv)
	}
	byHost := map[string]*Facts{}
	for _, f := range in.Facts {
		byHost[f.Host] = f
	}
	for _, h := range s.Hosts {
		f, ok := byHost[h]
		if !ok {
			return nil, fmt.Errorf("plan %s: no facts for host %s", s.Name, h)
		}
		p.Hosts = append(p.Hosts, planHost(p, f))
	}
	return p, nil
}

func sortedSysctl(in []SysctlSetting) []PlannedSysctl {
	out := make([]PlannedSysctl, 0, len(in))
	for _, s := range in {
		out = append(out, PlannedSysctl{Key: s.Key, Value: s.Value})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

const (
	keyRmemMax     = "net.core.rmem_max"
	keyRmemDefault = "net.core.rmem_default"
)

// ObservedKeys are the sysctls read on every host besides the planned ones:
// the read-back rule depends on them.
var ObservedKeys = []string{keyRmemMax, keyRmemDefault}

// Replan computes, from a plan's own inputs and new facts, what the plan
// would do to the host now. apply uses it to recognise a host that is
// already as planned; verify, to list what differs.
func Replan(p *Plan, f *Facts) *HostPlan { return planHost(p, f) }

func planHost(p *Plan, f *Facts) *HostPlan {
	h := &HostPlan{Host: f.Host, Address: f.Address, Kernel: f.Kernel, Blockers: []string{}, Warnings: []string{}}
	h.Facts = Fingerprinted(f, p.ReadKeys())
	h.Fingerprint = Fingerprint(h.Facts)

	planSysctls(h, p, f)
	planRelease(h, p, f)
	planConfig(h, p, f)
	planReadback(h, p, f)

	h.Previous = PreviousState{
		DropIn:       fileFact(f, p.Paths.SysctlFile),
		CurrentLink:  f.Release.CurrentRaw,
		RelayConfig:  f.Config,
		RelayRunning: f.Service.Running,
	}
	for _, c := range h.Sysctls {
		h.Previous.Sysctls = append(h.Previous.Sysctls, PlannedSysctl{Key: c.Key, Value: tune.Normalize(c.Current)})
	}

	// A restart is what makes the socket pick up a new buffer: raising
	// rmem_max does nothing to a socket that already exists.
	h.Restart = h.Release.Action != "keep" || h.Config.Change ||
		!h.Readback.CurrentFound || h.Readback.Current != uint64(h.Readback.Expected)
	changes := h.Restart || h.DropIn.Change
	for _, c := range h.Sysctls {
		changes = changes || c.Change
	}
	switch {
	case len(h.Blockers) > 0:
		h.Action = ActionBlocked
	case changes:
		h.Action = ActionChange
	default:
		h.Action = ActionNone
	}
	if h.Action == ActionChange {
		h.Steps = steps(h, p)
	} else {
		h.Steps = []Step{}
	}
	return h
}

// ReadKeys are the sysctls read on every host of the plan: ObservedKeys
// and the planned ones, sorted, each once.
func (p *Plan) ReadKeys() []string {
	keys := make([]string, len(p.Sysctl))
	for i, s := range p.Sysctl {
		keys[i] = s.Key
	}
	return readKeys(keys)
}

// ReadKeys is Plan.ReadKeys for a plan not made yet.
func (s *Spec) ReadKeys() []string {
	keys := make([]string, len(s.Sysctl))
	for i, k := range s.Sysctl {
		keys[i] = k.Key
	}
	return readKeys(keys)
}

func readKeys(planned []string) []string {
	keys := append(append([]string{}, ObservedKeys...), planned...)
	sort.Strings(keys)
	out := keys[:0]
	for i, v := range keys {
		if i == 0 || v != keys[i-1] {
			out = append(out, v)
		}
	}
	return out
}

// Fingerprinted lists, sorted by name, every observed fact a plan depends
// on. Counters and PIDs are left out: they move without anything drifting.
func Fingerprinted(f *Facts, keys []string) []FactEntry {
	var e []FactEntry
	add := func(name, value string) { e = append(e, FactEntry{Name: name, Value: value}) }
	add("kernel", f.Kernel)
	add("ssh session in initial network namespace", strconv.FormatBool(f.InitialNetns))
	for _, k := range keys {
		sf := f.Sysctls[k]
		v := "(absent)"
		if sf.Exists {
			v = tune.Normalize(sf.Value)
			if !sf.Writable {
				v += " (read-only)"
			}
		}
		add("sysctl "+k, v)
	}
	for _, cf := range f.SysctlFiles {
		add("file "+cf.Path, "sha256:"+shortHash(cf.Content))
	}
	add("release current", orNone(f.Release.CurrentRaw))
	add("relay running", strconv.FormatBool(f.Service.Running))
	add("relay executable", orNone(f.Release.RunningExe))
	if f.Config.Exists {
		add("relay config", "sha256:"+shortHash(f.Config.Content))
	} else {
		add("relay config", "(absent)")
	}
	sort.Slice(e, func(i, j int) bool { return e[i].Name < e[j].Name })
	return e
}

// Fingerprint hashes the fingerprinted facts.
func Fingerprint(e []FactEntry) string {
	h := sha256.New()
	for _, f := range e {
		fmt.Fprintf(h, "%s=%s\n", f.Name, f.Value)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// Drift is one fact that changed since the plan was made.
type Drift struct {
	Name     string `json:"name"`
	Planned  string `json:"planned"`
	Observed string `json:"observed"`
}

// Diff lists the facts that differ between the plan's and a new observation.
func Diff(planned, observed []FactEntry) []Drift {
	pm, om := map[string]string{}, map[string]string{}
	var names []string
	for _, f := range planned {
		pm[f.Name] = f.Value
		names = append(names, f.Name)
	}
	for _, f := range observed {
		om[f.Name] = f.Value
		if _, ok := pm[f.Name]; !ok {
			names = append(names, f.Name)
		}
	}
	sort.Strings(names)
	var d []Drift
	for _, n := range names {
		pv, pok := pm[n]
		ov, ook := om[n]
		if !pok {
			pv = "(not present)"
		}
		if !ook {
			ov = "(not present)"
		}
		if pv != ov {
			d = append(d, Drift{Name: n, Planned: pv, Observed: ov})
		}
	}
	return d
}

func shortHash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

func fileFact(f *Facts, p string) FileFact {
	for _, cf := range f.SysctlFiles {
		if cf.Path == p {
			return FileFact{Exists: true, Content: cf.Content}
		}
	}
	return FileFact{}
}

func planSysctls(h *HostPlan, p *Plan, f *Facts) {
	planned := map[string]string{}
	for _, s := range p.Sysctl {
		planned[s.Key] = s.Value
	}
	h.DropIn = FileChange{Path: p.Paths.SysctlFile}
	if len(p.Sysctl) > 0 {
		h.DropIn.Planned = string(tune.RenderDropIn(planned, "# Written by relayctl (plan "+p.Name+"). Changes here are overwritten by the next apply."))
	}
	cur := fileFact(f, p.Paths.SysctlFile)
	h.DropIn.Exists = cur.Exists
	h.DropIn.Change = cur.Content != h.DropIn.Planned && (cur.Exists || h.DropIn.Planned != "")

	// Which file decides each key at the next boot, with our drop-in as planned.
	var files []tune.ConfFile
	for _, cf := range f.SysctlFiles {
		if cf.Path == p.Paths.SysctlFile {
			continue
		}
		files = append(files, tune.ConfFile{Path: cf.Path, Content: []byte(cf.Content)})
	}
	if h.DropIn.Planned != "" {
		files = append(files, tune.ConfFile{Path: p.Paths.SysctlFile, Content: []byte(h.DropIn.Planned)})
	}
	decided, _, err := tune.Decide(files)
	if err != nil {
		h.Warnings = append(h.Warnings, fmt.Sprintf("cannot tell which file decides the sysctls at boot: %v", err))
	}
	if masks, _, err := tune.Masks(files, p.Paths.SysctlFile); err == nil {
		for _, m := range masks {
			h.Warnings = append(h.Warnings, fmt.Sprintf("%s has the same name as %s, which it masks: none of that file's settings will apply at boot any more", p.Paths.SysctlFile, m))
		}
	}

	for _, s := range p.Sysctl {
		sf := f.Sysctls[s.Key]
		c := SysctlChange{Key: s.Key, Current: sf.Value, Planned: s.Value, Writable: sf.Writable}
		if !sf.Exists {
			h.Blockers = append(h.Blockers, fmt.Sprintf("%s does not exist on this host (kernel %s): nothing can set it; remove it from the spec or plan for a kernel that has it", s.Key, f.Kernel))
			h.Sysctls = append(h.Sysctls, c)
			continue
		}
		c.Change = !tune.Equal(sf.Value, s.Value)
		by, shadowed, _ := tune.Shadowed(files, p.Paths.SysctlFile, s.Key)
		if ours, ok := decided[s.Key]; ok && !shadowed {
			c.DecidedAtBoot = fmt.Sprintf("%s:%d", ours.Path, ours.Line)
			c.BootValue = tune.Normalize(ours.Value)
		}
		if shadowed {
			c.DecidedAtBoot = fmt.Sprintf("%s:%d", by.Path, by.Line)
			c.BootValue = tune.Normalize(by.Value)
			if by.Line == 0 {
				c.DecidedAtBoot = by.Path
				h.Warnings = append(h.Warnings, fmt.Sprintf("%s: %s masks our drop-in %s, so at the next boot it is not read at all", s.Key, by.Path, p.Paths.SysctlFile))
			} else if !tune.Equal(by.Value, s.Value) {
				c.Shadowed = true
				h.Warnings = append(h.Warnings, fmt.Sprintf("%s: %s sets it to %s and is applied after %s, so at the next boot the kernel gets %s, not %s; move the setting into our drop-in or rename %s", s.Key, c.DecidedAtBoot, c.BootValue, p.Paths.SysctlFile, c.BootValue, s.Value, path.Base(p.Paths.SysctlFile)))
			}
		}
		if c.Change && !sf.Writable {
			where := "where the SSH session runs"
			if !f.InitialNetns {
				where = "in this host's network namespace (the SSH session is in a container or child namespace)"
			}
			fix := "connect as root, or to the machine itself"
			if info, ok := tune.Lookup(s.Key); ok && info.Global {
				fix = "it is global to the machine: plan it on the machine that runs the container (its initial network namespace), then plan this host again"
			}
			h.Blockers = append(h.Blockers, fmt.Sprintf("%s is read-only %s, so apply cannot change it from %s to %s; %s", s.Key, where, tune.Normalize(sf.Value), s.Value, fix))
		}
		h.Sysctls = append(h.Sysctls, c)
	}
}

func planRelease(h *HostPlan, p *Plan, f *Facts) {
	r := ReleaseChange{Current: f.Release.Current, Planned: p.Relay.Version}
	for _, v := range f.Release.Installed {
		if v == p.Relay.Version {
			r.Installed = true
		}
	}
	want, _ := version.NewVersion(p.Relay.Version) // validated with the spec
	switch {
	case f.Release.Current == "":
		r.Action = "install"
	default:
		have, err := version.NewVersion(f.Release.Current)
		switch {
		case err != nil:
			r.Action = "install"
			h.Warnings = append(h.Warnings, fmt.Sprintf("the current release %q (%s) is not a version relayctl can compare; it will be replaced by %s", f.Release.Current, f.Release.CurrentRaw, p.Relay.Version))
		case want.Equal(have) && have.String() == want.String():
			r.Action = "keep"
		case want.GreaterThan(have):
			r.Action = "upgrade"
		case want.LessThan(have):
			r.Action = "downgrade"
			if !p.AllowDowngrade {
				h.Blockers = append(h.Blockers, fmt.Sprintf("release %s is older than the running %s: a downgrade needs plan --allow-downgrade", p.Relay.Version, f.Release.Current))
			}
		default: // equal by precedence, spelled differently (1.8 vs 1.8.0)
			r.Action = "keep"
		}
	}
	exe := f.Release.RunningExe
	if f.Service.Running && exe != "" && f.Release.CurrentRaw != "" && path.Dir(exe) != strings.TrimSuffix(resolveLink(p.Paths.Current, f.Release.CurrentRaw), "/") {
		h.Warnings = append(h.Warnings, fmt.Sprintf("the running relay was started from %s, but %s points at %s: a restart was already pending before this plan", exe, p.Paths.Current, f.Release.CurrentRaw))
	}
	h.Release = r
}

// resolveLink turns a symlink target into an absolute folder.
func resolveLink(link, target string) string {
	if path.IsAbs(target) {
		return path.Clean(target)
	}
	return path.Join(path.Dir(link), target)
}

func planConfig(h *HostPlan, p *Plan, f *Facts) {
	c := config.Default()
	if f.Config.Exists {
		parsed, err := config.Parse(strings.NewReader(f.Config.Content), p.Paths.RelayConfig)
		if err != nil {
			h.Warnings = append(h.Warnings, fmt.Sprintf("the relay config on the host does not parse (%v): it will be replaced, with defaults for what relayctl does not manage", err))
		} else {
			c = parsed
		}
	}
	// relayctl manages these keys; the rest of the operator's settings stay.
	c.Listen = "0.0.0.0:" + strconv.Itoa(p.Relay.Port)
	c.Control = p.Relay.Control
	c.SORcvbuf = p.Relay.SORcvbuf
	c.SORcvbufForce = p.Relay.SORcvbufForce
	planned := string(c.Render())
	h.Config = FileChange{Path: p.Paths.RelayConfig, Exists: f.Config.Exists, Planned: planned, Change: !f.Config.Exists || f.Config.Content != planned}
}

func planReadback(h *HostPlan, p *Plan, f *Facts) {
	after := func(key string) int {
		for _, s := range p.Sysctl {
			if s.Key == key {
				n, _ := strconv.Atoi(s.Value)
				return n
			}
		}
		n, _ := strconv.Atoi(tune.Normalize(f.Sysctls[key].Value))
		return n
	}
	rmemMax, rmemDefault := after(keyRmemMax), after(keyRmemDefault)
	e := tune.ExpectRcvbuf(p.Relay.SORcvbuf, p.Relay.SORcvbufForce, rmemMax, rmemDefault)
	h.Readback = Readback{
		Port: p.Relay.Port, Requested: p.Relay.SORcvbuf, Force: p.Relay.SORcvbufForce,
		RmemMax: rmemMax, RmemDefault: rmemDefault, Expected: e.Effective,
		Current: f.Socket.Rcvbuf, CurrentFound: f.Socket.Found, CurrentDrops: f.Socket.Drops,
	}
	if w := e.Warning(); w != "" {
		h.Warnings = append(h.Warnings, w)
	}
	before, _ := strconv.Atoi(tune.Normalize(f.Sysctls[keyRmemMax].Value))
	if p.Relay.SORcvbuf == 0 {
		if w := tune.NeverAsksWarning(before, rmemMax, rmemDefault); w != "" {
			h.Warnings = append(h.Warnings, w)
		}
	}
	if !f.Service.Running {
		h.Warnings = append(h.Warnings, "the relay is not running now, so there is no current read-back to compare; apply will start it in the window")
	} else if !f.Socket.Found {
		h.Warnings = append(h.Warnings, fmt.Sprintf("the relay is running (pid %d) but no UDP socket is bound to port %d in its network namespace: check relay.port", f.Service.PID, p.Relay.Port))
	}
}

func steps(h *HostPlan, p *Plan) []Step {
	var st []Step
	add := func(phase, kind, key, value, title string) {
		st = append(st, Step{Phase: phase, Kind: kind, Key: key, Value: value, Title: title})
	}
	rel := path.Join(p.Paths.Releases, p.Relay.Version)
	if h.Release.Action != "keep" {
		if h.Release.Installed {
			add(PhaseStage, StepCheckRelease, "", p.Relay.SHA256, fmt.Sprintf("check the sha256 of the release already in %s", rel))
		} else {
			add(PhaseStage, StepUploadRelease, "", p.Relay.SHA256, fmt.Sprintf("upload release %s to %s/relayd and check its sha256", p.Relay.Version, rel))
		}
	}
	if h.Config.Change {
		add(PhaseStage, StepStageConfig, "", "", fmt.Sprintf("write the relay config beside %s (not yet in place)", p.Paths.RelayConfig))
	}
	if h.DropIn.Change {
		add(PhaseStage, StepStageDropIn, "", "", fmt.Sprintf("write the sysctl drop-in beside %s (not yet in place)", p.Paths.SysctlFile))
	}
	for _, c := range h.Sysctls {
		if c.Change {
			add(PhaseWindow, StepSetSysctl, c.Key, c.Planned, fmt.Sprintf("set %s = %s in /proc/sys and read it back", c.Key, c.Planned))
		}
	}
	if h.DropIn.Change {
		add(PhaseWindow, StepPersistDropIn, "", "", fmt.Sprintf("put the drop-in in place as %s (atomic rename)", p.Paths.SysctlFile))
	}
	if h.Release.Action != "keep" {
		add(PhaseWindow, StepSwitchRelease, "", p.Relay.Version, fmt.Sprintf("point %s at %s (atomic rename of a new link)", p.Paths.Current, rel))
	}
	if h.Config.Change {
		add(PhaseWindow, StepInstallConfig, "", "", fmt.Sprintf("put the relay config in place as %s (atomic rename)", p.Paths.RelayConfig))
	}
	if h.Restart {
		add(PhaseWindow, StepRestart, "", "", "restart the relay once: "+restartHow(p.Relay.Service))
		add(PhaseVerify, StepVerifyProcess, "", p.Relay.Version, fmt.Sprintf("the relay runs with a new PID from release %s", p.Relay.Version))
	}
	add(PhaseVerify, StepVerifySocket, "", strconv.Itoa(h.Readback.Expected), fmt.Sprintf("ss in the relay's network namespace reads back rb %d on UDP port %d", h.Readback.Expected, p.Relay.Port))
	if len(p.Sysctl) > 0 {
		add(PhaseVerify, StepVerifySysctl, "", "", "the runtime sysctls read back as planned")
	}
	add(PhaseVerify, StepVerifyStatus, "", strconv.Itoa(h.Readback.Expected), fmt.Sprintf("the relay's own /status on %s agrees (so_rcvbuf_effective %d)", p.Relay.Control, h.Readback.Expected))
	return st
}

// Plan is the service as a plan records it.
func (s Service) Plan() PlanService {
	return PlanService{Manager: s.Manager, Name: s.Name, Start: s.Start, Stop: s.Stop, PID: s.PID}
}

func restartHow(s PlanService) string {
	if s.Manager == "systemd" {
		return "systemctl restart " + s.Name
	}
	return strings.Join(s.Stop, " ") + ", then " + strings.Join(s.Start, " ")
}

// Changes reports whether any host has something to do.
func (p *Plan) Changes() bool {
	for _, h := range p.Hosts {
		if h.Action == ActionChange {
			return true
		}
	}
	return false
}

// Blocked lists the hosts apply would refuse.
func (p *Plan) Blocked() []*HostPlan {
	var out []*HostPlan
	for _, h := range p.Hosts {
		if h.Action == ActionBlocked {
			out = append(out, h)
		}
	}
	return out
}
