package capability

import (
	"bytes"
	"debug/buildinfo"
	"fmt"
	"strings"
)

// Where an artifact's version was read (Stamp.From).
const (
	FromMarker    = "marker"    // relayd's version marker, which make build stamps
	FromBuildInfo = "buildinfo" // -X main.Version=… in the -ldflags Go's build information records
	FromNone      = "none"      // neither: the version cannot be checked
)

// Stamp is the version an artifact's program was built as, and where that
// was read. With From FromNone, Version is "" and Why says what was looked
// for and not found.
type Stamp struct {
	Version string
	From    string
	Why     string
}

// BuildVersion reads the version a program's build recorded, from its
// bytes (it is never run): relayd's version marker (make build), else the
// -X main.Version=… of the -ldflags that Go's build information records,
// which a plain go build -ldflags "-X main.Version=1.8.0" leaves (but not
// with -trimpath, which keeps -ldflags out of the build information), else
// none. A marker and -ldflags that disagree are an error: relayd refuses
// to start so built.
func BuildVersion(program []byte) (Stamp, error) {
	marker, err := Version(program)
	if err != nil {
		return Stamp{}, err
	}
	flagged, why := ldflagsOf(program)
	switch {
	case marker != "" && flagged != "" && flagged != marker:
		return Stamp{}, fmt.Errorf("read version: its version marker says %s, its build's -ldflags say -X main.Version=%s: not one build (relayd refuses to start so stamped)", marker, clip(flagged))
	case marker != "":
		return Stamp{Version: marker, From: FromMarker}, nil
	case flagged != "":
		return Stamp{Version: flagged, From: FromBuildInfo}, nil
	}
	return Stamp{From: FromNone, Why: why}, nil
}

// ldflagsOf is the main.Version the program's recorded -ldflags set, or
// "" and why there is none.
func ldflagsOf(program []byte) (string, string) {
	bi, err := buildinfo.Read(bytes.NewReader(program))
	if err != nil {
		return "", "it has no version marker and no Go build information (it is not a Go program)"
	}
	raw, trimpath := "", false
	for _, s := range bi.Settings {
		switch s.Key {
		case "-ldflags":
			raw = s.Value
		case "-trimpath":
			trimpath = s.Value == "true"
		}
	}
	if raw == "" {
		if trimpath {
			return "", "it has no version marker, and its Go build information records no -ldflags (go build -trimpath leaves them out)"
		}
		return "", "it has no version marker, and its Go build information records no -ldflags"
	}
	v, found, err := LdflagsVersion(raw, bi.Path)
	switch {
	case err != nil:
		return "", fmt.Sprintf("it has no version marker, and its build's -ldflags %q cannot be read for certain: %v", clip(raw), err)
	case !found:
		return "", fmt.Sprintf("it has no version marker, and its build's -ldflags %q set no -X main.Version", clip(raw))
	case v == "":
		return "", fmt.Sprintf("it has no version marker, and its build's -ldflags %q set main.Version empty", clip(raw))
	}
	return v, ""
}

func clip(s string) string {
	if len(s) > 200 {
		return s[:200] + "…"
	}
	return s
}

