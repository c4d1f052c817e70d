package config

import (
	"bytes"
	"strings"
)

// Setting is one KEY=VALUE to write with Edit.
type Setting struct {
	Key, Value string
}

// Edit sets keys in an environment file and keeps every other line as it
// is (comments, keys relayctl does not manage, their order), so the change
// a review shows is only what relayctl means to change. A key already
// assigned is rewritten where its last assignment is; one not yet there is
// appended. Values are written bare: relayctl's values need no quoting.
func Edit(content []byte, set []Setting) []byte {
	lines := strings.SplitAfter(string(content), "\n")
	if n := len(lines); n > 0 && lines[n-1] == "" {
		lines = lines[:n-1]
	}
	last := map[string]int{}
	for i, l := range lines {
		if name, ok := assignment(l); ok {
			last[name] = i
		}
	}
	var appended []string
	for _, s := range set {
		line := s.Key + "=" + s.Value + "\n"
		if i, ok := last[s.Key]; ok {
			lines[i] = line
		} else {
			appended = append(appended, line)
		}
	}
	var b bytes.Buffer
	for _, l := range lines {
		b.WriteString(l)
	}
	if len(appended) > 0 && b.Len() > 0 && !bytes.HasSuffix(b.Bytes(), []byte("\n")) {
		b.WriteByte('\n')
	}
	for _, l := range appended {
		b.WriteString(l)
	}
	return b.Bytes()
}

// assignment returns the key a KEY=VALUE line sets.
func assignment(line string) (string, bool) {
	t := strings.TrimSpace(line)
	if t == "" || strings.HasPrefix(t, "#") {
		return "", false
	}
	name, _, ok := strings.Cut(t, "=")
	name = strings.TrimSpace(strings.TrimPrefix(name, "export "))
	if !ok || name == "" {
		return "", false
	}
	return name, true
}

// Assignments lists the KEY=VALUE lines of an environment file in order,
// unquoted as Parse reads them, with their 1-based line numbers. Lines
// that are not assignments are left out.
func Assignments(content []byte) []Assignment {
	var out []Assignment
	for i, l := range strings.Split(string(content), "\n") {
		name, ok := assignment(l)
		if !ok {
			continue
		}
		_, v, _ := strings.Cut(strings.TrimSpace(l), "=")
		out = append(out, Assignment{Key: name, Value: unquote(strings.TrimSpace(v)), Line: i + 1})
	}
	return out
}

// Assignment is one KEY=VALUE line of an environment file.
type Assignment struct {
	Key, Value string
	Line       int
}
