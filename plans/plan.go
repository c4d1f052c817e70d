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

	"github.com/relayctl/relayctl/internal/lazyre"
	"github.com/relayctl/relayctl/relay/config"
	"github.com/relayctl/relayctl/relay/dist"
	"github.com/relayctl/relayctl/tune"
)

// FormatVersion is the layout version of plan files. apply refuses others.
// Version 2 records the spec itself, keeps no file content that may hold a
// secret, and finds a command-managed relay through its pid file; version
// 3 lists every file relayctl writes on a host in one list (files); version
// 4 says what kind of release it ships and how the service is told its
// values (relay.kind, program, keep, config with its templates); version 5
// leaves out what moves without anything drifting (the drop counters, the
// host's clock, the players: PLAN.readings.json, readings.go), says what
// each window step's rollback does (steps[].undo), and fingerprints the
// current link by the folder it names, not by how the link spells it.
const FormatVersion = 5

// Plan is the reviewed, one-window change for every host of a spec. Its JSON
// is byte-for-byte identical for identical inputs.
//
// A plan file is input, not authority: anyone who can write it can
// recompute its checksum. Apply therefore parses the recorded spec again
// (Validate), and re-derives each host's steps from that spec and the facts
// it observes, refusing when they differ from the ones recorded here.
type Plan struct {
	FormatVersion  int             `json:"format_version"`
	Checksum       string          `json:"checksum"` // sha256 of this JSON with checksum ""
	Name           string          `json:"name"`
	SpecFile       string          `json:"spec_file"`
	SpecSHA256     string          `json:"spec_sha256"`
	Spec           string          `json:"spec"` // the spec's text, parsed again by apply and verify
	AllowDowngrade bool            `json:"allow_downgrade"`
	Window         *PlanWindow     `json:"window,omitempty"`
	Capacity       *tune.Promise   `json:"capacity,omitempty"`    // what the region promises, from the spec
	CapacityBy     *LabelCapacity  `json:"capacity_by,omitempty"` // a promise per label value instead (capacity_labels.go)
	Drain          *Drain          `json:"drain,omitempty"`       // the gate before each window, from the spec
	Sysctl         []PlannedSysctl `json:"sysctl"`
	Relay          PlannedRelay    `json:"relay"`
	Paths          PlanPaths       `json:"paths"`
	Rollout        *Rollout        `json:"rollout,omitempty"` // the spec's rollout section (rollout.go)
	// Inventory is what the hosts were selected from, when the spec names
	// an inventory (spec_hosts.go): apply selects them again and refuses
	// a plan whose inventory changed.
	Inventory *InventoryRecord `json:"inventory,omitempty"`
	// Rollback is set on a plan relayctl rollback made: it undoes the
	// applied windows of that plan, each host's decisions from its own
	// receipt of that run (rollback.go).
	Rollback *RollbackRecord `json:"rollback,omitempty"`
	// UnreachableAllowed is the budget of hosts not read that the plan was
	// made with (plan's --max-unreachable, else the spec's
	// rollout.max_unreachable, else 0), recorded when a host could not be
	// read: a plan over it is not a plan to apply (OverBudget), which
	// approve and apply hold to.
	UnreachableAllowed string      `json:"unreachable_allowed,omitempty"`
	Hosts              []*HostPlan `json:"hosts"`
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
	// RunsProgram says why this value makes the kernel run a program as
	// root (tune.RunsProgram), which the spec allowed in its unsafe section.
	RunsProgram string `json:"runs_program,omitempty"`
}

