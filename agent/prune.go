package agent

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// pPrune: RELEASES_DIR CURRENT_LINK N, then N words, v:VERSION (a release
// folder) or s:SHA256 (a store entry): each removed, a release folder
// renamed aside first so none is ever half there under its name; never
// the one the current link points at, and never through a symlink. What
// an earlier prune left renamed aside goes too. VAL the count removed.
func pPrune(s *session, r *request) answer {
	rel, current := r.arg(0), r.arg(1)
	if err := safeDir(rel); err != nil {
		return errf("%s", err)
	}
	n := atoi(r.arg(2))
	words, ok := r.argv(n)
	if n < 0 || !ok {
		return errf("short argv")
	}
	// Both sides resolved alike: under a symlinked releases folder the
	// link's target and rel/VERSION are two names for one folder.
	cur, _ := filepath.EvalSymlinks(current)
	resolved, err := filepath.EvalSymlinks(rel)
	if err != nil {
		return errf("cannot resolve %s", rel)
	}
	p := pruner{rel: rel, resolved: resolved, current: cur}
	for _, w := range words {
		p.prune(w)
	}
	p.removeLeftovers()
	if len(p.failed) > 0 {
		return errf("could not remove: %s", strings.Join(p.failed, " "))
	}
	return val(fmt.Sprint(p.removed))
}

// pruner is one prune's way through its words.
type pruner struct {
	rel, resolved, current string
	removed                int
	failed                 []string
}

// pruneWord reads one of prune's words: the path under the releases
// folder it names (VERSION, or .sha256/SHA256), or bad, what to list as
// not removed; neither for a store entry whose name is not a sha256's
// length (nothing of relayctl's is there).
func pruneWord(w string) (target, bad string) {
	switch {
	case strings.HasPrefix(w, "v:") && len(w) > 2 && isAlnum(w[2]):
		v := w[2:]
		if strings.Trim(v, "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz.+-") != "" || strings.Contains(v, "..") {
			return "", v
		}
		return v, ""
	case strings.HasPrefix(w, "s:"):
		h := w[2:]
		if !isHexString(h) {
			return "", h
		}
		if len(h) != 64 {
			return "", ""
		}
		return ".sha256/" + h, ""
	}
	return "", w
}

func isAlnum(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// prune removes what the word w names, if it is there.
func (p *pruner) prune(w string) {
	target, bad := pruneWord(w)
	switch {
	case bad != "":
		p.failed = append(p.failed, bad)
	case strings.HasPrefix(target, ".sha256/"):
		p.removeStored(target)
	case target != "":
		p.removeRelease(target)
	}
}

// removeRelease removes the release folder v: renamed aside, then removed.
func (p *pruner) removeRelease(v string) {
	dir := p.rel + "/" + v
	if p.resolved+"/"+v == p.current || !isDir(dir) {
		return
	}
	aside := p.rel + "/.relayctl-prune-" + v
	if os.Rename(dir, aside) != nil || os.RemoveAll(aside) != nil {
		p.failed = append(p.failed, v)
		return
	}
	p.removed++
}

// removeStored removes a store entry, only from a store folder of root's
// alone (a symlink there would lead the removal elsewhere).
func (p *pruner) removeStored(entry string) {
	h := strings.TrimPrefix(entry, ".sha256/")
	if fi, err := os.Stat(p.rel + "/" + entry); err != nil || !fi.IsDir() {
		return
	}
	if !rootDir(p.rel+"/.sha256") || os.RemoveAll(p.rel+"/"+entry) != nil {
		p.failed = append(p.failed, h)
		return
	}
	p.removed++
}

// removeLeftovers removes the folders an earlier prune renamed aside and
// was stopped before it removed (never the current link's target).
func (p *pruner) removeLeftovers() {
	entries, err := os.ReadDir(p.rel)
	if err != nil {
		return
	}
	for _, e := range entries {
		name := e.Name()
		if !strings.HasPrefix(name, ".relayctl-prune-") || !e.IsDir() || p.resolved+"/"+name == p.current {
			continue
		}
		os.RemoveAll(p.rel + "/" + name) // tried again by the next prune
	}
}
