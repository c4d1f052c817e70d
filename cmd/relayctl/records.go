package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/relayctl/relayctl/internal/whoami"
	"github.com/relayctl/relayctl/plans"
	"github.com/relayctl/relayctl/rollout"
)

// The record of a plan's runs, beside the plan: every apply, resume and
// stage writes its receipt under a name of its own in PLAN.receipts/,
// RUNID-KIND.json and RUNID-KIND.md (the run id begins with its UTC time,
// so the names sort as the runs began), and nothing is overwritten.
// PLAN.receipt.json and .md (apply, resume) and PLAN.stage.json and .md
// (stage) are symlinks to the newest run of their kind: the stable name
// for scripts. A receipt an older relayctl wrote there as a file is moved
// into the record first, not lost.

// runsDir is the folder of a plan's run records.
func runsDir(plan string) string { return plan + ".receipts" }

// runInfo is this run's identity for its receipts: a new run id, the
// kind, who runs relayctl (its uid, and the name with where it came from)
// on which machine, and which relayctl.
func runInfo(kind string) rollout.RunInfo {
	id := whoami.Current()
	op := &rollout.Operator{User: id.Name, UID: &id.UID, UserFrom: id.Source, SudoUser: os.Getenv("SUDO_USER")}
	if op.User == "" {
		op.User = "unknown"
	}
	op.Machine, _ = os.Hostname()
	return rollout.RunInfo{ID: rollout.NewRunID(time.Now()), Kind: kind, Operator: op, Relayctl: &rollout.Build{Version: version(), Commit: commit()}}
}

// pointerOf is the stable name of the newest run of a kind: PLAN.stage
// for stage, PLAN.receipt for apply and resume (and rollback).
func pointerOf(plan, kind string) string {
	if kind == rollout.RunStage {
		return plan + ".stage"
	}
	return plan + ".receipt"
}

// writeRun files a run's receipt in the plan's record, JSON and Markdown
// (0600, through a temporary file and a rename each), and points the
// kind's stable name at it. It returns the JSON record's path.
func writeRun(plan string, p *plans.Plan, rep *rollout.Report) (string, error) {
	dir, err := recordDir(plan)
	if err != nil {
		return "", err
	}
	kind := rep.RunInfo.Kind
	pointer := pointerOf(plan, kind)
	if err := keepLegacy(dir, pointer, kind); err != nil {
		return "", err
	}
	name := rep.RunInfo.ID + "-" + kind
	record := filepath.Join(dir, name)
	if err := writeFileAtomicWith(record+".json", 0o600, func(w io.Writer) error { return rollout.WriteReceiptJSON(w, p, rep) }); err != nil {
		return "", err
	}
	if err := writeFileAtomicWith(record+".md", 0o600, func(w io.Writer) error { return rollout.WriteReceiptMarkdown(w, p, rep) }); err != nil {
		return "", err
	}
	rel := filepath.Join(filepath.Base(dir), name)
	for _, ext := range []string{".json", ".md"} {
		if err := pointAt(pointer+ext, rel+ext); err != nil {
			return "", err
		}
	}
	return record + ".json", nil
}

// recordDir makes the plan's record folder (0700), and refuses one that
// is a symlink or not a folder: receipts are written where the plan is,
// never somewhere a link sends them.
func recordDir(plan string) (string, error) {
	dir := runsDir(plan)
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", fmt.Errorf("make the record of %s: %w", plan, err)
	}
	st, err := os.Lstat(dir)
	if err != nil {
		return "", fmt.Errorf("make the record of %s: %w", plan, err)
	}
	if !st.IsDir() {
		return "", withHint(fmt.Errorf("%s is not a folder (%s): relayctl keeps the plan's receipts there", dir, st.Mode().Type()), "move it away and run again")
	}
	return dir, nil
}

// pointAt makes link a symlink to target (relative to link's folder),
// through a new link renamed over it.
func pointAt(link, target string) error {
	tmp := filepath.Join(filepath.Dir(link), "."+filepath.Base(link)+".relayctl-new")
	os.Remove(tmp)
	if err := os.Symlink(target, tmp); err != nil {
		return fmt.Errorf("point %s at %s: %w", link, target, err)
	}
	if err := os.Rename(tmp, link); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("point %s at %s: %w", link, target, err)
	}
	return nil
}

// keepLegacy moves a receipt an older relayctl wrote as a file at the
// stable name (POINTER.json and .md) into the record, named by the time
// its run began, so that pointing the name at the new run loses nothing.
func keepLegacy(dir, pointer, kind string) error {
	st, err := os.Lstat(pointer + ".json")
	if err != nil || !st.Mode().IsRegular() {
		return nil // absent, or a link already
	}
	started := st.ModTime()
	if head, err := readRun(pointer+".json", nil); err == nil {
		if t, err := time.Parse(time.RFC3339, head.Started); err == nil {
			started = t
		}
	}
	name := filepath.Join(dir, started.UTC().Format(rollout.RunIDLayout)+"-legacy000-"+kind)
	for _, ext := range []string{".json", ".md"} {
		if st, err := os.Lstat(pointer + ext); err == nil && st.Mode().IsRegular() {
			if err := os.Rename(pointer+ext, name+ext); err != nil {
				return fmt.Errorf("keep the earlier receipt %s: %w", pointer+ext, err)
			}
		}
	}
	return nil
}

// runFile is one run in a plan's record.
type runFile struct {
	Path string // RUNID-KIND.json in PLAN.receipts
	ID   string // the run id ("TIME-legacy000" for a receipt an older relayctl wrote)
	Kind string
}

// planRuns lists a plan's runs, newest first, from its record: the one
// place that knows how they are named (a run of another kind, rollback,
// is found by the same names).
func planRuns(plan string) ([]runFile, error) {
	entries, err := os.ReadDir(runsDir(plan))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the record of %s: %w", plan, err)
	}
	var runs []runFile
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || !e.Type().IsRegular() {
			continue
		}
		i := strings.LastIndexByte(name, '-')
		if i < 0 {
			continue
		}
		runs = append(runs, runFile{Path: filepath.Join(runsDir(plan), e.Name()), ID: name[:i], Kind: name[i+1:]})
	}
	sort.Slice(runs, func(i, j int) bool { return runs[i].ID > runs[j].ID })
	return runs, nil
}

// newestApplied is the record of the newest apply or resume of a plan in
// which some host was applied: the run whose "before" a rollback of the
// plan goes back to. "" when there is none.
func newestApplied(plan string) (string, error) {
	runs, err := planRuns(plan)
	if err != nil {
		return "", err
	}
	for _, r := range runs {
		if r.Kind != rollout.RunApply && r.Kind != rollout.RunResume {
			continue
		}
		applied := false
		if _, err := readRun(r.Path, func(h historyHost) { applied = applied || h.Outcome == string(rollout.Applied) }); err != nil {
			return "", err
		}
		if applied {
			return r.Path, nil
		}
	}
	return "", nil
}
