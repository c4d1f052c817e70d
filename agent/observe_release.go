package agent

import (
	"os"
	"sort"
	"strings"
	"time"

	"github.com/relayctl/relayctl/uplink"
)

// releaseFacts, for a release relayctl ships: where the current link
// points, the releases installed, the release store (newest first), and
// what the host can unpack an upload with.
func (o *observer) releaseFacts() {
	if isSymlink(o.q.current) {
		o.readlink("current-link", o.q.current)
	} else {
		o.f.absent("current-link")
	}
	if isDirFollowed(o.q.releases) {
		names, _ := listNames(o.q.releases)
		o.f.value("releases", 0, strings.Join(names, "\n"))
	} else {
		o.f.absent("releases")
	}
	if store := o.q.releases + "/.sha256"; isDirFollowed(store) {
		names, err := newestFirst(store)
		o.f.section("store", lsStatus(err), linesOf(names))
	}
	o.decoders()
}

// listNames is ls -1: a folder's entries by name, dot names left out (as
// the shell's glob lists them too).
func listNames(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	var out []string
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), ".") {
			out = append(out, e.Name())
		}
	}
	return out, err
}

// newestFirst is ls -1t: a folder's entries (no dot names), the most
// recently modified first, by name where the times are equal.
func newestFirst(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	type entry struct {
		name string
		t    time.Time
	}
	var es []entry
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			continue
		}
		if fi, err := os.Lstat(dir + "/" + e.Name()); err == nil {
			es = append(es, entry{e.Name(), fi.ModTime()})
		}
	}
	sort.SliceStable(es, func(i, j int) bool { return es[i].t.After(es[j].t) })
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.name
	}
	return out, nil
}

// linesOf is names one a line, as ls prints them.
func linesOf(names []string) []byte {
	var b strings.Builder
	for _, n := range names {
		b.WriteString(n + "\n")
	}
	return []byte(b.String())
}

// lsStatus is ls's exit status for a folder it could or could not read.
func lsStatus(err error) int {
	if err != nil {
		return 2
	}
	return 0
}

// decodes are the packed forms of an upload the agent decodes itself
// (packed.go), wherever it runs: what it reports, rather than the host's
// gzip and zstd programs, which observe.sh reported and it does not use.
var decodes = []string{uplink.Gzip, uplink.Zstd, uplink.ZstdPatch}

// decoders frames what the host can unpack an upload with.
func (o *observer) decoders() { o.f.value("decoders", 0, strings.Join(decodes, " ")) }
