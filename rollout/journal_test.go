package rollout

import (
	"strings"
	"testing"
)

const journalSample = `2026-12-01T15:16:42.139687732Z begin plan=fake checksum=sha256:5750
2026-12-01T15:16:42.139690276Z start check-folders: check target folders: root alone can write /etc/relay
2026-12-01T15:16:42.139693841Z done check-folders: check target folders: root alone can write /etc/relay
2026-12-01T15:16:42.139724547Z start install-config: prepare for install relay config: /etc/relay/relayd.env put in place (atomic rename)
2026-12-01T15:16:42.139725699Z done install-config: prepare for install relay config: /etc/relay/relayd.env put in place (atomic rename)
2026-12-01T15:16:42.139749104Z start window
2026-12-01T15:16:42.139778417Z start set-sysctl: set sysctl: net.core.rmem_max = 8388608 in /proc/sys, read back
2026-12-01T15:16:42.139791557Z ok sysctl net.core.rmem_max
2026-12-01T15:16:42.139792518Z done set-sysctl: set sysctl: net.core.rmem_max = 8388608 in /proc/sys, read back
2026-12-01T15:16:42.139794361Z start install-config: install relay config: /etc/relay/relayd.env put in place (atomic rename)
2026-12-01T15:16:42.139795723Z ok rename /etc/relay/relayd.env.relayctl-new
`

func TestReadJournal(t *testing.T) {
	j, err := ReadJournal(journalSample)
	if err != nil {
		t.Fatal(err)
	}
	if j.Plan != "fake" || j.Checksum != "sha256:5750" || !j.Window || j.Rollback || j.Ended != "" {
		t.Errorf("got %+v", j)
	}
	if s, ok := j.Step("set-sysctl", "set sysctl: net.core.rmem_max = 8388608 in /proc/sys, read back"); !ok || !s.Done || len(s.Changes) != 1 {
		t.Errorf("the sysctl step: %+v %v; want done, one change", s, ok)
	}
	s, ok := j.Step("install-config", "install relay config: /etc/relay/relayd.env put in place (atomic rename)")
	if !ok || s.Done || len(s.Changes) != 1 || s.Changes[0] != (JournalChange{"rename", "/etc/relay/relayd.env.relayctl-new"}) {
		t.Errorf("the config step: %+v %v; want begun, its rename made, not done", s, ok)
	}
	if _, ok := j.Step("install-config", "install relay config: /etc/relay/relayd.env"); ok {
		t.Error("found a step by a prefix of its title")
	}
	for _, tt := range []struct{ name, text, want string }{
		{"no time", "begin plan=p checksum=c\n", "no time"},
		{"steps without begin", "2026-12-01T15:16:42.1Z start window\n", "without a begin"},
		{"two begins", "2026-12-01T15:16:42.1Z begin plan=p checksum=c\n2026-12-01T15:16:42.1Z begin plan=q checksum=d\n", "bad begin"},
		{"done without start", "2026-12-01T15:16:42.1Z begin plan=p checksum=c\n2026-12-01T15:16:42.1Z done restart: x\n", "without its start"},
		{"a change by no primitive", "2026-12-01T15:16:42.1Z begin plan=p checksum=c\n2026-12-01T15:16:42.1Z ok rm /etc\n", "no primitive"},
		{"something else", "2026-12-01T15:16:42.1Z begin plan=p checksum=c\n2026-12-01T15:16:42.1Z hello\n", "unknown entry"},
	} {
		if _, err := ReadJournal(tt.text); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: got %v, want %q", tt.name, err, tt.want)
		}
	}
}

