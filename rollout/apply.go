package rollout

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/relayctl/relayctl/artifact"
	"github.com/relayctl/relayctl/plans"
	"github.com/relayctl/relayctl/relay/capability"
	"github.com/relayctl/relayctl/uplink"
)

// ApplyOptions travel from the CLI to the engine.
type ApplyOptions struct {
	Parallel int    // hosts in flight after the canary
	Artifact []byte // the release file, checked against the plan's sha256
	// Cache holds the releases relayctl shipped before (a patch's base)
	// and the forms of this one a plan made (uplink.Cache); nil: the
	// release goes compressed, never as a patch.
	Cache         *uplink.Cache
	Now           func() time.Time
	IgnoreWindow  bool      // apply outside the plan's window
	ClearJournal  bool      // archive an unfinished run's journal that cannot be recovered with this plan, and go on
	Owner         string    // who applies, recorded in the host lock
	Progress      io.Writer // one line per step, for people
	VerifyTimeout time.Duration
	// StableFor is how long the read-back must hold, the same relay process
	// (PID and systemd's invocation) still reading back as planned, before
	// a host counts as applied: a relay that starts and then dies is not
	// applied. 0 is one read-back for the command manager and a second for
	// systemd, where Restart=on-failure can hide a crash behind a new PID.
	// The read-back may take VerifyTimeout to hold, then StableFor more.
	// The CLI's default is DefaultStableFor.
	StableFor time.Duration
	// Reconnects is how many times the run dials a host again after it
	// lost the connection once the window began (resync.go): 0 is
	// DefaultReconnects, a negative number none.
	Reconnects int

	// The fleet (waves.go, ledger.go, fleetview.go).
	Rollout    *plans.Resolved    // waves and budgets; nil: the plan's own
	Resume     *Ledger            // go on with the hosts this ledger has not applied (within Only)
	Only       *plans.Selector    // the hosts this run works on (--only region=ash); nil: every host
	Outside    *Ledger            // without Resume: an earlier ledger of this plan, whose hosts outside Only keep their lines
	SaveLedger func([]byte) error // called with the whole ledger when the run starts and ends, and each time a host starts or ends without PatchLedger
	// PatchLedger rewrites bytes of the file SaveLedger last wrote, in
	// place: with it, a host that starts or ends costs one line and the
	// header, whatever the fleet's size (ledger.go).
	PatchLedger  func(p []byte, off int64) error
	Live         bool          // Progress is a terminal: a live fleet view instead of step lines
	LiveWidth    int           // its columns
	StageOnly    bool          // stop each host after its stage (relayctl stage)
	FetchTimeout time.Duration // a host's fetch of a url release

	confirmOnly bool            // check a host the ledger shows done is as planned, and change nothing
	wire        *uplink.Release // the artifact's forms for the wire, shared by every host
	soakRole    string          // this host soaks (Rollout.Soak), as its wave's canary or as every host
	Approval    *Approval       // how the caller decided the plan may run, for the receipt
	// RunInfo is the run's id, kind, operator and relayctl, for every
	// receipt; Apply gives it an id and a kind when the caller did not.
	RunInfo RunInfo
}

// DefaultStableFor is apply's --stable-for when not given: a release
// whose relay starts, reads back as planned and dies a few seconds later
// (its first lobbies, a timer, a reload at start-up) is caught on the
// canary, which is rolled back before the next wave starts, instead of
// counting as applied at its first reading. It costs each host's window as
// long (the relay is up and serving meanwhile; the host lock is held):
// docs/cli.md has the figures.
const DefaultStableFor = 10 * time.Second

// Checked is a plan that passed CheckPlan: the only kind Apply and Stage
// take, so a run checks its plan once, before anything connects.
type Checked struct {
	plan *plans.Plan
	note string
}

// Plan is the checked plan.
func (c Checked) Plan() *plans.Plan { return c.plan }

// InventoryNote says, for a plan whose inventory or vars files changed
// since it was made but select the same hosts, what changed; "" otherwise.
func (c Checked) InventoryNote() string { return c.note }

// CheckPlan is everything apply and verify check in a plan file before
// anything connects: the plan against its recorded spec (plans.Validate),
// and each host's recorded steps against the ones its own recorded
// decisions give. A plan edited after it was made, checksum recomputed or
// not, fails here or, for what needs the host, when apply derives the
// host's plan again from what it observes.
//
// A plan whose hosts came from an inventory needs that inventory, to
// select them again: CheckPlanFrom.
func CheckPlan(p *plans.Plan) (Checked, error) {
	if p.Inventory != nil {
		return Checked{}, fmt.Errorf("check plan %s: %w", p.Name, plans.ErrNeedsInventory)
	}
	return checkPlan(p)
}

// CheckPlanFrom is CheckPlan for a plan whose hosts came from an
// inventory: besides CheckPlan's checks, its hosts are selected again from
// in, the inventory as it is now (plans.CheckInventory), so a plan whose
// inventory changed, or whose hosts were edited, is refused.
func CheckPlanFrom(p *plans.Plan, in plans.InventoryInput) (Checked, error) {
	c, err := checkPlan(p)
	if err != nil {
		return Checked{}, err
	}
	note, err := plans.CheckInventory(p, in)
	if err != nil {
		return Checked{}, err
	}
	c.note = note
	return c, nil
}

