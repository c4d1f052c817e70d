package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/relayctl/relayctl/internal/lab"
	"github.com/relayctl/relayctl/relay/capability"
)

// A release build carries its version where relayctl reads it from the
// bytes (the linker ends a stamped string with a NUL, which
// capability.Version relies on), and --version says the same.
func TestVersionMarkerInRelease(t *testing.T) {
	if testing.Short() {
		t.Skip("builds relayd; skipped under -short")
	}
	out := filepath.Join(t.TempDir(), "relayd")
	if err := lab.BuildRelaydTo(context.Background(), "1.8.1-rc.2", out); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := capability.Version(data); err != nil || v != "1.8.1-rc.2" {
		t.Errorf("capability.Version of a release built as 1.8.1-rc.2: %q, %v", v, err)
	}
}

// Two stamps that disagree: relayd refuses to start, so no relay reports
// a version other than the one its planner checked.
func TestStampsDisagree(t *testing.T) {
	defer func(v, m string) { Version, versionMarker = v, m }(Version, versionMarker)
	for _, tt := range []struct {
		version, marker string
		code            int
	}{
		{"1.8.0", "relayd-version:1.8.0", 0},
		{"1.8.0", "", 0},
		{"1.8.0", "relayd-version:1.8.1", 2},
		{"1.8.0", "1.8.0", 2},
	} {
		Version, versionMarker = tt.version, tt.marker
		var stdout, stderr bytes.Buffer
		code := run([]string{"relayd", "--version"}, nil, &stdout, &stderr, nil)
		if code != tt.code {
			t.Errorf("Version %q, marker %q: exit %d, want %d (%s)", tt.version, tt.marker, code, tt.code, stderr.String())
		}
		if tt.code == 2 && !strings.Contains(stderr.String(), "stamp both with one version") {
			t.Errorf("Version %q, marker %q: stderr %q", tt.version, tt.marker, stderr.String())
		}
	}
}
