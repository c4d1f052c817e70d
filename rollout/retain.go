package rollout

import (
	"fmt"
	"sync"
)

// What a fleet keeps of a host once it is done (it was 11 KB a host
// before, so 10,000 hosts held 110 MB until the receipt was written): its
// account and the summary of its readings the receipt needs, not the
// facts they came from; each log bounded; the texts every host repeats
// (step titles, checks) kept once for the fleet.

// Bounds on the logs a done host keeps: the end of each, where the
// failure is. The whole journal stays on the host.
const (
	maxJournalKept = 16 << 10
	maxLogKept     = 4 << 10
)

// seal keeps of r only what its receipt needs.
func (r *HostResult) seal(keys []string, in *interner) {
	if r.readings == nil {
		rd := readingsOf(keys, r)
		r.readings = &rd
	}
	r.Before, r.After = nil, nil
	r.Journal = clipLog(r.Journal, maxJournalKept, "the journal on the host, /var/lib/relayctl/journal, has it whole")
	r.UnitLog = clipLog(r.UnitLog, maxLogKept, "journalctl -u on the host has it whole")
	r.RelayLog = clipLog(r.RelayLog, maxLogKept, "the relay's log on the host has it whole")
	r.Reason = clipHead(r.Reason, maxLogKept)
	for i := range r.Steps {
		s := &r.Steps[i]
		s.Phase, s.Kind, s.Key, s.Title = in.of(s.Phase), in.of(s.Kind), in.of(s.Key), in.of(s.Title)
		s.Detail = clipHead(s.Detail, maxLogKept)
	}
	for i := range r.Verify {
		r.Verify[i].What = in.of(r.Verify[i].What) // want and got are often the host's own (a PID)
	}
	for i := range r.Timeline {
		r.Timeline[i].Name = in.of(r.Timeline[i].Name)
	}
	r.State = in.of(r.State)
}

// clipLog keeps the last max bytes of a log, saying what was left out.
func clipLog(s string, max int, whole string) string {
	if len(s) <= max {
		return s
	}
	cut := len(s) - max
	for cut < len(s) && s[cut]&0xC0 == 0x80 { // a rune boundary
		cut++
	}
	return fmt.Sprintf("(the first %d bytes left out; %s)\n", cut, whole) + s[cut:]
}

// clipHead keeps the first max bytes of a message.
func clipHead(s string, max int) string {
	if len(s) <= max {
		return s
	}
	return cutText(s, max) + fmt.Sprintf(" (%d bytes more)", len(s)-max)
}

// interner keeps one copy of each text many hosts repeat.
type interner struct{ m sync.Map }

func (in *interner) of(s string) string {
	if len(s) == 0 || len(s) > 256 {
		return s
	}
	v, _ := in.m.LoadOrStore(s, s)
	return v.(string)
}