// PlannedRelay is the relay part of the spec, as apply needs it.
type PlannedRelay struct {
	Port          int      `json:"port"`
	Control       string   `json:"control"`
	SORcvbuf      int      `json:"so_rcvbuf"`
	SORcvbufForce bool     `json:"so_rcvbuf_force"`
	HandoffSocket string   `json:"handoff_socket,omitempty"`
	Version       string   `json:"version"`
	Artifact      string   `json:"artifact"`      // as written in the spec, relative to it
	URL           string   `json:"url,omitempty"` // each host fetches the release from here
	SHA256        string   `json:"sha256"`
	Size          int64    `json:"size"`
	Capabilities  []string `json:"capabilities,omitempty"` // what the release says it can do (relay/capability)
	// VersionFrom is where the version of the release's program was read
	// from its bytes (relay/capability.BuildVersion): its version marker,
	// its Go build information, or none when it cannot be checked; "" for
	// a release of kind none.
	VersionFrom string      `json:"version_from,omitempty"`
	Service     PlanService `json:"service"`
	// Kind is the release's kind (ReleaseKinds), Program what the
	// service runs, Keep the releases a host keeps (Release).
	Kind    string `json:"kind"`
	Program string `json:"program"`
	Keep    int    `json:"keep,omitempty"`
	// TreeSHA256 (tarball, folder) is the hash of the unpacked release's
	// files (artifact.TreeHash), what a host checks after unpacking.
	TreeSHA256 string     `json:"tree_sha256,omitempty"`
	Config     PlanConfig `json:"config"`
}

// PlanConfig is how the service is told its values (ServiceConfig), with
// each template's text as reviewed.
type PlanConfig struct {
	EnvFile   bool           `json:"env_file"`
	Keys      EnvKeys        `json:"keys"`
	Templates []PlanTemplate `json:"templates,omitempty"`
	Vars      []Var          `json:"vars,omitempty"`
}