// LdflagsVersion is the value the -ldflags of a build, as Go's build
// information records them (go version -m shows them), give main.Version
// of the program whose main package is mainPath; found is false when they
// set none. They are read as cmd/go and the linker read them: an optional
// pattern= (all, or the main package's path: another pattern may not
// apply to the program), fields split at spaces with '…' or "…" around a
// field (nothing is unescaped inside), then the linker's flags, -X and --X
// with the definition as the next field or after =, the last -X of
// main.Version winning. Anything the linker would have read otherwise, or
// refused (a flag it does not have, a word that is not a flag, an @file of
// arguments), is an error: the version cannot be told for certain.
func LdflagsVersion(raw, mainPath string) (version string, found bool, err error) {
	v := strings.TrimSpace(raw)
	if v != "" && !strings.HasPrefix(v, "-") {
		pattern, rest, ok := strings.Cut(v, "=")
		pattern = strings.TrimSpace(pattern)
		if !ok || pattern != "all" && pattern != mainPath {
			return "", false, fmt.Errorf("they apply to the packages %q, which may not be the program's", pattern)
		}
		v = rest
	}
	fields, err := splitQuoted(v)
	if err != nil {
		return "", false, err
	}
	for i := 0; i < len(fields); i++ {
		name, value, hasValue, err := linkerFlag(fields[i])
		if err != nil {
			return "", false, err
		}
		if !hasValue && linkerValueFlags[name] {
			if i++; i == len(fields) {
				return "", false, fmt.Errorf("-%s without its value", name)
			}
			value = fields[i]
		}
		if name != "X" {
			continue
		}
		sym, val, ok := strings.Cut(value, "=")
		if !ok {
			return "", false, fmt.Errorf("-X %s is not importpath.name=value", value)
		}
		if sym == "main.Version" {
			version, found = val, true
		}
	}
	return version, found, nil
}

// linkerFlag reads one field as Go's flag package reads a flag: -name,
// --name, -name=value.
func linkerFlag(field string) (name, value string, hasValue bool, err error) {
	switch {
	case strings.HasPrefix(field, "@"):
		return "", "", false, fmt.Errorf("%s reads the linker's arguments from a file", field)
	case field == "--" || !strings.HasPrefix(field, "-") || field == "-":
		return "", "", false, fmt.Errorf("%q is not a flag: the linker stops reading flags there", field)
	}
	name = strings.TrimPrefix(strings.TrimPrefix(field, "-"), "-")
	name, value, hasValue = strings.Cut(name, "=")
	if !linkerValueFlags[name] && !linkerBoolFlags[name] {
		return "", "", false, fmt.Errorf("%s is not a flag of the Go linker relayctl knows", field)
	}
	return name, value, hasValue, nil
}

// The Go linker's flags (cmd/link/internal/ld/main.go, Go 1.26): those that
// take a value, which may be the next field, and the boolean ones, which
// never take the next field.
var (
	linkerValueFlags = set("X", "L", "r", "extld", "extldflags", "buildid", "o", "pluginpath", "fipso", "installsuffix",
		"k", "libgcc", "tmpdir", "extar", "capturehostobjs", "B", "I", "debugtramp", "debugtextsize", "strictdups", "R", "T",
		"D", "funcalign", "E", "randlayout", "cpuprofile", "memprofile", "memprofilerate", "benchmark", "benchmarkprofile",
		"H", "linkmode", "buildmode", "importcfg")
	linkerBoolFlags = set("s", "w", "v", "V", "a", "c", "d", "e", "f", "g", "h", "n", "8", "bindnow", "dumpdep", "race",
		"msan", "asan", "aslr", "checklinkname", "debugnosplit", "pruneweakmap", "linkshared", "compressdwarf")
)

func set(words ...string) map[string]bool {
	m := make(map[string]bool, len(words))
	for _, w := range words {
		m[w] = true
	}
	return m
}

// splitQuoted splits flags as cmd/go does (cmd/internal/quoted.Split):
// at spaces, tabs and newlines, with '…' or "…" around a whole field and
// nothing unescaped inside; a quote inside a field is part of it.
func splitQuoted(s string) ([]string, error) {
	var f []string
	for {
		s = strings.TrimLeft(s, " \t\n\r")
		if s == "" {
			return f, nil
		}
		if q := s[0]; q == '"' || q == '\'' {
			end := strings.IndexByte(s[1:], q)
			if end < 0 {
				return nil, fmt.Errorf("an unterminated %c string", q)
			}
			f = append(f, s[1:1+end])
			s = s[2+end:]
			continue
		}
		end := strings.IndexAny(s, " \t\n\r")
		if end < 0 {
			end = len(s)
		}
		f = append(f, s[:end])
		s = s[end:]
	}
}
