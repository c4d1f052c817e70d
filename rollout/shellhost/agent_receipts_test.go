package shellhost

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/relayctl/relayctl/internal/agenttest"

	"github.com/relayctl/relayctl/rollout"
)

// receiptName is a receipt name as a run files it: its run's time first.
func receiptName(second int) string {
	return fmt.Sprintf("20261130T1939%02d.000Z-0000abcd-lab-rcvbuf-fcbb04cc1e2a", second)
}

func filedNames(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// commit files the receipt with the run's journal, record the receipt
// alone (the journal there is not its run's), and each keeps only the
// newest KEEP receipts, removing the oldest with their journals and
// nothing else of the folder.
func TestAgentFilesReceiptsAndKeepsTheNewest(t *testing.T) {
	state := filepath.Join(rootDir(t), "state")
	receipts := filepath.Join(state, "receipts")
	h := lockedAgent(t, state)
	commit := func(kind string, second int) {
		t.Helper()
		o := op(kind, receiptName(second), "applied", "3")
		o.Data = []byte(fmt.Sprintf(`{"run": %d}`, second))
		if _, err := runOps(h, op("begin", "lab-rcvbuf", "sha256:fcbb04cc1e2a"), o); err != nil {
			t.Fatalf("%s %d: %v", kind, second, err)
		}
	}
	commit("commit", 10)
	// An applied window's backups stay beside its receipt (a rollback's).
	if got := filedNames(t, receipts); !slices.Equal(got, []string{receiptName(10) + ".backups", receiptName(10) + ".journal", receiptName(10) + ".json"}) {
		t.Fatalf("after a commit: %q", got)
	}
	os.WriteFile(filepath.Join(receipts, "abandoned-20261130T000000Z.journal"), []byte("x"), 0o600)
	commit("commit", 11)
	commit("commit", 12)
	// A journal left by another run: record files the receipt and leaves it.
	os.WriteFile(filepath.Join(state, "journal"), []byte("another run's journal\n"), 0o600)
	o := op("record", receiptName(13), "refused", "3")
	o.Data = []byte(`{"run": 13}`)
	if _, err := runOps(h, o); err != nil {
		t.Fatal(err)
	}
	if j, err := os.ReadFile(filepath.Join(state, "journal")); err != nil || string(j) != "another run's journal\n" {
		t.Errorf("record touched the journal: %q, %v", j, err)
	}
	want := []string{receiptName(11) + ".backups", receiptName(11) + ".journal", receiptName(11) + ".json",
		receiptName(12) + ".backups", receiptName(12) + ".journal", receiptName(12) + ".json",
		receiptName(13) + ".json", "abandoned-20261130T000000Z.journal"}
	if got := filedNames(t, receipts); !slices.Equal(got, want) {
		t.Errorf("kept:\n%q\nwant the newest 3 receipts with their journals and backups, and nothing else removed:\n%q", got, want)
	}
	if b, _ := os.ReadFile(filepath.Join(receipts, receiptName(13)+".json")); string(b) != `{"run": 13}` {
		t.Errorf("the receipt filed: %q", b)
	}
	for _, bad := range [][]string{{"../x", "applied", "3"}, {"x", "applied", "three"}} {
		o := op("record", bad...)
		o.Data = []byte("{}")
		if _, err := runOps(h, o); err == nil {
			t.Errorf("record %q: no error", bad)
		}
	}
}

// receipts reads the newest N receipts, newest first, without the host
// lock (an apply may hold it), and never through a symlink.
func TestAgentReadsReceiptsWithoutTheLock(t *testing.T) {
	state := filepath.Join(rootDir(t), "state")
	receipts := filepath.Join(state, "receipts")
	os.MkdirAll(receipts, 0o700)
	for s := 10; s < 13; s++ {
		os.WriteFile(filepath.Join(receipts, receiptName(s)+".json"), []byte(fmt.Sprintf("{\"run\": %d}\n", s)), 0o600)
	}
	secret := filepath.Join(rootDir(t), "secret")
	os.WriteFile(secret, []byte("not a receipt"), 0o600)
	os.Symlink(secret, filepath.Join(receipts, receiptName(14)+".json"))
	lockedAgent(t, state) // an apply in progress holds the lock
	h := New("local", localConn{}, state, agenttest.Set(t), nil)
	var files []rollout.HostFile
	err := h.Run(context.Background(), []Op{op("receipts", "2")}, func(_ int, r Result) error {
		var err error
		files, err = rollout.ParseHostFiles(r.Value)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range files {
		got = append(got, f.Name+" "+strings.TrimSpace(string(f.Data)))
	}
	want := []string{receiptName(12) + `.json {"run": 12}`, receiptName(11) + `.json {"run": 11}`}
	if !slices.Equal(got, want) {
		t.Errorf("receipts 2: %q, want %q (the symlink left out)", got, want)
	}
	if h.RoundTrips() != 1 {
		t.Errorf("%d round trips, want 1", h.RoundTrips())
	}
	// No receipts folder at all: none, no error.
	h = New("local", localConn{}, filepath.Join(rootDir(t), "none"), agenttest.Set(t), nil)
	err = h.Run(context.Background(), []Op{op("receipts", "5")}, func(_ int, r Result) error {
		if r.Value != "" {
			t.Errorf("a host without receipts answered %q", r.Value)
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
}

// receipts reads only where root alone could have written, as lock
// checks before it writes: a state folder, a folder above it or a
// receipts folder that another user owns or can write is refused with
// the reason, and nothing in it is read (whoever can write there can swap
// a receipt for a FIFO, which would hang the read, or a symlink to a
// file of root's between the check and the read). Nothing is made.
func TestAgentReadsReceiptsOnlyWhereRootAloneCould(t *testing.T) {
	root := rootDir(t)
	secret := filepath.Join(root, "secret")
	os.WriteFile(secret, []byte("root's alone"), 0o600)
	elsewhere := filepath.Join(root, "elsewhere")
	os.Mkdir(elsewhere, 0o755)
	os.WriteFile(filepath.Join(elsewhere, receiptName(10)+".json"), []byte(`{"run": 10}`), 0o600)
	for _, tt := range []struct {
		name string
		make func(state, receipts string) // after state/receipts/ is made, root's, with one receipt
		want string
	}{
		{"the state folder another user's", func(state, _ string) { os.Chown(state, 65534, 65534) }, "STATE is not owned by root or is writable by its group or others"},
		{"a folder above it open to others", func(state, _ string) { os.Chmod(filepath.Dir(state), 0o777) }, "PARENT is not owned by root or is writable by its group or others"},
		{"receipts/ another user's", func(_, receipts string) { os.Chown(receipts, 65534, 65534) }, "STATE/receipts is not a folder that belongs to root and only root can write"},
		{"receipts/ open to others", func(_, receipts string) { os.Chmod(receipts, 0o777) }, "STATE/receipts is not a folder that belongs to root and only root can write"},
		{"receipts/ a symlink", func(_, receipts string) { os.RemoveAll(receipts); os.Symlink(elsewhere, receipts) }, "STATE/receipts is not a folder that belongs to root and only root can write"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			parent := filepath.Join(rootDir(t), "var")
			state := filepath.Join(parent, "state")
			receipts := filepath.Join(state, "receipts")
			os.MkdirAll(receipts, 0o755)
			os.Chmod(parent, 0o755)
			os.WriteFile(filepath.Join(receipts, receiptName(11)+".json"), []byte(`{"run": 11}`), 0o600)
			os.Symlink(secret, filepath.Join(receipts, receiptName(12)+".json"))
			tt.make(state, receipts)
			var got string
			err := New("local", localConn{}, state, agenttest.Set(t), nil).Run(context.Background(), []Op{op("receipts", "5")}, func(_ int, r Result) error {
				got = r.Value
				return nil
			})
			want := strings.NewReplacer("STATE", state, "PARENT", parent).Replace(tt.want)
			if !errors.Is(err, ErrUnsafeHost) || !strings.Contains(err.Error(), "read receipts: ") || !strings.Contains(err.Error(), want) || got != "" {
				t.Fatalf("got %v and %q read; want ErrUnsafeHost naming %q, and nothing read", err, got, want)
			}
		})
	}
	// A host without a state folder has no receipts, and gets none made.
	none := filepath.Join(root, "none", "state")
	err := New("local", localConn{}, none, agenttest.Set(t), nil).Run(context.Background(), []Op{op("receipts", "5")}, nil)
	if _, serr := os.Lstat(filepath.Join(root, "none")); err != nil || serr == nil {
		t.Errorf("no state folder: %v, and %s made (%v)", err, filepath.Join(root, "none"), serr)
	}
}
