package plans

import (
	"errors"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/hashicorp/go-version"

	"github.com/relayctl/relayctl/tune"
)

// A rollback plan (relayctl rollback) undoes the applied windows of
// another plan: each host back to what its window found, as the host's
// own receipt of that run records it (Undo). It is a plan like any other,
// with the same spec and header as the plan it undoes, reviewed, approved
// and applied the same way; only each host's decisions come from its
// receipt on the host instead of the spec. The host is the authority: the
// plan records what the receipt said, and apply reads the receipt again
// and refuses a host where the two differ.

// RollbackRecord says which plan's windows a rollback plan undoes, and
// from which receipt it was made.
type RollbackRecord struct {
	Plan          string `json:"plan"`          // the name of the plan undone
	Checksum      string `json:"plan_checksum"` // its checksum: each host's receipt of it is found by it
	Receipt       string `json:"receipt"`       // the local receipt it was made from, as given
	ReceiptSHA256 string `json:"receipt_sha256"`
}

// RollbackInput is what a rollback plan is made from.
type RollbackInput struct {
	From    *Plan          // the plan undone, checked
	Receipt RollbackRecord // with From's name and checksum
	// Undos are the windows the local receipt records, by host (nil or
	// absent: none); each host's own receipt must say the same.
	Undos map[string]*Undo
	// Facts are the hosts read now, their Undo among them (a query with
	// the plan's checksum: rollout.Query.UndoOf); Unreachable the others.
	Facts       []*Facts
	Unreachable map[string]string
	Steps       StepsFunc
	// UnreachableAllowed is the budget of Unreachable (Input's).
	UnreachableAllowed Amount
}

// MakeRollback makes the plan back to what From's windows found, host by
// host: a host its receipt shows changed goes back, refused (blocked)
// where it changed since or the host cannot go back (a release it no
// longer keeps, backups pruned); the others have nothing to undo.
func MakeRollback(in RollbackInput) (*Plan, error) {
	if in.Steps == nil {
		return nil, errors.New("rollback plan: no step lister")
	}
	from := in.From
	p := *from
	p.Checksum, p.Hosts, p.UnreachableAllowed = "", make([]*HostPlan, 0, len(from.Hosts)), ""
	rec := in.Receipt
	p.Rollback = &rec
	byHost := map[string]*Facts{}
	for _, f := range in.Facts {
		if err := ValidateFacts(f); err != nil {
			return nil, err
		}
		byHost[f.Host] = f
	}
	for _, old := range from.Hosts {
		f, ok := byHost[old.Host]
		if !ok {
			why := in.Unreachable[old.Host]
			if why == "" {
				return nil, fmt.Errorf("rollback plan: no facts for host %s", old.Host)
			}
			p.Hosts = append(p.Hosts, unreachableHost(old.ID(), why))
			continue
		}
		h := planRollbackHost(&p, old.ID(), f)
		agree(h, in.Undos[old.Host], f.Undo, in.Receipt.Receipt)
		reverseDiffs(h, old)
		h.Steps = in.Steps(&p, h)
		p.Hosts = append(p.Hosts, h)
	}
	p.recordBudget(in.UnreachableAllowed)
	return &p, nil
}

// agree blocks a host whose own receipt does not record the window the
// local receipt does: the host is the authority, and a reviewer must not
// approve one record while the host holds another.
func agree(h *HostPlan, local *Undo, host *UndoFact, receipt string) {
	switch {
	case local == nil:
		return // the host's own record, if any, is the one (a host a resumed run applied)
	case host == nil || host.Undo == nil:
		h.Blockers = append(h.Blockers, fmt.Sprintf("%s records a window on this host (its receipt %s), but the host keeps no receipt of it with a record of what it changed: nothing to go back from", receipt, local.Receipt))
	case !SameUndo(local, host.Undo):
		h.Blockers = append(h.Blockers, fmt.Sprintf("the host's own receipt %s does not record what %s does of that window: the host's is the record; check the host, then make the rollback plan again", host.Receipt, receipt))
	default:
		return
	}
	h.Action = ActionBlocked
}

