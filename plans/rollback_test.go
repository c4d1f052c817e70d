package plans

import (
	"strings"
	"testing"
)

// rolledOut is the incident's host after the fix was applied: the plan,
// and the host as that window left it, with the receipt's record of what
// it changed (which, on a real host, observe reads from its receipt).
func rolledOut(t *testing.T) (*Plan, *Facts) {
	t.Helper()
	s := incidentSpec(t, nil)
	p := makePlan(t, s, incidentFacts())
	if _, err := p.JSON(); err != nil {
		t.Fatal(err)
	}
	h := p.Hosts[0]
	f := incidentFacts()
	f.Sysctls["net.core.rmem_max"] = SysctlFact{Exists: true, Value: "8388608", Writable: true}
	f.Release = RelayRelease{Current: "1.8.0", CurrentRaw: "/opt/relay/releases/1.8.0", Installed: []string{"1.7.0", "1.8.0"}, RunningExe: "/opt/relay/releases/1.8.0/relayd"}
	f.Socket.Rcvbuf = 8388608
	u := &Undo{Receipt: "20261130T193916Z-ashburn-rcvbuf-fcbb04cc1e2a", Running: true, RB: 212992,
		Release: &UndoRelease{Was: "1.7.0", WasLink: "/opt/relay/releases/1.7.0", SHA256: strings.Repeat("cd", 32), Set: "1.8.0"},
		Sysctls: []UndoSysctl{{Key: "net.core.rmem_max", Was: "212992", Set: "8388608"}}}
	for _, fc := range h.Files {
		if !fc.Change {
			continue
		}
		uf := UndoFile{Role: fc.Role, Path: fc.Path, Existed: fc.Exists, Set: fc.SHA256, Removed: fc.Remove}
		if fc.Exists {
			uf.SHA256, uf.Backup = fc.CurrentSHA256, "backup-"+strings.ReplaceAll(fc.Role, " ", "-")
		}
		u.Files = append(u.Files, uf)
		switch fc.Role {
		case RoleRelayConfig:
			f.Config = FileFact{Exists: true, Content: fc.Content}
		case RoleSysctlDropIn:
			f.SysctlFiles = append(f.SysctlFiles, ConfFile{Path: fc.Path, Content: fc.Content})
		}
	}
	f.Undo = &UndoFact{Receipt: u.Receipt, Checksum: p.Checksum, Outcome: "applied", Undo: u, Backups: []string{"backup-relay-config"}}
	return p, f
}

func makeRollback(t *testing.T, from *Plan, f *Facts) *Plan {
	t.Helper()
	p, err := MakeRollback(RollbackInput{From: from, Receipt: RollbackRecord{Plan: from.Name, Checksum: from.Checksum, Receipt: "x.plan.receipt.json", ReceiptSHA256: strings.Repeat("ef", 32)},
		Undos: map[string]*Undo{f.Host: f.Undo.Undo}, Facts: []*Facts{f}, Steps: testSteps})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.JSON(); err != nil {
		t.Fatal(err)
	}
	return p
}

// The rollback plan goes back to what the window found: the sysctl, the
// release (a downgrade, named, not blocked), the files from the host's
// backups, the read-back of the old config; it validates as any plan
// does against its own record, and a plan edited to go elsewhere does not.
func TestRollbackPlanGoesBackAndValidates(t *testing.T) {
	from, f := rolledOut(t)
	p := makeRollback(t, from, f)
	h := p.Hosts[0]
	if h.Action != ActionChange || len(h.Blockers) > 0 {
		t.Fatalf("rollback host: %s, blockers %q", h.Action, h.Blockers)
	}
	if h.Release.Action != ReleaseDowngrade || h.Release.Planned != "1.7.0" || h.Sysctls[0].Planned != "212992" || h.Readback.Expected != 212992 {
		t.Errorf("rollback host: release %+v, sysctl %+v, expected rb %d", h.Release, h.Sysctls, h.Readback.Expected)
	}
	cfg := h.File(RoleRelayConfig)
	if cfg == nil || cfg.Restore != "backup-relay-config" || cfg.SHA256 != f.Undo.Undo.Files[0].SHA256 || len(cfg.Diff) == 0 {
		t.Errorf("relay config: %+v", cfg)
	}
	if err := Validate(p); err != nil {
		t.Fatalf("validate: %v", err)
	}
	for name, edit := range map[string]func(h *HostPlan){
		"a sysctl elsewhere":      func(h *HostPlan) { h.Sysctls[0].Planned = "425984" },
		"another backup":          func(h *HostPlan) { h.File(RoleRelayConfig).Restore = "backup-unit-drop-in" },
		"another release":         func(h *HostPlan) { h.Release.Planned = "1.6.0" },
		"a record that says more": func(h *HostPlan) { h.Undo.Sysctls[0].Was = "425984" },
		"a receipt path":          func(h *HostPlan) { h.Undo.Receipt = "../../etc/passwd" },
	} {
		from, f := rolledOut(t) // the edits reach into the host's record: a fresh one each
		q := makeRollback(t, from, f)
		edit(q.Hosts[0])
		if err := Validate(q); err == nil {
			t.Errorf("%s: validated", name)
		}
	}
	// Replan is the same decisions from the same host, as apply derives them.
	again, err := Replan(p, h.ID(), f, testSteps)
	if err != nil || len(ActionDiff(h, again)) > 0 || !SameUndo(h.Undo, again.Undo) {
		t.Errorf("replan: %v, %q", err, ActionDiff(h, again))
	}
}

