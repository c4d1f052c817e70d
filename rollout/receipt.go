package rollout

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/relayctl/relayctl/plans"
	"github.com/relayctl/relayctl/tune"
)

// Counters are the four drop counts that agreed to the unit in the
// incident: ss's d, /proc/net/udp drops, the namespace's RcvbufErrors, and
// the relay's own rx_drops.
type Counters struct {
	SSDrops      uint64  `json:"ss_d"`
	ProcUDPDrops uint64  `json:"proc_net_udp_drops"`
	RcvbufErrors uint64  `json:"snmp_rcvbuf_errors"`
	RelayRxDrops *uint64 `json:"relay_rx_drops"` // nil when the relay's /status was not read
}

// CountersOf picks the drop counters out of facts.
func CountersOf(f *plans.Facts) Counters {
	c := Counters{SSDrops: f.Socket.Drops, ProcUDPDrops: f.Socket.ProcUDPDrops, RcvbufErrors: f.Socket.RcvbufErrors}
	if f.RelayStatus != nil && f.RelayStatus.Read {
		v := f.RelayStatus.RxDrops
		c.RelayRxDrops = &v
	}
	return c
}

// HostReceipt is the summary of one host kept on the host and in the
// local receipt: what it was, what it is, and how the window went.
type HostReceipt struct {
	Plan          string            `json:"plan"`
	Checksum      string            `json:"plan_checksum"`
	Host          string            `json:"host"`
	Address       string            `json:"address"`
	Outcome       Outcome           `json:"outcome"`
	State         string            `json:"state"`
	Reason        string            `json:"reason,omitempty"`
	Drift         []plans.Drift     `json:"drift,omitempty"`
	Journal       string            `json:"journal,omitempty"`
	UnitLog       string            `json:"unit_log,omitempty"` // systemd's journal of the relay when the window failed
	SysctlsBefore map[string]string `json:"sysctls_before,omitempty"`
	SysctlsAfter  map[string]string `json:"sysctls_after,omitempty"`
	ReleaseBefore string            `json:"release_before,omitempty"`
	ReleaseAfter  string            `json:"release_after,omitempty"`
	PIDBefore     int               `json:"relay_pid_before,omitempty"`
	PIDAfter      int               `json:"relay_pid_after,omitempty"`
	RBBefore      uint64            `json:"rb_before"`
	RBAfter       uint64            `json:"rb_after"`
	ExpectedRB    int               `json:"rb_expected"`
	DropsBefore   *Counters         `json:"drops_before,omitempty"`
	DropsAfter    *Counters         `json:"drops_after,omitempty"`
	WindowMillis  int64             `json:"window_ms"`
	Restarts      int               `json:"restarts"`
	Handoffs      int               `json:"handoffs"`
	// The players (see HostResult).
	PlayersAtWindow *plans.Players `json:"players_at_window,omitempty"`
	DrainWaitMillis int64          `json:"drain_wait_ms,omitempty"`
	PlayersCut      *int           `json:"players_cut,omitempty"`
	HandoffGapUS    *int64         `json:"handoff_gap_us,omitempty"`
	RoundTrips      int            `json:"round_trips"`
	Steps           []StepRecord   `json:"steps"`
	Timeline        []Phase        `json:"timeline,omitempty"`
	Verify          []Check        `json:"verify,omitempty"`
	Wave            int            `json:"wave,omitempty"`
	BytesUploaded   int64          `json:"bytes_uploaded"`        // release, config, drop-in: 0 when staged ahead
	TowardPlan      []plans.Drift  `json:"toward_plan,omitempty"` // moved toward the plan since it was made
	FromLedger      string         `json:"from_ledger,omitempty"` // not touched by this run (apply --resume)
}

