package tune

import (
	"bytes"
	"fmt"
	"path"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// SysctlDirs are the directories `sysctl --system` reads *.conf files from,
// highest priority first: a file masks every file of the same basename in a
// later directory (docs/kernel.md).
var SysctlDirs = []string{
	"/etc/sysctl.d",
	"/run/sysctl.d",
	"/usr/local/lib/sysctl.d",
	"/usr/lib/sysctl.d",
	"/lib/sysctl.d",
}

// SysctlConf is applied after every sysctl.d file by `sysctl --system`.
const SysctlConf = "/etc/sysctl.conf"

// ConfFile is one file found on a host.
type ConfFile struct {
	Path    string
	Content []byte
}

// Setting is one assignment in a sysctl.d file.
type Setting struct {
	Key          string // dotted form; may be a glob such as net.ipv4.conf.*.rp_filter
	Value        string // trimmed, as written
	Path         string
	Line         int  // 1-based
	IgnoreErrors bool // the line started with '-'
}

func (s Setting) String() string {
	return fmt.Sprintf("%s:%d: %s = %s", s.Path, s.Line, s.Key, s.Value)
}

// ParseConf parses a sysctl.d file: `key = value` lines, '#' and ';'
// comment lines, blank lines; a leading '-' on the key means errors
// writing it are ignored; a key written with '/' separators is turned into
// the dotted form (as systemd-sysctl does). A bad line is an error that
// names path:line.
func ParseConf(path string, content []byte) ([]Setting, error) {
	settings, bad := parseConf(path, content)
	if len(bad) > 0 {
		return nil, bad[0]
	}
	return settings, nil
}

// ParseConfLenient is ParseConf that skips bad lines instead of failing,
// returning them apart: for showing what a file sets, not for deciding.
func ParseConfLenient(path string, content []byte) ([]Setting, []*LineError) {
	return parseConf(path, content)
}

// LineError is a line of a sysctl.d file that is not an assignment.
type LineError struct {
	Path   string
	Line   int
	Reason string
}

func (e *LineError) Error() string {
	return fmt.Sprintf("parse %s:%d: %s", e.Path, e.Line, e.Reason)
}

func parseConf(path string, content []byte) ([]Setting, []*LineError) {
	var settings []Setting
	var bad []*LineError
	content = bytes.TrimPrefix(content, []byte("\xef\xbb\xbf"))
	for i, raw := range strings.Split(string(content), "\n") {
		n := i + 1
		line := strings.TrimSpace(strings.TrimSuffix(raw, "\r"))
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		fail := func(format string, a ...any) {
			bad = append(bad, &LineError{Path: path, Line: n, Reason: fmt.Sprintf(format, a...)})
		}
		if !utf8.ValidString(line) {
			fail("line is not valid UTF-8")
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			fail("want key = value, got %q", clip(line))
			continue
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		s := Setting{Value: v, Path: path, Line: n}
		if strings.HasPrefix(k, "-") {
			s.IgnoreErrors = true
			k = strings.TrimSpace(k[1:])
		}
		if k == "" {
			fail("empty key before '='")
			continue
		}
		if i := strings.IndexFunc(k, func(r rune) bool { return unicode.IsSpace(r) || !unicode.IsPrint(r) }); i >= 0 {
			fail("key %q contains a space or control character", clip(k))
			continue
		}
		if strings.IndexFunc(v, func(r rune) bool { return r != '\t' && !unicode.IsPrint(r) }) >= 0 {
			fail("value of %s contains a control character", clip(k))
			continue
		}
		if s.Key = dotted(k); s.Key == "" {
			fail("empty key %q", clip(k))
			continue
		}
		settings = append(settings, s)
	}
	return settings, bad
}

// dotted turns a key written with '/' separators into the dotted form,
// swapping '.' and '/' as systemd-sysctl's sysctl_normalize does, so that
// net/ipv4/conf/eth0.100/rp_filter becomes net.ipv4.conf.eth0/100.rp_filter.
func dotted(k string) string {
	k = strings.TrimLeft(k, "/")
	if i := strings.IndexAny(k, "./"); i < 0 || k[i] == '.' {
		return k
	}
	return swapSeparators(k)
}

func clip(s string) string {
	if len(s) > 60 {
		return s[:60] + "..."
	}
	return s
}

// isGlob reports whether a key is a pattern rather than a name.
func isGlob(key string) bool {
	return strings.ContainsAny(key, "*?[")
}

// globMatches reports whether the glob pattern matches the concrete key.
// Matching is done on the /proc/sys path form, so '*' does not cross a
// separator: verified with procps 4.0.2, net.*udp_rmem_min does not set
// net.ipv4.udp_rmem_min, net.ipv4.conf.*.rp_filter sets every interface.
func globMatches(pattern, key string) bool {
	ok, err := path.Match(swapSeparators(pattern), swapSeparators(key))
	return err == nil && ok
}

// swapSeparators exchanges '.' and '/': it turns a dotted key into its path
// under /proc/sys and back (an interface eth0.100 is eth0/100 when dotted).
func swapSeparators(k string) string {
	return strings.Map(func(r rune) rune {
		switch r {
		case '/':
			return '.'
		case '.':
			return '/'
		}
		return r
	}, k)
}

// ProblemKind says what went wrong with a file or a setting.
type ProblemKind int

const (
	// Masked: the file at Path is never read, because By.Path has the same
	// basename in a higher-priority directory.
	Masked ProblemKind = iota + 1
	// Overridden: the setting Path:Line of Key is replaced at boot by By, a
	// later setting of the same key with a different value.
	Overridden
	// BadLine: Path:Line is not an assignment; sysctl skips it.
	BadLine
)

// Problem is something a reviewer of the host's sysctl.d should know.
type Problem struct {
	Kind   ProblemKind
	Path   string
	Line   int
	Key    string
	Value  string
	By     Setting // Masked: only By.Path; Overridden: the winning setting
	Reason string  // BadLine: what is wrong
}

func (p Problem) String() string {
	switch p.Kind {
	case Masked:
		return fmt.Sprintf("%s is masked by %s: none of its settings apply", p.Path, p.By.Path)
	case Overridden:
		return fmt.Sprintf("%s:%d sets %s = %s but %s:%d sets %s = %s later, which wins at boot",
			p.Path, p.Line, p.Key, p.Value, p.By.Path, p.By.Line, p.By.Key, p.By.Value)
	case BadLine:
		return fmt.Sprintf("%s:%d is skipped: %s", p.Path, p.Line, p.Reason)
	}
	return fmt.Sprintf("unknown problem %d at %s", p.Kind, p.Path)
}

// conf is the outcome of reading every file the way `sysctl --system` does.
type conf struct {
	applied  []Setting         // in application order
	maskedBy map[string]string // masked path -> the path that masks it
	problems []Problem
}

// load orders files as `sysctl --system` applies them: the *.conf files of
// SysctlDirs, one per basename (the highest-priority directory wins), sorted
// by basename, then SysctlConf. A path outside those places is an error, as
// is the same path twice.
func load(files []ConfFile) (*conf, error) {
	c := &conf{maskedBy: map[string]string{}}
	type entry struct {
		file ConfFile
		rank int
	}
	byBase := map[string]entry{}
	var etcConf *ConfFile
	var all []ConfFile
	seen := map[string]bool{}
	for i, f := range files {
		p := path.Clean(f.Path)
		if seen[p] {
			return nil, fmt.Errorf("load sysctl files: %s given twice", p)
		}
		seen[p] = true
		if p == SysctlConf {
			etcConf = &files[i]
			continue
		}
		rank := slices.Index(SysctlDirs, path.Dir(p))
		if rank < 0 || !strings.HasSuffix(p, ".conf") || path.Base(p) == ".conf" {
			return nil, fmt.Errorf("load sysctl files: %s is not a *.conf file in %s, nor %s",
				f.Path, strings.Join(SysctlDirs, ", "), SysctlConf)
		}
		base := path.Base(p)
		f.Path = p
		if cur, ok := byBase[base]; !ok || rank < cur.rank {
			byBase[base] = entry{f, rank}
		}
		all = append(all, f)
	}
	// Every other file of a basename is masked by the one of highest
	// priority. On merged-/usr hosts /lib is a symlink to /usr/lib, so a
	// collector may list one file under both names: that is not a mask.
	for _, f := range all {
		w := byBase[path.Base(f.Path)].file
		if w.Path == f.Path {
			continue
		}
		if path.Dir(f.Path) == "/lib/sysctl.d" && path.Dir(w.Path) == "/usr/lib/sysctl.d" && bytes.Equal(f.Content, w.Content) {
			continue
		}
		c.mask(f.Path, w.Path)
	}
	bases := make([]string, 0, len(byBase))
	for b := range byBase {
		bases = append(bases, b)
	}
	slices.Sort(bases)
	order := make([]ConfFile, 0, len(bases)+1)
	for _, b := range bases {
		order = append(order, byBase[b].file)
	}
	if etcConf != nil {
		order = append(order, ConfFile{Path: SysctlConf, Content: etcConf.Content})
	}
	for _, f := range order {
		settings, bad := parseConf(f.Path, f.Content)
		for _, e := range bad {
			c.problems = append(c.problems, Problem{Kind: BadLine, Path: e.Path, Line: e.Line, Reason: e.Reason})
		}
		c.applied = append(c.applied, settings...)
	}
	return c, nil
}

func (c *conf) mask(masked, by string) {
	c.maskedBy[masked] = by
	c.problems = append(c.problems, Problem{Kind: Masked, Path: masked, By: Setting{Path: by}})
}

// deciding returns the setting that decides a concrete key at boot. An
// explicit assignment beats every glob, whatever their order; among
// explicit ones, or among globs when no explicit one exists, the last
// applied wins. Verified with procps 4.0.2's `sysctl --system` (which
// systemd-sysctl agrees with): net.ipv4.conf.lo.rp_filter = 1 in 10-a.conf
// survives net.ipv4.conf.*.rp_filter = 2 in a later 20-b.conf.
func (c *conf) deciding(key string) (Setting, bool) {
	var glob *Setting
	for i := len(c.applied) - 1; i >= 0; i-- {
		s := &c.applied[i]
		if s.Key == key {
			return *s, true
		}
		if glob == nil && isGlob(s.Key) && globMatches(s.Key, key) {
			glob = s
		}
	}
	if glob != nil {
		return *glob, true
	}
	return Setting{}, false
}

// Decide reads files (every file found in SysctlDirs plus SysctlConf) as
// `sysctl --system` does and returns, per key as written, the setting that
// decides it at the next boot, and the problems a reviewer should see:
// masked files, settings overridden by a later one with a different value,
// and lines sysctl skips. A glob stays a pattern in the map; it reaches only
// the keys no explicit assignment sets (see Decides for one concrete key).
func Decide(files []ConfFile) (map[string]Setting, []Problem, error) {
	c, err := load(files)
	if err != nil {
		return nil, nil, err
	}
	decided := map[string]Setting{}
	for _, s := range c.applied {
		decided[s.Key] = s
	}
	problems := c.problems
	for _, s := range c.applied {
		// A glob is only overridden here by a later glob written the same
		// way; which concrete keys it reaches depends on the host.
		win, _ := c.deciding(s.Key)
		if isGlob(s.Key) {
			win = c.lastSame(s.Key)
		}
		if (win.Path != s.Path || win.Line != s.Line) && !Equal(win.Value, s.Value) {
			problems = append(problems, Problem{Kind: Overridden, Path: s.Path, Line: s.Line,
				Key: s.Key, Value: s.Value, By: win})
		}
	}
	slices.SortStableFunc(problems, func(a, b Problem) int {
		if c := strings.Compare(a.Path, b.Path); c != 0 {
			return c
		}
		return a.Line - b.Line
	})
	return decided, problems, nil
}

// Shadowed reports whether the drop-in at path ours sets key and yet
// something else decides key at the next boot: an explicit assignment in a
// later file (a glob never beats an explicit key), or a file that masks
// ours. Files must include ours with the content the plan will write. by names the winning setting (for a mask that
// does not set key itself, only by.Path is set). A key ours does not set is
// never shadowed.
func Shadowed(files []ConfFile, ours, key string) (by Setting, shadowed bool, err error) {
	c, err := load(files)
	if err != nil {
		return Setting{}, false, err
	}
	ours = path.Clean(ours)
	var sets bool
	for _, f := range files {
		if path.Clean(f.Path) != ours {
			continue
		}
		settings, _ := parseConf(ours, f.Content)
		for _, s := range settings {
			sets = sets || s.Key == key || isGlob(s.Key) && globMatches(s.Key, key)
		}
	}
	if !sets {
		return Setting{}, false, nil
	}
	win, ok := c.deciding(key)
	if m, masked := c.maskedBy[ours]; masked && !ok {
		return Setting{Key: key, Path: m}, true, nil
	}
	if !ok || win.Path == ours {
		return Setting{}, false, nil
	}
	return win, true, nil
}

// Decides returns the setting that decides the concrete key at the next
// boot, explicit or by glob, and false if no file sets it (the kernel's
// value stays).
func Decides(files []ConfFile, key string) (Setting, bool, error) {
	c, err := load(files)
	if err != nil {
		return Setting{}, false, err
	}
	s, ok := c.deciding(key)
	return s, ok, nil
}

// Masks returns the files that the file at p masks (same basename in a
// lower-priority directory, so they are never read), and the file that
// masks p, if any. Putting relayctl's drop-in at /etc/sysctl.d/NAME hides
// /usr/lib/sysctl.d/NAME: a plan must say so.
func Masks(files []ConfFile, p string) (masks []string, maskedBy string, err error) {
	c, err := load(files)
	if err != nil {
		return nil, "", err
	}
	p = path.Clean(p)
	for masked, by := range c.maskedBy {
		if by == p {
			masks = append(masks, masked)
		}
	}
	slices.Sort(masks)
	return masks, c.maskedBy[p], nil
}

// RenderDropIn returns the content of relayctl's drop-in: header as '#'
// comment lines, then one `key = value` line per setting, keys sorted, so
// the same settings always give the same bytes. Values are written
// normalised (see Normalize), which also keeps each on one line; callers
// check keys and values with ValidKey and ValidateValue first.
func RenderDropIn(settings map[string]string, header string) []byte {
	var b bytes.Buffer
	if header != "" {
		for _, l := range strings.Split(strings.TrimRight(header, "\n"), "\n") {
			l = strings.TrimRight(l, " \t\r")
			if l == "" {
				b.WriteString("#\n")
				continue
			}
			b.WriteString("# " + l + "\n")
		}
	}
	keys := make([]string, 0, len(settings))
	for k := range settings {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "%s = %s\n", k, Normalize(settings[k]))
	}
	return b.Bytes()
}

// lastSame returns the last applied setting whose key is written exactly k.
func (c *conf) lastSame(k string) Setting {
	for i := len(c.applied) - 1; i >= 0; i-- {
		if c.applied[i].Key == k {
			return c.applied[i]
		}
	}
	return Setting{}
}
