package rollout

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/relayctl/relayctl/plans"
	"github.com/relayctl/relayctl/tune"
)

// Counters are the drop counts that agreed to the unit in the incident:
// ss's d, /proc/net/udp drops, the namespace's RcvbufErrors (and
// InErrors) and the relay's own rx_drops, with the socket and the host
// clock of the reading (plans.DropCounters).
type Counters = plans.DropCounters

// CountersOf picks the drop counters out of facts.
func CountersOf(f *plans.Facts) Counters { return plans.DropCountersOf(f) }

// HostReceipt is the summary of one host kept on the host and in the
// local receipt: how its apply went, and what it was and is. The host's
// own copy carries the run as well (RunHeader); the local receipt has it
// once, at its top.
type HostReceipt struct {
	Plan     string `json:"plan"`
	Checksum string `json:"plan_checksum"`
	*RunHeader
	HostAccount
	HostReadings
}

// RunHeader is the run a host's own receipt belongs to: its id, kind,
// operator, relayctl, and how its approval was decided.
type RunHeader struct {
	RunInfo
	Approval *Approval `json:"approval,omitempty"`
}

// HostReadings is what a receipt keeps of the host as read before and
// after its apply: a summary, kept once the host is done instead of the
// facts it came from (HostResult.seal). What was not read is absent,
// never 0: DropsBefore and DropsAfter are present exactly when the host
// was read before and after.
type HostReadings struct {
	SysctlsBefore map[string]string `json:"sysctls_before,omitempty"`
	SysctlsAfter  map[string]string `json:"sysctls_after,omitempty"`
	ReleaseBefore string            `json:"release_before,omitempty"`
	ReleaseAfter  string            `json:"release_after,omitempty"`
	PIDBefore     int               `json:"relay_pid_before,omitempty"`
	PIDAfter      int               `json:"relay_pid_after,omitempty"`
	// RBBefore and RBAfter are the socket's rb as read: absent when the
	// host was not read then, or no socket was found.
	RBBefore    uint64    `json:"rb_before,omitempty"`
	RBAfter     uint64    `json:"rb_after,omitempty"`
	DropsBefore *Counters `json:"drops_before,omitempty"`
	DropsAfter  *Counters `json:"drops_after,omitempty"`
}

// Receipt builds the receipt of one host.
func Receipt(p *plans.Plan, r *HostResult) HostReceipt {
	hr := HostReceipt{Plan: p.Name, Checksum: p.Checksum, HostAccount: r.HostAccount}
	if r.readings != nil {
		hr.HostReadings = *r.readings
	} else {
		hr.HostReadings = readingsOf(p.ReadKeys(), r)
	}
	return hr
}

// readingsOf summarises the host as read before and after its apply.
func readingsOf(keys []string, r *HostResult) HostReadings {
	var hr HostReadings
	if f := r.Before; f != nil {
		hr.SysctlsBefore = sysctlValues(f, keys)
		hr.ReleaseBefore, hr.PIDBefore, hr.RBBefore = f.Release.Current, f.Service.PID, f.Socket.Rcvbuf
		c := CountersOf(f)
		hr.DropsBefore = &c
	}
	afterReadings(&hr, r.After, keys)
	return hr
}

