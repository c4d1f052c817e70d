package plans

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"strings"

	"github.com/relayctl/relayctl/internal/lazyre"
	"github.com/relayctl/relayctl/relay/capability"
)

// Sentinel errors of plan files.
var (
	ErrPlanFormat   = errors.New("unsupported plan format_version")
	ErrPlanChecksum = errors.New("plan checksum does not match its content")
	ErrNotAPlan     = errors.New("not a plan file") // not JSON, or JSON without a format_version
)

// A plan file is written with sorted, fixed fields, two-space indent and
// a final newline, so equal plans are equal bytes: json.Encoder's
// encoding of the whole Plan. It is written one host at a time (stream),
// never held whole: a plan of 10,000 hosts is some 90 MB, and encoding it
// at once took four times that.

// stream writes p's canonical encoding to w.
func (p *Plan) stream(w io.Writer) error {
	head := *p
	head.Hosts = nil
	n := len(p.Hosts)
	if p.Hosts == nil {
		n = -1
	}
	return StreamJSON(w, &head, n, func(i int) any { return p.Hosts[i] }, "plan")
}

// WriteJSON writes the plan file's bytes to w, with its checksum filled
// in: the sha256 of the plan's bytes with checksum "".
func (p *Plan) WriteJSON(w io.Writer) error {
	c := *p
	c.Checksum = ""
	h := sha256.New()
	if err := c.stream(h); err != nil {
		return err
	}
	p.Checksum = "sha256:" + hex.EncodeToString(h.Sum(nil))
	c.Checksum = p.Checksum
	return c.stream(w)
}

// JSON returns the plan file's bytes, with its checksum filled in.
func (p *Plan) JSON() ([]byte, error) {
	var b bytes.Buffer
	if err := p.WriteJSON(&b); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// Load reads a plan file, refusing an unknown format or a plan whose content
// was edited after it was written: its checksum no longer matches, or its
// bytes are not the ones relayctl writes for its content.
func Load(file string, data []byte) (*Plan, error) {
	version, err := formatVersion(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w: %w", file, ErrNotAPlan, err)
	}
	if version != FormatVersion {
		return nil, fmt.Errorf("%s: %w: %d (this relayctl reads %d); make the plan again with this relayctl", file, ErrPlanFormat, version, FormatVersion)
	}
	if len(data) > MaxPlanSize {
		return nil, fmt.Errorf("%s: a plan of %d bytes (at most %d)", file, len(data), MaxPlanSize)
	}
	// Decoded in place (a Decoder would copy the file first); a field
	// the plan does not have fails the comparison below, and strictly
	// decoded then says which.
	var p Plan
	if err := json.Unmarshal(data, &p); err != nil {
		return nil, fmt.Errorf("%s: read plan: %w", file, err)
	}
	want := p.Checksum
	// Encode the content again with checksum "", comparing it as it comes
	// with the file's bytes (their checksum taken out) and hashing it.
	c := p
	c.Checksum = ""
	v := newVerifier(data, want)
	if err := c.stream(v); err != nil {
		return nil, err
	}
	p.Checksum = v.sum()
	if !v.same() {
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		if err := dec.Decode(new(Plan)); err != nil {
			return nil, fmt.Errorf("%s: read plan: %w", file, err)
		}
	}
	if p.Checksum != want || !v.same() {
		return nil, fmt.Errorf("%s: %w (recorded %s, content gives %s): it was edited after review; make and review a new plan", file, ErrPlanChecksum, orNone(want), p.Checksum)
	}
	return &p, nil
}

// verifier is a writer that hashes what it is written and compares it
// with a plan file's bytes where the checksum is "": the file's own
// checksum, right after its format version, is taken out of the
// comparison without copying the file.
type verifier struct {
	parts [][]byte // the file's bytes as they should come, checksum ""
	h     hash.Hash
	equal bool
}

var checksumField = lazyre.New(`^\{\n  "format_version": [0-9]+,\n  "checksum": ("[^"\\\n]{0,100}")`)

func newVerifier(data []byte, want string) *verifier {
	v := &verifier{h: sha256.New(), equal: true}
	m := checksumField.FindSubmatchIndex(data)
	if m == nil {
		v.parts, v.equal = [][]byte{data}, false
		return v
	}
	head := append(append([]byte(nil), data[:m[2]]...), `""`...)
	v.parts = [][]byte{head, data[m[3]:]}
	return v
}

func (v *verifier) Write(b []byte) (int, error) {
	v.h.Write(b)
	n := len(b)
	for len(b) > 0 && v.equal {
		if len(v.parts) == 0 {
			v.equal = false
			break
		}
		p := v.parts[0]
		k := min(len(p), len(b))
		if !bytes.Equal(p[:k], b[:k]) {
			v.equal = false
			break
		}
		b, v.parts[0] = b[k:], p[k:]
		if len(v.parts[0]) == 0 {
			v.parts = v.parts[1:]
		}
	}
	return n, nil
}

// same reports whether everything written matched the whole file.
func (v *verifier) same() bool { return v.equal && len(v.parts) == 0 }

func (v *verifier) sum() string { return "sha256:" + hex.EncodeToString(v.h.Sum(nil)) }

// formatVersion reads a plan's format_version: its first field when the
// plan is relayctl's, else found by decoding the whole document.
func formatVersion(data []byte) (int, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return probeVersion(data)
	}
	if k, err := dec.Token(); err != nil || k != "format_version" {
		return probeVersion(data)
	}
	var v int
	if err := dec.Decode(&v); err != nil {
		return probeVersion(data)
	}
	return v, nil
}