// reverseDiffs shows each restored file's change as the undone plan's
// diff backwards (current → planned then, so planned → current now): the
// host holds what that plan wrote (else it is blocked as changed since),
// and the content it goes back to never left the host.
func reverseDiffs(h *HostPlan, old *HostPlan) {
	if h.Undo == nil || h.Action == ActionBlocked {
		return
	}
	for i := range h.Files {
		fc := &h.Files[i]
		was := old.FileAt(fc.Path)
		if !fc.Change || was == nil || !was.Change {
			continue
		}
		for _, l := range was.Diff {
			switch l.Op {
			case "+":
				l.Op = "-"
			case "-":
				l.Op = "+"
			}
			fc.Diff = append(fc.Diff, l)
		}
		for _, k := range was.Changes {
			k.Current, k.Planned = k.Planned, k.Current
			switch k.Change {
			case KeyAdded:
				k.Change = KeyRemoved
			case KeyRemoved:
				k.Change = KeyAdded
			}
			fc.Changes = append(fc.Changes, k)
		}
	}
}

// planRollbackHost is one host's plan back to what the window its receipt
// on the host records found (f.Undo): apply derives it again from the host
// the same way (Replan).
func planRollbackHost(p *Plan, id HostID, f *Facts) *HostPlan {
	h := &HostPlan{Host: f.Host, Target: id.Target, Labels: id.Labels, Address: f.Address, Kernel: f.Kernel,
		Blockers: []string{}, Warnings: []string{}, Sysctls: []SysctlChange{}, Files: []FileChange{}, Steps: []Step{}}
	h.Facts = Fingerprinted(f, p.ReadKeys(), p.Paths.Current)
	h.Fingerprint = Fingerprint(h.Facts)
	h.Previous = PreviousState{CurrentLink: f.Release.CurrentRaw, RelayRunning: f.Service.Running}
	h.Release = ReleaseChange{Kind: p.Relay.Kind, Action: ReleaseKeep, Current: f.Release.Current, Planned: f.Release.Current}
	h.Readback = Readback{Port: p.Relay.Port, Current: f.Socket.Rcvbuf, CurrentFound: f.Socket.Found}
	if f.Undo == nil || f.Undo.Undo == nil {
		h.Action = ActionNone // its receipts record no window of that plan: nothing to undo
		return h
	}
	u := f.Undo.Undo
	h.Undo = u
	if err := validUndo(p, u); err != nil {
		h.Blockers = append(h.Blockers, fmt.Sprintf("the host's receipt %s of that run does not read as relayctl writes it (%v): check the host", f.Undo.Receipt, err))
		h.Action = ActionBlocked
		return h
	}
	rollbackSysctls(h, f, u)
	rollbackRelease(h, p, f, u)
	rollbackFiles(h, f, u)
	rollbackDrift(h, p, f, u)
	if !u.Running || u.RB == 0 {
		h.Blockers = append(h.Blockers, "the relay was not running (or its socket was not found) before that run's window, so there is no state of it to go back to: stop it, or plan from the spec")
	}
	rollbackReadback(h, f, u)
	decideAction(h, p, f)
	return h
}

// rollbackReadback is the rb the relay reads back once it is back: the
// kernel's rule for the buffer its config asked for before the window,
// with the sysctls as they will be. A socket kept across the switch (the
// store, a handoff) gets it too: relayd puts on a socket it inherits the
// buffer it asks for, and rmem_default's when it asks for none, as a new
// socket would have.
func rollbackReadback(h *HostPlan, f *Facts, u *Undo) {
	inForce := func(key string) int {
		v := f.Sysctls[key].Value
		for _, s := range u.Sysctls {
			if s.Key == key {
				v = s.Was
			}
		}
		n, _ := strconv.Atoi(tune.Normalize(v))
		return n
	}
	r := &h.Readback
	r.Requested, r.Force, r.RmemMax, r.RmemDefault = u.SORcvbuf, u.Force, inForce(keyRmemMax), inForce(keyRmemDefault)
	r.Expected = tune.ExpectRcvbuf(r.Requested, r.Force, r.RmemMax, r.RmemDefault).Effective
}

// rollbackSysctls puts each sysctl the window set back to what it was.
func rollbackSysctls(h *HostPlan, f *Facts, u *Undo) {
	for _, s := range u.Sysctls {
		sf := f.Sysctls[s.Key]
		c := SysctlChange{Key: s.Key, Current: sf.Value, Planned: s.Was, Writable: sf.Writable, Change: !tune.Equal(sf.Value, s.Was)}
		if c.Change && !sf.Writable {
			h.Blockers = append(h.Blockers, fmt.Sprintf("%s is read-only where the SSH session runs, so it cannot go back from %s to %s", s.Key, tune.Normalize(sf.Value), s.Was))
		}
		h.Sysctls = append(h.Sysctls, c)
	}
}

