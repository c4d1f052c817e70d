package rollout

import (
	"fmt"
	"strings"

	"github.com/relayctl/relayctl/plans"
)

// ReceiptMarkdown is the receipt for people. Every string that came from
// a host or a plan is escaped, as in the plan's review.
func ReceiptMarkdown(p *plans.Plan, rep *Report) []byte {
	m := &receiptMD{p: p}
	m.header(rep)
	for _, h := range rep.Hosts {
		m.host(Receipt(p, h))
	}
	return []byte(m.b.String())
}

// receiptMD is a Markdown receipt being written.
type receiptMD struct {
	p *plans.Plan
	b strings.Builder
}

func (m *receiptMD) w(format string, a ...any) { fmt.Fprintf(&m.b, format, a...) }

func md(s string) string   { return plans.MDText(s) }
func code(s string) string { return plans.MDCode(s) }
func cell(s string) string { return plans.MDCell(plans.MDText(s)) }

// header is the run: the plan, the approval, the recap, why it stopped,
// and the waves.
func (m *receiptMD) header(rep *Report) {
	m.w("# relayctl receipt: %s\n\n", md(rep.Plan))
	m.w("- Plan checksum %s\n- Started %s, took %d ms\n", code(rep.Checksum), md(rep.Started), rep.Millis)
	if a := rep.Approval; a != nil {
		m.w("- Approval: %s\n", md(a.String()))
	}
	if rep.Only != "" {
		m.w("- Only %s: %d host(s); the plan's %d others are outside this run, as the ledger had them\n", code("--only "+rep.Only), len(rep.Hosts), rep.Outside)
	}
	m.w("\n")
	m.w("%s\n", indent(Recap(rep)))
	if rep.Stopped != "" {
		m.w("The rollout stopped: %s\n\n", md(rep.Stopped))
	}
	if len(rep.Waves) == 0 {
		return
	}
	m.w("| wave | hosts | applied | unchanged | failed, rolled back, refused (budget) | unreachable (budget) | not started | ms |\n|---|---|---|---|---|---|---|---|\n")
	for _, x := range rep.Waves {
		m.w("| %d | %s | %d | %d | %d (%d) | %d (%d) | %d | %d |\n", x.Wave, cell(hostRange(x.Hosts)), x.Applied+x.Staged, x.Unchanged,
			x.Failures, x.MaxFailures, x.Unreachable, x.MaxUnreachable, x.NotStarted, x.EndMillis-x.StartMillis)
	}
	m.w("\n")
}

// host is one host's section.
func (m *receiptMD) host(r HostReceipt) {
	m.w("## %s (%s): %s\n\n", md(r.Host), md(r.Address), r.Outcome)
	m.w("- State: %s\n", md(r.State))
	if r.Reason != "" {
		m.w("- Why: %s\n", md(r.Reason))
	}
	if r.FromLedger == "" && r.Outcome != NotStarted {
		m.w("- Wave %d; %d bytes uploaded\n", r.Wave, r.BytesUploaded)
	}
	for _, d := range r.TowardPlan {
		m.w("- Toward the plan already: %s: planned %s, now %s\n", md(d.Name), code(d.Planned), code(d.Observed))
	}
	for _, d := range r.Drift {
		m.w("- Drifted: %s: planned %s, now %s\n", md(d.Name), code(d.Planned), code(d.Observed))
	}
	if r.Journal != "" {
		m.w("- Journal of the unfinished run:\n\n%s\n", indent(r.Journal))
	}
	if r.UnitLog != "" {
		m.w("- systemd's journal of the relay since the window began:\n\n%s\n", indent(r.UnitLog))
	}
	if r.DropsBefore != nil {
		m.window(r)
		m.counters(r)
		m.sysctls(r)
	}
	m.checks(r.Verify)
	m.steps(r.Steps)
}

