package rollout

import (
	"fmt"
	"time"

	"github.com/relayctl/relayctl/plans"
	"github.com/relayctl/relayctl/tune"
	"github.com/relayctl/relayctl/uplink"
)

// step is one step of a host's apply, one type per file (step_*.go): its
// title as the review, progress, journal and receipt show it; the host
// primitives that carry it out; the ones that undo it; the read-back checks
// that prove it (and, after a rollback, that it was undone); and what the
// engine needs to know about it (traits). Steps embed noStep for what they
// do not need.
type step interface {
	describe() plans.Step
	// prepare are primitives run before the window, with the stage: what
	// undo will need (a backup), nothing that changes what is in force.
	prepare() []Op
	// do carries the step out, in its phase.
	do() []Op
	// undo restores what do changed; rollback runs it for every window
	// step that started, last one first (a switch's after all others).
	undo() []Op
	// checks compare the host read back after the window with the plan.
	checks(c *checkCtx) []Check
	// restored compare the host read back after a rollback with before.
	restored(c *checkCtx) []Check
	// hostChecks are what the host checks of its own reading when it ends
	// the window by itself (window.go): a few of checks', in words the
	// agent evaluates.
	hostChecks(c *checkCtx) []HostCheck
	traits() traits
}

// traits are what the engine needs to know about a step, so that it never
// matches step kinds.
type traits struct {
	// switches: the relay switch, the one moment players notice (restart or
	// handoff). Its primitive answers the host clock when the relay stopped
	// (the window's length is measured from there), it is counted in the
	// receipt, and its undo runs after every other undo.
	switches bool
	// handsOver: the switch passes the socket and lobbies to the new
	// release instead of restarting; when its do fails the old relay still
	// serves, so there is nothing of it to undo.
	handsOver bool
}

// noStep is a step that does nothing; steps embed it for the methods they
// do not need.
type noStep struct{}

func (noStep) prepare() []Op                    { return nil }
func (noStep) do() []Op                         { return nil }
func (noStep) undo() []Op                       { return nil }
func (noStep) checks(*checkCtx) []Check         { return nil }
func (noStep) restored(*checkCtx) []Check       { return nil }
func (noStep) hostChecks(*checkCtx) []HostCheck { return nil }
func (noStep) traits() traits                   { return traits{} }

// undoOf is what rollback runs for a step whose do started; failed says
// its do failed.
func undoOf(s step, failed bool) []Op {
	if failed && s.traits().handsOver {
		return nil // the old relay still serves its socket
	}
	return s.undo()
}

// checkCtx is what checks compare: the plan and the host before and after.
type checkCtx struct {
	p             *plans.Plan
	h             *plans.HostPlan
	before, after *plans.Facts // before is nil for verify
}

// stepInput is what steps need besides the plan: the bytes they upload
// and their forms for the wire with the host as observed (what it decodes
// and keeps: the forms it is sent), and how long a host may take to fetch
// a release from the plan's url.
type stepInput struct {
	artifact     []byte
	wire         *uplink.Release
	facts        *plans.Facts
	fetchTimeout time.Duration
	// releaseSum hears what the host says of the release a window
	// switches away from (its sha256, tree hash and capabilities): the
	// receipt's record of it, for a rollback.
	releaseSum func(string)
}

// Step kinds, as journals and receipts name them.
const (
	KindCheckFolders  = "check-folders"
	KindPlaceRelease  = "place-release"
	KindFetchRelease  = "fetch-release"
	KindCheckRelease  = "check-release"
	KindStageFile     = "stage-file"
	KindRestoreFile   = "restore-file"
	KindSetSysctl     = "set-sysctl"
	KindPersistDropIn = "persist-drop-in"
	KindSwitchRelease = "switch-release"
	KindInstallConfig = "install-config"
	KindUnitDropIn    = "unit-drop-in"
	KindInstallDropIn = "install-drop-in"
	KindRestart       = "restart"
	KindHandoff       = "handoff"
	KindReload        = "reload"
	KindReadBack      = "read-back"
)

