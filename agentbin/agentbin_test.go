package agentbin

import (
	"bytes"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// The agent relayctl embeds is the agent in this tree, built as make
// agent builds it: a stale bin/ (the source changed, make agent not run)
// would ship hosts another agent than the one the tests hold. Building it
// again gives the same bytes: the build is reproducible, so a reviewer
// can check the sha256s a relayctl ships.
func TestEmbeddedAgentIsTheSource(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the agent for every machine: not a unit test")
	}
	set, err := Embedded()
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range set {
		out := filepath.Join(t.TempDir(), FileName(b.Arch))
		c := exec.Command("go", "build", "-trimpath", "-buildvcs=false", "-ldflags", "-s -w", "-o", out, "github.com/relayctl/relayctl/cmd/relayctl-agent")
		c.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+b.Arch)
		if msg, err := c.CombinedOutput(); err != nil {
			t.Fatalf("build %s: %v\n%s", b.Arch, err, msg)
		}
		fresh, _ := os.ReadFile(out)
		if !bytes.Equal(fresh, b.Bytes) {
			t.Errorf("the embedded agent for %s (sha256 %s) is not the source's build: run make agent", b.Arch, b.SHA256)
		}
	}
}

// Each build is a static Linux executable for its machine.
func TestEmbeddedAgentsAreStaticForTheirMachine(t *testing.T) {
	if testing.Short() {
		t.Skip("reads what make agent built: not a unit test")
	}
	set, err := Embedded()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}
	for _, b := range set {
		f, err := elf.NewFile(bytes.NewReader(b.Bytes))
		if err != nil {
			t.Fatalf("%s: %v", b.Arch, err)
		}
		if f.Machine != want[b.Arch] || f.Type != elf.ET_EXEC {
			t.Errorf("%s: machine %v, type %v; want %v, a static executable", b.Arch, f.Machine, f.Type, want[b.Arch])
		}
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				t.Errorf("%s: it asks for a dynamic loader", b.Arch)
			}
		}
		if b.Machine == "" {
			t.Errorf("%s: no machine name", b.Arch)
		}
	}
}