// fromArtifact checks what the plan took from the artifact's bytes, its
// capabilities and where its version was read, against the program it
// ships: a plan edited to claim a handoff gets none, and one edited to
// claim a checked version (which takes the review's warning away) is
// refused.
func fromArtifact(p *plans.Plan, program []byte) error {
	caps, err := capability.Capabilities(program)
	if err != nil {
		return err
	}
	if !slices.Equal(caps, p.Relay.Capabilities) {
		return fmt.Errorf("%w: the plan says release %s can %q, its artifact says %q", plans.ErrPlanEdited, p.Relay.Version, p.Relay.Capabilities, caps)
	}
	st, err := capability.BuildVersion(program)
	if err != nil {
		return err
	}
	if st.From != p.Relay.VersionFrom || st.From != capability.FromNone && st.Version != p.Relay.Version {
		return fmt.Errorf("%w: the plan says release %s's version was read from %s, its artifact's is %q from %s", plans.ErrPlanEdited, p.Relay.Version, plans.Visible(p.Relay.VersionFrom), plans.Visible(st.Version), st.From)
	}
	return nil
}

// CheckUnselected is CheckPlan for reading a plan rather than applying
// it: an inventory plan's hosts are not selected again, so a plan whose
// hosts are a program's output is shown and approved without running the
// program. It gives no Checked: nothing applies such a plan.
func CheckUnselected(p *plans.Plan) error {
	_, err := checkPlan(p)
	return err
}

func checkPlan(p *plans.Plan) (Checked, error) {
	if err := plans.Validate(p); err != nil {
		return Checked{}, err
	}
	for _, h := range p.Hosts {
		if d := stepDiff(h.Steps, Steps(p, h)); d != "" {
			return Checked{}, fmt.Errorf("%w: host %s: %s; make and review the plan again", plans.ErrPlanEdited, h.Host, d)
		}
	}
	return Checked{plan: p}, nil
}

// stepDiff names the first difference between two step lists.
func stepDiff(stored, derived []plans.Step) string {
	for i := 0; i < max(len(stored), len(derived)); i++ {
		switch {
		case i >= len(derived):
			return fmt.Sprintf("step %d (%s) is not one this plan takes", i+1, plans.Visible(stored[i].Title))
		case i >= len(stored):
			return fmt.Sprintf("step %d (%s) is missing", i+1, derived[i].Title)
		case stored[i] != derived[i]:
			return fmt.Sprintf("step %d is %q, the plan's decisions give %q", i+1, plans.Visible(stored[i].Title), derived[i].Title)
		}
	}
	return ""
}

// Apply applies a plan in waves (waves.go): by default the first host
// alone as a canary, then the rest, parallel at a time. A wave over its
// failure budget, or ctx being cancelled (SIGINT), stops new hosts from
// starting; a host inside its window finishes it or rolls back whatever
// happens to ctx. The ledger (ledger.go) is saved as each host starts and
// ends; with o.Resume, hosts it has applied or unchanged are not touched.
func Apply(ctx context.Context, d HostDialer, c Checked, o ApplyOptions) (*Report, error) {
	p := c.plan
	if p == nil {
		return nil, errors.New("apply: no checked plan")
	}
	// The release's capabilities are read from its bytes, not taken from
	// the plan file: a plan edited to claim a handoff gets none.
	if o.Artifact != nil {
		program := o.Artifact
		if p.Relay.Kind == plans.ReleaseKindTarball || p.Relay.Kind == plans.ReleaseKindFolder {
			// The tarball is read again here, as the plan read it: only
			// files and folders inside the release, its program among them.
			r, err := artifact.Tarball(o.Artifact, p.Relay.Program)
			if err != nil {
				return nil, fmt.Errorf("apply: the release artifact: %w", err)
			}
			if r.TreeSHA256 != p.Relay.TreeSHA256 {
				return nil, fmt.Errorf("%w: the plan says release %s's files hash to %s, its artifact's to %s", plans.ErrPlanEdited, p.Relay.Version, p.Relay.TreeSHA256, r.TreeSHA256)
			}
			program = r.Program
		}
		if err := fromArtifact(p, program); err != nil {
			return nil, err
		}
		o.wire = uplink.NewRelease(o.Artifact, o.Cache)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.RunInfo.ID == "" {
		o.RunInfo.ID = NewRunID(o.Now())
	}
	if o.RunInfo.Kind == "" {
		o.RunInfo.Kind = RunApply
		switch {
		case o.StageOnly:
			o.RunInfo.Kind = RunStage
		case o.Resume != nil:
			o.RunInfo.Kind = RunResume
		}
	}
	if o.Parallel < 1 {
		o.Parallel = 1
	}
	if o.VerifyTimeout <= 0 {
		o.VerifyTimeout = 15 * time.Second
	}
	if o.StableFor <= 0 && p.Relay.Service.Manager == "systemd" {
		o.StableFor = time.Second
	}
	switch {
	case o.Reconnects == 0:
		o.Reconnects = DefaultReconnects
	case o.Reconnects < 0:
		o.Reconnects = 0
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	if o.Rollout == nil {
		r, err := p.Rollout.Resolve()
		if err != nil {
			return nil, err
		}
		o.Rollout = &r
	}
	if o.Rollout.Recover == "" {
		o.Rollout.Recover = plans.RecoverComplete
	}
	return runFleet(ctx, d, p, o)
}