// rollbackRelease points the link back at the release the window
// replaced, as the host keeps it: no artifact is shipped, and the host
// checks its sha256 against the receipt's before the window. A downgrade
// is what a rollback is: named, not blocked.
func rollbackRelease(h *HostPlan, p *Plan, f *Facts, u *Undo) {
	r := u.Release
	if r == nil || p.Relay.Kind == ReleaseKindNone {
		return
	}
	h.Release.Planned = r.Was
	h.Release.Installed = slices.Contains(f.Release.Installed, r.Was)
	was, _ := version.NewVersion(r.Was) // validUndo checked both
	if have, err := version.NewVersion(f.Release.Current); err != nil || f.Release.Current == "" {
		h.Release.Action = ReleaseInstall
	} else if was.LessThan(have) {
		h.Release.Action = ReleaseDowngrade
	} else if was.GreaterThan(have) {
		h.Release.Action = ReleaseUpgrade
	} else {
		return // at it already: nothing to switch
	}
	switch {
	case !h.Release.Installed:
		h.Blockers = append(h.Blockers, fmt.Sprintf("release %s is no longer in %s (pruned, or removed): a rollback points the link back at the release the host kept, and ships none", r.Was, p.Paths.Releases))
	case r.SHA256 == "" || p.Relay.Kind != ReleaseKindBinary && r.TreeSHA256 == "":
		h.Blockers = append(h.Blockers, fmt.Sprintf("that run's receipt records no sha256 of release %s (the host could not hash it then), so the host cannot check the release it would go back to", r.Was))
	}
}

// rollbackFiles restores each file the window wrote from the host's
// backup of it (or removes one it created).
func rollbackFiles(h *HostPlan, f *Facts, u *Undo) {
	kept := map[string]bool{}
	if f.Undo != nil {
		for _, b := range f.Undo.Backups {
			kept[b] = true
		}
	}
	for _, uf := range u.Files {
		fc := FileChange{Role: uf.Role, Path: uf.Path}
		now := fc.Observed(f)
		if now.Unsafe != "" {
			h.Blockers = append(h.Blockers, fmt.Sprintf("the %s %s was not read: %s", uf.Role, uf.Path, now.Unsafe))
		}
		fc.Exists = now.Exists
		if now.Exists {
			fc.CurrentSHA256 = sha256Text(now.Content)
		}
		if uf.Existed {
			fc.SHA256, fc.Restore = uf.SHA256, uf.Backup
			fc.Change = !now.Exists || fc.CurrentSHA256 != uf.SHA256
			if fc.Change && !kept[uf.Backup] {
				h.Blockers = append(h.Blockers, fmt.Sprintf("the host no longer keeps that run's backup of %s (%s.backups/%s: pruned, or removed), so it cannot be put back", uf.Path, u.Receipt, uf.Backup))
			}
		} else {
			fc.Remove, fc.Change = true, now.Exists
		}
		h.Files = append(h.Files, fc)
	}
}

// rollbackDrift blocks a host that changed since the window: a rollback
// would undo whatever changed it too. A thing back at what the window
// found already is not drift: the rollback leaves it as it is (a run of
// this rollback plan that was killed after it, a value reset by hand, or
// in the lab a sysctl that another host's rollback reset for the kernel
// they share), and a host back at all of it has nothing left to undo.
func rollbackDrift(h *HostPlan, p *Plan, f *Facts, u *Undo) {
	var drift []string
	for _, s := range u.Sysctls {
		if now := f.Sysctls[s.Key].Value; !tune.Equal(now, s.Set) && !tune.Equal(now, s.Was) {
			drift = append(drift, fmt.Sprintf("sysctl %s is %s, that run set %s", s.Key, tune.Normalize(now), s.Set))
		}
	}
	if r := u.Release; r != nil {
		now, want := ResolveLink(p.Paths.Current, f.Release.CurrentRaw), path.Join(p.Paths.Releases, r.Set)
		if f.Release.CurrentRaw == "" || now != want && now != path.Join(p.Paths.Releases, r.Was) {
			drift = append(drift, fmt.Sprintf("%s points at %s, that run pointed it at %s", p.Paths.Current, orNone(f.Release.CurrentRaw), want))
		}
	}
	for _, uf := range u.Files {
		if got, want := undoFileNow(f, uf); got != want && got != undoFileWas(uf) {
			drift = append(drift, fmt.Sprintf("the %s %s is %s, that run left it %s", uf.Role, uf.Path, got, want))
		}
	}
	if len(drift) > 0 {
		h.Blockers = append(h.Blockers, fmt.Sprintf("changed since that run (its receipt %s): %s; a rollback would undo those changes too: plan from the spec instead", u.Receipt, strings.Join(drift, "; ")))
	}
}

