package agent

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/relayctl/relayctl/uplink"
)

// maxAgent bounds an agent binary received: more is not relayctl's agent.
const maxAgent = 64 << 20

// installMain puts a newer agent in place beside this one: its bytes come
// on stdin as a zstd patch from this agent's own (which the bootstrap
// checked before it ran this), are decoded, checked against want and
// renamed into STATE/agent/want. It prints INSTALLED or FAILED why.
func installMain(state, want, size, enc string, stdin io.Reader, stdout, stderr io.Writer) int {
	n := atoi(size)
	fail := func(why string) int {
		fmt.Fprintln(stdout, "FAILED "+clean(why))
		return 1
	}
	if len(want) != 64 || !isHexString(want) || n < 0 || n > maxAgent || enc != uplink.ZstdPatch {
		io.Copy(io.Discard, io.LimitReader(stdin, int64(max(n, 0))))
		return fail("bad install request")
	}
	packed := make([]byte, n)
	if _, err := io.ReadFull(stdin, packed); err != nil {
		return fail("short read: " + err.Error())
	}
	self, err := os.Executable()
	if err != nil {
		return fail(err.Error())
	}
	base, err := os.ReadFile(self)
	if err != nil {
		return fail(err.Error())
	}
	b, err := uplink.Decode(enc, packed, base, maxAgent)
	if err != nil {
		return fail("the patch does not decode: " + err.Error())
	}
	if got := sha256Hex(b); got != want {
		return fail("the agent received hashes to " + got + ", not " + want)
	}
	dir := filepath.Join(state, "agent")
	t := filepath.Join(dir, ".new."+want[:12])
	if err := writeNew(t, b, 0o700); err != nil {
		return fail(errText(err))
	}
	if err := os.Rename(t, filepath.Join(dir, want)); err != nil {
		os.Remove(t)
		return fail(errText(err))
	}
	fmt.Fprintln(stdout, "INSTALLED")
	return 0
}

// pruneAgents keeps, beside this agent, the newest other one (the base of
// the next patch when relayctl goes back a version) and removes the rest.
func pruneAgents(state string) {
	self, err := os.Executable()
	if err != nil {
		return
	}
	dir := filepath.Join(state, "agent")
	if filepath.Dir(self) != dir {
		return // not run from the state folder (a test): nothing of ours to prune
	}
	entries, _ := os.ReadDir(dir)
	type kept struct {
		name string
		at   time.Time
	}
	var others []kept
	for _, e := range entries {
		if len(e.Name()) != 64 || !isHexString(e.Name()) || e.Name() == filepath.Base(self) {
			continue
		}
		if fi, err := e.Info(); err == nil && fi.Mode().IsRegular() {
			others = append(others, kept{e.Name(), fi.ModTime()})
		}
	}
	sort.Slice(others, func(i, j int) bool { return others[i].at.After(others[j].at) })
	for i := 1; i < len(others); i++ {
		os.Remove(filepath.Join(dir, others[i].name))
	}
}