// Receipt builds the receipt of one host.
func Receipt(p *plans.Plan, r *HostResult) HostReceipt {
	hr := HostReceipt{Plan: p.Name, Checksum: p.Checksum, Host: r.Host, Address: r.Address, Outcome: r.Outcome, State: r.State,
		Reason: r.Reason, Drift: r.Drift, Journal: r.Journal, UnitLog: r.UnitLog, ExpectedRB: r.ExpectedRB, WindowMillis: r.WindowMillis,
		Restarts: r.Restarts, Handoffs: r.Handoffs, RoundTrips: r.RoundTrips, Steps: r.Steps, Timeline: r.Timeline, Verify: r.Verify,
		PlayersAtWindow: r.PlayersAtWindow, DrainWaitMillis: r.DrainWaitMillis, PlayersCut: r.PlayersCut, HandoffGapUS: r.HandoffGapUS,
		Wave: r.Wave, BytesUploaded: r.BytesUploaded, TowardPlan: r.TowardPlan, FromLedger: r.FromLedger}
	keys := p.ReadKeys()
	if f := r.Before; f != nil {
		hr.SysctlsBefore = sysctlValues(f, keys)
		hr.ReleaseBefore, hr.PIDBefore, hr.RBBefore = f.Release.Current, f.Service.PID, f.Socket.Rcvbuf
		c := CountersOf(f)
		hr.DropsBefore = &c
	}
	if f := r.After; f != nil {
		hr.SysctlsAfter = sysctlValues(f, keys)
		hr.ReleaseAfter, hr.PIDAfter, hr.RBAfter = f.Release.Current, f.Service.PID, f.Socket.Rcvbuf
		c := CountersOf(f)
		hr.DropsAfter = &c
	}
	return hr
}

func sysctlValues(f *plans.Facts, keys []string) map[string]string {
	m := map[string]string{}
	for _, k := range keys {
		if s, ok := f.Sysctls[k]; ok && s.Exists {
			m[k] = tune.Normalize(s.Value)
		}
	}
	return m
}

func receiptJSON(p *plans.Plan, r *HostResult) ([]byte, error) {
	return json.MarshalIndent(Receipt(p, r), "", "  ")
}

// ReceiptFormatVersion is the layout version of the fleet receipt
// (PLAN.receipt.json, apply --json), documented in docs/json.md. A
// field added keeps it; one renamed, removed or changed in meaning bumps it.
const ReceiptFormatVersion = 1

// FleetReceipt is the local receipt written beside the plan, and what
// apply --json prints.
type FleetReceipt struct {
	FormatVersion int           `json:"format_version"`
	Plan          string        `json:"plan"`
	Checksum      string        `json:"plan_checksum"`
	Started       string        `json:"started"`
	Millis        int64         `json:"ms"`
	Run           int           `json:"run,omitempty"`      // 1, then one more per apply --resume
	Waves         []*WaveResult `json:"waves,omitempty"`    // the waves as they ran
	Stopped       string        `json:"stopped,omitempty"`  // why hosts were left not started
	Approval      *Approval     `json:"approval,omitempty"` // how this run's approval was decided
	Hosts         []HostReceipt `json:"hosts"`
}

// Approval is how a run's approval was decided, before anything
// connected (relayctl decides it; the receipt keeps it): the plan was
// approved by a signer, approval was skipped by a flag although an
// allowed_signers file was configured, or none was configured.
type Approval struct {
	Decision       string `json:"decision"`                  // ApprovalSigned, ApprovalSkipped or ApprovalNotConfigured
	AllowedSigners string `json:"allowed_signers,omitempty"` // the allowed_signers file in force
	From           string `json:"from,omitempty"`            // what named it: --require-approval, RELAYCTL_REQUIRE_APPROVAL or the system file
	Signer         string `json:"signer,omitempty"`          // who signed: principals (key type and fingerprint, file:line)
	Signature      string `json:"signature,omitempty"`       // the signature file checked
	SkippedBy      string `json:"skipped_by,omitempty"`      // the flag that skipped it, with its reason
	User           string `json:"user,omitempty"`            // who ran relayctl, when approval was skipped
}

// Approval decisions.
const (
	ApprovalSigned        = "signed"
	ApprovalSkipped       = "skipped"
	ApprovalNotConfigured = "not configured"
)

