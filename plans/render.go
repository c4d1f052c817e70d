package plans

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/relayctl/relayctl/tune"
)

// Sentinel errors of plan files.
var (
	ErrPlanFormat   = errors.New("unsupported plan format_version")
	ErrPlanChecksum = errors.New("plan checksum does not match its content")
)

// MarshalJSON-free encoding: the plan is written with sorted, fixed fields,
// two-space indent and a final newline, so equal plans are equal bytes.
func encode(p *Plan) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(p); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// JSON returns the plan file's bytes, with its checksum filled in.
func (p *Plan) JSON() ([]byte, error) {
	c := *p
	c.Checksum = ""
	body, err := encode(&c)
	if err != nil {
		return nil, fmt.Errorf("encode plan: %w", err)
	}
	sum := sha256.Sum256(body)
	c.Checksum = "sha256:" + hex.EncodeToString(sum[:])
	p.Checksum = c.Checksum
	return encode(&c)
}

// Load reads a plan file, refusing an unknown format or a plan whose content
// was edited after it was written (its checksum no longer matches).
func Load(file string, data []byte) (*Plan, error) {
	var probe struct {
		FormatVersion int `json:"format_version"`
	}
	if err := json.Unmarshal(data, &probe); err != nil {
		return nil, fmt.Errorf("%s: not a plan file: %w", file, err)
	}
	if probe.FormatVersion != FormatVersion {
		return nil, fmt.Errorf("%s: %w: %d (this relayctl reads %d); make the plan again with this relayctl", file, ErrPlanFormat, probe.FormatVersion, FormatVersion)
	}
	if len(data) > MaxPlanSize {
		return nil, fmt.Errorf("%s: a plan of %d bytes (at most %d)", file, len(data), MaxPlanSize)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var p Plan
	if err := dec.Decode(&p); err != nil {
		return nil, fmt.Errorf("%s: read plan: %w", file, err)
	}
	want := p.Checksum
	again, err := p.JSON()
	if err != nil {
		return nil, err
	}
	if p.Checksum != want || !bytes.Equal(again, data) {
		return nil, fmt.Errorf("%s: %w (recorded %s, content gives %s): it was edited after review; make and review a new plan", file, ErrPlanChecksum, orNone(want), p.Checksum)
	}
	return &p, nil
}

// runsProgram reports whether the plan sets key to a value that makes the
// kernel run a program as root.
func (p *Plan) runsProgram(key string) bool {
	for _, c := range p.Sysctl {
		if c.Key == key {
			return c.RunsProgram != ""
		}
	}
	return false
}

// Markdown renders the review a person reads in a change request: warnings
// and blockers first, then per host the sysctl table, the release, the
// files with their diffs, the expected read-back and the window's steps.
// Every string that came from a host or a spec is escaped (escape.go).
func (p *Plan) Markdown(planFile string) []byte {
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	w("# relayctl plan: %s\n\n", MDText(p.Name))
	w("- Plan file: %s (format %d, checksum %s)\n", MDCode(planFile), p.FormatVersion, MDCode(p.Checksum))
	w("- Spec: %s (sha256 %s)\n", MDCode(p.SpecFile), MDCode(short(p.SpecSHA256)))
	if p.Relay.URL != "" {
		w("- Release: %s, fetched by each host from %s (sha256 %s, checked on the host before anything is staged)\n", MDText(p.Relay.Version), MDCode(p.Relay.URL), MDCode(p.Relay.SHA256))
	} else {
		w("- Release: %s from %s (sha256 %s, %d bytes)\n", MDText(p.Relay.Version), MDCode(p.Relay.Artifact), MDCode(p.Relay.SHA256), p.Relay.Size)
	}
	force := ""
	if p.Relay.SORcvbufForce {
		force = " with SO_RCVBUFFORCE (ignores net.core.rmem_max)"
	}
	if p.Relay.SORcvbuf > 0 {
		w("- The relay asks for SO_RCVBUF %d%s on UDP port %d\n", p.Relay.SORcvbuf, force, p.Relay.Port)
	} else {
		w("- The relay does not call setsockopt(SO_RCVBUF): its socket gets net.core.rmem_default\n")
	}
	w("- Service: %s\n", serviceText(p.Relay.Service))
	if p.Window != nil {
		w("- Window: %s to %s (apply refuses outside it)\n", MDText(p.Window.NotBefore), MDText(p.Window.NotAfter))
	} else {
		w("- Window: none given (apply may restart at any time)\n")
	}
	if len(p.Relay.Service.Handoff) > 0 {
		w("- Handoff: %s on %s, where release and running relay both support it\n", MDCode(Argv(p.Relay.Service.Handoff)), MDCode(p.Relay.HandoffSocket))
	}
	if c := p.Capacity; c != nil {
		w("- Promise: %d players in lobbies of %d at %d Hz, %d-byte datagrams, %s\n", c.Players, c.LobbySize, c.Hz, c.PacketSize, MDText(tune.StallPhrase(c.Stall)))
	}
	if p.AllowDowngrade {
		w("- Downgrades allowed (--allow-downgrade)\n")
	}
	var change, none, blocked int
	for _, h := range p.Hosts {
		switch h.Action {
		case ActionChange:
			change++
		case ActionNone:
			none++
		case ActionBlocked:
			blocked++
		}
	}
	w("- Hosts: %d to change, %d already as planned, %d blocked\n", change, none, blocked)
	if len(p.Hosts) > 0 {
		w("%s", rolloutMarkdown(p))
	}
	w("\n")

	var notes []string
	for _, c := range p.Sysctl {
		if c.RunsProgram != "" {
			notes = append(notes, fmt.Sprintf("- **RUNS A PROGRAM AS ROOT** %s = %s: %s (allowed by the spec's unsafe.sysctls_that_run_programs)", MDCode(c.Key), mdValue(c.Value), MDText(c.RunsProgram)))
		}
	}
	for _, h := range p.Hosts {
		for _, m := range h.Blockers {
			notes = append(notes, fmt.Sprintf("- **BLOCKED** %s: %s", MDText(h.Host), MDText(m)))
		}
	}
	for _, h := range p.Hosts {
		for _, m := range h.Warnings {
			notes = append(notes, fmt.Sprintf("- **warning** %s: %s", MDText(h.Host), MDText(m)))
		}
	}
	if len(notes) > 0 {
		w("## Read first\n\n%s\n\n", strings.Join(notes, "\n"))
	}

	for _, h := range p.Hosts {
		w("## %s (%s): %s\n\n", MDText(h.Host), MDText(h.Address), actionText(h.Action))
		w("Kernel %s · fingerprint %s\n\n", MDCode(h.Kernel), MDCode(short(h.Fingerprint)))
		if len(h.Sysctls) > 0 {
			w("| key | current | planned | decided at boot by |\n|---|---|---|---|\n")
			for _, c := range h.Sysctls {
				cur := mdValue(c.Current)
				if !c.Writable {
					cur += " (read-only here)"
				}
				planned := mdValue(c.Planned)
				if !c.Change {
					planned += " (no change)"
				}
				if p.runsProgram(c.Key) {
					planned += " **runs a program as root**"
				}
				boot := "nothing (kernel default)"
				if c.DecidedAtBoot != "" {
					boot = MDCode(c.DecidedAtBoot)
					if c.Shadowed {
						boot += " **shadows ours** (" + mdValue(c.BootValue) + ")"
					}
				}
				w("| %s | %s | %s | %s |\n", MDCell(MDCode(c.Key)), MDCell(cur), MDCell(planned), MDCell(boot))
			}
			w("\n")
		}
		w("- Release: %s\n", releaseText(h.Release))
		w("- Relay config %s: %s\n", MDCode(h.Config.Path), changeText(h.Config))
		w("- Sysctl drop-in %s: %s\n", MDCode(h.DropIn.Path), changeText(h.DropIn))
		if u := h.UnitDropIn; u != nil && u.Change {
			w("- systemd unit drop-in %s (CAP_NET_ADMIN for SO_RCVBUFFORCE): %s, then `systemctl daemon-reload`\n", MDCode(u.Path), changeText(*u))
		} else if u != nil && u.Exists {
			w("- systemd unit drop-in %s (CAP_NET_ADMIN for SO_RCVBUFFORCE): no change\n", MDCode(u.Path))
		}
		rb := h.Readback
		rule := fmt.Sprintf("max(2 × min(%d, rmem_max %d), 2304)", rb.Requested, rb.RmemMax)
		switch {
		case rb.Requested == 0:
			rule = fmt.Sprintf("rmem_default %d, since the relay does not ask", rb.RmemDefault)
		case rb.Force:
			rule = fmt.Sprintf("max(2 × %d, 2304) with SO_RCVBUFFORCE", rb.Requested)
		}
		now := "no socket found now"
		if rb.CurrentFound {
			now = fmt.Sprintf("now rb %d, drops %d", rb.Current, rb.CurrentDrops)
		}
		w("- Expected read-back: `ss` on UDP port %d shows **rb %d** = %s; %s\n", rb.Port, rb.Expected, rule, now)
		if c := h.Capacity; c != nil {
			w("- Capacity: %s\n", MDText(c.Summary()))
		}
		if h.Switch != "" {
			w("- Switch: **%s**: %s\n", h.Switch, MDText(h.SwitchWhy))
		}
		if d := p.Drain; d != nil && h.Action == ActionChange {
			w("- Drain gate: %s\n", MDText(drainText(d, h)))
		}
		w("\n")
		for _, f := range []struct {
			name string
			fc   FileChange
		}{{"Relay config", h.Config}, {"Sysctl drop-in", h.DropIn}} {
			if len(f.fc.Diff) > 0 {
				w("%s %s, current → planned (`*` marks a line relayctl manages; the others are kept as they are; secrets masked):\n\n", f.name, MDCode(f.fc.Path))
				w("%s", diffBlock(f.fc))
			}
		}
		if len(h.Steps) > 0 {
			w("### Steps\n\n")
			n := 0
			for _, phase := range []struct{ name, title string }{
				{PhaseStage, "Before the window (no effect on the running relay)"},
				{PhaseWindow, "In the window (one restart)"},
				{PhaseVerify, "After the restart: read back"},
			} {
				first := true
				for _, s := range h.Steps {
					if s.Phase != phase.name {
						continue
					}
					if first {
						w("%s:\n\n", phase.title)
						first = false
					}
					n++
					w("%d. %s\n", n, MDText(s.Title))
				}
				if !first {
					w("\n")
				}
			}
		}
	}
	return []byte(b.String())
}

// diffBlock renders a file's change as a unified diff (diff -u: a ---/+++
// header, @@ hunks with three lines of context) in a fenced diff block, so
// a Markdown viewer colours it. After the +/-/space of each line, a * marks
// a line relayctl manages. The fence is longer than any run of backticks
// in the diff, so no line of it can close the block.
func diffBlock(f FileChange) string {
	var lines []string
	from, to := f.Path+" (current)", f.Path+" (planned)"
	if !f.Exists {
		from = "/dev/null"
	}
	if f.Remove {
		to = "/dev/null"
	}
	lines = append(lines, "--- "+Visible(from), "+++ "+Visible(to))
	hunks := Hunks(f.Diff, DiffContext)
	for _, h := range hunks {
		lines = append(lines, h.Header())
		for _, l := range h.Lines {
			mark := " "
			if l.Managed {
				mark = "*"
			}
			lines = append(lines, diffOp(l.Op)+mark+" "+Visible(l.Text))
		}
	}
	if len(hunks) == 0 {
		// The lines are equal: the file differs in its final newline, or
		// is too long to show (the diff says so in its one line).
		note := "(the lines are the same; the planned file differs only in its final newline)"
		if len(f.Diff) == 1 && strings.HasPrefix(f.Diff[0].Text, "(too long") {
			note = f.Diff[0].Text
		}
		lines = append(lines, "# "+Visible(note))
	}
	longest := 0
	for _, l := range lines {
		run := 0
		for _, r := range l {
			if r == '`' {
				run++
				longest = max(longest, run)
			} else {
				run = 0
			}
		}
	}
	fence := strings.Repeat("`", max(3, longest+1))
	return fence + "diff\n" + strings.Join(lines, "\n") + "\n" + fence + "\n\n"
}

// diffOp is a diff line's op as the review prints it; a plan holds no other
// (plans.Validate), but a review never prints what it does not know.
func diffOp(op string) string {
	switch op {
	case "+", "-":
		return op
	}
	return " "
}

// drainText says what the drain gate will do on a host, with the players
// the relay had when planned.
func drainText(d *Drain, h *HostPlan) string {
	now := "players at plan time unknown"
	if h.PlayersAtPlan != nil {
		now = fmt.Sprintf("%d players in %d lobbies at plan time", h.PlayersAtPlan.Players, h.PlayersAtPlan.Lobbies)
	}
	closeNew := ""
	if d.NoNewLobbies {
		closeNew = ", refusing new lobbies meanwhile"
	}
	return fmt.Sprintf("wait until at most %d players (polling every %v%s), up to %v, then %s; %s", d.MaxPlayers, d.Poll, closeNew, d.Deadline, d.OnDeadline, now)
}

func serviceText(s PlanService) string {
	if s.Manager == "systemd" {
		return "systemd unit " + MDCode(s.Name) + " (`systemctl restart`)"
	}
	return fmt.Sprintf("stopped with %s, started with %s; its PID is read from %s", MDCode(Argv(s.Stop)), MDCode(Argv(s.Start)), MDCode(s.PIDFile))
}

func actionText(a string) string {
	switch a {
	case ActionChange:
		return "changes"
	case ActionNone:
		return "no change"
	default:
		return "blocked"
	}
}

func releaseText(r ReleaseChange) string {
	cur := MDText(r.Current)
	planned := MDText(r.Planned)
	switch r.Action {
	case ReleaseKeep:
		return fmt.Sprintf("%s (no change)", planned)
	case ReleaseInstall:
		if r.Current != "" {
			return fmt.Sprintf("%s → %s (install)", cur, planned)
		}
		return fmt.Sprintf("none → %s (install)", planned)
	default:
		return fmt.Sprintf("%s → %s (%s)", cur, planned, MDText(r.Action))
	}
}

func changeText(f FileChange) string {
	switch {
	case !f.Change:
		return "no change"
	case f.Remove:
		return "removed"
	case !f.Exists:
		return "created"
	default:
		return "rewritten"
	}
}

// mdValue is a sysctl value in a table: whitespace folded, in a code span.
func mdValue(s string) string {
	return MDCode(strings.Join(strings.Fields(s), " "))
}

func short(s string) string {
	if i := strings.IndexByte(s, ':'); i >= 0 && len(s) > i+17 {
		return s[:i+17]
	}
	if len(s) > 16 {
		return s[:16]
	}
	return s
}
