package hostfacts

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/relayctl/relayctl/plans"
	"github.com/relayctl/relayctl/rollout"
)

const testBoundary = "@@relayctl-0123456789abcdef0123456789abcdef"

func TestParseFrames(t *testing.T) {
	B := testBoundary
	out := B + " kernel\n6.18.44\n\n" + B + " end 0\n" +
		B + " relay-config\nabsent\n\n" + B + " end 2\n" +
		B + " file /etc/sysctl.d/a b.conf\na = 1\n@@relayctl-guess end 0\n\n" + B + " end 0\n"
	frames, err := ParseFrames([]byte(out), B)
	if err != nil {
		t.Fatal(err)
	}
	if len(frames) != 3 {
		t.Fatalf("got %d frames, want 3", len(frames))
	}
	if frames[0].Name != "kernel" || string(frames[0].Data) != "6.18.44\n" {
		t.Errorf("kernel frame: got %q %q", frames[0].Name, frames[0].Data)
	}
	if frames[2].Name != "file /etc/sysctl.d/a b.conf" || string(frames[2].Data) != "a = 1\n@@relayctl-guess end 0\n" {
		t.Errorf("a frame whose content fakes another boundary: got %q %q", frames[2].Name, frames[2].Data)
	}
	if frames[1].Status != 2 {
		t.Errorf("status: got %d, want 2", frames[1].Status)
	}
	for _, bad := range []string{
		"garbage\n",
		B + " kernel\n6.18\n",                    // never ends
		B + " kernel\n6.18\n\n" + B + " end x\n", // bad status
		B + " kernel\n6.18\n\n" + B + " end 0",   // no final newline
		B + " kernel",                            // no header newline
		"@@relayctl-other kernel\nx\n\n@@relayctl-other end 0\n",
	} {
		if _, err := ParseFrames([]byte(bad), B); err == nil {
			t.Errorf("ParseFrames(%q): got no error", bad)
		}
	}
	// A frame seen twice, or output holding the boundary, is forged.
	for _, forged := range []string{
		B + " ss\na\n" + B + " end 0\n" + B + " ss\nb\n" + B + " end 0\n",
		B + " relay-status\n{}" + B + " ss\n\n" + B + " end 0\n",
	} {
		if _, err := ParseFrames([]byte(forged), B); !errors.Is(err, ErrForgedFrame) {
			t.Errorf("ParseFrames(%q): got %v, want ErrForgedFrame", forged, err)
		}
	}
}

func FuzzParseFrames(f *testing.F) {
	B := testBoundary
	f.Add([]byte(B + " kernel\n6.18.44\n\n" + B + " end 0\n"))
	f.Add([]byte(B + " relay-config\nabsent\n\n" + B + " end 2\n"))
	f.Add([]byte(B + " a\nabc\n" + B + " end 0\n" + B + " b\nx\n\n" + B + " end 1\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		frames, err := ParseFrames(b, B)
		if err != nil {
			return
		}
		n := 0
		seen := map[string]bool{}
		for _, fr := range frames {
			n += len(fr.Data)
			if seen[fr.Name] || bytes.Contains(fr.Data, []byte(B)) {
				t.Fatalf("accepted a forged frame %q", fr.Name)
			}
			seen[fr.Name] = true
		}
		if n > len(b) {
			t.Fatalf("frames hold %d bytes of a %d-byte input", n, len(b))
		}
		FactsFromFrames(frames, rollout.Query{Keys: []string{"net.core.rmem_max"}, Port: 7788})
	})
}

func framesOf(B string, kv ...string) []byte {
	var b bytes.Buffer
	for i := 0; i+1 < len(kv); i += 2 {
		fmt.Fprintf(&b, "%s %s\n%s\n%s end 0\n", B, kv[i], kv[i+1], B)
	}
	return b.Bytes()
}

