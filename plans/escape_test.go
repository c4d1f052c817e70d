package plans

import (
	"strings"
	"testing"
)

func TestEscapes(t *testing.T) {
	tests := []struct {
		name, in, want string
		f              func(string) string
	}{
		{"ansi", "a\x1b[2Jb", `a\x1b[2Jb`, Visible},
		{"newline", "a\nb", "a⏎b", Visible},
		{"bidi", "a\u202eb", `a\u202eb`, Visible},
		{"md text", "**x** | `y` [l](u) <b>", `\*\*x\*\* \| \` + "`" + `y\` + "`" + ` \[l\](u) \<b\>`, MDText},
		{"md code", "a`b", "``a`b``", MDCode},
		{"md code edge", "`a", "`` `a ``", MDCode},
		{"md code newline", "a\n## b", "`a⏎## b`", MDCode},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.f(tt.in); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
	if got := Argv([]string{"/bin/sh", "-c", "reboot now"}); got != `["/bin/sh" "-c" "reboot now"]` {
		t.Errorf("argv: got %s", got)
	}
	if got := MDCell(MDCode("a|b")); got != "`a\\|b`" {
		t.Errorf("cell: got %s", got)
	}
}

// Strings a host controls reach the review escaped: they cannot end the
// sysctl table, start a heading, or hide a step.
func TestReviewEscapesHostStrings(t *testing.T) {
	f := incidentFacts()
	f.Release.CurrentRaw = "releases/x` | net.core.rmem_max | `1` | ## Steps"
	f.Release.Current = ""
	f.Kernel = "6.18 | **fine** |"
	f.Address = "10.0.0.4:22 <img src=x>"
	p, err := Make(Input{Spec: incidentSpec(t, nil), Facts: []*Facts{f}, Artifact: testArtifact, Steps: testSteps})
	if err != nil {
		t.Fatal(err)
	}
	md := string(p.Markdown("x.plan"))
	for _, bad := range []string{"\n## Steps\n\n## ", " <img", "| net.core.rmem_max | `1` |"} {
		if strings.Contains(md, bad) {
			t.Errorf("the review holds host text unescaped: %q\n%s", bad, md)
		}
	}
	if !strings.Contains(md, "Kernel `6.18 | **fine** |`") {
		t.Errorf("the kernel release is not in a code span:\n%s", md)
	}
	rows := 0
	for _, l := range strings.Split(md, "\n") {
		if strings.HasPrefix(l, "| `net.core.rmem_max` |") {
			rows++
			if n := strings.Count(strings.ReplaceAll(l, `\|`, ""), "|"); n != 5 {
				t.Errorf("the sysctl row has %d cell borders, want 5: %s", n, l)
			}
		}
	}
	if rows != 1 {
		t.Errorf("got %d sysctl rows, want 1:\n%s", rows, md)
	}
}
