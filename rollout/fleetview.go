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
// and one when a wave starts and ends; beyond plainHosts hosts, no step
// lines, a line only for each host that does not end as planned (up to
// maxHostLines), and a line for the fleet every plainEvery. Live (a
// terminal): no step lines; a block redrawn five times a second, a line
// for the wave in flight (applied / in window / staging / waiting /
// failed, and the slowest hosts in flight), one for the fleet and one for
// the hosts that did not end as planned, with a permanent line above it
// for each wave that ended and each of the first maxHostLines hosts that
// did not end as planned. Its cost does not grow with the fleet: it keeps
// the hosts in flight and counts, not a line or an entry per host.
type progress struct {
	mu    sync.Mutex
	w     io.Writer
	live  bool
	width int
	start time.Time
	hosts map[string]*hostView // the wave's hosts in flight
	total int                  // hosts of this run
	waves int                  // waves of this run
	wave  *WaveResult
	now   phaseCounts // the wave in flight, by phase
	ended map[Outcome]int
	bad   []string // the latest hosts that did not end as planned, for the block
	lines int      // permanent lines about hosts
	drawn int      // lines of the live block on screen
	quit  chan struct{}
	done  chan struct{}
}

// waveCounts are the wave's hosts by phase.
type phaseCounts struct{ waiting, staging, window, applied, failed, unreachable int }

// Bounds of the fleet view (see progress).
const (
	plainHosts   = 20
	maxHostLines = 20
	plainEvery   = 10 * time.Second
)

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
	if pr.live || pr.big() {
		pr.quit, pr.done = make(chan struct{}), make(chan struct{})
		go pr.redraw()
	}
	return pr
}

// big is a plain run too big for a line per step.
func (p *progress) big() bool { return !p.live && p.total > plainHosts }

// say is a line about a host: printed when plain and small, left out
// otherwise (the receipt keeps it).
func (p *progress) say(host, format string, a ...any) {
	if p.live || p.big() {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.w, "%s: %s\n", plans.Visible(host), plans.Visible(fmt.Sprintf(format, a...)))
}

// step is a host starting a step of a phase.
func (p *progress) step(host, phase, title string) {
	p.mu.Lock()
	if h := p.hosts[host]; h != nil && phase == plans.PhaseWindow && h.phase != phaseWindow {
		h.phase = phaseWindow
		p.now.staging--
		p.now.window++
	}
	p.mu.Unlock()
	p.say(host, "[%s] %s", phase, title)
}

func (p *progress) waveStart(w *WaveResult) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.wave = w
	p.now = phaseCounts{waiting: len(w.Hosts)}
	clear(p.hosts)
	if !p.live {
		fmt.Fprintf(p.w, "wave %d/%d%s: %d host(s), %s; budgets: %d failed, rolled back or refused, %d unreachable\n",
			w.Wave, p.waves, plans.Visible(w.groupText()), len(w.Hosts), plans.Visible(hostRange(w.Hosts)), w.MaxFailures, w.MaxUnreachable)
	}
}

func (p *progress) hostStart(host string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.hosts[host] = &hostView{phase: phaseStaging, started: time.Now()}
	p.now.waiting--
	p.now.staging++
}

func (p *progress) hostEnd(r *HostResult) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if h := p.hosts[r.Host]; h != nil {
		if h.phase == phaseWindow {
			p.now.window--
		} else {
			p.now.staging--
		}
		delete(p.hosts, r.Host)
	}
	switch r.Outcome {
	case Applied, Unchanged, Staged:
		p.now.applied++
	case Unreachable:
		p.now.unreachable++
	default:
		p.now.failed++
	}
	p.ended[r.Outcome]++
	if asPlanned(r.Outcome) {
		if !p.live && !p.big() {
			p.above(plans.Visible(endLine(r)))
		}
		return
	}
	p.bad = append(p.bad, r.Host)
	if len(p.bad) > 3 {
		p.bad = p.bad[1:]
	}
	p.lines++
	switch {
	case p.lines <= maxHostLines:
		p.above(plans.Visible(endLine(r)))
	case p.lines == maxHostLines+1:
		p.above("(more hosts that do not end as planned are counted below, not listed: the receipt has each, the failures first)")
	}
}

