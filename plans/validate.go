package plans

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/relayctl/relayctl/relay/capability"
	"github.com/relayctl/relayctl/tune"
	"github.com/relayctl/relayctl/uplink"
)

// ErrPlanEdited is a plan whose content is not what its recorded spec and
// its own decisions give: it was edited after it was made.
var ErrPlanEdited = errors.New("the plan does not match its recorded spec")

// Limits on what relayctl reads from plans and hosts. Nothing untrusted is
// read without a bound.
const (
	MaxPlanSize     = 1 << 30   // a plan file: about 9 KB a host, MaxFleet hosts
	MaxFactsSize    = 64 << 20  // a facts file
	MaxArtifactSize = 512 << 20 // a release artifact
	MaxHostFile     = 256 << 10 // one file read on a host (a sysctl.d file, the relay config)
	MaxHostFiles    = 512       // sysctl.d files on one host
	MaxHostText     = 4096      // a line of host output: kernel release, link target, a sysctl value
	MaxJournal      = 1 << 20   // an unfinished apply's journal
)

// Validate checks a loaded plan against the spec it records, with the same
// parser a spec goes through, before anything connects: a value the spec
// parser refuses is refused here too, and every field the plan takes from
// its spec must be what that spec gives. Host decisions that need the host
// (steps, file contents) are re-derived by apply from the facts it observes.
func Validate(p *Plan) error {
	s, err := ParseSpec(p.SpecFile, []byte(p.Spec))
	if err != nil {
		return fmt.Errorf("%w: the spec recorded in the plan does not parse:\n%v", ErrPlanEdited, err)
	}
	if got := "sha256:" + sha256Text(p.Spec); p.SpecSHA256 != got {
		return fmt.Errorf("%w: spec_sha256 is %s, the recorded spec hashes to %s", ErrPlanEdited, p.SpecSHA256, got)
	}
	switch {
	case !s.Relay.Release.Ships():
		if p.Relay.SHA256 != "" || p.Relay.Size != 0 || p.Relay.TreeSHA256 != "" {
			return fmt.Errorf("%w: a release of kind none ships nothing, but relay.sha256, size or tree_sha256 is set", ErrPlanEdited)
		}
	case !sha256Re.MatchString(p.Relay.SHA256):
		return fmt.Errorf("%w: relay.sha256 %q is not a sha256", ErrPlanEdited, p.Relay.SHA256)
	case s.Relay.Release.Kind != ReleaseKindBinary && !sha256Re.MatchString(p.Relay.TreeSHA256):
		return fmt.Errorf("%w: relay.tree_sha256 %q is not a sha256", ErrPlanEdited, p.Relay.TreeSHA256)
	}
	texts := map[string]string{}
	for _, t := range p.Relay.Config.Templates {
		if len(t.Text) > MaxTemplateSize {
			return fmt.Errorf("%w: template %s is longer than %d bytes", ErrPlanEdited, Visible(t.Source), MaxTemplateSize)
		}
		texts[t.Source] = t.Text
	}
	if p.Relay.Size < 0 || p.Relay.Size > MaxArtifactSize {
		return fmt.Errorf("%w: relay.size %d is outside 0 to %d", ErrPlanEdited, p.Relay.Size, MaxArtifactSize)
	}
	if want := s.Relay.Release.SHA256; want != "" && want != p.Relay.SHA256 {
		return fmt.Errorf("%w: relay.sha256 is %s, the spec says %s", ErrPlanEdited, p.Relay.SHA256, want)
	}
	if err := validFromArtifact(p.Relay); err != nil {
		return fmt.Errorf("%w: %v", ErrPlanEdited, err)
	}
	want := header(s, Artifact{SHA256: p.Relay.SHA256, Size: p.Relay.Size, Capabilities: p.Relay.Capabilities, TreeSHA256: p.Relay.TreeSHA256,
		VersionFrom: p.Relay.VersionFrom}, texts, p.AllowDowngrade)
	want.SpecSHA256 = p.SpecSHA256
	if s.Inventory != nil {
		// The inventory's sha256s come from its files, not the spec:
		// CheckInventory selects the hosts again from them.
		if err := validInventoryRecord(p.Inventory, s.Inventory); err != nil {
			return fmt.Errorf("%w: %v", ErrPlanEdited, err)
		}
		want.Inventory = p.Inventory
	}
	if p.Rollback != nil {
		if err := validRollbackRecord(p.Rollback); err != nil {
			return fmt.Errorf("%w: %v", ErrPlanEdited, err)
		}
		want.Rollback = p.Rollback
	}
	if err := validBudget(p); err != nil {
		return fmt.Errorf("%w: %v", ErrPlanEdited, err)
	}
	want.UnreachableAllowed = p.UnreachableAllowed
	if d := headerDiff(p, want); len(d) > 0 {
		return fmt.Errorf("%w: %s; make and review the plan again", ErrPlanEdited, strings.Join(d, "; "))
	}
	if err := validateHostNames(p, s); err != nil {
		return fmt.Errorf("%w: %v", ErrPlanEdited, err)
	}
	for _, h := range p.Hosts {
		if err := validateHost(p, h); err != nil {
			return fmt.Errorf("%w: host %s: %v", ErrPlanEdited, h.Host, err)
		}
	}
	return nil
}