// PlanService is how apply restarts and finds the relay.
type PlanService struct {
	Manager string   `json:"manager"`
	Name    string   `json:"name,omitempty"`
	Start   []string `json:"start,omitempty"`
	Stop    []string `json:"stop,omitempty"`
	Handoff []string `json:"handoff,omitempty"`
	PIDFile string   `json:"pid_file,omitempty"`
	Log     string   `json:"log,omitempty"` // see Service
	// Reload (command manager) and ReloadKeepsSocket: see Service.
	Reload            []string `json:"reload,omitempty"`
	ReloadKeepsSocket bool     `json:"reload_keeps_socket,omitempty"`
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

// Release actions.
const (
	ReleaseInstall   = "install"
	ReleaseUpgrade   = "upgrade"
	ReleaseDowngrade = "downgrade"
	ReleaseKeep      = "keep"
)

// HostPlan is what happens on one host.
type HostPlan struct {
	Host string `json:"host"`
	// Target is where apply dials the host, [user@]address[:port], when
	// that is not its name (an inventory's ansible_host, _port, _user).
	Target string `json:"target,omitempty"`
	// Labels are the host's labels from the inventory (hosts.labels).
	Labels  map[string]string `json:"labels,omitempty"`
	Address string            `json:"address"`
	Kernel  string            `json:"kernel"`
	Action  string            `json:"action"`
	// Unreachable is why the host could not be read when the plan was
	// made (ActionUnreachable); the host plan has nothing else.
	Unreachable string         `json:"unreachable,omitempty"`
	Fingerprint string         `json:"fingerprint"`
	Facts       []FactEntry    `json:"facts"` // what the fingerprint covers
	Blockers    []string       `json:"blockers"`
	Warnings    []string       `json:"warnings"`
	Sysctls     []SysctlChange `json:"sysctls"`
	Release     ReleaseChange  `json:"release"`
	Files       []FileChange   `json:"files"` // every file relayctl writes on the host (files.go)
	Restart     bool           `json:"restart"`
	Switch      string         `json:"switch,omitempty"`     // how the window switches the relay: restart, handoff, reload, fdstore
	SwitchWhy   string         `json:"switch_why,omitempty"` // why that way
	// ClearStore says when a restart empties the unit's file-descriptor
	// store, so that a release that binds its own socket can start:
	// "window" (the new release cannot take the stored socket) or
	// "rollback" (the old one may not).
	ClearStore string `json:"clear_store,omitempty"`
	// StoreGap is the old rb against the spec's promise over the gap of a
	// restart through the store, when the spec has a capacity section.
	StoreGap *tune.Capacity `json:"store_gap,omitempty"`
	Readback Readback       `json:"readback"`
	Capacity *tune.Capacity `json:"capacity,omitempty"` // the planned rb against the spec's promise
	Steps    []Step         `json:"steps"`              // the steps apply will take (Input.Steps)
	Previous PreviousState  `json:"previous"`           // what a rollback restores
	// Undo is, in a rollback plan, the window this host goes back from, as
	// its receipt on the host records it.
	Undo *Undo `json:"undo,omitempty"`
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

// ReleaseChange is the relay release on one host.
type ReleaseChange struct {
	Kind      string `json:"kind"` // the release's kind (ReleaseKinds)
	Current   string `json:"current"`
	Planned   string `json:"planned"`
	Action    string `json:"action"` // install, upgrade, downgrade, keep
	Installed bool   `json:"installed"`
	// Prune are the releases a window that succeeds removes (older than
	// the newest relay.release.keep, never the current one or the
	// rollback target), PruneStore the store entries (by sha256).
	Prune      []string `json:"prune,omitempty"`
	PruneStore []string `json:"prune_store,omitempty"`
	// Upload is how the release will cross the uplink to the host, when
	// it is sent one (upload.go); a plan made without Input.Uploads has
	// none.
	Upload *Upload `json:"upload,omitempty"`
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
	// Sockets are the current rb of each of the service's sockets on the
	// port, when it has more than one (SO_REUSEPORT, IPv4 and IPv6):
	// each is read back, and each must end at Expected.
	Sockets []SocketRB `json:"sockets,omitempty"`
}

// SocketRB is one socket's address and rb.
type SocketRB struct {
	Local  string `json:"local"`
	Rcvbuf uint64 `json:"rb"`
}

// AllAtExpected reports whether every socket of the service was found at
// the expected rb already.
func (r Readback) AllAtExpected() bool {
	if !r.CurrentFound || r.Current != uint64(r.Expected) {
		return false
	}
	for _, s := range r.Sockets {
		if s.Rcvbuf != uint64(r.Expected) {
			return false
		}
	}
	return true
}

// PreviousState is what the host had that no other field of the host plan
// holds, for checking a rollback: the files' and sysctls' current state is
// in Files and Sysctls. File contents stay on the host (backed up there by
// apply).
type PreviousState struct {
	CurrentLink  string `json:"current_link"`
	RelayRunning bool   `json:"relay_running"`
}

// Step phases.
const (
	PhaseStage  = "stage"
	PhaseWindow = "window"
	PhaseVerify = "verify"
)

// Step is one step of a host's apply as the review shows it and the
// journal and receipt name it. rollout decides the steps (one type per
// step kind, in rollout/step_*.go) and apply compares the steps it derives
// with these.
type Step struct {
	Phase string `json:"phase"`
	Kind  string `json:"kind"`
	Key   string `json:"key,omitempty"`
	Value string `json:"value,omitempty"`
	Title string `json:"title"`
	// Undo is what a rollback does about a window step, in words: the
	// review's account of a failed window.
	Undo string `json:"undo,omitempty"`
}

// Artifact is the release file as found on the machine running relayctl.
type Artifact struct {
	SHA256       string
	Size         int64
	Capabilities []string // read from its bytes (relay/capability), never by running it
	TreeSHA256   string   // a tarball's or folder's files (artifact.TreeHash)
	// VersionFrom is where its program's version was read (capability.From…).
	VersionFrom string
}

// Input is everything a plan is made from.
type Input struct {
	Spec  *Spec
	Facts []*Facts // one per spec host read, any order
	// Unreachable are the spec hosts that could not be read, with why:
	// the plan holds them as unreachable (ActionUnreachable).
	Unreachable map[string]string
	Artifact    Artifact
	// Templates are the texts of the spec's templates, by source.
	Templates      map[string]string
	AllowDowngrade bool
	// Steps lists the steps apply takes on a host of the plan: the engine's
	// (rollout.Steps), which plans cannot import.
	Steps StepsFunc
	// Uploads sizes the release's upload to each host (Upload); nil: the
	// plan says nothing of it.
	Uploads Uploads
	// UnreachableAllowed is the budget of Unreachable the plan is made
	// with: the plan records it when a host could not be read.
	UnreachableAllowed Amount
}

// StepsFunc lists the steps apply takes on a host of a plan, in order.
type StepsFunc func(p *Plan, h *HostPlan) []Step

// Make computes the plan, steps included. It fails only when the input is
// inconsistent (facts missing or malformed for a host, no Steps); problems
// on a host become its blockers, and a host that could not be read is
// unreachable.
func Make(in Input) (*Plan, error) {
	s := in.Spec
	if in.Steps == nil {
		return nil, fmt.Errorf("plan %s: no step lister", s.Name)
	}
	if in.Artifact.SHA256 == "" && s.Relay.Release.Ships() {
		return nil, fmt.Errorf("plan %s: the artifact's sha256 is missing", s.Name)
	}
	for _, t := range s.Relay.Config.Templates {
		if _, ok := in.Templates[t.Source]; !ok {
			return nil, fmt.Errorf("plan %s: no text for template %s", s.Name, t.Source)
		}
	}
	if s.Relay.Release.SHA256 != "" && s.Relay.Release.SHA256 != in.Artifact.SHA256 {
		return nil, &SpecError{File: s.File, Field: "relay.release.sha256",
			Msg: fmt.Sprintf("the artifact %s has sha256 %s, the spec says %s; rebuild or fix the spec", s.Relay.Release.Artifact, in.Artifact.SHA256, s.Relay.Release.SHA256)}
	}
	p := header(s, in.Artifact, in.Templates, in.AllowDowngrade)
	p.SpecSHA256 = "sha256:" + sha256Text(string(s.Source))
	byHost := map[string]*Facts{}
	for _, f := range in.Facts {
		if err := ValidateFacts(f); err != nil {
			return nil, err
		}
		byHost[f.Host] = f
	}
	p.Inventory = s.InventoryRecord
	p.Hosts = make([]*HostPlan, 0, len(s.Hosts))
	for _, name := range s.Hosts {
		id := HostID{Name: name, Target: s.Targets[name], Labels: s.Labels[name]}
		f, ok := byHost[name]
		if why, down := in.Unreachable[name]; down && !ok {
			p.Hosts = append(p.Hosts, unreachableHost(id, why))
			continue
		}
		if !ok {
			return nil, fmt.Errorf("plan %s: no facts for host %s", s.Name, name)
		}
		h := planHost(p, id, f)
		h.Steps = in.Steps(p, h)
		if in.Uploads != nil {
			var err error
			if h.Release.Upload, err = planUpload(h, p, f, in.Uploads); err != nil {
				return nil, err
			}
		}
		p.Hosts = append(p.Hosts, h)
	}
	p.recordBudget(in.UnreachableAllowed)
	return p, nil
}

// HostID is a host as the plan names it: its name, where it is dialled,
// and its labels.
type HostID struct {
	Name   string
	Target string // "" when the name is dialled
	Labels map[string]string
}

// ID is the host plan's HostID.
func (h *HostPlan) ID() HostID { return HostID{Name: h.Host, Target: h.Target, Labels: h.Labels} }

// Dial is what apply dials: the target, else the name.
func (h *HostPlan) Dial() string {
	if h.Target != "" {
		return h.Target
	}
	return h.Host
}

// header is everything a plan takes from its spec (and the artifact), with
// no host: Validate compares a loaded plan's header with the one its
// recorded spec gives.
func header(s *Spec, art Artifact, templates map[string]string, allowDowngrade bool) *Plan {
	p := &Plan{
		FormatVersion:  FormatVersion,
		Name:           s.Name,
		SpecFile:       s.File,
		Spec:           string(s.Source),
		AllowDowngrade: allowDowngrade,
		Sysctl:         sortedSysctl(s.Sysctl),
		Relay: PlannedRelay{
			Port: s.Relay.Port, Control: s.Relay.Control,
			SORcvbuf: s.Relay.SORcvbuf, SORcvbufForce: s.Relay.SORcvbufForce,
			Version: s.Relay.Release.Version, Artifact: s.Relay.Release.Artifact,
			SHA256: art.SHA256, Size: art.Size, Capabilities: art.Capabilities, VersionFrom: art.VersionFrom,
			HandoffSocket: s.Relay.HandoffSocket,
			Service:       s.Relay.Service.Plan(),
			Kind:          s.Relay.Release.Kind, Program: s.Relay.Release.Program, Keep: s.Relay.Release.Keep,
			TreeSHA256: art.TreeSHA256,
			Config:     planConfigOf(s, templates),
		},
		Drain:      s.Drain,
		Paths:      PlanPaths(s.Paths),
		Capacity:   s.Capacity,
		CapacityBy: s.CapacityBy,
		Hosts:      []*HostPlan{},
	}
	if s.Rollout != nil {
		r := *s.Rollout
		p.Rollout = &r
	}
	p.Relay.URL = s.Relay.Release.URL
	if s.Window != nil {
		p.Window = &PlanWindow{
			NotBefore: s.Window.NotBefore.Format(timeLayout),
			NotAfter:  s.Window.NotAfter.Format(timeLayout),
		}
	}
	return p
}

const timeLayout = "2006-01-02T15:04:05Z07:00"

// planConfigOf is the spec's config section as a plan records it, with
// the templates' texts.
func planConfigOf(s *Spec, texts map[string]string) PlanConfig {
	c := s.Relay.Config
	pc := PlanConfig{EnvFile: c.EnvFile, Keys: c.Keys, Vars: c.Vars}
	if !c.EnvFile {
		pc.Keys = EnvKeys{}
	}
	for _, t := range c.Templates {
		text := texts[t.Source]
		pc.Templates = append(pc.Templates, PlanTemplate{Source: t.Source, Path: t.Target(s.Relay.Service),
			UnitDropIn: t.UnitDropIn != "", SHA256: sha256Text(text), Text: text})
	}
	return pc
}

func sortedSysctl(in []SysctlSetting) []PlannedSysctl {
	out := make([]PlannedSysctl, 0, len(in))
	for _, s := range in {
		why, _ := tune.RunsProgram(s.Key, s.Value)
		out = append(out, PlannedSysctl{Key: s.Key, Value: s.Value, RunsProgram: why})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

const (
	keyRmemMax     = "net.core.rmem_max"
	keyRmemDefault = "net.core.rmem_default"
)

// decideAction settles whether the host's window switches the relay, how,
// and the host's action: blocked, a change, or nothing to do.
func decideAction(h *HostPlan, p *Plan, f *Facts) {
	// A restart is what makes the socket pick up a new buffer: raising
	// rmem_max does nothing to a socket that already exists.
	h.Restart = h.Release.Action != ReleaseKeep || h.filesRestart() || !h.Readback.AllAtExpected()
	changes := h.Restart
	for _, fc := range h.Files {
		changes = changes || fc.Change
	}
	for _, c := range h.Sysctls {
		changes = changes || c.Change
	}
	if h.Restart {
		planSwitch(h, p, f)
	}
	switch {
	case len(h.Blockers) > 0:
		h.Action = ActionBlocked
	case changes:
		h.Action = ActionChange
	default:
		h.Action = ActionNone
	}
}

// ObservedKeys are the sysctls read on every host besides the planned ones:
// the read-back rule depends on them.
var ObservedKeys = []string{keyRmemMax, keyRmemDefault}

// Replan computes, from a plan's own inputs and new facts, what the plan
// would do to the host now. apply uses it to re-derive every action instead
// of trusting the plan file; verify, to list what differs. id is the host
// as the plan names it.
func Replan(p *Plan, id HostID, f *Facts, steps StepsFunc) (*HostPlan, error) {
	if err := ValidateFacts(f); err != nil {
		return nil, err
	}
	h := planHost(p, id, f)
	if p.Rollback != nil {
		h = planRollbackHost(p, id, f)
	}
	h.Steps = steps(p, h)
	return h, nil
}

func planHost(p *Plan, id HostID, f *Facts) *HostPlan {
	h := &HostPlan{Host: f.Host, Target: id.Target, Labels: id.Labels, Address: f.Address, Kernel: f.Kernel, Blockers: []string{}, Warnings: []string{}, Steps: []Step{}}
	h.Facts = Fingerprinted(f, p.ReadKeys(), p.Paths.Current)
	h.Fingerprint = Fingerprint(h.Facts)

	dropIn := planSysctls(h, p, f)
	planRelease(h, p, f)
	if p.Relay.Config.EnvFile {
		h.Files = append(h.Files, planConfig(h, p, f))
	}
	h.Files = append(h.Files, dropIn)
	if u := planUnitDropIn(p, f); u != nil {
		h.Files = append(h.Files, *u)
	}
	h.Files = append(h.Files, planTemplates(h, p, f)...)
	planReadback(h, p, f)
	planService(h, p, f)
	planDrain(h, p, f)
	h.Previous = PreviousState{CurrentLink: f.Release.CurrentRaw, RelayRunning: f.Service.Running}

	decideAction(h, p, f)
	if h.Action == ActionChange {
		h.Release.Prune, h.Release.PruneStore = planPrune(p, f)
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

// readKeys are ObservedKeys, the planned keys, and the keys the kernel
// checks a planned one against (tune.Related).
func readKeys(planned []string) []string {
	keys := append(append([]string{}, ObservedKeys...), planned...)
	for _, k := range planned {
		keys = append(keys, tune.Related(k)...)
	}
	sort.Strings(keys)
	out := keys[:0]
	for i, v := range keys {
		if i == 0 || v != keys[i-1] {
			out = append(out, v)
		}
	}
	return out
}

func sha256Text(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// SHA256 is the hex sha256 of s, as plans record file contents.
func SHA256(s string) string { return sha256Text(s) }

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

// DropInHeader opens the drop-in relayctl writes.
func DropInHeader(plan string) string {
	return "Written by relayctl (plan " + plan + "). Changes here are overwritten by the next apply."
}

func planRelease(h *HostPlan, p *Plan, f *Facts) {
	if p.Relay.Kind == ReleaseKindNone {
		h.Release = ReleaseChange{Kind: ReleaseKindNone, Action: ReleaseKeep}
		return
	}
	r := ReleaseChange{Kind: p.Relay.Kind, Current: f.Release.Current, Planned: p.Relay.Version}
	for _, v := range f.Release.Installed {
		if v == p.Relay.Version {
			r.Installed = true
		}
	}
	want, _ := version.NewVersion(p.Relay.Version) // validated with the spec
	switch {
	case f.Release.Current == "":
		r.Action = ReleaseInstall
		if f.Release.CurrentRaw != "" {
			h.Warnings = append(h.Warnings, fmt.Sprintf("%s points at %s, which is not a release folder in %s: it will point at %s", p.Paths.Current, f.Release.CurrentRaw, p.Paths.Releases, path.Join(p.Paths.Releases, p.Relay.Version)))
		}
	default:
		have, err := version.NewVersion(f.Release.Current)
		switch {
		case err != nil:
			r.Action = ReleaseInstall
			h.Warnings = append(h.Warnings, fmt.Sprintf("the current release %q (%s) is not a version relayctl can compare; it will be replaced by %s", f.Release.Current, f.Release.CurrentRaw, p.Relay.Version))
		case want.Equal(have) && have.String() == want.String():
			r.Action = ReleaseKeep
		case want.GreaterThan(have):
			r.Action = ReleaseUpgrade
		case want.LessThan(have):
			r.Action = ReleaseDowngrade
			if !p.AllowDowngrade {
				h.Blockers = append(h.Blockers, fmt.Sprintf("release %s is older than the running %s: a downgrade needs plan --allow-downgrade", p.Relay.Version, f.Release.Current))
			}
		default: // equal by precedence, spelled differently (1.8 vs 1.8.0)
			r.Action = ReleaseKeep
		}
	}
	exe := f.Release.RunningExe
	if f.Service.Running && exe != "" && f.Release.CurrentRaw != "" && path.Dir(exe) != ResolveLink(p.Paths.Current, f.Release.CurrentRaw) {
		h.Warnings = append(h.Warnings, fmt.Sprintf("the running relay was started from %s, but %s points at %s: a restart was already pending before this plan", exe, p.Paths.Current, f.Release.CurrentRaw))
	}
	h.Release = r
}

// ResolveLink turns a symlink's target into the absolute, clean path it
// names, as the kernel resolves it from the link's folder.
func ResolveLink(link, target string) string {
	if path.IsAbs(target) {
		return path.Clean(target)
	}
	return path.Join(path.Dir(link), target)
}

// ReleaseOf returns the version the current link names when it points at
// a folder directly in releases, and "" otherwise: a link to
// /anywhere/1.8.0 is not release 1.8.0.
func ReleaseOf(paths PlanPaths, target string) string {
	if target == "" {
		return ""
	}
	dir := ResolveLink(paths.Current, target)
	if path.Dir(dir) != paths.Releases {
		return ""
	}
	return path.Base(dir)
}

// ManagedConfig are the relay config keys relayctl writes, under the
// names the spec gives them (relayd's by default), with the values a plan
// gives them; every other line of the file is kept as it is.
func ManagedConfig(r PlannedRelay) []config.Setting {
	k := r.Config.Keys
	var s []config.Setting
	add := func(key, value string) {
		if key != "" {
			s = append(s, config.Setting{Key: key, Value: value})
		}
	}
	add(k.Listen, "0.0.0.0:"+strconv.Itoa(r.Port))
	if r.Control != "" {
		add(k.Control, r.Control)
	}
	add(k.SORcvbuf, strconv.Itoa(r.SORcvbuf))
	add(k.SORcvbufForce, strconv.FormatBool(r.SORcvbufForce))
	if r.HandoffSocket != "" {
		add(k.HandoffSocket, r.HandoffSocket)
	}
	return s
}

// Players is what a relay reports holding.
type Players struct {
	Players int `json:"players"`
	Lobbies int `json:"lobbies"`
}

// planDrain warns when the drain gate cannot see the relay's players.
// (How many it has now is a reading, not the plan: readings.go.)
func planDrain(h *HostPlan, p *Plan, f *Facts) {
	if p.Drain == nil {
		return
	}
	if st := f.RelayStatus; st == nil || !st.Read {
		h.Warnings = append(h.Warnings, "drain: the relay's /status could not be read, so apply cannot tell when its players have gone; it will wait until the deadline")
	}
}

func planConfig(h *HostPlan, p *Plan, f *Facts) FileChange {
	managed := ManagedConfig(p.Relay)
	if f.Config.Unsafe != "" {
		h.Blockers = append(h.Blockers, fmt.Sprintf("the relay config was not read: %s; relayctl reads and writes a config (which may hold secrets) only as a regular file in a folder only root can write: fix it on the host, then plan again", f.Config.Unsafe))
		return FileChange{Role: RoleRelayConfig, Path: p.Paths.RelayConfig}
	}
	var planned string
	if f.Config.Exists {
		// The operator's lines stay as they are, in their order: the review
		// then shows only the keys relayctl manages changing.
		planned = string(config.Edit([]byte(f.Config.Content), managed))
		if _, err := config.Parse(strings.NewReader(planned), p.Paths.RelayConfig); err != nil && p.Relay.Config.Keys == RelaydKeys {
			// Not the error's words: they quote the line, which may hold a secret.
			h.Warnings = append(h.Warnings, fmt.Sprintf("relayd would not read the planned relay config (%s): relayctl keeps the lines it does not manage as they are; fix them on the host", configProblem(planned)))
		}
	} else if p.Relay.Config.Keys == RelaydKeys {
		c := config.Default()
		for _, s := range managed {
			c.Set(s.Key, s.Value)
		}
		planned = string(c.Render())
	} else {
		planned = string(config.Edit(nil, managed))
	}
	fc := fileChange(RoleRelayConfig, p.Paths.RelayConfig, f.Config, planned, false)
	fc.Masked = f.Config.Masked
	fc.Diff = maskDiff(fc.Diff, managedKeys(managed))
	if fc.Change {
		fc.Changes = keyChanges(configKeys(f.Config.Content), configKeys(planned), managedKeys(managed), IsSecretKey)
	}
	return fc
}

// configProblem says where relayd's parser stops in a config, by line and
// key only: its own error quotes the line, which may hold a secret.
func configProblem(content string) string {
	_, err := config.Parse(strings.NewReader(content), "config")
	if err == nil {
		return "it parses"
	}
	m := configLine.FindStringSubmatch(err.Error())
	if m == nil {
		return "it does not parse"
	}
	for _, a := range config.Assignments([]byte(content)) {
		if strconv.Itoa(a.Line) == m[1] {
			return "line " + m[1] + ", key " + a.Key
		}
	}
	return "line " + m[1]
}

// configLine finds the line number in relayd's config error.
var configLine = lazyre.New(`^config:([0-9]+):`)

func managedKeys(s []config.Setting) map[string]bool {
	m := map[string]bool{}
	for _, x := range s {
		m[x.Key] = true
	}
	return m
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
		Current: f.Socket.Rcvbuf, CurrentFound: f.Socket.Found,
	}
	for _, s := range f.Socket.All {
		h.Readback.Sockets = append(h.Readback.Sockets, SocketRB{Local: s.Local, Rcvbuf: s.Rcvbuf})
	}
	if w := e.Warning(); w != "" {
		h.Warnings = append(h.Warnings, w)
	}
	if pr := p.promiseFor(h); pr != nil {
		c := tune.CheckCapacity(*pr, e.Effective)
		h.Capacity = &c
		if w := c.Warning(); w != "" {
			h.Warnings = append(h.Warnings, w)
		}
	}
	before, _ := strconv.Atoi(tune.Normalize(f.Sysctls[keyRmemMax].Value))
	if p.Relay.SORcvbuf == 0 {
		if w := tune.NeverAsksWarning(before, rmemMax, rmemDefault); w != "" {
			h.Warnings = append(h.Warnings, w)
		}
	}
	if !f.Service.Running {
		detail := ""
		if f.Service.Detail != "" {
			detail = " (" + f.Service.Detail + ")"
		}
		h.Warnings = append(h.Warnings, "the relay is not running now"+detail+", so there is no current read-back to compare; apply will start it in the window")
	} else if !f.Socket.Found {
		h.Warnings = append(h.Warnings, fmt.Sprintf("the relay is running (pid %d) but no UDP socket is bound to port %d in its network namespace: check relay.port", f.Service.PID, p.Relay.Port))
	}
}

// planService blocks a systemd host whose unit does not exist: systemctl
// restart would fail in the window.
func planService(h *HostPlan, p *Plan, f *Facts) {
	if p.Relay.Service.Manager == "systemd" && f.Service.UnitMissing {
		h.Blockers = append(h.Blockers, fmt.Sprintf("the systemd unit %s does not exist on this host (systemctl says %q): install relay/dist/relayd.service (see docs/systemd.md) or fix relay.service.name", p.Relay.Service.Name, f.Service.Detail))
	}
}

// UnitDropInPath is the drop-in relayctl owns for a systemd unit: the
// one relay/dist ships for so_rcvbuf_force (CAP_NET_ADMIN), under the
// name operators would install it.
func UnitDropInPath(unit string) string {
	return UnitDropInDir(unit) + "/" + unitDropInForce
}

// planUnitDropIn: a systemd relay that asks SO_RCVBUFFORCE needs
// CAP_NET_ADMIN, which the shipped unit does not grant; relayctl installs
// the shipped drop-in (and removes it when force is off), with a
// daemon-reload, in the same window.
func planUnitDropIn(p *Plan, f *Facts) *FileChange {
	// relayd's drop-in, for a service that takes SO_RCVBUFFORCE from its env
	// file: another service grants itself capabilities in a unit drop-in
	// of its own (relay.config.templates), since CapabilityBoundingSet
	// here would take every other capability from it.
	if p.Relay.Service.Manager != "systemd" || !p.Relay.Config.EnvFile || p.Relay.Config.Keys.SORcvbufForce == "" {
		return nil
	}
	cur := FileFact{}
	if f.UnitDropIn != nil {
		cur = *f.UnitDropIn
	}
	fc := fileChange(RoleUnitDropIn, UnitDropInPath(p.Relay.Service.Name), cur, string(dist.ForceDropIn), !p.Relay.SORcvbufForce)
	return &fc
}

// Plan is the service as a plan records it.
func (s Service) Plan() PlanService {
	return PlanService(s)
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
