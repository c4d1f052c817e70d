package rollout

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/relayctl/relayctl/plans"
	"github.com/relayctl/relayctl/uplink"
)

// ReceiptMarkdown is the receipt for people (WriteReceiptMarkdown's
// bytes).
func ReceiptMarkdown(p *plans.Plan, rep *Report) []byte {
	var b bytes.Buffer
	WriteReceiptMarkdown(&b, p, rep)
	return b.Bytes()
}

// maxHostSections is the most hosts a receipt gives a section each;
// beyond, the hosts that ended as planned are summarised by wave (their
// accounts are in the JSON receipt and on each host), and
// maxFailureSections the most hosts that did not whose sections lead it
// (the others are a table).
const (
	maxHostSections    = 50
	maxFailureSections = 100
)

// WriteReceiptMarkdown writes the receipt for people to w: the run, then
// the hosts that did not end as planned, each with its section, then the
// others, each with its section up to maxHostSections hosts and
// summarised beyond. Every string that came from a host or a plan is
// escaped, as in the plan's review.
func WriteReceiptMarkdown(w io.Writer, p *plans.Plan, rep *Report) error {
	m := &receiptMD{p: p, out: bufio.NewWriterSize(w, 64<<10)}
	m.header(rep)
	var good, bad []*HostResult
	for _, h := range rep.Hosts {
		if asPlanned(h.Outcome) {
			good = append(good, h)
		} else {
			bad = append(bad, h)
		}
	}
	if len(bad) > 0 && len(rep.Hosts) > 1 {
		m.w("**%d of %d hosts did not end as planned: they come first.**\n\n", len(bad), len(rep.Hosts))
	}
	for i, h := range bad {
		if i == maxFailureSections {
			m.failureTable(bad[i:])
			break
		}
		m.host(Receipt(p, h))
	}
	if len(rep.Hosts) <= maxHostSections {
		for _, h := range good {
			m.host(Receipt(p, h))
		}
	} else if len(good) > 0 {
		m.summary(rep, good)
	}
	return m.out.Flush()
}

// asPlanned is an outcome that needs nothing more: applied, unchanged,
// staged.
func asPlanned(o Outcome) bool { return o == Applied || o == Unchanged || o == Staged }

// receiptMD is a Markdown receipt being written.
type receiptMD struct {
	p   *plans.Plan
	out *bufio.Writer
}

func (m *receiptMD) w(format string, a ...any) { fmt.Fprintf(m.out, format, a...) }

func md(s string) string   { return plans.MDText(s) }
func code(s string) string { return plans.MDCode(s) }
func cell(s string) string { return plans.MDCell(plans.MDText(s)) }

