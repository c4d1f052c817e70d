package rollout

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/relayctl/relayctl/plans"
)

// progress is what people see while a fleet applies, on stderr. Plain
// (not a terminal): one line per step of each host, one when a host ends,
// and one when a wave starts and ends. Live (a terminal): no step lines;
// a block redrawn five times a second, a line for the wave in flight
// (applied / in window / staging / waiting / failed, and the slowest host
// in flight) and one for the fleet, with a permanent line above it for
// each wave that ended and each host that did not end applied or
// unchanged.
type progress struct {
	mu    sync.Mutex
	w     io.Writer
	live  bool
	width int
	start time.Time
	hosts map[string]*hostView
	total int // hosts of this run
	waves int // waves of this run
	wave  *WaveResult
	ended map[Outcome]int
	drawn int // lines of the live block on screen
	quit  chan struct{}
	done  chan struct{}
}

// Host phases in the fleet view, besides an outcome.
const (
	phaseWaiting = "waiting"
	phaseStaging = "staging"
	phaseWindow  = "in window"
)

type hostView struct {
	phase   string
	started time.Time
}

func newProgress(o ApplyOptions, hosts, waves int) *progress {
	pr := &progress{w: o.Progress, live: o.Live, width: o.LiveWidth, start: time.Now(), hosts: map[string]*hostView{},
		total: hosts, waves: waves, ended: map[Outcome]int{}}
	if pr.width < 40 {
		pr.width = 80
	}
	if pr.live {
		pr.quit, pr.done = make(chan struct{}), make(chan struct{})
		go pr.redraw()
	}
	return pr
}

// say is a line about a host: printed when plain, left out when live (the
// receipt keeps it).
func (p *progress) say(host, format string, a ...any) {
	if p.live {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.w, "%s: %s\n", plans.Visible(host), plans.Visible(fmt.Sprintf(format, a...)))
}

// step is a host starting a step of a phase.
func (p *progress) step(host, phase, title string) {
	p.mu.Lock()
	if h := p.hosts[host]; h != nil && phase == plans.PhaseWindow {
		h.phase = phaseWindow
	}
	p.mu.Unlock()
	p.say(host, "[%s] %s", phase, title)
}

func (p *progress) waveStart(w *WaveResult) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.wave = w
	for _, h := range w.Hosts {
		p.hosts[h] = &hostView{phase: phaseWaiting}
	}
	if !p.live {
		fmt.Fprintf(p.w, "wave %d/%d%s: %d host(s), %s; budgets: %d failed, rolled back or refused, %d unreachable\n",
			w.Wave, p.waves, plans.Visible(w.groupText()), len(w.Hosts), plans.Visible(hostRange(w.Hosts)), w.MaxFailures, w.MaxUnreachable)
	}
}

func (p *progress) hostStart(host string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.hosts[host] = &hostView{phase: phaseStaging, started: time.Now()}
}

func (p *progress) hostEnd(r *HostResult) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if h := p.hosts[r.Host]; h != nil {
		h.phase = string(r.Outcome)
	}
	p.ended[r.Outcome]++
	line := fmt.Sprintf("%s: %s", r.Host, r.Outcome)
	if r.Outcome != Applied && r.Outcome != Unchanged && r.Outcome != Staged && r.Reason != "" {
		line += " (" + r.State + "): " + r.Reason
	} else if r.Outcome == Applied {
		line += fmt.Sprintf(" (window %d ms, %d bytes uploaded)", r.WindowMillis, r.BytesUploaded)
	} else if r.Outcome == Staged {
		line += fmt.Sprintf(" (%d bytes uploaded)", r.BytesUploaded)
	}
	if p.live && (r.Outcome == Applied || r.Outcome == Unchanged || r.Outcome == Staged) {
		return
	}
	p.above(plans.Visible(line))
}

// interrupted says at once what an interrupt does (issue 22: Ctrl-C was
// silent for seconds while windows finished): no host starts, a host in
// its window finishes it or rolls back, a host staging stops before its
// window. A second interrupt changes none of that (the command says so).
func (p *progress) interrupted() {
	p.mu.Lock()
	defer p.mu.Unlock()
	var window, staging []string
	if w := p.wave; w != nil {
		for _, name := range w.Hosts {
			switch h := p.hosts[name]; {
			case h == nil:
			case h.phase == phaseWindow:
				window = append(window, name)
			case h.phase == phaseStaging:
				staging = append(staging, name)
			}
		}
	}
	line := "relayctl: interrupt: no new host starts"
	if len(window) > 0 {
		ends := "each ends"
		if len(window) == 1 {
			ends = "it ends"
		}
		line += fmt.Sprintf("; finishing the window on %s (%s): %s applied or rolled back", tenseHosts(len(window)), hostList(window), ends)
	}
	if len(staging) > 0 {
		verb := "stop"
		if len(staging) == 1 {
			verb = "stops"
		}
		line += fmt.Sprintf("; %s staging %s before the window", tenseHosts(len(staging)), verb)
	}
	line += "; then relayctl stops (apply --resume goes on later). A second interrupt does not cut a window short"
	p.above(plans.Visible(line))
}

func tenseHosts(n int) string {
	if n == 1 {
		return "1 host"
	}
	return fmt.Sprintf("%d hosts", n)
}