// steps lists what apply does on a host, in order, from its host plan.
// With target set it lists every step whatever needs changing: their
// checks together describe the state the plan promises (verify uses them).
func steps(p *plans.Plan, h *plans.HostPlan, in stepInput, target bool) []step {
	if p.Rollback != nil && h.Undo == nil {
		return nil // a rollback plan's host with no window to undo: nothing is promised
	}
	var st []step
	if !target {
		st = append(st, newCheckFolders(p, h))
		rel := releaseSteps(p, h, in)
		st = append(st, rel...)
		send := len(rel) > 0 && lacksRelease(p, in)
		for _, fc := range h.Files {
			switch {
			case !fc.Change || fc.Remove:
			case fc.Restore != "":
				st = append(st, newRestoreFile(p, h.Undo, fc))
			default:
				st = append(st, stageFile{fc: fc, send: send})
			}
		}
	}
	for _, c := range h.Sysctls {
		if c.Change || target {
			st = append(st, setSysctl{key: c.Key, value: c.Planned, previous: tune.Normalize(c.Current)})
		}
	}
	for _, fc := range h.Files {
		if fc.Change || target {
			st = append(st, newInstallFile(fc))
		}
	}
	rel := releaseFor(p, h)
	if h.Release.Action != plans.ReleaseKeep || target && p.Relay.Kind != plans.ReleaseKindNone {
		st = append(st, switchRelease{link: p.Paths.Current, dir: rel.dir, version: rel.version, paths: p.Paths, previous: h.Previous.CurrentLink,
			program: rel.program, tree: rel.tree != "-", heard: in.releaseSum})
	}
	if h.Restart || target {
		st = append(st, restart{svc: p.Relay.Service, wasRunning: h.Previous.RelayRunning, planned: h.Restart,
			handoff: h.Switch == plans.SwitchHandoff, reload: h.Switch == plans.SwitchReload,
			store: h.Switch == plans.SwitchFDStore, clearStore: h.ClearStore})
	}
	return append(st, readBack{port: p.Relay.Port, expected: h.Readback.Expected, control: p.Relay.Control, version: rel.version})
}

// releaseSteps bring the planned release onto the host before the window:
// checked where it is there already, else fetched by the host or uploaded.
func releaseSteps(p *plans.Plan, h *plans.HostPlan, in stepInput) []step {
	r := releaseFor(p, h)
	switch {
	case h.Release.Action == plans.ReleaseKeep:
		return nil
	case h.Release.Installed || h.Undo != nil: // a rollback ships nothing: the host keeps the release
		return []step{checkRelease{release: r}}
	case p.Relay.URL != "":
		return []step{fetchRelease{release: r, url: p.Relay.URL, timeout: in.fetchTimeout}}
	}
	return []step{placeRelease{release: r, data: in.artifact, packed: packedRelease(p, in), lacks: lacksRelease(p, in)}}
}

func releaseDir(p *plans.Plan) string { return p.Paths.Releases + "/" + p.Relay.Version }

// Steps lists the steps apply takes on a host of a plan, as the review
// shows them and apply compares them with the ones it derives: what a plan
// is made with (plans.Input.Steps). A host with nothing to change has none.
func Steps(p *plans.Plan, h *plans.HostPlan) []plans.Step {
	out := []plans.Step{}
	if h.Action != plans.ActionChange {
		return out
	}
	for _, s := range steps(p, h, stepInput{}, false) {
		out = append(out, s.describe())
	}
	return out
}

// PlannedChecks compares a host read back after the window (or now, for
// verify, with before nil) with the state the plan promises: the checks of
// every step the plan can take.
func PlannedChecks(p *plans.Plan, h *plans.HostPlan, before, after *plans.Facts) []Check {
	return checksOf(steps(p, h, stepInput{}, true), &checkCtx{p: p, h: h, before: before, after: after})
}

// checksOf are the steps' checks against c.
func checksOf(st []step, c *checkCtx) []Check {
	var out []Check
	for _, s := range st {
		out = append(out, s.checks(c)...)
	}
	return out
}

// Check is one read-back comparison.
type Check struct {
	What string `json:"what"`
	Want string `json:"want"`
	Got  string `json:"got"`
	OK   bool   `json:"ok"`
}

func check(what, want, got string) Check {
	return Check{What: what, Want: want, Got: got, OK: want == got}
}

// fileCheck compares a file read back with the sha256 a plan gives it.
func fileCheck(what string, exists bool, content, wantSHA string, wantExists bool) Check {
	got := "absent"
	if exists {
		got = "sha256 " + short12(plans.SHA256(content))
	}
	want := "absent"
	if wantExists {
		want = "sha256 " + short12(wantSHA)
	}
	return check(what, want, got)
}

func short12(s string) string {
	if len(s) > 12 {
		return s[:12]
	}
	return s
}

func titlef(format string, a ...any) string { return fmt.Sprintf(format, a...) }
