package handoff

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A handoff socket under a folder another user can write is refused, even
// when its own folder is safe: that user could rename the safe folder and
// put one of their own, or a symlink, in its place between relayd's check
// and its bind and chmod. A sticky folder (as /tmp) is fine: nobody renames
// what is not theirs there.
func TestHandoffFolderAboveMustBeSafe(t *testing.T) {
	base := t.TempDir()
	mkdir := func(p string, mode os.FileMode) string {
		t.Helper()
		if err := os.MkdirAll(p, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	open := mkdir(filepath.Join(base, "open"), 0o777)
	sticky := mkdir(filepath.Join(base, "sticky"), 0o777|os.ModeSticky)
	link := filepath.Join(base, "link")
	if err := os.Symlink(open, link); err != nil {
		t.Fatal(err)
	}
	tests := []struct{ name, path, want string }{
		{"open folder above", filepath.Join(open, "run", "h.sock"), open + " above it is group- or world-writable (mode 0777) and not sticky"},
		{"open folder above, through a symlink", filepath.Join(link, "run", "h.sock"), open + " above it is group- or world-writable (mode 0777) and not sticky"},
		{"open folder two above", filepath.Join(open, "a", "run", "h.sock"), open + " above it is group- or world-writable"},
		{"sticky folder above", filepath.Join(sticky, "run", "h.sock"), ""},
	}
	if os.Geteuid() == 0 {
		other := mkdir(filepath.Join(base, "other"), 0o755)
		if err := os.Chown(other, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		tests = append(tests, struct{ name, path, want string }{"folder above of another user", filepath.Join(other, "run", "h.sock"),
			other + " above it is owned by uid 65534, not by root or uid 0 that relayd runs as"})
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.want != "" {
				// The socket's own folder is safe: only what is above it is not.
				mkdir(filepath.Dir(tt.path), 0o700)
			}
			l, err := Listen(tt.path, log)
			if err == nil {
				l.Close()
			}
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("Listen: %v, want it to listen", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("Listen: %v, want %q", err, tt.want)
			}
			if _, err := Dial(tt.path); tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
				t.Errorf("Dial: %v, want %q", err, tt.want)
			}
		})
	}
}