// window is what the switch did: the read-back, the release, the players.
func (m *receiptMD) window(r HostReceipt) {
	m.w("- Read-back: rb %d before, %d after (expected %d)\n", r.RBBefore, r.RBAfter, r.ExpectedRB)
	m.w("- Release: %s before, %s after; relay pid %d before, %d after; restarts: %d\n", md(orDash(r.ReleaseBefore)), md(orDash(r.ReleaseAfter)), r.PIDBefore, r.PIDAfter, r.Restarts)
	if r.WindowMillis > 0 {
		m.w("- Window: %d ms from relay stop to new socket verified (host clock)\n", r.WindowMillis)
	}
	if r.Handoffs > 0 {
		m.w("- Handoffs: %d (the socket and its lobbies passed to the new release)\n", r.Handoffs)
	}
	if pw := r.PlayersAtWindow; pw != nil {
		m.w("- Players when the window began: %d in %d lobbies", pw.Players, pw.Lobbies)
		if r.DrainWaitMillis > 0 {
			m.w(" (after %d ms at the drain gate)", r.DrainWaitMillis)
		}
		m.w("\n")
	}
	if r.PlayersCut != nil {
		m.w("- Players cut by the switch: %d\n", *r.PlayersCut)
	}
	if r.HandoffGapUS != nil {
		m.w("- Handoff gap (the relay's own: old's last read to new's first): %d µs\n", *r.HandoffGapUS)
	}
	m.w("- Round trips: %d\n", r.RoundTrips)
	if len(r.Timeline) > 0 {
		var parts []string
		for _, ph := range r.Timeline {
			parts = append(parts, fmt.Sprintf("%s %d ms", ph.Name, ph.Ms))
		}
		m.w("- Timeline: %s\n", strings.Join(parts, ", "))
	}
	m.w("\n")
}

// counters are the four drop counters, before and after.
func (m *receiptMD) counters(r HostReceipt) {
	a := r.DropsAfter
	if a == nil {
		a = &Counters{}
	}
	m.w("| counter | before | after |\n|---|---|---|\n")
	m.w("| ss d | %d | %d |\n", r.DropsBefore.SSDrops, a.SSDrops)
	m.w("| /proc/net/udp drops | %d | %d |\n", r.DropsBefore.ProcUDPDrops, a.ProcUDPDrops)
	m.w("| RcvbufErrors | %d | %d |\n", r.DropsBefore.RcvbufErrors, a.RcvbufErrors)
	m.w("| relay rx_drops | %s | %s |\n\n", ptr(r.DropsBefore.RelayRxDrops), ptr(a.RelayRxDrops))
}

// sysctls are the read sysctls, before and after.
func (m *receiptMD) sysctls(r HostReceipt) {
	if len(r.SysctlsBefore) == 0 {
		return
	}
	m.w("| sysctl | before | after |\n|---|---|---|\n")
	for _, k := range m.p.ReadKeys() {
		m.w("| %s | %s | %s |\n", plans.MDCell(code(k)), cell(orDash(r.SysctlsBefore[k])), cell(orDash(r.SysctlsAfter[k])))
	}
	m.w("\n")
}

// checks are the read-back's comparisons.
func (m *receiptMD) checks(cs []Check) {
	if len(cs) == 0 {
		return
	}
	m.w("| check | want | got | |\n|---|---|---|---|\n")
	for _, c := range cs {
		mark := "ok"
		if !c.OK {
			mark = "**differs**"
		}
		m.w("| %s | %s | %s | %s |\n", cell(c.What), cell(c.Want), cell(c.Got), mark)
	}
	m.w("\n")
}

// steps are the steps as they ran.
func (m *receiptMD) steps(steps []StepRecord) {
	if len(steps) == 0 {
		return
	}
	m.w("Steps:\n\n")
	for _, s := range steps {
		detail := ""
		if s.Detail != "" {
			detail = ": " + s.Detail
		}
		title := s.Title
		if title == "" {
			title = s.Kind
		}
		m.w("- +%d ms [%s] %s: %s%s\n", s.Millis, md(s.Phase), md(title), s.Status, md(detail))
	}
	m.w("\n")
}
