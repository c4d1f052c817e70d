package rollout

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/relayctl/relayctl/plans"
)

// The live view counts the wave's hosts by phase, names the slowest host
// in flight, keeps lines within the terminal's width, and leaves its last
// state on screen with the wave and problem lines above it.
func TestLiveFleetView(t *testing.T) {
	var out bytes.Buffer
	p := newProgress(ApplyOptions{Progress: &out, Live: true, LiveWidth: 200}, 4, 2)
	w := &WaveResult{Wave: 1, Hosts: []string{"a", "b", "c", "d"}, MaxFailures: 1}
	p.waveStart(w)
	p.hostStart("a")
	p.hostStart("b")
	p.hostStart("c")
	time.Sleep(10 * time.Millisecond)
	p.hostStart("d")
	p.step("b", plans.PhaseWindow, "restart relay once")
	p.say("a", "this line is for plain output only")
	p.hostEnd(&HostResult{HostAccount: HostAccount{Host: "a", Outcome: Applied}})
	p.hostEnd(&HostResult{HostAccount: HostAccount{Host: "c", Outcome: RolledBack, State: StateAsWas, Reason: "read-back: ss rb on udp/7788: got 212992, want 8388608"}})
	p.mu.Lock()
	block := strings.Join(p.block(), "\n")
	p.mu.Unlock()
	if want := "wave 1/2  4 hosts: 1 applied · 1 in window · 1 staging · 0 waiting · 1 failed  slowest b "; !strings.Contains(block, want) {
		t.Errorf("block:\n%s\nwant %q", block, want)
	}
	if want := "fleet     4 hosts: 1 applied · 0 unchanged · 1 failed, rolled back or refused · 0 unreachable · 2 to go"; !strings.Contains(block, want) {
		t.Errorf("block:\n%s\nwant %q", block, want)
	}
	w.Applied, w.Failures, w.EndMillis = 1, 1, 1500
	p.waveEnd(w)
	p.finish()
	s := out.String()
	if strings.Contains(s, "plain output only") || strings.Contains(s, "a: applied") {
		t.Errorf("live output has step or success lines:\n%s", s)
	}
	for _, want := range []string{"c: rolled back (as it was): read-back: ss rb", "wave 1/2 ended after 1.5 s: 1 applied, 1 failed, rolled back or refused", "\x1b[3A\r\x1b[J", "not as planned 1: latest c"} {
		if !strings.Contains(s, want) {
			t.Errorf("live output lacks %q:\n%q", want, s)
		}
	}
	p.width = 20
	if got := p.fit(strings.Repeat("x", 30)); len([]rune(got)) != 19 {
		t.Errorf("fit: %q", got)
	}
}

// An interrupt is said at once: which hosts finish their window, which
// stop before it, and what a second interrupt does.
func TestInterruptSaysWhatItDoes(t *testing.T) {
	var out bytes.Buffer
	p := newProgress(ApplyOptions{Progress: &out}, 5, 2)
	p.waveStart(&WaveResult{Wave: 2, Hosts: []string{"a", "b", "c", "d"}})
	for _, h := range []string{"a", "b", "c"} {
		p.hostStart(h)
	}
	p.step("a", plans.PhaseWindow, "restart relay once")
	p.step("b", plans.PhaseWindow, "restart relay once")
	p.interrupted()
	want := "relayctl: interrupt: no new host starts; finishing the window on 2 hosts (a, b): each ends applied or rolled back; 1 host staging stops before the window; then relayctl stops (apply --resume goes on later). A second interrupt does not cut a window short\n"
	if got := out.String(); !strings.HasSuffix(got, want) {
		t.Errorf("got\n%s\nwant it to end\n%s", got, want)
	}
	// On an 80-column terminal too: a line above the live block is said
	// whole (the terminal wraps it); only the block is cut to fit.
	out.Reset()
	p = newProgress(ApplyOptions{Progress: &out, Live: true, LiveWidth: 80}, 5, 2)
	p.waveStart(&WaveResult{Wave: 2, Hosts: []string{"a", "b", "c", "d"}})
	for _, h := range []string{"a", "b", "c"} {
		p.hostStart(h)
	}
	p.step("a", plans.PhaseWindow, "restart relay once")
	p.step("b", plans.PhaseWindow, "restart relay once")
	p.interrupted()
	reason := "read-back: ss rb on udp/7788: got 212992, want 8388608 (the relay asked for 4194304)"
	p.hostEnd(&HostResult{HostAccount: HostAccount{Host: "c", Outcome: RolledBack, State: StateAsWas, Reason: reason}})
	p.finish()
	got := out.String()
	for _, w := range []string{want, "c: rolled back (as it was): " + reason + "\n"} {
		if !strings.Contains(got, w) {
			t.Errorf("live at 80 columns:\n%q\nwant it whole:\n%q", got, w)
		}
	}
	for _, l := range strings.Split(got, "\n") {
		if _, after, ok := strings.Cut(l, "\x1b[J"); ok {
			l = after
		}
		if !strings.HasPrefix(l, "relayctl: interrupt") && !strings.HasPrefix(l, "c: rolled back") && len([]rune(l)) >= 80 {
			t.Errorf("a line of the live block is %d wide, past the terminal's 80: %q", len([]rune(l)), l)
		}
	}
}

// A big fleet's view is a summary: no line per step (or per host applied)
// when plain, at most maxHostLines lines about hosts that did not end as
// planned, then a count; nothing kept of a host once it ended.
func TestFleetViewOfABigFleetIsASummary(t *testing.T) {
	for _, live := range []bool{false, true} {
		var out bytes.Buffer
		n := 1000
		p := newProgress(ApplyOptions{Progress: &out, Live: live, LiveWidth: 200}, n, 1)
		var names []string
		for i := range n {
			names = append(names, fmt.Sprintf("h%d", i))
		}
		p.waveStart(&WaveResult{Wave: 1, Hosts: names})
		for i, h := range names {
			p.hostStart(h)
			p.step(h, plans.PhaseWindow, "restart relay once")
			p.say(h, "a step line")
			o := Applied
			if i%10 == 0 {
				o = Failed
			}
			p.hostEnd(&HostResult{HostAccount: HostAccount{Host: h, Outcome: o, Reason: "stage: place release: no space left"}})
		}
		p.mu.Lock()
		kept := len(p.hosts)
		block := strings.Join(p.block(), "\n")
		p.mu.Unlock()
		p.finish()
		s := out.String()
		if kept != 0 || strings.Contains(s, "a step line") || strings.Contains(s, ": applied") || strings.Count(s, ": failed") > maxHostLines {
			t.Errorf("live %v: %d hosts kept, output of %d lines, %d about failed hosts:\n%.2000s", live, kept, strings.Count(s, "\n"), strings.Count(s, ": failed"), s)
		}
		if !strings.Contains(s, "more hosts that do not end as planned are counted below") {
			t.Errorf("live %v: no note that the rest are counted:\n%.2000s", live, s)
		}
		if want := "not as planned 100: latest h970, h980, h990"; !strings.Contains(block, want) {
			t.Errorf("live %v: block:\n%s\nwant %q", live, block, want)
		}
	}
}