// afterReadings summarises the host as read after its apply (nil: not read).
func afterReadings(hr *HostReadings, f *plans.Facts, keys []string) {
	if f == nil {
		return
	}
	hr.SysctlsAfter = sysctlValues(f, keys)
	hr.ReleaseAfter, hr.PIDAfter, hr.RBAfter = f.Release.Current, f.Service.PID, f.Socket.Rcvbuf
	c := CountersOf(f)
	hr.DropsAfter = &c
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

// hostReceiptJSON is the receipt a host files: its own, with the run.
func hostReceiptJSON(p *plans.Plan, r *HostResult, o ApplyOptions) ([]byte, error) {
	hr := Receipt(p, r)
	hr.RunHeader = &RunHeader{RunInfo: o.RunInfo, Approval: o.Approval}
	return json.MarshalIndent(hr, "", "  ")
}

// ReceiptFormatVersion is the layout version of the fleet receipt
// (PLAN.receipt.json, apply --json), documented in docs/json.md. A
// field added keeps it; one renamed, removed or changed in meaning bumps it.
// Format 2 leaves out what was not read (rb_before, rb_after were 0), and
// adds the run: run_id, kind, operator, relayctl, ended, and each host's
// ssh, started and ended.
const ReceiptFormatVersion = 2

// FleetReceipt is the local receipt written beside the plan, and what
// apply --json prints.
type FleetReceipt struct {
	FormatVersion int    `json:"format_version"`
	Plan          string `json:"plan"`
	Checksum      string `json:"plan_checksum"`
	// Release is the release the plan leaves its hosts on
	// (plans.Plan.ReleaseName): absent for a plan that ships none.
	Release string `json:"release,omitempty"`
	RunInfo
	Started  string        `json:"started"`
	Ended    string        `json:"ended,omitempty"`
	Millis   int64         `json:"ms"`
	Run      int           `json:"run,omitempty"`      // 1, then one more per apply --resume
	Only     string        `json:"only,omitempty"`     // apply --only: hosts lists only these
	Outside  int           `json:"outside,omitempty"`  // the plan's hosts outside --only, as the ledger had them
	Waves    []*WaveResult `json:"waves,omitempty"`    // the waves as they ran
	Stopped  string        `json:"stopped,omitempty"`  // why hosts were left not started
	Approval *Approval     `json:"approval,omitempty"` // how this run's approval was decided
	Hosts    []HostReceipt `json:"hosts"`
}

// Approval is how a run's approval was decided, before anything
// connected (relayctl decides it; the receipt keeps it): the plan was
// approved by a signer, approval was skipped by a flag although an
// allowed_signers file was configured, or none was configured.
type Approval struct {
	Decision       string `json:"decision"`                       // ApprovalSigned, ApprovalSkipped or ApprovalNotConfigured
	AllowedSigners string `json:"allowed_signers,omitempty"`      // the allowed_signers file in force
	From           string `json:"from,omitempty"`                 // what named it: --require-approval, RELAYCTL_REQUIRE_APPROVAL or the system file
	Signer         string `json:"signer,omitempty"`               // who signed: principals (key type and fingerprint, file:line)
	SignerKey      string `json:"signer_key,omitempty"`           // the key that signed: its type and SHA256 fingerprint
	SignersLine    string `json:"allowed_signers_line,omitempty"` // the allowed_signers line that allowed it: FILE:LINE
	Signature      string `json:"signature,omitempty"`            // the signature file checked
	SkippedBy      string `json:"skipped_by,omitempty"`           // the flag that skipped it, with its reason
	User           string `json:"user,omitempty"`                 // who ran relayctl, when approval was skipped
}

// Approval decisions.
const (
	ApprovalSigned        = "signed"
	ApprovalSkipped       = "skipped"
	ApprovalNotConfigured = "not configured"
)

// ReceiptJSON is the fleet receipt as JSON (WriteReceiptJSON's bytes).
func ReceiptJSON(p *plans.Plan, rep *Report) ([]byte, error) {
	var b bytes.Buffer
	if err := WriteReceiptJSON(&b, p, rep); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// WriteReceiptJSON writes the fleet receipt as JSON to w, one host at a
// time: the bytes of json.Encoder with a two-space indent of the whole
// FleetReceipt, without ever holding it (a receipt of 10,000 hosts is
// some 70 MB).
func WriteReceiptJSON(w io.Writer, p *plans.Plan, rep *Report) error {
	fr := FleetReceipt{FormatVersion: ReceiptFormatVersion, Plan: rep.Plan, Checksum: rep.Checksum, Release: rep.Release, RunInfo: rep.RunInfo, Started: rep.Started, Ended: rep.Ended, Millis: rep.Millis,
		Run: rep.Run, Only: rep.Only, Outside: rep.Outside, Waves: rep.Waves, Stopped: rep.Stopped, Approval: rep.Approval}
	return plans.StreamJSON(w, fr, len(rep.Hosts), func(i int) any { return Receipt(p, rep.Hosts[i]) }, "receipt")
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

// ptr is a counter that may not have been read (the relay's /status).
func ptr(v *uint64) string {
	if v == nil {
		return "not read"
	}
	return fmt.Sprint(*v)
}