// headerDiff names every field, below the hosts, where the plan differs
// from the header its spec gives.
func headerDiff(got, want *Plan) []string {
	strip := func(p *Plan) map[string]string {
		c := *p
		c.Checksum, c.Hosts = "", nil
		return flatten(&c)
	}
	g, w := strip(got), strip(want)
	var keys []string
	for k := range g {
		keys = append(keys, k)
	}
	for k := range w {
		if _, ok := g[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var out []string
	for _, k := range keys {
		if g[k] != w[k] {
			out = append(out, fmt.Sprintf("%s is %s, its spec gives %s", k, orAbsent(g[k]), orAbsent(w[k])))
		}
	}
	return out
}

func orAbsent(s string) string {
	if s == "" {
		return "(absent)"
	}
	return s
}

// flatten turns a value's JSON into dotted field names and JSON values.
func flatten(v any) map[string]string {
	b, _ := json.Marshal(v)
	var x any
	json.Unmarshal(b, &x)
	out := map[string]string{}
	var walk func(prefix string, x any)
	walk = func(prefix string, x any) {
		switch t := x.(type) {
		case map[string]any:
			for k, v := range t {
				walk(join(prefix, k), v)
			}
		default:
			b, _ := json.Marshal(t)
			out[prefix] = string(b)
		}
	}
	walk("", x)
	return out
}

// validateHost checks what a host plan says against the plan's spec
// values, as far as that needs no host: the planned sysctls, release and
// read-back, and that every string is one a review can show.
func validateHost(p *Plan, h *HostPlan) error {
	switch h.Action {
	case ActionChange, ActionNone, ActionBlocked:
	case ActionUnreachable:
		return validateUnreachable(h)
	default:
		return fmt.Errorf("action %q", h.Action)
	}
	for _, s := range []string{h.Address, h.Kernel, h.Fingerprint} {
		if err := hostText(s); err != nil {
			return err
		}
	}
	for _, s := range append(append([]string{}, h.Blockers...), h.Warnings...) {
		if len(s) > 4*MaxHostText || !utf8.ValidString(s) {
			return errors.New("a note that is not text")
		}
	}
	if p.Rollback != nil {
		if err := validateRollbackHost(p, h); err != nil {
			return err
		}
		return validateSteps(h)
	}
	if h.Undo != nil {
		return errors.New("a record of a window to undo, in a plan that is no rollback")
	}
	spec := map[string]string{}
	for _, s := range p.Sysctl {
		spec[s.Key] = s.Value
	}
	if len(h.Sysctls) > len(p.Sysctl) {
		return fmt.Errorf("%d sysctls, the spec has %d", len(h.Sysctls), len(p.Sysctl))
	}
	for _, c := range h.Sysctls {
		if v, ok := spec[c.Key]; !ok || v != c.Planned {
			return fmt.Errorf("sysctl %s = %q is not in the spec", c.Key, c.Planned)
		}
	}
	if h.Release.Planned != p.Relay.Version {
		return fmt.Errorf("release %q, the spec ships %s", h.Release.Planned, p.Relay.Version)
	}
	rb := tune.ExpectRcvbuf(p.Relay.SORcvbuf, p.Relay.SORcvbufForce, h.Readback.RmemMax, h.Readback.RmemDefault)
	if h.Readback.Expected != rb.Effective || h.Readback.Requested != p.Relay.SORcvbuf || h.Readback.Port != p.Relay.Port {
		return fmt.Errorf("expected rb %d, the kernel rule gives %d", h.Readback.Expected, rb.Effective)
	}
	if err := validateFiles(p, h); err != nil {
		return err
	}
	return validateSteps(h)
}

// validateSteps checks a host plan's steps are text a review can show.
func validateSteps(h *HostPlan) error {
	for _, st := range h.Steps {
		switch st.Phase {
		case PhaseStage, PhaseWindow, PhaseVerify:
		default:
			return fmt.Errorf("step phase %q", st.Phase)
		}
		for _, s := range []string{st.Kind, st.Key, st.Value, st.Title} {
			if err := hostText(s); err != nil {
				return fmt.Errorf("step %q: %v", st.Kind, err)
			}
		}
	}
	return nil
}

// hostText checks a single line of text that came from a host or a plan.
func hostText(s string) error {
	if len(s) > MaxHostText {
		return fmt.Errorf("a text of %d bytes (at most %d)", len(s), MaxHostText)
	}
	if !utf8.ValidString(s) {
		return fmt.Errorf("%q is not UTF-8", s)
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return fmt.Errorf("%q holds a control character", s)
		}
	}
	return nil
}

// validFromArtifact checks the form of what a plan took from the
// artifact's bytes, not the spec (its capabilities, where its version was
// read), which apply checks against the artifact it ships. A release the
// hosts fetch from a url with no local copy had no bytes to read.
func validFromArtifact(r PlannedRelay) error {
	for _, c := range r.Capabilities {
		if err := hostText(c); err != nil || len(c) > 64 || !strings.Contains(c, "=") {
			return fmt.Errorf("relay.capabilities holds %q", c)
		}
	}
	from := []string{capability.FromMarker, capability.FromBuildInfo, capability.FromNone}
	switch {
	case r.Kind == ReleaseKindNone:
		from = []string{""}
	case r.URL != "" && r.Artifact == "":
		from = []string{capability.FromNone}
	}
	if !slices.Contains(from, r.VersionFrom) {
		return fmt.Errorf("relay.version_from is %q, want one of %q: make the plan again with this relayctl", clip(r.VersionFrom), from)
	}
	return nil
}

// ValidateFacts checks observed facts before a plan uses them: host output
// (and a facts file) is input like a spec. Sizes are bounded, the numbers
// the kernel rule uses are whole numbers, and one-line texts are one line.
func ValidateFacts(f *Facts) error {
	if f == nil {
		return errors.New("facts: a host entry is empty")
	}
	if f.Host == "" || hostText(f.Host) != nil || len(f.Host) > 255 {
		return fmt.Errorf("facts of %s: host name %q", clip(f.Host), clip(f.Host))
	}
	for _, check := range []func(*Facts) error{factTexts, factReleases, factSysctls, factFiles, factRelay, factUndo} {
		if err := check(f); err != nil {
			return fmt.Errorf("facts of %s: %w", clip(f.Host), err)
		}
	}
	return nil
}

// factTexts: every short string is text a review can show.
func factTexts(f *Facts) error {
	for name, s := range map[string]string{"address": f.Address, "user": f.User, "hostname": f.Hostname, "kernel": f.Kernel, "arch": f.Arch,
		"release current": f.Release.Current, "release link": f.Release.CurrentRaw, "running executable": f.Release.RunningExe,
		"service detail": f.Service.Detail, "found by": f.Service.FoundBy, "lock owner": f.LockOwner, "relay config": f.Config.Unsafe} {
		if err := hostText(s); err != nil {
			return fmt.Errorf("%s: %v", name, err)
		}
	}
	return nil
}

// factReleases: versions only, and not too many.
func factReleases(f *Facts) error {
	if f.Release.Current != "" && ValidVersion(f.Release.Current) != nil {
		return fmt.Errorf("release current %q is not a version", clip(f.Release.Current))
	}
	if len(f.Release.Installed) > MaxHostFiles {
		return fmt.Errorf("%d releases installed (at most %d)", len(f.Release.Installed), MaxHostFiles)
	}
	for _, v := range f.Release.Installed {
		if ValidVersion(v) != nil {
			return fmt.Errorf("installed release %q is not a version", clip(v))
		}
	}
	if len(f.Release.Stored) > MaxHostFiles {
		return fmt.Errorf("%d release store entries (at most %d)", len(f.Release.Stored), MaxHostFiles)
	}
	for _, sha := range f.Release.Stored {
		if len(sha) != 64 || strings.Trim(sha, "0123456789abcdef") != "" {
			return fmt.Errorf("release store entry %q is not a sha256", clip(sha))
		}
	}
	for _, d := range f.Release.Decoders {
		if !slices.Contains(uplink.Encodings, d) {
			return fmt.Errorf("decoder %q is not one of %s", clip(d), strings.Join(uplink.Encodings, ", "))
		}
	}
	return nil
}

// factSysctls: valid keys, bounded values, whole numbers where the kernel
// rule reads them.
func factSysctls(f *Facts) error {
	if len(f.Sysctls) > 1000 {
		return fmt.Errorf("%d sysctls", len(f.Sysctls))
	}
	for k, s := range f.Sysctls {
		if err := tune.ValidKey(k); err != nil {
			return err
		}
		if len(s.Value) > MaxHostText || !utf8.ValidString(s.Value) {
			return fmt.Errorf("sysctl %s: a value of %d bytes", k, len(s.Value))
		}
	}
	for _, k := range ObservedKeys {
		s := f.Sysctls[k]
		if !s.Exists {
			continue
		}
		if n, err := strconv.ParseInt(tune.Normalize(s.Value), 10, 64); err != nil || n < 0 || n > 1<<31-1 {
			return fmt.Errorf("sysctl %s reads %q, not a whole number from 0 to %d", k, clip(s.Value), 1<<31-1)
		}
	}
	return nil
}

// factFiles: clean paths, bounded sizes and counts.
func factFiles(f *Facts) error {
	if len(f.SysctlFiles) > MaxHostFiles {
		return fmt.Errorf("%d sysctl.d files (at most %d)", len(f.SysctlFiles), MaxHostFiles)
	}
	for _, cf := range f.SysctlFiles {
		if err := ValidHostPath(cf.Path); err != nil {
			return fmt.Errorf("sysctl file: %v", err)
		}
		if len(cf.Content) > MaxHostFile {
			return fmt.Errorf("sysctl file %s is %d bytes (at most %d)", cf.Path, len(cf.Content), MaxHostFile)
		}
	}
	if len(f.SkippedFiles) > MaxHostFiles {
		return fmt.Errorf("%d skipped files", len(f.SkippedFiles))
	}
	for _, s := range f.SkippedFiles {
		if err := hostText(s); err != nil {
			return fmt.Errorf("skipped file: %v", err)
		}
	}
	if f.UnitDropIn != nil && len(f.UnitDropIn.Content) > MaxHostFile {
		return fmt.Errorf("unit drop-in is %d bytes (at most %d)", len(f.UnitDropIn.Content), MaxHostFile)
	}
	if len(f.Config.Content) > MaxHostFile {
		return fmt.Errorf("relay config is %d bytes (at most %d)", len(f.Config.Content), MaxHostFile)
	}
	if len(f.Journal) > MaxJournal {
		return fmt.Errorf("journal is %d bytes (at most %d)", len(f.Journal), MaxJournal)
	}
	return nil
}

// factRelay: the process, the socket and the relay's own words.
func factRelay(f *Facts) error {
	if f.Service.PID < 0 || (f.Service.Running && f.Service.PID == 0) {
		return fmt.Errorf("relay pid %d", f.Service.PID)
	}
	if f.Socket.Port < 0 || f.Socket.Port > 65535 || f.Socket.Rcvbuf > 1<<32 {
		return fmt.Errorf("socket port %d, rb %d", f.Socket.Port, f.Socket.Rcvbuf)
	}
	if st := f.RelayStatus; st != nil {
		for _, s := range []string{st.Error, st.Version, st.Handoff, st.HandoffSocket} {
			if err := hostText(s); err != nil {
				return fmt.Errorf("relay status: %v", err)
			}
		}
	}
	return nil
}

// factUndo: a receipt's plain name, a few plain backup names.
func factUndo(f *Facts) error {
	u := f.Undo
	if u == nil {
		return nil
	}
	if err := ValidReceiptName(u.Receipt); err != nil {
		return err
	}
	if hostText(u.Checksum) != nil || hostText(u.Outcome) != nil || len(u.Backups) > 64 {
		return errors.New("undo receipt: not text, or too many backups")
	}
	for _, b := range u.Backups {
		if err := ValidBackupName(b); err != nil {
			return fmt.Errorf("undo receipt: %v", err)
		}
	}
	return nil
}

func clip(s string) string {
	if len(s) > 60 {
		return s[:60] + "…"
	}
	return s
}

// ActionDiff names every way two plans for one host would act differently:
// apply compares the host plan in the plan file with the one it derives
// from the recorded spec and the facts it observes, and runs only the
// derived one.
func ActionDiff(stored, derived *HostPlan) []string {
	var d []string
	cmp := func(what, a, b string) {
		if a != b {
			d = append(d, fmt.Sprintf("%s: the plan says %s, derived %s", what, orAbsent(a), orAbsent(b)))
		}
	}
	cmp("action", stored.Action, derived.Action)
	cmp("release", stored.Release.Action+" "+stored.Release.Planned, derived.Release.Action+" "+derived.Release.Planned)
	cmp("restart", strconv.FormatBool(stored.Restart), strconv.FormatBool(derived.Restart))
	cmp("expected rb", strconv.Itoa(stored.Readback.Expected), strconv.Itoa(derived.Readback.Expected))
	var paths []string
	for _, h := range []*HostPlan{stored, derived} {
		for _, f := range h.Files {
			if !slices.Contains(paths, f.Path) {
				paths = append(paths, f.Path)
			}
		}
	}
	for _, path := range paths {
		what := path
		if f := derived.FileAt(path); f != nil {
			what = f.Role + " " + path
		}
		cmp(what, fileWords(stored.FileAt(path), nil), fileWords(derived.FileAt(path), stored.FileAt(path)))
	}
	sysctls := func(h *HostPlan) string {
		var s []string
		for _, c := range h.Sysctls {
			s = append(s, fmt.Sprintf("%s=%s(change %v)", c.Key, c.Planned, c.Change))
		}
		return strings.Join(s, ", ")
	}
	cmp("sysctls", sysctls(stored), sysctls(derived))
	steps := func(h *HostPlan) []string {
		var s []string
		for _, st := range h.Steps {
			s = append(s, fmt.Sprintf("[%s] %s", st.Phase, st.Title))
		}
		return s
	}
	a, b := steps(stored), steps(derived)
	for i := 0; i < max(len(a), len(b)); i++ {
		var x, y string
		if i < len(a) {
			x = a[i]
		}
		if i < len(b) {
			y = b[i]
		}
		cmp(fmt.Sprintf("step %d", i+1), x, y)
	}
	return d
}

// fileWords says what a plan does with a file, hashed as reviewed: a file
// derived now is hashed as the plan it is compared with was (masked, for a
// plan made from masked facts).
func fileWords(f, reviewed *FileChange) string {
	switch {
	case f == nil:
		return "none"
	case reviewed != nil && reviewed.Masked && f.Change && !f.Remove:
		return "written with sha256 " + reviewed.maskedSHA256(f.Content)
	case !f.Change:
		return "no change"
	case f.Remove:
		return "removed"
	}
	return "written with sha256 " + f.SHA256
}

// validateFiles checks a host plan's files: each of a known role, once, at
// the path the plan's spec gives that role, and only what a review shows.
func validateFiles(p *Plan, h *HostPlan) error {
	seen := map[string]bool{}
	planned := PlannedFiles(p)
	for _, f := range h.Files {
		switch {
		case !slices.Contains(planned, PlannedFile{f.Role, f.Path}):
			if _, ok := Role(f.Role); !ok {
				return fmt.Errorf("a file of role %q, which this plan has none of", clip(f.Role))
			}
			return fmt.Errorf("a file path that is not the spec's: %s %s", clip(f.Role), clip(f.Path))
		case seen[f.Path]:
			return fmt.Errorf("two files at %s", clip(f.Path))
		}
		seen[f.Path] = true
		if (f.SHA256 != "" && !sha256Re.MatchString(f.SHA256)) || len(f.Diff) > maxDiffLines+1 || len(f.Changes) > maxDiffLines || f.Restore != "" && ValidBackupName(f.Restore) != nil {
			return fmt.Errorf("file change %s is malformed", f.Path)
		}
		// The review shows these as they are: only the ops and kinds relayctl writes.
		for _, l := range f.Diff {
			if l.Op != " " && l.Op != "+" && l.Op != "-" {
				return fmt.Errorf("file change %s: diff op %q", f.Path, l.Op)
			}
		}
		for _, c := range f.Changes {
			switch c.Change {
			case KeyAdded, KeyRemoved, KeyChanged, KeyKept:
			default:
				return fmt.Errorf("file change %s: key change %q", f.Path, c.Change)
			}
		}
	}
	return nil
}
