package rollout

import (
	"strings"
	"testing"
	"unsafe"

	"github.com/relayctl/relayctl/plans"
)

func sealFacts(rmemMax string) *plans.Facts {
	return &plans.Facts{Sysctls: map[string]plans.SysctlFact{"net.core.rmem_max": {Exists: true, Value: rmemMax}}}
}

func TestClipLogs(t *testing.T) {
	long := strings.Repeat("é", 10000) + "the end"
	got := clipLog(long, 100, "the host has it whole")
	if !strings.HasPrefix(got, "(the first ") || !strings.HasSuffix(got, "the end") || len(got) > 200 {
		t.Errorf("clipLog keeps the end: %q", got)
	}
	if clipLog("short", 100, "x") != "short" || clipHead("short", 100) != "short" {
		t.Error("a short log is kept as it is")
	}
	head := clipHead("start "+strings.Repeat("x", 5000), 100)
	if !strings.HasPrefix(head, "start ") || !strings.HasSuffix(head, "bytes more)") || len(head) > 130 {
		t.Errorf("clipHead keeps the start: %q", head)
	}
}

// A done host keeps its readings' summary, not the facts, and its logs
// bounded; the receipt built from it is the one built before sealing.
func TestSealKeepsWhatTheReceiptNeeds(t *testing.T) {
	r := &HostResult{HostAccount: HostAccount{Host: "h1", Journal: strings.Repeat("j", 100000), Reason: strings.Repeat("r", 100000),
		Steps: []StepRecord{{Title: "set sysctl", Detail: strings.Repeat("d", 100000)}}}}
	r.Before = sealFacts("212992")
	r.After = sealFacts("8388608")
	keys := []string{"net.core.rmem_max"}
	before := readingsOf(keys, r)
	var in interner
	r.seal(keys, &in)
	if r.Before != nil || r.After != nil {
		t.Error("the facts are kept")
	}
	if r.readings.SysctlsBefore["net.core.rmem_max"] != before.SysctlsBefore["net.core.rmem_max"] || r.readings.SysctlsAfter["net.core.rmem_max"] != "8388608" {
		t.Errorf("readings: %+v", r.readings)
	}
	if len(r.Journal) > maxJournalKept+200 || len(r.Reason) > maxLogKept+50 || len(r.Steps[0].Detail) > maxLogKept+50 {
		t.Errorf("logs kept: journal %d, reason %d, detail %d bytes", len(r.Journal), len(r.Reason), len(r.Steps[0].Detail))
	}
	other := &HostResult{HostAccount: HostAccount{Steps: []StepRecord{{Title: strings.Clone("set sysctl")}}}}
	other.seal(keys, &in)
	if unsafe.StringData(other.Steps[0].Title) != unsafe.StringData(r.Steps[0].Title) {
		t.Error("a step title every host has is kept once for the fleet")
	}
}
