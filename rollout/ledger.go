package rollout

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"
	"unicode/utf8"

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
	// Next is what to do next for the host (NextResume, ...), as the
	// receipt says: --resume refuses a ledger that says a release was
	// rejected (NextRejected) unless told the operator knows.
	Next string `json:"next,omitempty"`
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
// line, so a person can read (and grep) it. Every host's line is
// ledgerSlot bytes (padded with spaces, which JSON allows between tokens)
// and the header a whole number of slots, so that a save rewrites one
// host's line in place (ledgerBook): its cost does not grow with the
// fleet, and the file is a JSON document at every moment.
func (l *Ledger) JSON() ([]byte, error) {
	head, err := l.header()
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, len(head)+len(l.Hosts)*ledgerSlot+len(ledgerTail))
	out = append(out, head...)
	for i := range l.Hosts {
		line, err := slotLine(&l.Hosts[i], i == len(l.Hosts)-1)
		if err != nil {
			return nil, err
		}
		out = append(out, line...)
	}
	return append(out, ledgerTail...), nil
}

// ledgerSlot is the bytes of one host's line in the ledger file: one
// disk sector, so an in-place rewrite is all or nothing on most disks.
const ledgerSlot = 512

const ledgerTail = "  ]\n}\n"

// header is the ledger's fields up to the hosts' list, padded to a whole
// number of slots.
func (l *Ledger) header() ([]byte, error) {
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
	out = append(out, '[')
	return pad(out, (len(out)/ledgerSlot+1)*ledgerSlot), nil
}

// pad fills b with spaces and a newline to n bytes.
func pad(b []byte, n int) []byte {
	for len(b) < n-1 {
		b = append(b, ' ')
	}
	return append(b, '\n')
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

// slotLine is a host's line of exactly ledgerSlot bytes: its reason (and
// state) cut to fit, when they must be (the receipt has them whole).
func slotLine(h *LedgerHost, last bool) ([]byte, error) {
	c := *h
	for {
		line, err := hostLine(&c)
		if err != nil {
			return nil, err
		}
		room := ledgerSlot - len("    ") - len(",\n")
		if len(line) <= room {
			out := append([]byte("    "), line...)
			if !last {
				out = append(out, ',')
			}
			return pad(out, ledgerSlot), nil
		}
		// Each is cut once to what fits, or to "…" and then the other:
		// a reason cut to nothing must not be cut again forever.
		switch over := len(line) - room; {
		case c.Reason != "" && c.Reason != "…":
			c.Reason = cutText(c.Reason, len(c.Reason)-over-8)
		case c.State != "" && c.State != "…":
			c.State = cutText(c.State, len(c.State)-over-8)
		default:
			return nil, fmt.Errorf("encode ledger: host %s does not fit a line of %d bytes", plans.Visible(clip(h.Host)), ledgerSlot)
		}
	}
}

// cutText cuts s to at most n bytes on a rune boundary, with an ellipsis.
func cutText(s string, n int) string {
	if n <= 0 {
		return "…"
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// ledgerBook keeps the ledger of a run and saves it after each change:
// in full (save) when the run starts and ends, and in between by
// rewriting the changed host's line and the header in place (patch),
// when the caller gives a way to; a ledger that cannot be saved stops
// the fleet: a resume would not know where the run got to.
type ledgerBook struct {
	mu      sync.Mutex
	l       *Ledger
	save    func([]byte) error
	patch   func(p []byte, off int64) error // nil: every save in full
	now     func() time.Time
	err     error
	written bool // the file holds this run's layout: patches may follow
	headLen int
}

func (b *ledgerBook) update(i int, f func(h *LedgerHost)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	f(&b.l.Hosts[i])
	if b.patch == nil || !b.written {
		b.flush()
		return
	}
	if b.save == nil || b.err != nil {
		return
	}
	b.l.Updated = b.now().UTC().Format(time.RFC3339)
	head, err := b.l.header()
	if err == nil && len(head) != b.headLen {
		b.flush() // the header grew past its slots: write it all again
		return
	}
	var line []byte
	if err == nil {
		line, err = slotLine(&b.l.Hosts[i], i == len(b.l.Hosts)-1)
	}
	if err == nil {
		err = b.patch(line, int64(b.headLen+i*ledgerSlot))
	}
	if err == nil {
		err = b.patch(head, 0)
	}
	if err != nil {
		b.err = fmt.Errorf("save the ledger: %w", err)
	}
}

// flush writes the whole ledger. Callers hold mu.
func (b *ledgerBook) flush() {
	if b.save == nil || b.err != nil {
		return
	}
	b.l.Updated = b.now().UTC().Format(time.RFC3339)
	head, err := b.l.header()
	var body []byte
	if err == nil {
		body, err = b.l.JSON()
	}
	if err == nil {
		err = b.save(body)
	}
	if err != nil {
		b.err = fmt.Errorf("save the ledger: %w", err)
		return
	}
	b.written, b.headLen = true, len(head)
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
			Ended: b.now().UTC().Format(time.RFC3339), BytesUploaded: r.BytesUploaded, Next: r.Next}
	})
}

// notStarted records why the hosts of sel left over did not start.
func (b *ledgerBook) notStarted(results []*HostResult, sel []int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, i := range sel {
		if r := results[i]; r.Outcome == NotStarted && r.FromLedger == "" {
			h := &b.l.Hosts[i]
			*h = LedgerHost{Host: h.Host, Outcome: string(NotStarted), State: r.State, Reason: r.Reason, Run: b.l.Run, Wave: r.Wave, Next: r.Next}
		}
	}
	b.flush()
}
