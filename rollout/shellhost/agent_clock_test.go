package shellhost

import (
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/relayctl/relayctl/rollout"
)

// clockFuncs are the agent's journal clock with what it uses.
func clockFuncs(t *testing.T) string {
	return agentFunc(t, "now_ms") + agentFunc(t, "uptime_ms") + agentFunc(t, "now_v")
}

// The journal's time comes from one `date` and /proc/uptime; the civil
// date is arithmetic, so it is checked here across the dates that trip such
// code: the epoch, leap days (2000's and 2024's), a century that is not a
// leap year (2100), month and year ends.
func TestJournalClockIsTheHostsUTCTime(t *testing.T) {
	for _, want := range []time.Time{
		time.Unix(0, 0),
		time.Date(2000, 2, 29, 12, 0, 0, 0, time.UTC),
		time.Date(2024, 2, 29, 23, 59, 58, 0, time.UTC),
		time.Date(2024, 3, 1, 0, 0, 0, 5e6, time.UTC),
		time.Date(2026, 12, 31, 23, 59, 58, 123e6, time.UTC),
		time.Date(2100, 2, 28, 9, 8, 7, 0, time.UTC),
		time.Date(2100, 3, 1, 1, 2, 3, 0, time.UTC),
		time.Date(2400, 2, 29, 6, 30, 0, 0, time.UTC),
	} {
		// The base as the first call sets it, but at a chosen time.
		script := clockFuncs(t) + `uptime_ms; t_base_up=$up_ms t_base_ms=$1; now_v; printf '%s' "$t_now"`
		out, err := exec.Command("sh", "-c", script, "sh", strconv.FormatInt(want.UnixMilli(), 10)).CombinedOutput()
		if err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		got, err := time.Parse("2006-01-02T15:04:05.000Z", string(out))
		if err != nil {
			t.Fatalf("%s: %q is not the journal's form: %v", want, out, err)
		}
		if d := got.Sub(want); d < 0 || d > time.Second {
			t.Errorf("%s: the agent says %s", want.Format(time.RFC3339Nano), out)
		}
		if _, err := rollout.ReadJournal(string(out) + " begin plan=p checksum=c\n"); err != nil {
			t.Errorf("relayctl does not read the agent's time: %v", err)
		}
	}
	// Without a base: one `date`, then the clock moves with /proc/uptime.
	out, err := exec.Command("sh", "-c", clockFuncs(t)+`now_v; a=$t_now; sleep 0.3; now_v; printf '%s %s' "$a" "$t_now"`).CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	f := strings.Fields(string(out))
	first, err1 := time.Parse("2006-01-02T15:04:05.000Z", f[0])
	second, err2 := time.Parse("2006-01-02T15:04:05.000Z", f[1])
	if err1 != nil || err2 != nil {
		t.Fatalf("%q: %v %v", out, err1, err2)
	}
	if d := time.Since(first); d < 0 || d > 5*time.Second {
		t.Errorf("the first time %s is %s from this machine's clock", f[0], d)
	}
	if d := second.Sub(first); d < 250*time.Millisecond || d > 3*time.Second {
		t.Errorf("0.3 s of sleep moved the clock by %s (%q)", d, out)
	}
}
