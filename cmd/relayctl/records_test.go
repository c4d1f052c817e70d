package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A plan's runs are listed newest first, by the names they were filed
// under, of every kind; the newest apply or resume that applied a host is
// what a rollback goes back to, whatever came after it.
func TestPlanRunsNewestFirst(t *testing.T) {
	dir := t.TempDir()
	plan := filepath.Join(dir, "x.plan")
	rec := runsDir(plan)
	os.Mkdir(rec, 0o700)
	write := func(name, outcome string) {
		t.Helper()
		body := `{"format_version": 2, "plan": "x", "plan_checksum": "sha256:00", "started": "2026-11-30T19:39:16Z",
  "hosts": [{"host": "h1", "outcome": "` + outcome + `", "state": "as planned"}]}`
		if err := os.WriteFile(filepath.Join(rec, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("20261130T193916.000Z-legacy000-apply.json", "applied")
	write("20261130T200000.100Z-0000000a-apply.json", "applied")
	write("20261130T200000.200Z-0000000b-stage.json", "staged")
	write("20261130T200000.300Z-0000000c-resume.json", "unreachable")
	os.WriteFile(filepath.Join(rec, "notes.txt"), []byte("x"), 0o600)
	os.Symlink("20261130T200000.100Z-0000000a-apply.json", filepath.Join(rec, "20261130T210000.000Z-0000000d-apply.json"))
	runs, err := planRuns(plan)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range runs {
		got = append(got, r.ID+" "+r.Kind)
	}
	want := "20261130T200000.300Z-0000000c resume, 20261130T200000.200Z-0000000b stage, 20261130T200000.100Z-0000000a apply, 20261130T193916.000Z-legacy000 apply"
	if strings.Join(got, ", ") != want {
		t.Errorf("runs:\n%s\nwant\n%s", strings.Join(got, ", "), want)
	}
	if p, err := newestApplied(plan); err != nil || filepath.Base(p) != "20261130T200000.100Z-0000000a-apply.json" {
		t.Errorf("newest applied: %q, %v", p, err)
	}
	if runs, err := planRuns(filepath.Join(dir, "none.plan")); err != nil || len(runs) != 0 {
		t.Errorf("a plan never run: %v, %v", runs, err)
	}
}

// The record folder is a folder of the plan's own: a symlink there (to
// somewhere else, another user's folder) is refused, not written through.
func TestRecordDirIsNeverALink(t *testing.T) {
	dir := t.TempDir()
	plan := filepath.Join(dir, "x.plan")
	elsewhere := t.TempDir()
	if err := os.Symlink(elsewhere, runsDir(plan)); err != nil {
		t.Fatal(err)
	}
	if _, err := recordDir(plan); err == nil || !strings.Contains(err.Error(), "is not a folder") {
		t.Errorf("a symlinked record folder: %v", err)
	}
	os.Remove(runsDir(plan))
	d, err := recordDir(plan)
	if err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(d); st.Mode().Perm() != 0o700 {
		t.Errorf("the record folder is %v, want 0700", st.Mode().Perm())
	}
}

// A receipt an older relayctl wrote at the stable name is moved into the
// record, named by the time its run began, and the name then points at
// the new run.
func TestLegacyReceiptIsKept(t *testing.T) {
	dir := t.TempDir()
	plan := filepath.Join(dir, "x.plan")
	os.WriteFile(plan+".receipt.json", []byte(`{"format_version": 1, "plan": "x", "plan_checksum": "sha256:00", "started": "2026-11-30T19:39:16Z", "hosts": []}`), 0o600)
	os.WriteFile(plan+".receipt.md", []byte("# relayctl receipt: x\n"), 0o600)
	rec, err := recordDir(plan)
	if err != nil {
		t.Fatal(err)
	}
	if err := keepLegacy(rec, plan+".receipt", "apply"); err != nil {
		t.Fatal(err)
	}
	for _, ext := range []string{".json", ".md"} {
		if _, err := os.Stat(filepath.Join(rec, "20261130T193916.000Z-legacy000-apply"+ext)); err != nil {
			t.Errorf("the legacy %s receipt was not kept: %v", ext, err)
		}
	}
	if err := pointAt(plan+".receipt.json", "x.plan.receipts/new.json"); err != nil {
		t.Fatal(err)
	}
	if target, err := os.Readlink(plan + ".receipt.json"); err != nil || target != "x.plan.receipts/new.json" {
		t.Errorf("the stable name: %q, %v", target, err)
	}
}
