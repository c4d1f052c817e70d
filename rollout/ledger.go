package rollout

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/relayctl/relayctl/plans"
)

// Ledger is a fleet apply's account of every host of its plan, saved
// beside the plan (PLAN.ledger.json) each time a host starts or ends, so
// it is current even after relayctl is killed: each host's outcome so far,
// the hosts never started included (Ansible's retry files list only the
// failed ones). apply --resume goes on with every host the ledger does not
// show applied or unchanged, and refuses a ledger of another plan.
type Ledger struct {
	FormatVersion int          `json:"format_version"`
	Plan          string       `json:"plan"`
	Checksum      string       `json:"plan_checksum"`
	Run           int          `json:"run"`            // 1, then one more per apply --resume
	Only          []string     `json:"only,omitempty"` // the --only of the run that wrote it: the hosts --resume goes on with
	Updated       string       `json:"updated"`
	Hosts         []LedgerHost `json:"hosts"` // in the plan's order
}

// LedgerHost is one host in the ledger.
type LedgerHost struct {
	Host string `json:"host"`
	// Outcome is an Outcome, or InProgress while the host runs: a ledger
	// left with a host in progress means relayctl died then, maybe inside
	// the host's window (its journal on the host says).
	Outcome       string `json:"outcome"`
	State         string `json:"state,omitempty"`
	Reason        string `json:"reason,omitempty"`
	Run           int    `json:"run,omitempty"` // the run that last worked on the host
	Wave          int    `json:"wave,omitempty"`
	Ended         string `json:"ended,omitempty"`
	BytesUploaded int64  `json:"bytes_uploaded,omitempty"`
}

// LedgerFormatVersion is the layout version of ledger files.
const LedgerFormatVersion = 1

// InProgress is a ledger host that started and has not ended.
const InProgress = "in progress"

// ErrLedgerOtherPlan is a ledger written by an apply of another plan (or
// of this one before it was made again): resuming from it would skip
// hosts this plan never applied.
var ErrLedgerOtherPlan = errors.New("the ledger belongs to another plan")

// MaxLedgerSize bounds a ledger file.
const MaxLedgerSize = 64 << 20

// NewLedger is a first run's ledger: every host not started.
func NewLedger(p *plans.Plan) *Ledger {
	l := &Ledger{FormatVersion: LedgerFormatVersion, Plan: p.Name, Checksum: p.Checksum, Run: 1}
	for _, h := range p.Hosts {
		l.Hosts = append(l.Hosts, LedgerHost{Host: h.Host, Outcome: string(NotStarted), State: StateAsWas})
	}
	return l
}

// LoadLedger reads a ledger for resuming plan p: it must be a ledger of
// exactly this plan (its checksum) and name the plan's hosts in order.
func LoadLedger(file string, data []byte, p *plans.Plan) (*Ledger, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var l Ledger
	if err := dec.Decode(&l); err != nil {
		return nil, fmt.Errorf("%s: not a ledger of relayctl apply: %w", file, err)
	}
	if l.FormatVersion != LedgerFormatVersion {
		return nil, fmt.Errorf("%s: ledger format_version %d, this relayctl reads %d", file, l.FormatVersion, LedgerFormatVersion)
	}
	if l.Checksum != p.Checksum {
		return nil, fmt.Errorf("%s: %w: it was written for plan %s with checksum %s, this plan is %s with checksum %s",
			file, ErrLedgerOtherPlan, plans.Visible(clip(l.Plan)), plans.Visible(clipTo(l.Checksum, 80)), p.Name, p.Checksum)
	}
	if len(l.Hosts) != len(p.Hosts) {
		return nil, fmt.Errorf("%s: the ledger has %d hosts, the plan %d", file, len(l.Hosts), len(p.Hosts))
	}
	known := map[string]bool{InProgress: true}
	for _, o := range Outcomes {
		known[string(o)] = true
	}
	for i, h := range l.Hosts {
		if h.Host != p.Hosts[i].Host {
			return nil, fmt.Errorf("%s: host %d of the ledger is %s, the plan's is %s", file, i+1, plans.Visible(clip(h.Host)), p.Hosts[i].Host)
		}
		if !known[h.Outcome] || h.Outcome == string(Staged) {
			return nil, fmt.Errorf("%s: host %s: outcome %q", file, h.Host, plans.Visible(clip(h.Outcome)))
		}
	}
	if l.Run < 1 {
		return nil, fmt.Errorf("%s: run %d", file, l.Run)
	}
	return &l, nil
}

