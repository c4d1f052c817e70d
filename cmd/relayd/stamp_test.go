package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
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

// The version check on each kind of build of relayd, built here with go
// build: make build's (the marker), a plain -ldflags "-X main.Version=…"
// (Go's build information records the flags), one with -trimpath (which
// leaves -ldflags out of it) and one with neither. Where a version is
// read, it is the one the binary itself reports with --version.
func TestBuildVersionOfEachBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("builds relayd; skipped under -short")
	}
	dir := t.TempDir()
	for _, tt := range []struct {
		name  string
		flags []string
		want  capability.Stamp
		why   string
	}{
		{"make build", lab.BuildFlags("1.8.0"), capability.Stamp{Version: "1.8.0", From: capability.FromMarker}, ""},
		{"ldflags", []string{"-ldflags", "-X main.Version=1.8.0"}, capability.Stamp{Version: "1.8.0", From: capability.FromBuildInfo}, ""},
		{"ldflags quoted, twice", []string{"-ldflags=-s -X=main.Version=1.7.9 -X 'main.Version=1.8.0-rc.1'"}, capability.Stamp{Version: "1.8.0-rc.1", From: capability.FromBuildInfo}, ""},
		{"ldflags for all", []string{"-ldflags=all=-X main.Version=1.8.0"}, capability.Stamp{Version: "1.8.0", From: capability.FromBuildInfo}, ""},
		{"ldflags with trimpath", []string{"-trimpath", "-ldflags", "-X main.Version=1.8.0"}, capability.Stamp{From: capability.FromNone}, "records no -ldflags (go build -trimpath leaves them out)"},
		{"neither", nil, capability.Stamp{From: capability.FromNone}, "its Go build information records no -ldflags"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			out := filepath.Join(dir, strings.ReplaceAll(tt.name, " ", "-"))
			if err := lab.BuildRelaydWith(context.Background(), out, tt.flags...); err != nil {
				t.Fatal(err)
			}
			data, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			got, err := capability.BuildVersion(data)
			if err != nil {
				t.Fatal(err)
			}
			if got.Version != tt.want.Version || got.From != tt.want.From || !strings.Contains(got.Why, tt.why) {
				t.Errorf("got %+v, want %+v and why %q", got, tt.want, tt.why)
			}
			if got.Version == "" {
				return
			}
			said, err := exec.Command(out, "--version").Output()
			if err != nil || strings.TrimSpace(string(said)) != got.Version {
				t.Errorf("relayd --version says %q (%v), the check read %q", said, err, got.Version)
			}
		})
	}
}