// undoFileNow is a file the window wrote as the host has it now, and as
// the window left it: "absent", or "sha256 " and 12 hex digits.
func undoFileNow(f *Facts, uf UndoFile) (got, want string) {
	now := (FileChange{Role: uf.Role, Path: uf.Path}).Observed(f)
	got, want = "absent", "absent"
	if now.Exists {
		got = "sha256 " + sha256Text(now.Content)[:12]
	}
	if !uf.Removed {
		want = "sha256 " + uf.Set[:min(12, len(uf.Set))]
	}
	return got, want
}

// undoFileWas is a file the window wrote as the window found it, in
// undoFileNow's words.
func undoFileWas(uf UndoFile) string {
	if !uf.Existed {
		return "absent"
	}
	return "sha256 " + uf.SHA256[:min(12, len(uf.SHA256))]
}

// releaseTarget is the release a host's window switches to and what it
// can do: the spec's, or for a rollback the one the window it undoes
// replaced.
func (p *Plan) releaseTarget(h *HostPlan) (string, []string) {
	if h.Undo != nil && h.Undo.Release != nil {
		return h.Undo.Release.Was, h.Undo.Release.Capabilities
	}
	return p.Relay.Version, p.Relay.Capabilities
}

// validateRollbackHost checks a rollback plan's host against its own
// record of the window it undoes, as validateHost checks another plan's
// against the spec.
func validateRollbackHost(p *Plan, h *HostPlan) error {
	u := h.Undo
	if u == nil {
		if len(h.Sysctls)+len(h.Files)+len(h.Steps) > 0 || h.Action == ActionChange {
			return errors.New("changes without a record of the window they undo")
		}
		return nil
	}
	if err := validUndo(p, u); err != nil {
		return fmt.Errorf("undo: %v", err)
	}
	was := map[string]string{}
	for _, s := range u.Sysctls {
		was[s.Key] = s.Was
	}
	for _, c := range h.Sysctls {
		if v, ok := was[c.Key]; !ok || v != c.Planned {
			return fmt.Errorf("sysctl %s = %q is not what that window found", c.Key, c.Planned)
		}
	}
	if r := u.Release; r != nil && h.Release.Planned != r.Was || u.Release == nil && h.Release.Action != ReleaseKeep {
		return fmt.Errorf("release %q is not the one that window replaced", h.Release.Planned)
	}
	if h.Readback.Requested != u.SORcvbuf || h.Readback.Force != u.Force {
		return fmt.Errorf("so_rcvbuf %d, that window found %d", h.Readback.Requested, u.SORcvbuf)
	}
	for _, fc := range h.Files {
		i := slices.IndexFunc(u.Files, func(uf UndoFile) bool { return uf.Path == fc.Path })
		if i < 0 || u.Files[i].Existed && (fc.SHA256 != u.Files[i].SHA256 || fc.Restore != u.Files[i].Backup) || !u.Files[i].Existed && !fc.Remove {
			return fmt.Errorf("file %s is not restored as that window found it", fc.Path)
		}
	}
	return validateFiles(p, h)
}

// validRollbackRecord checks a plan's record of the plan it undoes.
func validRollbackRecord(r *RollbackRecord) error {
	switch {
	case r.Plan == "" || hostText(r.Plan) != nil || len(r.Plan) > 64:
		return errors.New("rollback.plan is not a plan's name")
	case !strings.HasPrefix(r.Checksum, "sha256:") || !sha256Re.MatchString(strings.TrimPrefix(r.Checksum, "sha256:")):
		return errors.New("rollback.plan_checksum is not a sha256")
	case hostText(r.Receipt) != nil || !sha256Re.MatchString(r.ReceiptSHA256):
		return errors.New("rollback.receipt is not a file and its sha256")
	}
	return nil
}