// A window's end line: what the host decided, by itself or on the run's
// word; a rollback or a window begun after it is not ended by it.
func TestReadJournalWindowEnds(t *testing.T) {
	const at = "2026-12-01T15:16:43.1Z "
	tests := []struct {
		tail string
		want *WindowEnd
		undo int
	}{
		{at + "window kept by=host\n", &WindowEnd{Verdict: EndKept, By: ByHost}, 0},
		{at + "window kept by=controller\n", &WindowEnd{Verdict: EndKept, By: ByController}, 0},
		{at + "window kept by=host pid=4194304\n", &WindowEnd{Verdict: EndKept, By: ByHost, PID: 4194304}, 0},
		{at + "window rolled-back by=host pid=7 why=read-back: x\n", &WindowEnd{Verdict: EndRolledBack, By: ByHost, PID: 7, Why: "read-back: x"}, 0},
		{at + "start rollback\n" + at + "ok restore-link /opt/relay/current\n" + at + "ok restart command\n" + at + "window rolled-back by=host why=read-back: ss rb: got rb212992, want rb8388608\n",
			&WindowEnd{Verdict: EndRolledBack, By: ByHost, Why: "read-back: ss rb: got rb212992, want rb8388608"}, 2},
		{at + "window kept by=host\n" + at + "start rollback\n", nil, 0},
		{at + "window kept by=host\n" + at + "start window\n", nil, 0},
	}
	for _, tt := range tests {
		j, err := ReadJournal(journalSample + tt.tail)
		if err != nil {
			t.Fatalf("%q: %v", tt.tail, err)
		}
		if tt.want == nil && j.End != nil || tt.want != nil && (j.End == nil || *j.End != *tt.want) || len(j.Undone) != tt.undo {
			t.Errorf("%q: end %+v, undone %v; want %+v and %d", tt.tail, j.End, j.Undone, tt.want, tt.undo)
		}
	}
	for _, bad := range []string{"window kept\n", "window kept by=me\n", "window won by=host\n", "window kept by=host because\n",
		"window kept by=host pid=\n", "window kept by=host pid=0\n", "window kept by=host pid=-1\n", "window kept by=host pid=012\n",
		"window kept by=host pid=4194305\n", "window kept by=host pid=99999999999999999999\n", "window kept by=host pid=1x\n", "window kept by=host pid=1 because\n"} {
		if _, err := ReadJournal(journalSample + at + bad); err == nil || !strings.Contains(err.Error(), "bad window end") {
			t.Errorf("%q: got %v, want a bad window end", bad, err)
		}
	}
	if _, err := ReadJournal("2026-12-01T15:16:42.1Z begin plan=p checksum=c\n" + at + "window kept by=host\n"); err == nil {
		t.Error("a window end with no window begun was read")
	}
}

func FuzzReadJournal(f *testing.F) {
	f.Add(journalSample)
	f.Add("2026-12-01T15:16:42.1Z begin plan=p checksum=c\n2026-12-01T15:16:42.1Z start rollback\n2026-12-01T15:16:42.1Z ok restore /x\n2026-12-01T15:16:42.1Z end applied\n")
	f.Add("")
	f.Add(journalSample + "2026-12-01T15:16:43.1Z window rolled-back by=host why=read-back: x\n")
	f.Fuzz(func(t *testing.T, text string) {
		j, err := ReadJournal(text)
		if err != nil {
			return
		}
		if (len(j.Steps) > 0 || j.Window) && j.Checksum == "" {
			t.Errorf("steps without a begin: %+v", j)
		}
		lines := strings.Count(text, "\n") + 1
		if len(j.Steps) > lines {
			t.Errorf("%d steps from %d lines", len(j.Steps), lines)
		}
		for _, s := range j.Steps {
			if s.Kind == "" || strings.Contains(s.Kind, " ") || s.Title == "" {
				t.Errorf("step %+v", s)
			}
		}
	})
}

// What verify says of a journal left on a host.
func TestJournalNote(t *testing.T) {
	const at = "2026-12-01T15:16:43.1Z "
	for _, tt := range []struct{ text, want string }{
		{"", ""},
		{journalSample + at + "window kept by=host\n", "the window of plan fake was completed by the host after the connection was lost; apply --resume"},
		{journalSample + at + "window rolled-back by=host why=read-back: relay running: got false, want true\n", "rolled back by the host after the connection was lost (read-back: relay running: got false, want true)"},
		{journalSample, "a run of plan fake stopped inside its window; apply --resume of that plan finishes it"},
		{"2026-12-01T15:16:42.1Z begin plan=p checksum=c\n", "stopped before its window"},
		{"rubbish\n", "cannot be read"},
	} {
		if got := JournalNote(tt.text); tt.want == "" && got != "" || !strings.Contains(got, tt.want) {
			t.Errorf("%q: got %q, want %q", tt.text, got, tt.want)
		}
	}
}