// The current release is the version of the folder the link names only
// when that folder is directly in the releases dir: a link to
// /anywhere/1.8.0 is not release 1.8.0.
func TestObserveReleaseIsTheWholeLinkTarget(t *testing.T) {
	q := rollout.Query{Port: 7788, Paths: plans.PlanPaths(plans.DefaultPaths)}
	for _, tt := range []struct{ link, want string }{
		{"/opt/relay/releases/1.8.0", "1.8.0"},
		{"releases/1.8.0", "1.8.0"},
		{"/anywhere/1.8.0", ""},
		{"/opt/relay/releases/../../tmp/1.8.0", ""},
		{"/opt/relay/releases/1.8.0/..", ""},
	} {
		frames, err := ParseFrames(framesOf(testBoundary, "kernel", "6.18", "current-link", tt.link), testBoundary)
		if err != nil {
			t.Fatal(err)
		}
		f, err := FactsFromFrames(frames, q)
		if err != nil {
			t.Fatal(err)
		}
		if f.Release.Current != tt.want {
			t.Errorf("link %s: got release %q, want %q", tt.link, f.Release.Current, tt.want)
		}
	}
}

// A sysctl.d file over the size limit is reported, not read into memory.
func TestObserveBoundsHostFiles(t *testing.T) {
	big := strings.Repeat("# padding\n", plans.MaxHostFile/10+10)
	frames, err := ParseFrames(framesOf(testBoundary, "kernel", "6.18", "file /etc/sysctl.d/99-big.conf", big), testBoundary)
	if err != nil {
		t.Fatal(err)
	}
	f, err := FactsFromFrames(frames, rollout.Query{Port: 7788, Paths: plans.PlanPaths(plans.DefaultPaths)})
	if err != nil {
		t.Fatal(err)
	}
	if len(f.SysctlFiles) != 0 || len(f.SkippedFiles) != 1 || !strings.Contains(f.SkippedFiles[0], "99-big.conf is larger than") {
		t.Errorf("got files %d, skipped %q", len(f.SysctlFiles), f.SkippedFiles)
	}
}

// The Go agent decodes uploads itself and says which forms in a section
// of its own: relayctl takes the forms it knows from it, in its own order,
// and no longer asks the host's programs.
func TestDecodersTheAgentLists(t *testing.T) {
	for _, c := range []struct {
		listed string
		status int
		want   string
	}{
		{"gzip zstd zstd-patch", 0, "gzip zstd zstd-patch"},
		{"zstd-patch zstd gzip", 0, "gzip zstd zstd-patch"},
		{"gzip brotli ../x zstd", 0, "gzip zstd"},
		{"", 0, ""},
		{"gzip zstd zstd-patch", 1, ""},
	} {
		by := frameSet{"decoders": {Name: "decoders", Data: []byte(c.listed), Status: c.status}}
		if got := strings.Join(by.decoders(), " "); got != c.want {
			t.Errorf("%q (status %d): decoders %q, want %q", c.listed, c.status, got, c.want)
		}
	}
}

// A /status that answers for another process or another socket is not
// this relay's: its counters are left out. The frames are parsed as
// strictly as observe's.
func TestDropsFromFramesTrustsOnlyTheRelaysStatus(t *testing.T) {
	const B = "@@relayctl-0123"
	ss := "UNCONN 0 0 0.0.0.0:7788 0.0.0.0:* ino:555 sk:1 <-> skmem:(r0,rb4096,t0,tb212992,f0,w0,o0,bl0,d41)"
	snmp := "Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors\nUdp: 900 0 41 0 41 0\n"
	status := func(pid, inode int) string {
		return fmt.Sprintf("HTTP/1.0 200 OK\r\n\r\n"+`{"version":"1.8.0","pid":%d,"socket_inode":%d,"players":8,"counters":{"rx_packets":100,"rx_drops":41}}`, pid, inode)
	}
	for _, tt := range []struct {
		name   string
		status string
		want   bool
	}{
		{"its own", status(42, 555), true},
		{"another process", status(43, 555), false},
		{"another socket", status(42, 556), false},
		{"not JSON", "HTTP/1.0 200 OK\r\n\r\n<html>", false},
	} {
		frames, err := ParseFrames(framesOf(B, "clock", "1700000000000000000", "ss", ss, "proc-net-snmp", snmp, "relay-status", tt.status), B)
		if err != nil {
			t.Fatal(err)
		}
		c, err := DropsFromFrames(frames, 42, 7788)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if c.SSDrops != 41 || c.RcvbufErrors != 41 || c.InDatagrams != 900 || c.SocketInode != 555 || c.ClockNanos != 1700000000000000000 {
			t.Errorf("%s: kernel counters %+v", tt.name, c)
		}
		if got := c.RelayRxDrops != nil; got != tt.want {
			t.Errorf("%s: relay counters kept %v, want %v", tt.name, got, tt.want)
		}
	}
	for _, bad := range [][]byte{
		framesOf(B, "ss", ss),                             // no clock
		framesOf(B, "clock", "yesterday", "ss", ss),       // a clock that is not one
		framesOf(B, "clock", "17", "ss", "UNCONN broken"), // ss that does not parse
	} {
		frames, err := ParseFrames(bad, B)
		if err != nil {
			continue
		}
		if _, err := DropsFromFrames(frames, 42, 7788); err == nil {
			t.Errorf("%q was read as a sample", bad)
		}
	}
}

