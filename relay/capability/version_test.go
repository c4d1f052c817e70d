package capability

import (
	"strings"
	"testing"
)

func TestVersion(t *testing.T) {
	tests := []struct {
		name, in, want, wantErr string
	}{
		{"stamped", "\x7fELF junk" + VersionPrefix + "1.8.0\x00more", "1.8.0", ""},
		{"a pre-release", VersionPrefix + "1.8.0-rc.1\x00", "1.8.0-rc.1", ""},
		{"none", "\x7fELF an older relayd", "", ""},
		{"the prefix constant, then other strings", VersionPrefix + "GET /status", "", ""},
		{"the prefix constant beside the stamp", VersionPrefix + VersionPrefix + "1.8.0\x00", "1.8.0", ""},
		{"no terminator within 64 bytes", VersionPrefix + strings.Repeat("1", 70) + "\x00", "", ""},
		{"not a version", VersionPrefix + "1.8.0; rm -rf /\x00", "", ""},
		{"empty", VersionPrefix + "\x00", "", ""},
		{"twice, the same", VersionPrefix + "1.8.0\x00x" + VersionPrefix + "1.8.0\x00", "1.8.0", ""},
		{"two that disagree", VersionPrefix + "1.8.0\x00" + VersionPrefix + "1.8.1\x00", "", "two markers disagree"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Version([]byte(tt.in))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got %q, %v; want an error containing %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("got %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

func FuzzVersion(f *testing.F) {
	f.Add([]byte(VersionPrefix + "1.8.0\x00"))
	f.Add([]byte(VersionPrefix + "1\x00" + VersionPrefix + "2\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := Version(b)
		if err == nil && v != "" && !versionToken.MatchString(v) {
			t.Fatalf("returned %q, not a version token", v)
		}
	})
}
