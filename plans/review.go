package plans

import (
	"fmt"
	"strings"

	"github.com/relayctl/relayctl/tune"
)

// Markdown renders the review a person reads in a change request: warnings
// and blockers first, then per host the sysctl table, the release, the
// files with their diffs, the expected read-back and the window's steps.
// Every string that came from a host or a spec is escaped (escape.go).
func (p *Plan) Markdown(planFile string) []byte {
	r := &review{p: p}
	r.header(planFile)
	r.readFirst()
	if len(p.Hosts) <= maxReviewSections {
		for _, h := range p.Hosts {
			r.host(h)
		}
	} else {
		r.hostGroups()
	}
	return []byte(r.b.String())
}

// review is a plan's review being written.
type review struct {
	p *Plan
	b strings.Builder
}

func (r *review) w(format string, a ...any) { fmt.Fprintf(&r.b, format, a...) }

// header is what the plan does everywhere: release, buffer, service,
// window, promise, and the hosts and waves.
func (r *review) header(planFile string) {
	p := r.p
	r.w("# relayctl plan: %s\n\n", MDText(p.Name))
	r.w("- Plan file: %s (format %d, checksum %s)\n", MDCode(planFile), p.FormatVersion, MDCode(p.Checksum))
	r.w("- Spec: %s (sha256 %s)\n", MDCode(p.SpecFile), MDCode(short(p.SpecSHA256)))
	if rb := p.Rollback; rb != nil {
		r.w("- **Rollback** of plan %s (checksum %s), made from %s (sha256 %s): each host goes back to what that plan's window found there, as the host's own receipt of it records (apply reads it again and refuses a host where it differs); hosts that changed since are blocked\n",
			MDText(rb.Plan), MDCode(short(rb.Checksum)), MDCode(rb.Receipt), MDCode(short(rb.ReceiptSHA256)))
		r.w("- Release: none shipped: each host's link goes back to the release that window replaced, as the host keeps it, its sha256 checked on the host against the receipt's before the window (the spec's %s is what is undone; a downgrade is named, not blocked)\n", MDText(p.Relay.Version))
		r.w("- Files: put back from the backups each host kept beside that receipt (%s), each checked by its sha256 there: their content never leaves the host\n", MDCode(p.Paths.StateDir+"/receipts/RECEIPT.backups"))
	} else {
		r.w("- Release: %s%s\n", releaseHeader(p.Relay), versionNote(p.Relay))
	}
	force := ""
	if p.Relay.SORcvbufForce {
		force = " with SO_RCVBUFFORCE (ignores net.core.rmem_max)"
	}
	switch {
	case p.Rollback != nil:
		r.w("- The relay asks for the SO_RCVBUF its config held before that window (each host's rb below) on UDP port %d\n", p.Relay.Port)
	case p.Relay.SORcvbuf > 0:
		r.w("- The relay asks for SO_RCVBUF %d%s on UDP port %d\n", p.Relay.SORcvbuf, force, p.Relay.Port)
	default:
		r.w("- The relay does not call setsockopt(SO_RCVBUF): its socket gets net.core.rmem_default\n")
	}
	r.w("- Service: %s\n", serviceText(p.Relay.Service))
	if p.Window != nil {
		r.w("- Window: %s to %s (apply refuses outside it)\n", MDText(p.Window.NotBefore), MDText(p.Window.NotAfter))
	} else {
		r.w("- Window: none given (apply may run the window at any time)\n")
	}
	if p.Relay.Control == "" {
		r.w("- Control plane: none (relay.control): no /status to read, so no drain gate and no handoff\n")
	}
	for _, t := range p.Relay.Config.Templates {
		r.w("- Template %s (sha256 %s) renders %s on each host\n", MDCode(t.Source), MDCode(t.SHA256[:12]), MDCode(t.Path))
	}
	r.w("- Writes on each host: %s\n", writesText(p))
	if len(p.Relay.Service.Handoff) > 0 {
		r.w("- Handoff: %s on %s, where release and running relay both support it\n", MDCode(Argv(p.Relay.Service.Handoff)), MDCode(p.Relay.HandoffSocket))
	}
	if c := p.Capacity; c != nil {
		r.w("- Promise: %d players in lobbies of %d at %d Hz, %d-byte datagrams, %s\n", c.Players, c.LobbySize, c.Hz, c.PacketSize, MDText(tune.StallPhrase(c.Stall)))
	} else if c := p.CapacityBy; c != nil {
		r.w("- Promise: %s\n", capacityByText(c))
	}
	if p.Inventory != nil && p.Inventory.Program != nil {
		r.w("- Inventory: the output of %s, run on the machine that planned (sha256 %s); apply runs it again and refuses the plan if what it prints changed\n", MDCode(ArgvText(p.Inventory.Program)), MDCode(short(p.Inventory.SHA256)))
	} else if p.Inventory != nil {
		r.w("- Inventory: %s (sha256 %s, %d vars file(s))\n", MDCode(p.Inventory.File), MDCode(short(p.Inventory.SHA256)), len(p.Inventory.VarsFiles))
	}
	if p.AllowDowngrade {
		r.w("- Downgrades allowed (--allow-downgrade)\n")
	}
	counts := map[string]int{}
	for _, h := range p.Hosts {
		counts[h.Action]++
	}
	r.w("- Hosts: %d to change, %d already as planned, %d blocked", counts[ActionChange], counts[ActionNone], counts[ActionBlocked])
	if n := counts[ActionUnreachable]; n > 0 {
		r.w(", %d unreachable (not planned: apply leaves them alone, a new plan reads them again)", n)
		if over, _ := p.OverBudget(); over {
			r.w("; more than the budget of %s it was made with: **not a plan to apply** (approve and apply refuse it without --allow-unreachable)", MDText(p.MadeWith().String()))
		}
	}
	r.w("\n")
	if line := uplinkText(p); line != "" {
		r.w("- Uplink: %s\n", line)
	}
	if q := p.reached(); len(q.Hosts) > 0 {
		r.w("%s", rolloutMarkdown(q))
	}
	r.w("\n")
	if p.CapacityBy != nil {
		r.w("%s", capacityByMarkdown(p))
	}
}