// ReceiptJSON is the fleet receipt as JSON.
func ReceiptJSON(p *plans.Plan, rep *Report) ([]byte, error) {
	fr := FleetReceipt{FormatVersion: ReceiptFormatVersion, Plan: rep.Plan, Checksum: rep.Checksum, Started: rep.Started, Millis: rep.Millis,
		Run: rep.Run, Waves: rep.Waves, Stopped: rep.Stopped, Approval: rep.Approval}
	for _, h := range rep.Hosts {
		fr.Hosts = append(fr.Hosts, Receipt(p, h))
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(fr); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// String is the approval in one line, for the receipt's people part.
func (a *Approval) String() string {
	switch a.Decision {
	case ApprovalSigned:
		return fmt.Sprintf("signed by %s, checked against %s (from %s), signature %s", a.Signer, a.AllowedSigners, a.From, a.Signature)
	case ApprovalSkipped:
		return fmt.Sprintf("SKIPPED by %s, run by %s, although %s (from %s) asks for a signature", a.SkippedBy, a.User, a.AllowedSigners, a.From)
	}
	return "none required: no allowed_signers file is configured"
}

// Recap is the compact summary: one line per outcome class that occurred
// (not one per task, ansible#80494).
func Recap(rep *Report) string {
	by := map[Outcome][]string{}
	for _, h := range rep.Hosts {
		by[h.Outcome] = append(by[h.Outcome], h.Host)
	}
	var b strings.Builder
	for _, o := range Outcomes {
		if hs := by[o]; len(hs) > 0 {
			fmt.Fprintf(&b, "%-12s %3d  %s\n", string(o)+":", len(hs), abbreviate(hs, 8))
		}
	}
	return b.String()
}

func abbreviate(s []string, n int) string {
	if len(s) <= n {
		return strings.Join(s, " ")
	}
	return strings.Join(s[:n], " ") + fmt.Sprintf(" … and %d more", len(s)-n)
}

// ReceiptMarkdown is the receipt for people. Every string that came from
// a host or a plan is escaped, as in the plan's review.
func ReceiptMarkdown(p *plans.Plan, rep *Report) []byte {
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	md, code, cell := plans.MDText, plans.MDCode, func(s string) string { return plans.MDCell(plans.MDText(s)) }
	w("# relayctl receipt: %s\n\n", md(rep.Plan))
	w("- Plan checksum %s\n- Started %s, took %d ms\n", code(rep.Checksum), md(rep.Started), rep.Millis)
	if a := rep.Approval; a != nil {
		w("- Approval: %s\n", md(a.String()))
	}
	w("\n")
	w("%s\n", indent(Recap(rep)))
	if rep.Stopped != "" {
		w("The rollout stopped: %s\n\n", md(rep.Stopped))
	}
	if len(rep.Waves) > 0 {
		w("| wave | hosts | applied | unchanged | failed, rolled back, refused (budget) | unreachable (budget) | not started | ms |\n|---|---|---|---|---|---|---|---|\n")
		for _, x := range rep.Waves {
			w("| %d | %s | %d | %d | %d (%d) | %d (%d) | %d | %d |\n", x.Wave, cell(hostRange(x.Hosts)), x.Applied+x.Staged, x.Unchanged,
				x.Failures, x.MaxFailures, x.Unreachable, x.MaxUnreachable, x.NotStarted, x.EndMillis-x.StartMillis)
		}
		w("\n")
	}
	for _, h := range rep.Hosts {
		r := Receipt(p, h)
		w("## %s (%s): %s\n\n", md(r.Host), md(r.Address), r.Outcome)
		w("- State: %s\n", md(r.State))
		if r.Reason != "" {
			w("- Why: %s\n", md(r.Reason))
		}
		if r.FromLedger == "" && r.Outcome != NotStarted {
			w("- Wave %d; %d bytes uploaded\n", r.Wave, r.BytesUploaded)
		}
		for _, d := range r.TowardPlan {
			w("- Toward the plan already: %s: planned %s, now %s\n", md(d.Name), code(d.Planned), code(d.Observed))
		}
		for _, d := range r.Drift {
			w("- Drifted: %s: planned %s, now %s\n", md(d.Name), code(d.Planned), code(d.Observed))
		}
		if r.Journal != "" {
			w("- Journal of the unfinished run:\n\n%s\n", indent(r.Journal))
		}
		if r.UnitLog != "" {
			w("- systemd's journal of the relay since the window began:\n\n%s\n", indent(r.UnitLog))
		}
		if r.DropsBefore != nil {
			w("- Read-back: rb %d before, %d after (expected %d)\n", r.RBBefore, r.RBAfter, r.ExpectedRB)
			w("- Release: %s before, %s after; relay pid %d before, %d after; restarts: %d\n", md(orDash(r.ReleaseBefore)), md(orDash(r.ReleaseAfter)), r.PIDBefore, r.PIDAfter, r.Restarts)
			if r.WindowMillis > 0 {
				w("- Window: %d ms from relay stop to new socket verified (host clock)\n", r.WindowMillis)
			}
			if r.Handoffs > 0 {
				w("- Handoffs: %d (the socket and its lobbies passed to the new release)\n", r.Handoffs)
			}
			if pw := r.PlayersAtWindow; pw != nil {
				w("- Players when the window began: %d in %d lobbies", pw.Players, pw.Lobbies)
				if r.DrainWaitMillis > 0 {
					w(" (after %d ms at the drain gate)", r.DrainWaitMillis)
				}
				w("\n")
			}
			if r.PlayersCut != nil {
				w("- Players cut by the switch: %d\n", *r.PlayersCut)
			}
			if r.HandoffGapUS != nil {
				w("- Handoff gap (the relay's own: old's last read to new's first): %d µs\n", *r.HandoffGapUS)
			}
			w("- Round trips: %d\n", r.RoundTrips)
			if len(r.Timeline) > 0 {
				var parts []string
				for _, ph := range r.Timeline {
					parts = append(parts, fmt.Sprintf("%s %d ms", ph.Name, ph.Ms))
				}
				w("- Timeline: %s\n", strings.Join(parts, ", "))
			}
			w("\n")
			w("| counter | before | after |\n|---|---|---|\n")
			a := r.DropsAfter
			if a == nil {
				a = &Counters{}
			}
			w("| ss d | %d | %d |\n", r.DropsBefore.SSDrops, a.SSDrops)
			w("| /proc/net/udp drops | %d | %d |\n", r.DropsBefore.ProcUDPDrops, a.ProcUDPDrops)
			w("| RcvbufErrors | %d | %d |\n", r.DropsBefore.RcvbufErrors, a.RcvbufErrors)
			w("| relay rx_drops | %s | %s |\n\n", ptr(r.DropsBefore.RelayRxDrops), ptr(a.RelayRxDrops))
			if len(r.SysctlsBefore) > 0 {
				w("| sysctl | before | after |\n|---|---|---|\n")
				for _, k := range p.ReadKeys() {
					w("| %s | %s | %s |\n", plans.MDCell(code(k)), cell(orDash(r.SysctlsBefore[k])), cell(orDash(r.SysctlsAfter[k])))
				}
				w("\n")
			}
		}
		if len(r.Verify) > 0 {
			w("| check | want | got | |\n|---|---|---|---|\n")
			for _, c := range r.Verify {
				mark := "ok"
				if !c.OK {
					mark = "**differs**"
				}
				w("| %s | %s | %s | %s |\n", cell(c.What), cell(c.Want), cell(c.Got), mark)
			}
			w("\n")
		}
		if len(r.Steps) > 0 {
			w("Steps:\n\n")
			for _, s := range r.Steps {
				detail := ""
				if s.Detail != "" {
					detail = ": " + s.Detail
				}
				title := s.Title
				if title == "" {
					title = s.Kind
				}
				w("- +%d ms [%s] %s: %s%s\n", s.Millis, md(s.Phase), md(title), s.Status, md(detail))
			}
			w("\n")
		}
	}
	return []byte(b.String())
}

// indent makes text from a host an indented code block, each line made
// visible: no line of it can end the block or reach a terminal raw.
func indent(s string) string {
	var b strings.Builder
	for _, l := range strings.Split(strings.TrimRight(s, "\n"), "\n") {
		b.WriteString("    " + plans.Visible(l) + "\n")
	}
	return b.String()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func ptr(v *uint64) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprint(*v)
}
