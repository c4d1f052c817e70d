package capability

import (
	"strings"
	"testing"
)

// -ldflags as go version -m shows them, read as cmd/go splits them and the
// linker reads its flags.
func TestLdflagsVersion(t *testing.T) {
	const main = "github.com/relayctl/relayctl/cmd/relayd"
	tests := []struct {
		name, raw string
		want      string
		found     bool
		err       string
	}{
		{"plain", "-X main.Version=1.8.0", "1.8.0", true, ""},
		{"with -s -w", "-s -w -X main.Version=1.8.0", "1.8.0", true, ""},
		{"-X=", "-X=main.Version=1.8.0", "1.8.0", true, ""},
		{"--X", "--X main.Version=1.8.0", "1.8.0", true, ""},
		{"--X=", "--X=main.Version=1.8.0", "1.8.0", true, ""},
		{"single quotes around the field", "-X 'main.Version=1.8.0 beta'", "1.8.0 beta", true, ""},
		{"double quotes around the field", `-X "main.Version=1.8.0"`, "1.8.0", true, ""},
		{"a quote inside a field is kept", "-X main.Version='1.8.0'", "'1.8.0'", true, ""},
		{"the last -X wins", "-X main.Version=1.8.0 -X main.Version=1.8.1", "1.8.1", true, ""},
		{"with the marker", "-X main.Version=1.8.0 -X main.versionMarker=relayd-version:1.8.0", "1.8.0", true, ""},
		{"an empty value", "-X main.Version=", "", true, ""},
		{"another variable", "-X main.Commit=abc -X github.com/x/y.Version=2", "", false, ""},
		{"a value flag's value is not a flag", `-extldflags "-X main.Version=9" -X main.Version=1.8.0`, "1.8.0", true, ""},
		{"a value flag's value is the next field", "-extldflags -X main.Version=9", "", false, `"main.Version=9" is not a flag`},
		{"-extldflags=", "-extldflags=-static -X main.Version=1.8.0", "1.8.0", true, ""},
		{"a boolean with =", "-s=false -X main.Version=1.8.0", "1.8.0", true, ""},
		{"tabs and newlines split", "-s\t-X\nmain.Version=1.8.0", "1.8.0", true, ""},
		{"pattern all", "all=-X main.Version=1.8.0", "1.8.0", true, ""},
		{"pattern of the main package", main + "=-X main.Version=1.8.0", "1.8.0", true, ""},
		{"another pattern", "std=-X main.Version=1.8.0", "", false, `apply to the packages "std"`},
		{"no flags", "", "", false, ""},
		{"unterminated quote", "-X 'main.Version=1.8.0", "", false, "an unterminated ' string"},
		{"-X without a value", "-s -X", "", false, "-X without its value"},
		{"-X without =", "-X main.Version", "", false, "is not importpath.name=value"},
		{"an unknown flag", "-frobnicate -X main.Version=1.8.0", "", false, "-frobnicate is not a flag of the Go linker"},
		{"a response file", "-s @flags.txt", "", false, "reads the linker's arguments from a file"},
		{"a word that is not a flag", "-s main.Version=1.8.0", "", false, "is not a flag"},
		{"--", "-- -X main.Version=1.8.0", "", false, `"--" is not a flag`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, found, err := LdflagsVersion(tt.raw, main)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("got %q, %v, %v; want an error with %q", got, found, err, tt.err)
				}
				return
			}
			if err != nil || got != tt.want || found != tt.found {
				t.Errorf("got %q, %v, %v; want %q, %v", got, found, err, tt.want, tt.found)
			}
		})
	}
}

// Without Go build information, only the marker says a version. (Builds
// with it are built for real in cmd/relayd's TestBuildVersionOfEachBuild.)
func TestBuildVersionWithoutBuildInfo(t *testing.T) {
	st, err := BuildVersion([]byte("\x7fELF...relayd-version:1.8.0\x00..."))
	if err != nil || st != (Stamp{Version: "1.8.0", From: FromMarker}) {
		t.Errorf("marked: %+v, %v", st, err)
	}
	st, err = BuildVersion([]byte("#!/bin/sh\necho 1.8.0\n"))
	if err != nil || st.From != FromNone || st.Version != "" || !strings.Contains(st.Why, "no version marker and no Go build information") {
		t.Errorf("a script: %+v, %v", st, err)
	}
	if _, err := BuildVersion([]byte(VersionPrefix + "1.8.0\x00" + VersionPrefix + "1.8.1\x00")); err == nil {
		t.Error("two markers that disagree: no error")
	}
}

func FuzzLdflagsVersion(f *testing.F) {
	for _, s := range []string{"-s -w -X main.Version=1.8.0", "all=-X 'main.Version=1 2' -X=main.Version=3", `-extldflags "-static" --X main.Version=4`, "-X 'unterminated"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		v, found, err := LdflagsVersion(raw, "m")
		if err == nil && !found && v != "" {
			t.Fatalf("%q: version %q without an -X of main.Version", raw, v)
		}
		if err == nil && found && !strings.Contains(raw, v) {
			t.Fatalf("%q: version %q is not in the flags", raw, v)
		}
	})
}