// readFirst lists what a reviewer must see before anything else: the
// hosts that could not be read, sysctls that run programs as root, then
// every host's blockers, then warnings.
func (r *review) readFirst() {
	var notes []string
	for i, h := range r.p.Unreached() {
		if i == maxReviewSections {
			notes = append(notes, fmt.Sprintf("- **UNREACHABLE** and %d more hosts (`relayctl show PLAN --json` lists each)", len(r.p.Unreached())-i))
			break
		}
		notes = append(notes, fmt.Sprintf("- **UNREACHABLE** %s: %s (not planned: apply leaves it alone)", MDText(h.Host), MDText(h.Unreachable)))
	}
	for _, c := range r.p.Sysctl {
		if c.RunsProgram != "" {
			notes = append(notes, fmt.Sprintf("- **RUNS A PROGRAM AS ROOT** %s = %s: %s (allowed by the spec's unsafe.sysctls_that_run_programs)", MDCode(c.Key), mdValue(c.Value), MDText(c.RunsProgram)))
		}
	}
	if w := versionWarning(r.p.Relay); w != "" {
		notes = append(notes, "- **warning** "+w)
	}
	if len(r.p.Hosts) > maxReviewSections {
		notes = append(notes, r.groupedNotes()...)
	} else {
		for _, h := range r.p.Hosts {
			for _, m := range h.Blockers {
				notes = append(notes, fmt.Sprintf("- **BLOCKED** %s: %s", MDText(h.Host), MDText(m)))
			}
		}
		for _, h := range r.p.Hosts {
			for _, m := range h.Warnings {
				notes = append(notes, fmt.Sprintf("- **warning** %s: %s", MDText(h.Host), MDText(m)))
			}
		}
	}
	if len(notes) > 0 {
		r.w("## Read first\n\n%s\n\n", strings.Join(notes, "\n"))
	}
}

// host is one host's section.
func (r *review) host(h *HostPlan) {
	if h.Action == ActionUnreachable {
		r.w("## %s: %s\n\n", MDText(h.Host), actionText(h.Action))
		r.b.WriteString(r.body(h))
		return
	}
	r.w("## %s (%s): %s\n\n", MDText(h.Host), MDText(h.Address), actionText(h.Action))
	r.w("Kernel %s · fingerprint %s%s\n\n", MDCode(h.Kernel), MDCode(short(h.Fingerprint)), identityText(h))
	r.b.WriteString(r.body(h))
}

