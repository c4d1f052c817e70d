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

func FuzzReadJournal(f *testing.F) {
	f.Add(journalSample)
	f.Add("2026-12-01T15:16:42.1Z begin plan=p checksum=c\n2026-12-01T15:16:42.1Z start rollback\n2026-12-01T15:16:42.1Z ok restore /x\n2026-12-01T15:16:42.1Z end applied\n")
	f.Add("")
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
