package plans

import (
	"strings"
	"testing"
)

// A YAML syntax error is reported on the line to fix, naming a tab or an
// indentation mistake with the fix (yaml.v3 alone gave the line where the
// enclosing block starts, counted from 0).
func TestYAMLSyntaxErrors(t *testing.T) {
	tests := []struct {
		name, spec string
		want       string
	}{
		{"tab", "name: x\nrelay:\n  port: 1\n\tso_rcvbuf: 2\n",
			"bad.yaml:4: not valid YAML: a tab in the indentation (column 1); YAML indents with spaces only: replace the tab with spaces"},
		{"tab after spaces", "name: x\nrelay:\n  port: 1\n  \tso_rcvbuf: 2\n",
			"bad.yaml:4: not valid YAML: a tab in the indentation (column 3)"},
		{"a key left of its neighbours", "name: x\nrelay:\n  port: 1\nso_rcvbuf: 2\n  release:\n    version: 1.8.0\n",
			`bad.yaml:4: not valid YAML: "so_rcvbuf: 2" is at column 1, left of the lines around it (lines 3 and 5 are at column 3): indent it to column 3, with spaces (yaml: mapping values are not allowed in this context)`},
		{"a block left of its neighbours", "name: x\nrelay:\n  port: 1\nrelease:\n    version: 1.8.0\n    artifact: relayd\n  service:\n    manager: systemd\n",
			`bad.yaml:4: not valid YAML: "release:" is at column 1, left of the line above it (column 3), so the keys below it end up in the wrong block and line 7 ("service:", column 3) lines up with none: indent line 4 to column 3, with spaces`},
		{"indented under a value", "name: x\nrelay:\n  port: 1\n   so_rcvbuf: 2\n",
			`bad.yaml:4: not valid YAML: "so_rcvbuf: 2" is indented under "port: 1" (line 3), which holds a value and cannot hold keys: line it up with the keys above it, with spaces (yaml: mapping values are not allowed in this context)`},
		{"a column of no block", "name: x\nrelay:\n    port: 1\n  so_rcvbuf: 2\n",
			`bad.yaml:4: not valid YAML: "so_rcvbuf: 2" is at column 3, which lines up with no key above it (they are at columns 1, 5): keys of one block start in one column, with spaces`},
		{"a block's first key one column too far", "name: x\nrelay:\n  port: 1\n  release:\n     version: 1.8.0\n    artifact: relayd\n",
			`bad.yaml:5: not valid YAML: "version: 1.8.0" is at column 6, right of the key below it (line 6, "artifact: relayd", column 5); both belong to "release:" (line 4): indent line 5 to column 5, with spaces (yaml: did not find expected key)`},
		{"a flow list over two lines before the mistake", "name: x\nhosts: [a,\n  b]\nrelay:\n  port: 1\n   so_rcvbuf: 2\n",
			`bad.yaml:6: not valid YAML: "so_rcvbuf: 2" is indented under "port: 1" (line 5)`},
		{"a block scalar before the mistake", "name: x\nnote: |\n  free text\n      indented as it likes\nrelay:\n  port: 1\n   so_rcvbuf: 2\n",
			`bad.yaml:7: not valid YAML: "so_rcvbuf: 2" is indented under "port: 1" (line 6)`},
		{"comments and blank lines", "name: x\n\n# the relay\nrelay:\n  port: 1   # udp\n\n   # nothing\n   so_rcvbuf: 2\n",
			`bad.yaml:8: not valid YAML: "so_rcvbuf: 2" is indented under "port: 1" (line 5)`},
		{"an unclosed quote", "name: \"x\nhosts: [a]\n", "bad.yaml:1: not valid YAML: found unexpected end of stream"},
		{"not a mapping key", "name: x\n: y\n", "bad.yaml:2: not valid YAML: did not find expected key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, errs := ParseSpecAll("bad.yaml", []byte(tt.spec))
			if len(errs) != 1 {
				t.Fatalf("got %d errors %v, want one", len(errs), errs)
			}
			if got := errs[0].Error(); !strings.HasPrefix(got, tt.want) {
				t.Errorf("got\n  %s\nwant it to start\n  %s", got, tt.want)
			}
		})
	}
}

// Whatever the bytes, a YAML syntax error's line is one of the spec's lines, and
// explaining it never panics.
func FuzzYAMLSyntaxError(f *testing.F) {
	for _, s := range []string{
		"name: x\nrelay:\n  port: 1\n\tso_rcvbuf: 2\n",
		"name: x\nrelay:\n  port: 1\nrelease:\n    version: 1.8.0\n  service:\n",
		"name: x\nhosts: [a,\n  b]\nrelay:\n  port: 1\n   so_rcvbuf: 2\n",
		"a: |\n  x\n b: c\n",
		"- a\n -b: c\n\t- d\n",
		"name: \"x\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		_, errs := ParseSpecAll("f.yaml", data)
		lines := strings.Count(strings.ReplaceAll(string(data), "\r\n", "\n"), "\n") + strings.Count(strings.ReplaceAll(string(data), "\r\n", "\n"), "\r") + 1
		for _, e := range errs {
			if !strings.HasPrefix(e.Msg, "not valid YAML") {
				continue // the spec parser's own, on a node yaml.v3 placed
			}
			if e.Line < 0 || e.Line > lines {
				t.Fatalf("error on line %d of a %d-line spec: %v", e.Line, lines, e)
			}
		}
	})
}
