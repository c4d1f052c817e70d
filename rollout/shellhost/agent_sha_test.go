package shellhost

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/relayctl/relayctl/relay/dist"
)

// Each function of the scripts that run as root on a host is defined
// once: a second definition of a name replaces the first for every caller
// (a helper named like an existing one once did, and the tests that take
// a function by its first definition tested the other).
func TestScriptsDefineEachFunctionOnce(t *testing.T) {
	def := regexp.MustCompile(`(?m)^([A-Za-z_][A-Za-z0-9_]*)\(\) *\{`)
	for name, script := range map[string]string{"agent.sh": agentScript, "observe.sh": observeScript, "relay-service.sh": string(dist.ServiceScript)} {
		seen := map[string]bool{}
		for _, m := range def.FindAllStringSubmatch(script, -1) {
			if seen[m[1]] {
				t.Errorf("%s defines %s twice", name, m[1])
			}
			seen[m[1]] = true
		}
		if len(seen) == 0 {
			t.Errorf("%s: no function definitions found: the pattern is stale", name)
		}
	}
}

// agentFunc is one shell function of agent.sh, as the script defines it.
func agentFunc(t *testing.T, name string) string {
	t.Helper()
	start := strings.Index(agentScript, "\n"+name+"() {") // a comment may follow
	if start < 0 {
		t.Fatalf("agent.sh defines no %s", name)
	}
	body := agentScript[start+1:]
	return body[:strings.Index(body, "\n}\n")+3]
}

// toolDir makes dir, a PATH of the named tools only (links to this
// machine's).
func toolDir(t *testing.T, dir string, tools ...string) string {
	t.Helper()
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tool := range tools {
		p, err := exec.LookPath(tool)
		if err != nil {
			t.Fatalf("%s: %v", tool, err)
		}
		os.Symlink(p, filepath.Join(dir, tool))
	}
	return dir
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
	bin := func(name string, tools ...string) string { return toolDir(t, filepath.Join(dir, name), tools...) }
	broken := bin("broken-openssl", "sha256sum")
	os.WriteFile(filepath.Join(broken, "openssl"), []byte("#!/bin/sh\necho 'openssl: not what you think'\n"), 0o755)

	tests := []struct {
		name, path, size string
	}{
		{"openssl", bin("with-openssl", "openssl", "sha256sum"), "2100000"},
		{"no openssl", bin("without-openssl", "sha256sum"), "2100000"},
		{"openssl prints no hash", broken, "2100000"},
		{"small file: sha256sum", bin("small", "sha256sum"), "100"},
		{"said small: sha256sum", bin("said-small", "sha256sum"), "small"},
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

// read_n takes exactly N bytes of stdin, with GNU dd where it has
// count_bytes and head -c elsewhere, and leaves the rest for the next
// request line.
func TestAgentReadNEveryPath(t *testing.T) {
	start := strings.Index(agentScript, "\nif [ \"$(printf abc | dd ")
	if start < 0 {
		t.Fatal("agent.sh defines no read_n probe")
	}
	block := agentScript[start+1:]
	block = block[:strings.Index(block, "\nfi\n")+4]
	dir := t.TempDir()
	log := filepath.Join(dir, "log")
	// A PATH of cat and printf, and of dd and head as given: each logs its
	// name, so the test sees which one read.
	bin := func(name string, tools map[string]string) string {
		d := toolDir(t, filepath.Join(dir, name), "cat", "printf")
		for tool, body := range tools {
			os.WriteFile(filepath.Join(d, tool), []byte("#!/bin/sh\necho "+tool+" >>"+log+"\n"+body+"\n"), 0o755)
		}
		return d
	}
	dd, err := exec.LookPath("dd")
	if err != nil {
		t.Fatal(err)
	}
	head, err := exec.LookPath("head")
	if err != nil {
		t.Fatal(err)
	}
	realDD, realHead := "exec "+dd+` "$@"`, "exec "+head+` "$@"`
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Fatal(err)
	}
	data := strings.Repeat("0123456789abcdef", 12345) + "x" // not a multiple of 64 KiB
	for _, tt := range []struct {
		name, path, uses string
	}{
		{"GNU dd", bin("gnu", map[string]string{"dd": realDD, "head": realHead}), "dd"},
		{"no dd", bin("none", map[string]string{"head": realHead}), "head"},
		{"dd without count_bytes", bin("busybox", map[string]string{"dd": "echo 'dd: unknown flag' >&2; exit 1", "head": realHead}), "head"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			os.Remove(log)
			script := block + `read_n "$1" >"$2"; cat >"$3"`
			out, rest := filepath.Join(dir, tt.name+".out"), filepath.Join(dir, tt.name+".rest")
			cmd := exec.Command(sh, "-c", script, "sh", strconv.Itoa(len(data)), out, rest)
			cmd.Env = []string{"PATH=" + tt.path}
			cmd.Stdin = strings.NewReader(data + "NEXT request\n")
			if b, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("%v: %s", err, b)
			}
			calls, _ := os.ReadFile(log)
			lines := strings.Fields(string(calls))
			if len(lines) == 0 || lines[len(lines)-1] != tt.uses {
				t.Errorf("tools run: %q; want the read done by %s", lines, tt.uses)
			}
			got, _ := os.ReadFile(out)
			left, _ := os.ReadFile(rest)
			if string(got) != data || string(left) != "NEXT request\n" {
				t.Errorf("read %d bytes (want %d), left %q", len(got), len(data), left)
			}
		})
	}
}
