package shellhost

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/relayctl/relayctl/relay/capability"
)

func sumOf(s string) string {
	b := sha256.Sum256([]byte(s))
	return hex.EncodeToString(b[:])
}

// release-sum describes the release a window switches away from, for
// the receipt: its program's sha256 and its capabilities marker, read on
// the host; nothing (and no failure) for a folder that holds none.
func TestAgentReleaseSum(t *testing.T) {
	root := rootDir(t)
	h := lockedAgent(t, filepath.Join(root, "state"))
	dir := filepath.Join(root, "1.7.0")
	os.MkdirAll(dir, 0o755)
	body := "\x7fELF...." + capability.Marker + "...."
	os.WriteFile(filepath.Join(dir, "relayd"), []byte(body), 0o755)
	res, err := runOps(h, op("release-sum", dir, "relayd", "-"), op("release-sum", filepath.Join(root, "none"), "relayd", "-"))
	if err != nil {
		t.Fatal(err)
	}
	want := sumOf(body) + " - " + strings.ReplaceAll(strings.TrimPrefix(strings.TrimSpace(capability.Marker), capability.Prefix), " ", ",")
	if res[0].Value != want || res[1].Value != "" {
		t.Errorf("release-sum: got %q and %q, want %q and nothing", res[0].Value, res[1].Value, want)
	}
}

// restore-kept puts a kept backup beside its file only when it is the
// bytes the receipt records: a backup changed since, or one that is a
// symlink, writes nothing.
func TestAgentRestoreKeptChecksTheBackup(t *testing.T) {
	root := rootDir(t)
	h := lockedAgent(t, filepath.Join(root, "state"))
	kept := filepath.Join(root, "state", "receipts", "r.backups")
	os.MkdirAll(kept, 0o700)
	secret := "API_TOKEN=s3cret\n"
	os.WriteFile(filepath.Join(kept, "backup-relay-config"), []byte(secret), 0o600)
	etc := filepath.Join(root, "etc")
	os.MkdirAll(etc, 0o755)
	dest := filepath.Join(etc, "relayd.env.relayctl-new")

	if _, err := runOps(h, op("restore-kept", filepath.Join(kept, "backup-relay-config"), dest, sumOf("something else"))); err == nil || !strings.Contains(err.Error(), "its receipt says") {
		t.Fatalf("restore-kept of a backup that is not the receipt's bytes: got %v", err)
	}
	if _, err := os.Stat(dest); !os.IsNotExist(err) {
		t.Fatalf("a refused restore left %s", dest)
	}
	os.Symlink("/etc/shadow", filepath.Join(kept, "backup-sysctl-drop-in"))
	if _, err := runOps(h, op("restore-kept", filepath.Join(kept, "backup-sysctl-drop-in"), dest, sumOf(secret))); err == nil || !strings.Contains(err.Error(), "no longer keeps that backup") {
		t.Fatalf("restore-kept of a symlink: got %v", err)
	}
	if _, err := runOps(h, op("restore-kept", filepath.Join(kept, "backup-relay-config"), dest, sumOf(secret))); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(dest)
	if b, _ := os.ReadFile(dest); err != nil || string(b) != secret || st.Mode().Perm() != 0o600 {
		t.Errorf("restored: %q, mode %v, %v; want the backup's bytes and mode 0600", b, st.Mode(), err)
	}
}

// An applied window's backups stay beside its receipt, in a folder only
// root can read; a rolled-back one's do not; the newest five stay.
func TestAgentCommitKeepsAnAppliedWindowsBackups(t *testing.T) {
	root := rootDir(t)
	state := filepath.Join(root, "state")
	receipts := filepath.Join(state, "receipts")
	for i, out := range []string{"applied", "rolled-back", "applied", "applied", "applied", "applied", "applied"} {
		h := lockedAgent(t, state)
		name := "2026010" + string(rune('1'+i)) + "T000000Z-p-abc"
		c := op("commit", name, out, "100")
		c.Data = []byte("{}")
		if _, err := runOps(h, op("begin", "p", "sha256:00"), op("backup", filepath.Join(root, "nothing"), "backup-relay-config"), c, op("unlock")); err != nil {
			t.Fatal(err)
		}
		h.Close()
		st, err := os.Stat(filepath.Join(receipts, name+".backups"))
		switch {
		case out == "applied" && (err != nil || st.Mode().Perm() != 0o700):
			t.Errorf("%s: backups %v, %v; want a folder only root can read", name, st, err)
		case out != "applied" && err == nil:
			t.Errorf("%s: a %s window's backups were kept", name, out)
		}
	}
	kept, _ := filepath.Glob(filepath.Join(receipts, "*.backups"))
	if len(kept) != 5 || !strings.Contains(kept[0], "20260103T") {
		t.Errorf("backups kept: %v; want the newest five", kept)
	}
	if _, err := os.Stat(filepath.Join(state, "stage")); !os.IsNotExist(err) {
		t.Errorf("the stage folder is left: %v", err)
	}
}

// observe with UndoOf reads the newest receipt of that plan that records
// its window (not another plan's, nor one without a record), with the
// backups kept beside it; and never from a folder others can write, where
// anyone could have put a record of what a rollback would restore as root.
func TestObserveReadsTheUndoOfAPlan(t *testing.T) {
	r := startFakeRelay(t)
	receipts := filepath.Join(r.dir, "state", "receipts")
	os.MkdirAll(receipts, 0o755)
	os.Chmod(receipts, 0o755)
	sum := strings.Repeat("ab", 32)
	write := func(name, body string) { os.WriteFile(filepath.Join(receipts, name+".json"), []byte(body), 0o644) }
	undo := func(rb int) string {
		return `{"plan": "p", "plan_checksum": "sha256:` + sum + `", "outcome": "applied", "undo": {"receipt": "x", "relay_running": true, "rb": ` + strings.Repeat("1", rb) + `, "so_rcvbuf": 0}}`
	}
	write("20260101T000000Z-p-abababababab", undo(3))
	write("20260102T000000Z-p-abababababab", undo(4))
	write("20260103T000000Z-p-abababababab", `{"plan": "p", "plan_checksum": "sha256:`+sum+`", "outcome": "rolled back"}`)
	write("20260104T000000Z-q-cdcdcdcdcdcd", `{"plan": "q", "plan_checksum": "sha256:`+strings.Repeat("cd", 32)+`", "undo": {"receipt": "y"}}`)
	os.MkdirAll(filepath.Join(receipts, "20260102T000000Z-p-abababababab.backups"), 0o700)
	os.WriteFile(filepath.Join(receipts, "20260102T000000Z-p-abababababab.backups", "backup-relay-config"), []byte("x"), 0o600)
	q := r.query("")
	q.UndoOf = "sha256:" + sum
	f, err := observeWith(t, localRunner{}, "here", q)
	if err != nil {
		t.Fatal(err)
	}
	if u := f.Undo; u == nil || u.Receipt != "20260102T000000Z-p-abababababab" || u.Undo.RB != 1111 || len(u.Backups) != 1 || u.Backups[0] != "backup-relay-config" {
		t.Fatalf("undo: %+v; want the newest receipt of the plan with a record, and its backup", u)
	}
	os.Chmod(receipts, 0o777)
	if f, err := observeWith(t, localRunner{}, "here", q); err != nil || f.Undo != nil {
		t.Errorf("undo from a folder others can write: %+v, %v; want none read", f.Undo, err)
	}
}