// body is a host's section after its heading: what changes on it.
func (r *review) body(h *HostPlan) string {
	o := &review{p: r.p}
	o.hostBody(h)
	return o.b.String()
}

func (r *review) hostBody(h *HostPlan) {
	if h.Action == ActionUnreachable {
		r.w("Not read when the plan was made: %s. Nothing is planned for it: apply leaves it alone, and the next plan reads it again.\n\n", MDText(h.Unreachable))
		return
	}
	if p := r.p; p.Rollback != nil && h.Undo == nil && h.Action == ActionNone {
		r.w("Nothing to undo: none of this host's receipts records a window of plan %s.\n\n", MDText(p.Rollback.Plan))
		return
	}
	if u := h.Undo; u != nil {
		r.w("- Going back from: the host's receipt %s\n", MDCode(u.Receipt))
		if rel := u.Release; rel != nil && h.Release.Action != ReleaseKeep {
			r.w("- Release kept on the host: %s, program sha256 %s%s, checked there before the window\n", MDCode(r.p.Paths.Releases+"/"+rel.Was), MDCode(short(rel.SHA256)), treeText(rel))
		}
	}
	r.sysctlTable(h)
	r.w("- Release: %s\n", releaseText(h.Release))
	if u := h.Release.Upload; u != nil {
		r.w("- Upload: %s\n", uploadText(u, r.p.Relay.Size))
	}
	if len(h.Release.Prune)+len(h.Release.PruneStore) > 0 {
		r.w("- After a window that succeeds, removes: %s (a failed window removes nothing)\n", pruneText(r.p, h.Release))
	}
	for _, fc := range h.Files {
		if line := fileLine(fc); line != "" {
			r.w("%s\n", line)
		}
	}
	r.w("- Expected read-back: %s\n", readbackText(h.Readback))
	if c := h.Capacity; c != nil {
		r.w("- Capacity: %s\n", MDText(c.Summary()))
	}
	if h.Switch != "" {
		r.w("- Switch: **%s**: %s\n", SwitchLabel(h.Switch), MDText(h.SwitchWhy))
	}
	if h.Action == ActionChange {
		r.w("- Cost to players: %s\n", MDText(SwitchCost(r.p, h)))
	}
	if c := h.StoreGap; c != nil {
		r.w("- Restart gap at the old rb: %s\n", MDText(c.Summary()))
	}
	if d := r.p.Drain; d != nil && h.Action == ActionChange {
		r.w("- Drain gate: %s\n", MDText(drainText(d)))
	}
	r.w("\n")
	for _, fc := range h.Files {
		if len(fc.Diff) > 0 {
			role, _ := Role(fc.Role)
			how := "`*` marks a line relayctl manages; the others are kept as they are; secrets masked"
			if t := r.p.template(fc.Path); t != nil {
				how = "rendered from " + MDCode(t.Source) + "; relayctl writes the whole file; lines naming a secret masked"
			}
			r.w("%s %s, current → planned (%s):\n\n", role.Label, MDCode(fc.Path), how)
			r.w("%s", diffBlock(fc))
		}
	}
	r.steps(h)
	r.rollback(h)
}

func treeText(r *UndoRelease) string {
	if r.TreeSHA256 == "" {
		return ""
	}
	return ", files' tree hash " + MDCode(short(r.TreeSHA256))
}

// sysctlTable is a host's sysctls: current, planned, and which file decides
// each at the next boot.
func (r *review) sysctlTable(h *HostPlan) {
	if len(h.Sysctls) == 0 {
		return
	}
	r.w("| key | current | planned | decided at boot by |\n|---|---|---|---|\n")
	for _, c := range h.Sysctls {
		cur := mdValue(c.Current)
		if !c.Writable {
			cur += " (read-only here)"
		}
		planned := mdValue(c.Planned)
		if !c.Change {
			planned += " (no change)"
		}
		if r.p.runsProgram(c.Key) {
			planned += " **runs a program as root**"
		}
		boot := "nothing (kernel default)"
		if c.DecidedAtBoot != "" {
			boot = MDCode(c.DecidedAtBoot)
			if c.Shadowed {
				boot += " **shadows ours** (" + mdValue(c.BootValue) + ")"
			}
		}
		r.w("| %s | %s | %s | %s |\n", MDCell(MDCode(c.Key)), MDCell(cur), MDCell(planned), MDCell(boot))
	}
	r.w("\n")
}