// A host that changed since the window is blocked with what changed, as
// is one whose own receipt says other than the local one, or one that no
// longer keeps the release.
func TestRollbackBlocksAHostThatCannotGoBack(t *testing.T) {
	from, f := rolledOut(t)
	f.Sysctls["net.core.rmem_max"] = SysctlFact{Exists: true, Value: "425984", Writable: true}
	if h := makeRollback(t, from, f).Hosts[0]; h.Action != ActionBlocked || !strings.Contains(strings.Join(h.Blockers, " "), "sysctl net.core.rmem_max is 425984, that run set 8388608") {
		t.Errorf("drifted: %s %q", h.Action, h.Blockers)
	}
	from, f = rolledOut(t)
	f.Release.Installed = []string{"1.8.0"}
	if h := makeRollback(t, from, f).Hosts[0]; h.Action != ActionBlocked || !strings.Contains(strings.Join(h.Blockers, " "), "release 1.7.0 is no longer in") {
		t.Errorf("release gone: %s %q", h.Action, h.Blockers)
	}
	from, f = rolledOut(t)
	local := *f.Undo.Undo
	local.RB = 1
	p, err := MakeRollback(RollbackInput{From: from, Receipt: RollbackRecord{Plan: from.Name, Checksum: from.Checksum, Receipt: "x", ReceiptSHA256: strings.Repeat("ef", 32)},
		Undos: map[string]*Undo{f.Host: &local}, Facts: []*Facts{f}, Steps: testSteps})
	if err != nil || p.Hosts[0].Action != ActionBlocked || !strings.Contains(strings.Join(p.Hosts[0].Blockers, " "), "does not record what x does") {
		t.Errorf("disagreeing receipts: %v %q", err, p.Hosts[0].Blockers)
	}
}

// A host's receipt may name only sysctls the plan's spec sets: a receipt
// naming kernel.core_pattern (which would make the kernel run a program)
// is not read as relayctl writes it, and the host is blocked, whatever
// the host's facts hold; a rollback plan edited to restore it does not
// validate.
func TestRollbackRestoresOnlyTheSpecsSysctls(t *testing.T) {
	from, f := rolledOut(t)
	f.Sysctls["kernel.core_pattern"] = SysctlFact{Exists: true, Value: "core", Writable: true}
	f.Undo.Undo.Sysctls = []UndoSysctl{{Key: "kernel.core_pattern", Was: "|/tmp/x", Set: "core"}}
	h := makeRollback(t, from, f).Hosts[0]
	if h.Action != ActionBlocked || !strings.Contains(strings.Join(h.Blockers, " "), "sysctl kernel.core_pattern, which the plan's spec does not set") {
		t.Errorf("a receipt naming kernel.core_pattern: %s, sysctls %+v, blockers %q; want blocked", h.Action, h.Sysctls, h.Blockers)
	}
	from, f = rolledOut(t)
	f.Undo.Undo.Sysctls = append(f.Undo.Undo.Sysctls, f.Undo.Undo.Sysctls[0])
	from.Sysctl = append(from.Sysctl, PlannedSysctl{Key: "net.core.rmem_default", Value: "212992"})
	if h := makeRollback(t, from, f).Hosts[0]; h.Action != ActionBlocked || !strings.Contains(strings.Join(h.Blockers, " "), "net.core.rmem_max twice") {
		t.Errorf("a receipt naming a sysctl twice: %s %q; want blocked", h.Action, h.Blockers)
	}
	from, f = rolledOut(t)
	q := makeRollback(t, from, f)
	qh := q.Hosts[0]
	qh.Undo.Sysctls[0] = UndoSysctl{Key: "kernel.core_pattern", Was: "|/tmp/x", Set: "core"}
	qh.Sysctls[0] = SysctlChange{Key: "kernel.core_pattern", Current: "core", Planned: "|/tmp/x", Writable: true, Change: true}
	if err := Validate(q); err == nil || !strings.Contains(err.Error(), "kernel.core_pattern") {
		t.Errorf("a rollback plan edited to restore kernel.core_pattern: %v", err)
	}
}

// A host back at what the window found already has nothing to undo, and
// one partly back (a sysctl reset by hand, or by a killed run of the
// rollback) goes back the rest of the way: neither is "changed since that
// run". On the code before, both were blocked, so a rollback that had
// completed (or half completed) was stale to apply and blocked to plan
// again.
func TestRollbackOfAHostBackAlready(t *testing.T) {
	from, f := rolledOut(t)
	back := incidentFacts() // the host as the window found it
	back.Release.Installed, back.Undo = f.Release.Installed, f.Undo
	if h := makeRollback(t, from, back).Hosts[0]; h.Action != ActionNone || len(h.Blockers) > 0 {
		t.Errorf("a host back already: %s, blockers %q; want nothing to do", h.Action, h.Blockers)
	}
	from, f = rolledOut(t)
	f.Sysctls["net.core.rmem_max"] = SysctlFact{Exists: true, Value: "212992", Writable: true}
	h := makeRollback(t, from, f).Hosts[0]
	if h.Action != ActionChange || len(h.Blockers) > 0 || h.Sysctls[0].Change || h.Release.Action != ReleaseDowngrade {
		t.Errorf("a host partly back: %s, blockers %q, sysctl %+v, release %s; want the rest undone", h.Action, h.Blockers, h.Sysctls[0], h.Release.Action)
	}
}