// Done reports whether the ledger shows host i applied or unchanged: a
// resumed apply does not touch it again.
func (l *Ledger) Done(i int) bool {
	o := Outcome(l.Hosts[i].Outcome)
	return o == Applied || o == Unchanged
}

// Todo lists the hosts a resumed apply goes on with, by index.
func (l *Ledger) Todo() []int {
	var out []int
	for i := range l.Hosts {
		if !l.Done(i) {
			out = append(out, i)
		}
	}
	return out
}

// JSON is the ledger file's bytes: the header's fields, then one host a
// line, so a person can read (and grep) it and a save re-encodes only the
// host that changed (ledgerBook).
func (l *Ledger) JSON() ([]byte, error) {
	lines := make([][]byte, len(l.Hosts))
	for i := range l.Hosts {
		b, err := hostLine(&l.Hosts[i])
		if err != nil {
			return nil, err
		}
		lines[i] = b
	}
	return l.assemble(lines)
}

func hostLine(h *LedgerHost) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(h); err != nil {
		return nil, fmt.Errorf("encode ledger: %w", err)
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

func (l *Ledger) assemble(lines [][]byte) ([]byte, error) {
	head := *l
	head.Hosts = nil
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(head); err != nil {
		return nil, fmt.Errorf("encode ledger: %w", err)
	}
	// The header ends `"hosts": null\n}\n`: the hosts go in its place.
	out, ok := bytes.CutSuffix(b.Bytes(), []byte("null\n}\n"))
	if !ok {
		return nil, errors.New("encode ledger: unexpected header")
	}
	out = append(out, "[\n"...)
	for i, line := range lines {
		out = append(out, "    "...)
		out = append(out, line...)
		if i < len(lines)-1 {
			out = append(out, ',')
		}
		out = append(out, '\n')
	}
	return append(out, "  ]\n}\n"...), nil
}

// ledgerBook keeps the ledger of a run and saves it after each change.
// A ledger that cannot be saved stops the fleet: a resume would not know
// where the run got to.
// Each host's line is kept encoded: a save costs one host's encoding and
// a copy of the file, not the whole fleet's encoding again.
type ledgerBook struct {
	mu    sync.Mutex
	l     *Ledger
	lines [][]byte // encoded hosts; nil: not yet
	save  func([]byte) error
	now   func() time.Time
	err   error
}

func (b *ledgerBook) update(i int, f func(h *LedgerHost)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	f(&b.l.Hosts[i])
	if b.lines != nil {
		line, err := hostLine(&b.l.Hosts[i])
		if err != nil {
			b.err = err
			return
		}
		b.lines[i] = line
	}
	b.flush()
}

func (b *ledgerBook) flush() {
	if b.save == nil || b.err != nil {
		return
	}
	b.l.Updated = b.now().UTC().Format(time.RFC3339)
	if b.lines == nil {
		b.lines = make([][]byte, len(b.l.Hosts))
		for i := range b.l.Hosts {
			line, err := hostLine(&b.l.Hosts[i])
			if err != nil {
				b.err = err
				return
			}
			b.lines[i] = line
		}
	}
	body, err := b.l.assemble(b.lines)
	if err == nil {
		err = b.save(body)
	}
	if err != nil {
		b.err = fmt.Errorf("save the ledger: %w", err)
	}
}

func (b *ledgerBook) failed() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.err
}

func (b *ledgerBook) started(i, wave int) {
	b.update(i, func(h *LedgerHost) {
		*h = LedgerHost{Host: h.Host, Outcome: InProgress, State: "unknown: relayctl was working on it", Run: b.l.Run, Wave: wave}
	})
}

func (b *ledgerBook) ended(i int, r *HostResult) {
	b.update(i, func(h *LedgerHost) {
		*h = LedgerHost{Host: h.Host, Outcome: string(r.Outcome), State: r.State, Reason: r.Reason, Run: b.l.Run, Wave: r.Wave,
			Ended: b.now().UTC().Format(time.RFC3339), BytesUploaded: r.BytesUploaded}
	})
}

// notStarted records why the hosts of sel left over did not start.
func (b *ledgerBook) notStarted(results []*HostResult, sel []int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, i := range sel {
		if r := results[i]; r.Outcome == NotStarted && r.FromLedger == "" {
			h := &b.l.Hosts[i]
			*h = LedgerHost{Host: h.Host, Outcome: string(NotStarted), State: r.State, Reason: r.Reason, Run: b.l.Run, Wave: r.Wave}
		}
	}
	b.lines = nil // every line again
	b.flush()
}