// endLine is the line about a host that ended.
func endLine(r *HostResult) string {
	line := fmt.Sprintf("%s: %s", r.Host, r.Outcome)
	switch {
	case !asPlanned(r.Outcome) && r.Reason != "":
		line += " (" + r.State + "): " + r.Reason
	case r.Outcome == Applied:
		line += fmt.Sprintf(" (window %d ms, %d bytes uploaded)", r.WindowMillis, r.BytesUploaded)
	case r.Outcome == Staged:
		line += fmt.Sprintf(" (%d bytes uploaded)", r.BytesUploaded)
	}
	return line
}

// interrupted says at once what an interrupt does (Ctrl-C used to be
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

// above prints a permanent line; when live, above the block. Callers hold
// mu. The line is printed whole, never cut to the terminal's width (an
// interrupt's line, a host's reason): the terminal wraps it, and the
// cursor goes back up over the block's lines only, drawn after it.
func (p *progress) above(line string) {
	if p.live {
		p.clear()
		fmt.Fprintln(p.w, line)
		p.draw()
		return
	}
	fmt.Fprintln(p.w, line)
}

// finish stops the live view and leaves its last state on screen.
func (p *progress) finish() {
	if p.quit == nil {
		return
	}
	close(p.quit)
	<-p.done
	if !p.live {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.clear()
	p.draw()
	p.drawn = 0
}

func (p *progress) redraw() {
	defer close(p.done)
	every := 200 * time.Millisecond
	if !p.live {
		every = plainEvery
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-p.quit:
			return
		case <-t.C:
			p.mu.Lock()
			if p.live {
				p.clear()
				p.draw()
			} else {
				fmt.Fprintln(p.w, strings.TrimSpace(p.fleetLine(time.Now())))
			}
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

// block is the live view: the wave in flight, the fleet, and the hosts
// that did not end as planned.
func (p *progress) block() []string {
	var out []string
	now := time.Now()
	if w := p.wave; w != nil {
		n := p.now
		line := fmt.Sprintf("wave %d/%d%s  %d hosts: %d applied · %d in window · %d staging · %d waiting · %d failed",
			w.Wave, p.waves, w.groupText(), len(w.Hosts), n.applied, n.window, n.staging, n.waiting, n.failed)
		if n.unreachable > 0 {
			line += fmt.Sprintf(" · %d unreachable", n.unreachable)
		}
		if slow := p.slowest(now, 3); slow != "" {
			line += "  slowest " + slow
		}
		out = append(out, plans.Visible(line))
	}
	out = append(out, p.fleetLine(now))
	if e := p.ended; len(p.bad) > 0 {
		n := e[Failed] + e[RolledBack] + e[Refused] + e[Skipped] + e[Unreachable]
		out = append(out, plans.Visible(fmt.Sprintf("not as planned %d: latest %s (the receipt has each)", n, strings.Join(p.bad, ", "))))
	}
	return out
}

// fleetLine is the fleet's counts so far.
func (p *progress) fleetLine(now time.Time) string {
	e := p.ended
	done := e[Applied] + e[Unchanged] + e[Staged] + e[Failed] + e[RolledBack] + e[Refused] + e[Skipped] + e[Unreachable] + e[NotStarted]
	return fmt.Sprintf("fleet     %d hosts: %d applied · %d unchanged · %d failed, rolled back or refused · %d unreachable · %d to go  %.0fs",
		p.total, e[Applied]+e[Staged], e[Unchanged], e[Failed]+e[RolledBack]+e[Refused], e[Unreachable], p.total-done, now.Sub(p.start).Seconds())
}

// slowest names the n hosts in flight longest, with how long.
func (p *progress) slowest(now time.Time, n int) string {
	type inFlight struct {
		name string
		for_ time.Duration
	}
	var top []inFlight
	for name, h := range p.hosts {
		d := now.Sub(h.started)
		i := len(top)
		for i > 0 && top[i-1].for_ < d {
			i--
		}
		if i < n {
			top = append(top[:i], append([]inFlight{{name, d}}, top[i:]...)...)
			if len(top) > n {
				top = top[:n]
			}
		}
	}
	parts := make([]string, len(top))
	for i, x := range top {
		parts[i] = fmt.Sprintf("%s %.1fs", x.name, x.for_.Seconds())
	}
	return strings.Join(parts, ", ")
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
