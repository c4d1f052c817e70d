package rollout

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// agentFunc is one shell function of agent.sh, as the script defines it.
func agentFunc(t *testing.T, name string) string {
	t.Helper()
	start := strings.Index(agentScript, "\n"+name+"() {\n")
	if start < 0 {
		t.Fatalf("agent.sh defines no %s", name)
	}
	body := agentScript[start+1:]
	return body[:strings.Index(body, "\n}\n")+3]
}

// sha256_of hashes a release with openssl when the host has it, and with
// coreutils' sha256sum when it does not or when openssl prints something
// that is not a hash: the same answer on every path.
func TestAgentSha256OfEveryPath(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "release")
	data := []byte(strings.Repeat("relayd ", 300000)) // 2.1 MB: over the 1 MiB line
	if err := os.WriteFile(file, data, 0o644); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	want := hex.EncodeToString(sum[:])

	// A PATH of only the tools each case may use.
	bin := func(name string, tools ...string) string {
		d := filepath.Join(dir, name)
		os.Mkdir(d, 0o755)
		for _, tool := range tools {
			p, err := exec.LookPath(tool)
			if err != nil {
				t.Fatalf("%s: %v", tool, err)
			}
			os.Symlink(p, filepath.Join(d, tool))
		}
		return d
	}
	broken := bin("broken-openssl", "sha256sum")
	os.WriteFile(filepath.Join(broken, "openssl"), []byte("#!/bin/sh\necho 'openssl: not what you think'\n"), 0o755)

	tests := []struct {
		name, path, size string
	}{
		{"openssl", bin("with-openssl", "openssl", "sha256sum"), "2100000"},
		{"no openssl", bin("without-openssl", "sha256sum"), "2100000"},
		{"openssl prints no hash", broken, "2100000"},
		{"small file: sha256sum", bin("small", "sha256sum"), "100"},
		{"size unknown", bin("unknown", "openssl", "sha256sum"), ""},
	}
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Fatal(err)
	}
	script := agentFunc(t, "sha256_of") + `sha256_of "$1" "$2"`
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd := exec.Command(sh, "-c", script, "sh", file, tt.size)
			cmd.Env = []string{"PATH=" + tt.path}
			out, err := cmd.CombinedOutput()
			if err != nil || string(out) != want {
				t.Errorf("sha256_of: %q, %v; want %s", out, err, want)
			}
		})
	}
	cmd := exec.Command(sh, "-c", script, "sh", filepath.Join(dir, "missing"), "")
	cmd.Env = []string{"PATH=" + bin("missing", "openssl", "sha256sum")}
	if out, err := cmd.CombinedOutput(); err == nil || len(out) != 0 {
		t.Errorf("a missing file: %q, %v; want nothing and false", out, err)
	}
}
