package plans

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
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

// releaseHeader says what the plan ships, and of which kind.
func releaseHeader(r PlannedRelay) string {
	switch r.Kind {
	case ReleaseKindNone:
		return fmt.Sprintf("none: the service as each host has it (%s), its config and sysctls changed, restarted or reloaded", MDCode(r.Program))
	case ReleaseKindBinary:
		if r.URL != "" {
			return fmt.Sprintf("%s, one program %s fetched by each host from %s (sha256 %s, checked on the host before anything is staged)", MDText(r.Version), MDCode(r.Program), MDCode(r.URL), MDCode(r.SHA256))
		}
		return fmt.Sprintf("%s from %s, one program %s (sha256 %s, %d bytes)", MDText(r.Version), MDCode(r.Artifact), MDCode(r.Program), MDCode(r.SHA256), r.Size)
	}
	from := "from " + MDCode(r.Artifact)
	if r.URL != "" {
		from = "fetched by each host from " + MDCode(r.URL) + " (the same bytes as " + MDCode(r.Artifact) + ")"
	}
	return fmt.Sprintf("%s, a %s %s unpacked into its folder, program %s (sha256 %s, %d bytes; its files' tree hash %s, checked on the host after unpacking)",
		MDText(r.Version), MDText(r.Kind), from, MDCode(r.Program), MDCode(r.SHA256), r.Size, MDCode(short(r.TreeSHA256)))
}

// writesText lists every path relayctl writes on a host of the plan.
func writesText(p *Plan) string {
	var w []string
	if p.Relay.Kind != ReleaseKindNone {
		w = append(w, MDCode(p.Paths.Releases+"/"+p.Relay.Version)+" (the release)", MDCode(p.Paths.Current)+" (the link)")
	}
	w = append(w, MDCode(p.Paths.SysctlFile))
	if p.Relay.Config.EnvFile {
		w = append(w, MDCode(p.Paths.RelayConfig))
	}
	if p.Relay.Service.Manager == "systemd" && p.Relay.Config.EnvFile && p.Relay.Config.Keys.SORcvbufForce != "" {
		w = append(w, MDCode(UnitDropInPath(p.Relay.Service.Name))+" (when force is on)")
	}
	for _, t := range p.Relay.Config.Templates {
		w = append(w, MDCode(t.Path))
	}
	return strings.Join(append(w, MDCode(p.Paths.StateDir)+" (lock, journal, backups, receipts)"), ", ")
}

// pruneText lists what a window removes.
func pruneText(p *Plan, r ReleaseChange) string {
	var parts []string
	for _, v := range r.Prune {
		parts = append(parts, MDCode(p.Paths.Releases+"/"+v))
	}
	if n := len(r.PruneStore); n > 0 {
		word := "entries"
		if n == 1 {
			word = "entry"
		}
		parts = append(parts, fmt.Sprintf("%d release store %s (%s)", n, word, MDCode(p.Paths.Releases+"/.sha256")))
	}
	return strings.Join(parts, ", ") + fmt.Sprintf("; relay.release.keep is %d", p.Relay.Keep)
}

func releaseText(r ReleaseChange) string {
	if r.Kind == ReleaseKindNone {
		return "none (the service as the host has it)"
	}
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

// fileLine is a planned file's line in the review, "" for a file that is
// absent and stays so where its role is not always shown.
func fileLine(fc FileChange) string {
	r, _ := Role(fc.Role)
	if !r.Always && !fc.Change && !fc.Exists {
		return ""
	}
	why, reload := "", ""
	if r.Why != "" {
		why = " (" + r.Why + ")"
	}
	if r.Reload && fc.Change {
		reload = ", then `systemctl daemon-reload`"
	}
	return fmt.Sprintf("- %s %s%s: %s%s", r.Label, MDCode(fc.Path), why, changeText(fc), reload)
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