func probeVersion(data []byte) (int, error) {
	var probe struct {
		FormatVersion int `json:"format_version"`
	}
	err := json.Unmarshal(data, &probe)
	return probe.FormatVersion, err
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

// drainText says what the drain gate will do on a host. (The players the
// relay had when planned are a reading, not the plan: PLAN.readings.json.)
func drainText(d *Drain) string {
	closeNew := ""
	if d.NoNewLobbies {
		closeNew = ", refusing new lobbies meanwhile"
	}
	return fmt.Sprintf("wait until at most %d players (polling every %v%s), up to %v, then %s", d.MaxPlayers, d.Poll, closeNew, d.Deadline, d.OnDeadline)
}

func serviceText(s PlanService) string {
	if s.Manager == "systemd" {
		return "systemd unit " + MDCode(s.Name) + " (`systemctl restart`)"
	}
	text := fmt.Sprintf("stopped with %s, started with %s; its PID is read from %s", MDCode(Argv(s.Stop)), MDCode(Argv(s.Start)), MDCode(s.PIDFile))
	if s.Log != "" {
		text += fmt.Sprintf("; its last words from %s when a read-back finds it not running", MDCode(s.Log))
	}
	return text
}

func actionText(a string) string {
	switch a {
	case ActionChange:
		return "changes"
	case ActionNone:
		return "no change"
	case ActionUnreachable:
		return "unreachable, not planned"
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

// versionNote is what the Release line says of where the version was
// read, when that was not relayd's version marker (the usual case).
func versionNote(r PlannedRelay) string {
	switch r.VersionFrom {
	case capability.FromBuildInfo:
		return fmt.Sprintf("; its version, %s, as Go's build information records it (-X main.Version in its -ldflags; it has no version marker)", MDText(r.Version))
	case capability.FromNone:
		return "; **its version cannot be checked** (Read first)"
	}
	return ""
}

// versionWarning is the review's warning for a release whose version
// cannot be checked before the window, "" for any other.
func versionWarning(r PlannedRelay) string {
	if r.VersionFrom != capability.FromNone {
		return ""
	}
	if r.URL != "" && r.Artifact == "" {
		return fmt.Sprintf("the release's version cannot be checked before the window: the hosts fetch it from %s, and relayctl read no copy of it (relay.release.artifact); a release that is not %s shows only at the read-back, after the restart", MDCode(r.URL), MDText(r.Version))
	}
	return fmt.Sprintf("the release's version cannot be checked before the window: its program %s records it neither in relayd's version marker nor in Go's build information (-X main.Version in its -ldflags), so a release that is not %s shows only at the read-back, after the restart; build it with make build RELAY_VERSION=%s",
		MDCode(r.Program), MDText(r.Version), MDText(r.Version))
}

// writesText lists every path relayctl writes on a host of the plan.
func writesText(p *Plan) string {
	var w []string
	switch {
	case p.Rollback != nil && p.Relay.Kind != ReleaseKindNone:
		w = append(w, MDCode(p.Paths.Current)+" (the link, back to the release the host keeps)")
	case p.Relay.Kind != ReleaseKindNone:
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
	case f.Restore != "":
		return "put back from the host's backup " + MDCode(f.Restore) + " (sha256 " + MDCode(short(f.SHA256)) + ", checked there)"
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
