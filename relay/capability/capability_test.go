package capability

import (
	"slices"
	"strings"
	"testing"
)

func TestCapabilities(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    []string
		wantErr string
	}{
		{"this build", "\x00\x01junk" + Marker + "more junk", []string{Drain, FDStore, Handoff, Ready}, ""},
		{"none", "\x7fELF an older relayd", nil, ""},
		{"prefix alone, then other strings", Prefix + "GET /status\x00", nil, ""},
		{"no newline within 256 bytes", Prefix + "handoff=unix/1" + strings.Repeat(" ", 300) + "\n", nil, ""},
		{"bad token", Prefix + "handoff=unix/1 rm -rf\n", nil, ""},
		{"twice, the same", Marker + "x" + Marker, []string{Drain, FDStore, Handoff, Ready}, ""},
		{"the prefix constant beside the marker", Prefix + Marker, []string{Drain, FDStore, Handoff, Ready}, ""},
		{"two that disagree", Marker + Prefix + "handoff=unix/2\n", nil, "two markers disagree"},
		{"a future version", Prefix + "handoff=unix/2 drain=http/1\n", []string{"drain=http/1", "handoff=unix/2"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Capabilities([]byte(tt.in))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got %v, %v; want an error containing %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil || !slices.Equal(got, tt.want) {
				t.Errorf("got %q, %v; want %q", got, err, tt.want)
			}
		})
	}
	if caps, _ := Capabilities([]byte(Marker)); !Has(caps, Handoff) || Has(caps, "handoff=unix/2") {
		t.Errorf("Has: %v", caps)
	}
}

func FuzzCapabilities(f *testing.F) {
	f.Add([]byte(Marker))
	f.Add([]byte(Prefix + "a=b\n" + Prefix + "a=c\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		caps, err := Capabilities(b)
		if err != nil {
			return
		}
		for _, c := range caps {
			if !token.MatchString(c) {
				t.Fatalf("returned %q, not a well-formed capability", c)
			}
		}
	})
}
