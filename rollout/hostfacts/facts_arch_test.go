package hostfacts

import (
	"testing"

	"github.com/relayctl/relayctl/rollout"
)

// The host agent reports the machine (uname's) in a section of its own:
// relayctl keeps a machine name, and nothing else a host might print
// there; observe.sh, which has no such section, leaves it empty.
func TestFactsArch(t *testing.T) {
	q := rollout.Query{Port: 7788}
	for _, tt := range []struct {
		name   string
		frames []byte
		want   string
	}{
		{"x86_64", framesOf(testBoundary, "kernel", "6.18.44", "arch", "x86_64"), "x86_64"},
		{"aarch64", framesOf(testBoundary, "kernel", "6.18.44", "arch", "aarch64"), "aarch64"},
		{"observe.sh: none", framesOf(testBoundary, "kernel", "6.18.44"), ""},
		{"a blank", framesOf(testBoundary, "kernel", "6.18.44", "arch", "x86 64"), ""},
		{"a control character", framesOf(testBoundary, "kernel", "6.18.44", "arch", "x86\x1b[2J"), ""},
		{"a path", framesOf(testBoundary, "kernel", "6.18.44", "arch", "../x86_64"), ""},
		{"too long", framesOf(testBoundary, "kernel", "6.18.44", "arch", "x86_64_x86_64_x86_64_x86_64_x86_64"), ""},
		{"a failed read", []byte(testBoundary + " kernel\n6.18.44\n" + testBoundary + " end 0\n" + testBoundary + " arch\nx86_64\n" + testBoundary + " end 1\n"), ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			frames, err := ParseFrames(tt.frames, testBoundary)
			if err != nil {
				t.Fatal(err)
			}
			f, err := FactsFromFrames(frames, q)
			if err != nil {
				t.Fatal(err)
			}
			if f.Arch != tt.want {
				t.Errorf("got arch %q, want %q", f.Arch, tt.want)
			}
		})
	}
}