// hostList names up to three hosts.
func hostList(h []string) string {
	if len(h) > 3 {
		return strings.Join(h[:3], ", ") + fmt.Sprintf(" and %d more", len(h)-3)
	}
	return strings.Join(h, ", ")
}

func (p *progress) waveEnd(w *WaveResult) {
	p.mu.Lock()
	defer p.mu.Unlock()
	line := fmt.Sprintf("wave %d/%d ended after %.1f s: %s", w.Wave, p.waves, float64(w.EndMillis-w.StartMillis)/1000, waveCounts(w))
	if w.Stopped != "" {
		line += "; the rollout stops: " + w.Stopped
	}
	p.above(plans.Visible(line))
}

func waveCounts(w *WaveResult) string {
	var parts []string
	for _, c := range []struct {
		n    int
		what string
	}{{w.Applied, "applied"}, {w.Unchanged, "unchanged"}, {w.Staged, "staged"}, {w.Failures, "failed, rolled back or refused"}, {w.Skipped, "skipped"},
		{w.Unreachable, "unreachable"}, {w.NotStarted, "not started"}} {
		if c.n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", c.n, c.what))
		}
	}
	if len(parts) == 0 {
		return "no host"
	}
	return strings.Join(parts, ", ")
}

// above prints a permanent line; when live, above the block. Callers hold mu.
func (p *progress) above(line string) {
	if p.live {
		p.clear()
		fmt.Fprintln(p.w, p.fit(line))
		p.draw()
		return
	}
	fmt.Fprintln(p.w, line)
}

// finish stops the live view and leaves its last state on screen.
func (p *progress) finish() {
	if !p.live {
		return
	}
	close(p.quit)
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	p.clear()
	p.draw()
	p.drawn = 0
}

func (p *progress) redraw() {
	defer close(p.done)
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-p.quit:
			return
		case <-t.C:
			p.mu.Lock()
			p.clear()
			p.draw()
			p.mu.Unlock()
		}
	}
}

// clear erases the live block: the cursor goes up its lines, and the
// screen below is cleared.
func (p *progress) clear() {
	if p.drawn > 0 {
		fmt.Fprintf(p.w, "\x1b[%dA\r\x1b[J", p.drawn)
	}
	p.drawn = 0
}

func (p *progress) draw() {
	lines := p.block()
	for _, l := range lines {
		fmt.Fprintln(p.w, p.fit(l))
	}
	p.drawn = len(lines)
}

// block is the live view: the wave in flight, then the fleet.
func (p *progress) block() []string {
	var out []string
	now := time.Now()
	if w := p.wave; w != nil {
		n := map[string]int{}
		slowest, since := "", time.Duration(0)
		for _, name := range w.Hosts {
			h := p.hosts[name]
			if h == nil {
				continue
			}
			switch Outcome(h.phase) {
			case Failed, RolledBack, Refused:
				n["failed"]++
			default:
				n[h.phase]++
			}
			if (h.phase == phaseStaging || h.phase == phaseWindow) && now.Sub(h.started) > since {
				slowest, since = name, now.Sub(h.started)
			}
		}
		line := fmt.Sprintf("wave %d/%d  %d hosts: %d applied · %d in window · %d staging · %d waiting · %d failed",
			w.Wave, p.waves, len(w.Hosts), n[string(Applied)]+n[string(Unchanged)]+n[string(Staged)], n[phaseWindow], n[phaseStaging], n[phaseWaiting], n["failed"])
		if u := n[string(Unreachable)]; u > 0 {
			line += fmt.Sprintf(" · %d unreachable", u)
		}
		if slowest != "" {
			line += fmt.Sprintf("  slowest %s %.1fs", plans.Visible(slowest), since.Seconds())
		}
		out = append(out, line)
	}
	e := p.ended
	done := e[Applied] + e[Unchanged] + e[Staged] + e[Failed] + e[RolledBack] + e[Refused] + e[Skipped] + e[Unreachable] + e[NotStarted]
	out = append(out, fmt.Sprintf("fleet     %d hosts: %d applied · %d unchanged · %d failed, rolled back or refused · %d unreachable · %d to go  %.0fs",
		p.total, e[Applied]+e[Staged], e[Unchanged], e[Failed]+e[RolledBack]+e[Refused], e[Unreachable], p.total-done, now.Sub(p.start).Seconds()))
	return out
}

// fit cuts a line to the terminal's width, so the block's lines never
// wrap and the cursor goes back up exactly over them.
func (p *progress) fit(s string) string {
	if utf8.RuneCountInString(s) < p.width {
		return s
	}
	r := []rune(s)
	return string(r[:p.width-2]) + "…"
}

// hostRange names a wave's hosts: the first and the last.
func hostRange(h []string) string {
	switch len(h) {
	case 0:
		return "no host"
	case 1:
		return h[0]
	}
	return h[0] + " … " + h[len(h)-1]
}

// silent is progress that goes nowhere: the ledger's confirmation checks,
// which say what they found in the recap, not as they go.
func silent() *progress {
	return &progress{w: io.Discard, hosts: map[string]*hostView{}, ended: map[Outcome]int{}}
}