// readbackText says what ss will show, by which kernel rule, and what it
// showed when planned.
func readbackText(rb Readback) string {
	rule := fmt.Sprintf("max(2 × min(%d, rmem_max %d), 2304)", rb.Requested, rb.RmemMax)
	switch {
	case rb.Requested == 0:
		rule = fmt.Sprintf("rmem_default %d, since the relay does not ask", rb.RmemDefault)
	case rb.Force:
		rule = fmt.Sprintf("max(2 × %d, 2304) with SO_RCVBUFFORCE", rb.Requested)
	}
	now := "no socket found now"
	if rb.CurrentFound {
		now = fmt.Sprintf("now rb %d", rb.Current)
	}
	if len(rb.Sockets) > 1 {
		var each []string
		for _, s := range rb.Sockets {
			each = append(each, fmt.Sprintf("%s rb %d", MDText(s.Local), s.Rcvbuf))
		}
		now = fmt.Sprintf("%d sockets now (%s), each read back", len(rb.Sockets), strings.Join(each, ", "))
	}
	return fmt.Sprintf("`ss` on UDP port %d shows **rb %d** = %s; %s", rb.Port, rb.Expected, rule, now)
}

// steps lists a host's steps by phase, numbered through.
func (r *review) steps(h *HostPlan) {
	if len(h.Steps) == 0 {
		return
	}
	r.w("### Steps\n\n")
	n := 0
	window, after := windowTitles(h)
	for _, phase := range []struct{ name, title string }{
		{PhaseStage, "Before the window (no effect on the running relay)"},
		{PhaseWindow, window},
		{PhaseVerify, after},
	} {
		first := true
		for _, s := range h.Steps {
			if s.Phase != phase.name {
				continue
			}
			if first {
				r.w("%s:\n\n", phase.title)
				first = false
			}
			n++
			r.w("%d. %s\n", n, MDText(s.Title))
		}
		if !first {
			r.w("\n")
		}
	}
}

// template is the plan's template that renders path, or nil.
func (p *Plan) template(path string) *PlanTemplate {
	for i, t := range p.Relay.Config.Templates {
		if t.Path == path {
			return &p.Relay.Config.Templates[i]
		}
	}
	return nil
}

// windowTitles are the headings of a host's window and read-back steps:
// what the window does to the relay, from the switch it plans.
func windowTitles(h *HostPlan) (window, after string) {
	if !h.Restart {
		return "In the window (no restart: the running relay is not touched)", "After the window: read back"
	}
	switch h.Switch {
	case SwitchHandoff:
		return "In the window (one handoff, not a restart)", "After the handoff: read back"
	case SwitchReload:
		return "In the window (one reload, not a restart)", "After the reload: read back"
	case SwitchFDStore:
		return "In the window (one restart, the socket and lobbies kept in systemd's store)", "After the restart: read back"
	}
	return "In the window (one restart)", "After the restart: read back"
}

// rollback says what a rollback of this window does, step by step in the
// order rollout's rollback runs them: the window's steps last first, the
// relay switched back after everything else.
func (r *review) rollback(h *HostPlan) {
	undo := RollbackSteps(h.Steps)
	if len(undo) == 0 {
		return
	}
	r.w("### If the window fails\n\n")
	r.w("A step of the window that fails, or a read-back that does not hold, rolls the host back: every window step that started is undone, in this order:\n\n")
	for i, s := range undo {
		r.w("%d. %s\n", i+1, MDText(s.Undo))
	}
	r.w("\nthen the host is read back against how it was. Nothing before the window needs undoing: the stage changes nothing in force. A connection lost inside the window leaves the host to the next `apply --resume`, which completes or undoes the window from the host's journal (docs/recovery.md).\n\n")
}

// RollbackSteps are the window steps in the order a rollback undoes them:
// last first, the relay's switch (restart, handoff or reload) after every
// other.
func RollbackSteps(steps []Step) []Step {
	var out []Step
	var sw *Step
	for i := len(steps) - 1; i >= 0; i-- {
		s := steps[i]
		if s.Phase != PhaseWindow {
			continue
		}
		if s.Kind == SwitchRestart || s.Kind == SwitchHandoff || s.Kind == SwitchReload {
			sw = &s
			continue
		}
		out = append(out, s)
	}
	if sw != nil {
		out = append(out, *sw)
	}
	return out
}
