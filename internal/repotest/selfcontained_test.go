package repotest

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// outsideReferences are what someone who cloned the repository cannot
// follow: an issue tracker's numbers and the team's own notes. The
// patterns are built from pieces so that this file does not match itself.
var outsideReferences = regexp.MustCompile(`(?i)\b(issue|ticket)s? #?[0-9]+\b|\bshared/` + `background\b|\bDESIGN` + `\.md\b|\.\./` + `shared\b`)

// TestNothingPointsOutsideTheRepository holds the code, scripts and docs
// to what a clone holds: the reasons are written here, not cited by number.
func TestNothingPointsOutsideTheRepository(t *testing.T) {
	root := filepath.Join("..", "..")
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			// Not the repository's own text: git's, the lab's and the
			// build's output, third-party modules.
			switch rel := filepath.ToSlash(strings.TrimPrefix(path, "../../")); {
			case name == ".git", name == "node_modules", rel == "lab", rel == "bin", rel == "vendor":
				return filepath.SkipDir
			}
			return nil
		}
		switch filepath.Ext(name) {
		case ".go", ".md", ".sh", ".yaml", ".yml", ".txtar", ".service", ".txt":
		default:
			if name != "Makefile" && !strings.HasPrefix(filepath.ToSlash(path), "../../.ci/") {
				return nil
			}
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(b), "\n") {
			if m := outsideReferences.FindString(line); m != "" {
				t.Errorf("%s:%d: %q points outside the repository: say the reason itself", filepath.ToSlash(strings.TrimPrefix(path, "../../")), i+1, m)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
