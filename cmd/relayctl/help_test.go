package main

import (
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// repoPath is a relative path to a source or document file as help text
// and the README name them (plans/examples/ashburn-rcvbuf.yaml,
// docs/json.md, specs/*.yaml), not a host's (/etc/relay/relayd.env).
var repoPath = regexp.MustCompile(`(?:^|[\s(\x60'"])([a-z][\w-]*/[\w./*-]*\.(?:yaml|md|sh|go|txt))\b`)

// Every repository path an example in --help or the README names exists
// (a glob matches something), so an example can be run as shown.
func TestExamplePathsExist(t *testing.T) {
	root := filepath.Join("..", "..")
	texts := map[string]string{}
	app := newApp(&env{stdin: strings.NewReader(""), stdout: io.Discard, stderr: io.Discard})
	for _, c := range app.Commands {
		texts["relayctl "+c.Name+" --help"] = c.Description
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	texts["README.md"] = string(readme)
	for where, text := range texts {
		for _, m := range repoPath.FindAllStringSubmatch(text, -1) {
			p := m[1]
			if made(p) {
				continue
			}
			matches, err := filepath.Glob(filepath.Join(root, p))
			if err != nil || len(matches) == 0 {
				t.Errorf("%s names %s, which is not in the repository", where, p)
			}
		}
	}
}

// made reports whether p is under a folder a make target writes (make
// demo, make lab, make build), not one the repository holds.
func made(p string) bool {
	for _, dir := range []string{"demo/", "demo-bench/", "lab/", "bin/"} {
		if strings.HasPrefix(p, dir) {
			return true
		}
	}
	return false
}