// header is the run: the plan, the approval, the recap, why it stopped,
// and the waves.
func (m *receiptMD) header(rep *Report) {
	m.w("# relayctl receipt: %s\n\n", md(rep.Plan))
	m.w("- Plan checksum %s\n", code(rep.Checksum))
	m.w("- Release %s\n", md(releaseWords(m.p, rep.Release)))
	if ri := rep.RunInfo; ri.ID != "" {
		m.w("- Run %s (%s)%s%s\n", code(ri.ID), md(ri.Kind), operatorMD(ri.Operator), buildMD(ri.Relayctl))
	}
	m.w("- Started %s, ended %s, took %d ms\n", md(rep.Started), md(orDash(rep.Ended)), rep.Millis)
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

// releaseWords is the release line of a receipt's header.
func releaseWords(p *plans.Plan, release string) string {
	switch {
	case release == "" && p.Relay.Kind == plans.ReleaseKindNone:
		return "none: the service as each host has it"
	case release == "":
		return "none planned (no host of the plan could be read)"
	case p.Rollback != nil:
		return release + ": a rollback plan, each host back to the release the window it undoes replaced"
	}
	return release
}

// host is one host's section.
func (m *receiptMD) host(r HostReceipt) {
	m.w("## %s (%s): %s\n\n", md(r.Host), md(r.Address), r.Outcome)
	m.w("- State: %s\n", md(r.State))
	if r.Reason != "" {
		m.w("- Why: %s\n", md(r.Reason))
	}
	if r.FromLedger == "" && r.Outcome != NotStarted {
		m.w("- Wave %d; %d bytes uploaded%s\n", r.Wave, r.BytesUploaded, uploadWords(r.Upload))
	}
	if s := r.SSH; s != nil && (s.Key != "" || s.HostKey != "") {
		m.w("- Reached as %s with key %s; host key %s\n", md(orDash(s.User)), code(orDash(s.Key)), code(orDash(s.HostKey)))
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
	if r.RelayLog != "" {
		m.w("- The relay's last words, the end of its log %s when the read-back found it not running:\n\n%s\n", code(m.p.Relay.Service.Log), indent(r.RelayLog))
	}
	if r.DropsBefore != nil {
		m.window(r)
		m.counters(r)
		m.sysctls(r)
	}
	m.soak(r.Soak)
	m.checks(r.Verify)
	m.steps(r.Steps)
}

// window is what the switch did: the read-back, the release, the players.
// What was not read after says so ("not read"), never 0.
func (m *receiptMD) window(r HostReceipt) {
	read := r.DropsAfter != nil
	m.w("- Read-back: rb %s before, %s after (expected %d)\n", rbText1(r.RBBefore, true), rbText1(r.RBAfter, read), r.ExpectedRB)
	pids := fmt.Sprintf("pid %s before, %s after", pidText(r.PIDBefore, true), pidText(r.PIDAfter, read))
	if m.p.Relay.Kind == plans.ReleaseKindNone {
		m.w("- Release: none (%s as the host has it); %s; restarts: %d\n", md(m.p.Relay.Program), pids, r.Restarts)
	} else {
		m.w("- Release (%s): planned %s; %s before, %s after; relay %s; restarts: %d\n", md(m.p.Relay.Kind), md(orDash(r.ReleasePlanned)), md(releaseText(r.ReleaseBefore, true)), md(releaseText(r.ReleaseAfter, read)), pids, r.Restarts)
	}
	if len(r.Pruned) > 0 {
		m.w("- Removed after the window: %s\n", md(strings.Join(r.Pruned, ", ")))
	}
	if r.PruneError != "" {
		m.w("- Could not remove every old release: %s\n", md(r.PruneError))
	}
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

// counters are the four drop counters, before and after ("not read"
// after when the host was not read after).
func (m *receiptMD) counters(r HostReceipt) {
	b, a := r.DropsBefore, r.DropsAfter
	after := func(v func(*Counters) string) string {
		if a == nil {
			return "not read"
		}
		return v(a)
	}
	m.w("| counter | before | after |\n|---|---|---|\n")
	for _, row := range []struct {
		name string
		v    func(*Counters) string
	}{
		{"ss d", func(c *Counters) string { return fmt.Sprint(c.SSDrops) }},
		{"/proc/net/udp drops", func(c *Counters) string { return fmt.Sprint(c.ProcUDPDrops) }},
		{"UdpRcvbufErrors", func(c *Counters) string { return fmt.Sprint(c.RcvbufErrors) }},
		{"UdpInErrors", func(c *Counters) string { return fmt.Sprint(c.InErrors) }},
		{"relay rx_drops", func(c *Counters) string { return ptr(c.RelayRxDrops) }},
	} {
		m.w("| %s | %s | %s |\n", row.name, row.v(b), after(row.v))
	}
	m.w("\n")
}

// rbText1 is an rb as read: "no socket" for none, "not read" when the
// host was not read then.
func rbText1(rb uint64, read bool) string {
	switch {
	case !read:
		return "not read"
	case rb == 0:
		return "no socket"
	}
	return fmt.Sprint(rb)
}

// pidText is a relay's pid as read: "not running" for none.
func pidText(pid int, read bool) string {
	switch {
	case !read:
		return "not read"
	case pid == 0:
		return "not running"
	}
	return fmt.Sprint(pid)
}

// releaseText is a release as read: "none" for no release folder.
func releaseText(v string, read bool) string {
	switch {
	case !read:
		return "not read"
	case v == "":
		return "none"
	}
	return v
}

// operatorMD is who ran the run, for its header line.
func operatorMD(o *Operator) string {
	if o == nil {
		return ""
	}
	s := ", by " + md(o.Who()) + " on " + md(o.Machine)
	if o.SudoUser != "" {
		s += " (through sudo, by " + md(o.SudoUser) + ")"
	}
	return s
}

// buildMD is the relayctl that ran it.
func buildMD(b *Build) string {
	if b == nil {
		return ""
	}
	c := b.Commit
	if c == "" {
		c = "commit not stamped"
	} else {
		c = "commit " + c
	}
	return ", relayctl " + md(b.Version) + " (" + md(c) + ")"
}

// soak is the host's soak: its verdict, the baseline's and the soak's
// counters and rates, and where the counters disagree.
func (m *receiptMD) soak(s *SoakResult) {
	if s == nil {
		return
	}
	m.w("- Soak (%s): **%s**, %s: %s\n\n", s.Role, s.Verdict, md(orDash(s.Action)), md(s.Why))
	m.w("| span | seconds | ss d | /proc/net/udp drops | UdpRcvbufErrors | UdpInErrors | rx_drops | drops/s | datagrams/s |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, sp := range []struct {
		name string
		d    *DropSpan
	}{{"baseline", s.Before}, {"soak", s.After}} {
		if sp.d == nil {
			m.w("| %s | - | - | - | - | - | - | - | - |\n", sp.name)
			continue
		}
		rx := "-"
		if sp.d.RelayRxDrops != nil {
			rx = "+" + thousands(*sp.d.RelayRxDrops)
		}
		m.w("| %s | %.1f | +%s | +%s | +%s | +%s | %s | %.1f | %.0f (%s) |\n", sp.name, sp.d.Seconds, thousands(sp.d.SSDrops), thousands(sp.d.ProcUDPDrops),
			thousands(sp.d.RcvbufErrors), thousands(sp.d.InErrors), rx, sp.d.DropRate, sp.d.Traffic, sp.d.DatagramsBy)
	}
	m.w("\n")
	if s.PlayersPeak != nil && s.PlayersEnd != nil {
		m.w("Players (%s): %d at the soak's peak, %d at its end", s.PlayersCounted, *s.PlayersPeak, *s.PlayersEnd)
		if s.ForwardedPeak != nil && s.ForwardedEnd != nil {
			m.w("; forwarded datagrams/s: %.0f at its busiest interval, %.0f over its last", *s.ForwardedPeak, *s.ForwardedEnd)
		}
		m.w(".\n\n")
	}
	for _, sp := range []struct {
		name string
		d    *DropSpan
	}{{"baseline", s.Before}, {"soak", s.After}} {
		if sp.d != nil && len(sp.d.Disagreement) > 0 {
			m.w("The counters disagree (%s): %s\n\n", sp.name, md(strings.Join(sp.d.Disagreement, "; ")))
		}
	}
}

// sysctls are the read sysctls, before and after.
func (m *receiptMD) sysctls(r HostReceipt) {
	if len(r.SysctlsBefore) == 0 {
		return
	}
	m.w("| sysctl | before | after |\n|---|---|---|\n")
	for _, k := range m.p.ReadKeys() {
		after := "not read"
		if r.SysctlsAfter != nil {
			after = orDash(r.SysctlsAfter[k])
		}
		m.w("| %s | %s | %s |\n", plans.MDCell(code(k)), cell(orDash(r.SysctlsBefore[k])), cell(after))
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

// failureTable lists, one row each, the hosts that did not end as planned
// beyond those with a section.
func (m *receiptMD) failureTable(hs []*HostResult) {
	m.w("The other %d hosts that did not end as planned (each one's account is in the JSON receipt and on the host):\n\n", len(hs))
	m.w("| host | outcome | state | why |\n|---|---|---|---|\n")
	for _, h := range hs {
		m.w("| %s | %s | %s | %s |\n", cell(h.Host), h.Outcome, cell(h.State), cell(clipHead(h.Reason, 300)))
	}
	m.w("\n")
}

// summary is the hosts that ended as planned, a row per wave: how many,
// how their windows went, what they read back. Each host's account is in
// the JSON receipt and on the host under /var/lib/relayctl/receipts.
func (m *receiptMD) summary(rep *Report, good []*HostResult) {
	m.w("## The %d hosts that ended as planned\n\n", len(good))
	m.w("Summarised by wave (a section each above %d hosts would run to tens of thousands of lines); each host's account is in the JSON receipt and on the host under `/var/lib/relayctl/receipts`.\n\n", maxHostSections)
	m.w("| wave | hosts | applied | unchanged | window ms, median (max) | round trips, median | MiB uploaded | rb after |\n|---|---|---|---|---|---|---|---|\n")
	byWave := map[int][]*HostResult{}
	for _, h := range good {
		byWave[h.Wave] = append(byWave[h.Wave], h)
	}
	waves := slices.Sorted(maps.Keys(byWave))
	for _, n := range waves {
		hs := byWave[n]
		var win, trips []int64
		var up int64
		rb := map[uint64]int{}
		counts := map[Outcome]int{}
		for _, h := range hs {
			counts[h.Outcome]++
			if h.WindowMillis > 0 {
				win = append(win, h.WindowMillis)
			}
			trips = append(trips, int64(h.RoundTrips))
			up += h.BytesUploaded
			if h.readings != nil && h.readings.DropsAfter != nil {
				rb[h.readings.RBAfter]++
			}
		}
		label := fmt.Sprint(n)
		if n == 0 {
			label = "earlier run"
		} else if n <= len(rep.Waves) && rep.Waves[n-1].Group != "" {
			label += " (" + rep.Waves[n-1].Group + ")"
		}
		names := make([]string, len(hs))
		for i, h := range hs {
			names[i] = h.Host
		}
		m.w("| %s | %d: %s | %d | %d | %s | %s | %.1f | %s |\n", cell(label), len(hs), cell(hostRange(names)), counts[Applied]+counts[Staged], counts[Unchanged],
			medianMax(win), median(trips), float64(up)/(1<<20), cell(rbText(rb)))
	}
	m.w("\n")
}

func medianMax(v []int64) string {
	if len(v) == 0 {
		return "-"
	}
	slices.Sort(v)
	return fmt.Sprintf("%d (%d)", v[len(v)/2], v[len(v)-1])
}

func median(v []int64) string {
	if len(v) == 0 {
		return "-"
	}
	slices.Sort(v)
	return fmt.Sprint(v[len(v)/2])
}

// rbText is the rb values read back and how many hosts each.
func rbText(rb map[uint64]int) string {
	if len(rb) == 0 {
		return "-"
	}
	var parts []string
	for _, v := range slices.Sorted(maps.Keys(rb)) {
		parts = append(parts, fmt.Sprintf("%d (%d)", v, rb[v]))
	}
	return strings.Join(parts, ", ")
}

// uploadWords says how the release crossed the uplink, for a host's line.
func uploadWords(u *UploadRecord) string {
	if u == nil {
		return ""
	}
	s := " (the release as it is)"
	if u.Form != uplink.Raw {
		s = fmt.Sprintf(" (the release as %s", formWords(u.Form))
		if u.From != "" {
			s += " from " + code(short12(u.From))
		}
		s += fmt.Sprintf(": %d bytes on the wire for its %d)", u.Bytes, u.Size)
	}
	if len(u.Fallback) > 0 {
		s += "; not the planned form: " + md(strings.Join(u.Fallback, "; "))
	}
	return s
}
