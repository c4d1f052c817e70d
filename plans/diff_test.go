package plans

import (
	"bytes"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

func TestHunks(t *testing.T) {
	// A file of n kept lines ("k1".."kn") with changes at the given lines.
	file := func(n int, edit map[int]DiffLine) []DiffLine {
		var d []DiffLine
		for i := 1; i <= n; i++ {
			if l, ok := edit[i]; ok {
				d = append(d, l)
				continue
			}
			d = append(d, DiffLine{Op: " ", Text: fmt.Sprintf("k%d", i)})
		}
		return d
	}
	tests := []struct {
		name    string
		d       []DiffLine
		headers []string
		lines   []int // lines per hunk
	}{
		{"no change", file(5, nil), nil, nil},
		{"new file", []DiffLine{{Op: "+", Text: "a"}, {Op: "+", Text: "b"}}, []string{"@@ -0,0 +1,2 @@"}, []int{2}},
		{"removed file", []DiffLine{{Op: "-", Text: "a"}}, []string{"@@ -1 +0,0 @@"}, []int{1}},
		{"short file, one hunk", file(4, map[int]DiffLine{2: {Op: "+", Text: "new"}}), []string{"@@ -1,3 +1,4 @@"}, []int{4}},
		{"long file, change in the middle", file(20, map[int]DiffLine{10: {Op: "-", Text: "old"}}), []string{"@@ -7,7 +7,6 @@"}, []int{7}},
		{"two changes far apart", file(30, map[int]DiffLine{5: {Op: "+", Text: "a"}, 25: {Op: "-", Text: "b"}}), []string{"@@ -2,6 +2,7 @@", "@@ -21,7 +22,6 @@"}, []int{7, 7}},
		{"two changes six apart share a hunk", file(30, map[int]DiffLine{10: {Op: "+", Text: "a"}, 16: {Op: "+", Text: "b"}}), []string{"@@ -7,11 +7,13 @@"}, []int{13}},
		{"change at the end", file(10, map[int]DiffLine{10: {Op: "+", Text: "z"}}), []string{"@@ -7,3 +7,4 @@"}, []int{4}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hs := Hunks(tt.d, DiffContext)
			var headers []string
			var lines []int
			for _, h := range hs {
				headers = append(headers, h.Header())
				lines = append(lines, len(h.Lines))
			}
			if !reflect.DeepEqual(headers, tt.headers) || !reflect.DeepEqual(lines, tt.lines) {
				t.Errorf("got %q with %v lines, want %q with %v", headers, lines, tt.headers, tt.lines)
			}
		})
	}
}

func TestKeyChanges(t *testing.T) {
	cur := configKeys("A=1\n# note\nAPI_TOKEN=s3cret\nB=2\nB=3\nGONE=x\n")
	planned := configKeys("A=1\nAPI_TOKEN=s3cret\nB=4\nNEW=5\n")
	got := keyChanges(cur, planned, map[string]bool{"B": true, "NEW": true}, IsSecretKey)
	masked := maskValue("s3cret")
	want := []KeyChange{
		{Key: "A", Current: "1", Planned: "1", Change: KeyKept},
		{Key: "API_TOKEN", Current: masked, Planned: masked, Change: KeyKept},
		{Key: "B", Current: "3", Planned: "4", Managed: true, Change: KeyChanged}, // the last B is the one read
		{Key: "NEW", Planned: "5", Managed: true, Change: KeyAdded},
		{Key: "GONE", Current: "x", Change: KeyRemoved},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
	if !strings.HasPrefix(masked, "••• (sha256:") || strings.Contains(masked, "s3cret") {
		t.Errorf("maskValue = %q, want ••• and a hash", masked)
	}
	// The drop-in: values compared as the kernel does, no masking.
	d := keyChanges(dropInKeys("net.core.rmem_max = 4194304\nnet.ipv4.udp_mem = 1  2\t3\nbad line\n"),
		dropInKeys("net.ipv4.udp_mem = 1 2 3\nnet.core.rmem_max = 8388608\n"), map[string]bool{"net.core.rmem_max": true}, noSecret)
	wantD := []KeyChange{
		{Key: "net.ipv4.udp_mem", Current: "1 2 3", Planned: "1 2 3", Change: KeyKept},
		{Key: "net.core.rmem_max", Current: "4194304", Planned: "8388608", Managed: true, Change: KeyChanged},
	}
	if !reflect.DeepEqual(d, wantD) {
		t.Errorf("drop-in: got %+v\nwant %+v", d, wantD)
	}
}

// secretFacts is a host whose relay config holds secrets and operator
// lines, long enough for the diff to need hunks, and an older drop-in.
func secretFacts() *Facts {
	f := incidentFacts()
	lines := []string{
		"# relay config of relay-ash-1, kept by the ops team",
		"RELAYD_LISTEN=0.0.0.0:7788",
		"RELAYD_CONTROL=127.0.0.1:7789",
		"API_TOKEN=s3cret-token-123",
		"RELAYD_SO_RCVBUF=0",
		"DB_PASSWORD=\"hunter2\"",
		"RELAYD_LOBBY_SIZE=8",
		"RELAYD_MAX_LOBBIES=4096",
		"RELAYD_IDLE_TIMEOUT=30s",
		"RELAYD_BATCH=64",
		"# metrics",
		"METRICS_ADDR=127.0.0.1:9100",
		"METRICS_PATH=/metrics",
		"LOG_LEVEL=info",
		"LOG_FORMAT=json",
		"# ```` is not a fence here",
		"SIGNING_KEY=`cat /etc/relay/key` ```",
		"RELAYD_SO_RCVBUF_FORCE=true",
	}
	f.Config = FileFact{Exists: true, Content: strings.Join(lines, "\n") + "\n"}
	f.SysctlFiles = append(f.SysctlFiles, ConfFile{Path: "/etc/sysctl.d/90-relayctl.conf",
		Content: "# Written by relayctl (plan ashburn-old). Changes here are overwritten by the next apply.\nnet.core.rmem_max = 4194304\nnet.core.rmem_default = 262144\n"})
	return f
}

// The review's diffs are unified diffs with secrets masked, pinned in
// golden files; the plan file holds no secret either.
func TestReviewDiffsGolden(t *testing.T) {
	p := makePlan(t, incidentSpec(t, nil), secretFacts())
	body, err := p.JSON()
	if err != nil {
		t.Fatal(err)
	}
	md := p.Markdown("secrets.plan")
	for _, secret := range []string{"s3cret", "hunter2", "cat /etc/relay/key"} {
		if bytes.Contains(body, []byte(secret)) || bytes.Contains(md, []byte(secret)) {
			t.Errorf("%q is in the plan or its review", secret)
		}
	}
	for _, want := range []string{
		"`````diff\n--- /etc/relay/relayd.env (current)\n+++ /etc/relay/relayd.env (planned)\n@@ -2,7 +2,7 @@\n",
		"\n   # ```` is not a fence here\n",
		"\n   API_TOKEN=••• (sha256:",
		"\n-* RELAYD_SO_RCVBUF=0\n+* RELAYD_SO_RCVBUF=4194304\n",
		"\n@@ -15,4 +15,4 @@\n",
		"\n-* RELAYD_SO_RCVBUF_FORCE=true\n+* RELAYD_SO_RCVBUF_FORCE=false\n",
		"\n-* net.core.rmem_max = 4194304\n-  net.core.rmem_default = 262144\n",
	} {
		if !bytes.Contains(md, []byte(want)) {
			t.Errorf("the review lacks %q", want)
		}
	}
	golden(t, "secrets.plan", body)
	golden(t, "secrets.plan.md", md)
}