func FuzzDropsFromFrames(f *testing.F) {
	const B = "@@relayctl-0123"
	f.Add(framesOf(B, "clock", "1700000000000000000", "ss", "UNCONN 0 0 0.0.0.0:7788 0.0.0.0:* ino:555 sk:1 <-> skmem:(r0,rb4096,t0,tb212992,f0,w0,o0,bl0,d41)",
		"proc-net-snmp", "Udp: InDatagrams InErrors RcvbufErrors\nUdp: 1 2 3\n", "relay-status", `{"version":"1.8.0","pid":42,"counters":{"rx_drops":1}}`))
	f.Add(framesOf(B, "clock", "-1"))
	f.Fuzz(func(t *testing.T, b []byte) {
		frames, err := ParseFrames(b, B)
		if err != nil {
			return
		}
		c, err := DropsFromFrames(frames, 42, 7788)
		if err == nil && (c.ClockNanos <= 0 || c.PID != 42) {
			t.Errorf("accepted a sample without a clock or of another pid: %+v", c)
		}
	})
}

// A receipt on the host is relayctl's own file, read as untrusted as any
// host output: whatever it holds, verify gets a baseline or none, and no
// text of it that a terminal could act on.
func FuzzLastApply(f *testing.F) {
	f.Add("20260102T000000Z-p-bbbb.json", []byte(`{"plan":"p","plan_checksum":"sha256:bbbb","outcome":"applied","drops_after":{"ss_d":7,"socket_inode":9,"clock_ns":200}}`))
	f.Add("x y.json", []byte(`{"drops_after":null}`))
	f.Add("r.json", []byte("{\"plan\":\"\\u001b[31m\",\"drops_after\":{}}"))
	f.Fuzz(func(t *testing.T, name string, data []byte) {
		by := frameSet{"last-apply-name": {Name: "last-apply-name", Data: []byte(name)}, "last-apply": {Name: "last-apply", Data: data}}
		la := by.lastApply()
		if la == nil {
			return
		}
		for _, s := range []string{la.Plan, la.Checksum, la.Outcome, la.Receipt} {
			if strings.ContainsAny(s, "\x1b\r\n\x00") {
				t.Errorf("a control character reached the baseline: %q", s)
			}
		}
	})
}

// The players a soak judges: /status's players_established and the
// forwarded count are read into the sample, checked; a relay that does not
// report established players (an older relayd) gives none, not 0.
func TestStatusEstablishedPlayers(t *testing.T) {
	for _, tt := range []struct {
		body      string
		est       int // -1: none
		forwarded uint64
		err       string
	}{
		{`{"version":"1.9.0","players":40,"players_established":32,"counters":{"forwarded":1234}}`, 32, 1234, ""},
		{`{"version":"1.8.0","players":40,"counters":{"forwarded":99}}`, -1, 99, ""},
		{`{"version":"1.9.0","players":40,"players_established":41}`, 0, 0, "status has 41 established players of 40"},
		{`{"version":"1.9.0","players":40,"players_established":-1}`, 0, 0, "status has negative numbers"},
	} {
		st := parseStatus(Frame{Name: "relay-status", Data: []byte(tt.body)})
		switch {
		case tt.err != "":
			if st.Read || st.Error != tt.err {
				t.Errorf("%s: read %v, error %q; want %q", tt.body, st.Read, st.Error, tt.err)
			}
		case !st.Read || st.Forwarded != tt.forwarded:
			t.Errorf("%s: %+v", tt.body, st)
		case tt.est < 0 && st.PlayersEstablished != nil, tt.est >= 0 && (st.PlayersEstablished == nil || *st.PlayersEstablished != tt.est):
			t.Errorf("%s: established %v, want %d", tt.body, st.PlayersEstablished, tt.est)
		}
	}
}
