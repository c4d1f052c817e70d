package agent

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
)

// The journal and receipt primitives: a run's stage folder and journal,
// the receipt a run files on the host with the journal beside it, and the
// newest receipts read back.
var journalPrimitives = map[string]handler{
	"begin":    pBegin,
	"step":     pStep,
	"clear":    pClear,
	"commit":   pCommit,
	"record":   pRecord,
	"receipts": func(s *session, r *request) answer { return receiptsAnswer(s.paths, r.arg(0)) },
	"unlock":   unlock,
	"clock":    func(s *session, r *request) answer { return val(strconv.FormatInt(s.now().UnixNano(), 10)) },
}

// keepBackups is how many applied windows' backups the host keeps beside
// their receipts (for relayctl rollback).
const keepBackups = 5

// maxReceipt bounds a receipt the host files or reads back.
const maxReceipt = 1 << 20

// pBegin: PLAN CHECKSUM, a fresh stage folder and the journal opened.
func pBegin(s *session, r *request) answer {
	os.RemoveAll(s.stage)
	if err := os.Mkdir(s.stage, 0o700); err != nil {
		return errf("cannot create %s", s.stage)
	}
	os.Mkdir(s.state+"/receipts", 0o755)
	if err := s.note("begin plan=" + r.arg(0) + " checksum=" + r.arg(1)); err != nil {
		return errf("cannot write the journal %s (a full disk?)", s.journal)
	}
	return ok()
}

// pStep: TEXT, a step's start or end. A step whose start the journal
// cannot note does not start (the journal is written ahead), but a
// rollback's does: an undo is better done than not.
func pStep(s *session, r *request) answer {
	if err := s.note(r.arg(0)); err != nil && r.journal != 2 {
		return errf("cannot write the journal %s (a full disk?)", s.journal)
	}
	return ok()
}

// pClear: an unfinished run's journal and stage archived as
// receipts/abandoned-TIME.*: VAL that name.
func pClear(s *session, r *request) answer {
	if err := os.MkdirAll(s.state+"/receipts", 0o755); err != nil {
		return errf("mkdir receipts")
	}
	old := freshArchive(s.state+"/receipts/abandoned-"+s.now().UTC().Format("20060102T150405Z"), ".journal", ".stage")
	if fi, err := os.Lstat(s.journal); err == nil && fi.Mode().IsRegular() {
		if err := os.Rename(s.journal, old+".journal"); err != nil {
			return errf("archive the journal")
		}
	}
	if isDir(s.stage) {
		if err := os.Rename(s.stage, old+".stage"); err != nil {
			return errf("archive %s", s.stage)
		}
	}
	s.forgetWindow()
	return val(old)
}

// freshArchive is base, or base-2, base-3...: a name none of whose forms
// (base+suffix) exists yet, so a second archive in the same second does not
// land in (or fail on) the first.
func freshArchive(base string, suffixes ...string) string {
	for i := 1; ; i++ {
		name := base
		if i > 1 {
			name = base + "-" + strconv.Itoa(i)
		}
		taken := false
		for _, s := range suffixes {
			if exists(name + s) {
				taken = true
			}
		}
		if !taken {
			return name
		}
	}
}

// fileReceipt files the request's data as STATE/receipts/NAME.json,
// through a temporary file and a rename.
func fileReceipt(s *session, r *request) (string, *answer) {
	name, keep := r.arg(0), r.arg(2)
	if !plainName(name) {
		a := errf("bad receipt name")
		return "", &a
	}
	if !digits(keep) {
		a := errf("bad receipt count")
		return "", &a
	}
	if err := os.MkdirAll(s.state+"/receipts", 0o755); err != nil {
		a := errf("mkdir receipts")
		return "", &a
	}
	body, err := r.data(maxReceipt)
	if err == nil {
		body, err = completeReceipt(s, r, body)
	}
	if err != nil {
		a := errf("write receipt: %v", err)
		return "", &a
	}
	base := s.state + "/receipts/" + name
	if err := writeNew(base+".json.relayctl-new", body, 0o644); err != nil {
		a := errf("write receipt: %s", errText(err))
		return "", &a
	}
	if err := os.Rename(base+".json.relayctl-new", base+".json"); err != nil {
		a := errf("write receipt")
		return "", &a
	}
	return base, nil
}

// pCommit: NAME OUTCOME KEEP, the receipt (data) filed with the journal
// beside it, the run over. An applied window's backups stay beside its
// receipt, root's alone: relayctl rollback puts files back from them.
func pCommit(s *session, r *request) answer {
	base, bad := fileReceipt(s, r)
	if bad != nil {
		return *bad
	}
	s.note("end " + r.arg(1))
	if err := os.Rename(s.journal, base+".journal"); err != nil {
		return errf("file the journal")
	}
	if r.arg(1) == "applied" && isDir(s.stage) && os.Rename(s.stage, base+".backups") == nil {
		pruneBackups(s.state)
	} else {
		os.RemoveAll(s.stage)
	}
	s.forgetWindow()
	pruneReceipts(s.state, r.arg(2))
	return ok()
}

// pRecord: NAME OUTCOME KEEP, the receipt of a run that ends without a
// commit filed alone (the journal, if any, is not this run's).
func pRecord(s *session, r *request) answer {
	if _, bad := fileReceipt(s, r); bad != nil {
		return *bad
	}
	pruneReceipts(s.state, r.arg(2))
	return ok()
}

// receiptNames are the receipts filed, oldest first (names begin with
// their run's UTC time: their order is the runs').
func receiptNames(state, suffix string) []string {
	entries, _ := os.ReadDir(state + "/receipts")
	var out []string
	for _, e := range entries {
		if n := e.Name(); strings.HasSuffix(n, suffix) && !strings.HasPrefix(n, ".") {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}

// pruneReceipts keeps only the newest keep receipts, each with its journal
// and backups; a name relayctl did not write is left.
func pruneReceipts(state, keep string) {
	n, _ := strconv.Atoi(keep)
	names := receiptNames(state, ".json")
	for i := 0; len(names)-i > n; i++ {
		base := state + "/receipts/" + strings.TrimSuffix(names[i], ".json")
		os.Remove(base + ".json")
		os.Remove(base + ".journal")
		if isDir(base + ".backups") {
			os.RemoveAll(base + ".backups")
		}
	}
}

// pruneBackups keeps the backups of the newest keepBackups receipts.
func pruneBackups(state string) {
	names := receiptNames(state, ".backups")
	for i := 0; len(names)-i > keepBackups; i++ {
		if p := state + "/receipts/" + names[i]; isDir(p) {
			os.RemoveAll(p)
		}
	}
}

// receiptsAnswer is the newest n receipts filed, newest first, as one DATA
// answer: for each, "NAME SIZE" on a line, then its bytes. Read-only,
// without the lock, so only where root alone could have written them (a
// FIFO or a symlink swapped in between a check and a read would hang it
// or read another file): the state folder and every folder above it, as
// written and as resolved, and receipts/ a folder of root's alone, not a
// symlink; else UNSAFE why, nothing read. Nothing is made: a host without
// them has no receipts. Each is opened without following a symlink or
// waiting on a FIFO, and at most maxReceipt bytes of it read.
func receiptsAnswer(p paths, n string) answer {
	if !digits(n) {
		return errf("bad receipt count")
	}
	want, _ := strconv.Atoi(n)
	dir := p.state + "/receipts"
	if _, err := os.Lstat(p.state); errors.Is(err, fs.ErrNotExist) {
		return dataAnswer(nil)
	}
	if err := safeDirReadOnly(p.state); err != nil {
		return answer{word: "UNSAFE", text: err.Error()}
	}
	if _, err := os.Lstat(dir); errors.Is(err, fs.ErrNotExist) {
		return dataAnswer(nil)
	}
	if !rootDir(dir) {
		return answer{word: "UNSAFE", text: dir + " is not a folder that belongs to root and only root can write"}
	}
	names := receiptNames(p.state, ".json")
	var out []byte
	for i := len(names) - 1; i >= 0 && want > 0; i-- {
		if !plainName(names[i]) {
			continue
		}
		b, ok := readOwnRegular(dir+"/"+names[i], maxReceipt)
		if !ok {
			continue
		}
		out = append(out, names[i]+" "+strconv.Itoa(len(b))+"\n"...)
		out = append(out, b...)
		want--
	}
	return dataAnswer(out)
}

// safeDirReadOnly is safeDir's check, as written and as resolved,
// without making anything: what a read without the lock trusts.
func safeDirReadOnly(dir string) error {
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return errors.New("cannot resolve " + dir)
	}
	if !isDir(real) {
		return errors.New(dir + " is not a folder")
	}
	for _, p := range append(prefixes(dir), prefixes(real)...) {
		if !ownedByRootOnly(p) {
			return errors.New(p + " is not owned by root or is writable by its group or others")
		}
	}
	return nil
}

// readOwnRegular reads a regular file of root's alone, at most max bytes
// (a larger one is not read), never through a symlink or from a FIFO.
func readOwnRegular(p string, max int64) ([]byte, bool) {
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, false
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() || fi.Size() > max || !ownedByRootOnly(p) {
		return nil, false
	}
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil || int64(len(b)) > max {
		return nil, false
	}
	return b, true
}

// writeNew writes b as a new file p (an old one replaced, never followed).
func writeNew(p string, b []byte, mode fs.FileMode) error {
	os.Remove(p)
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, mode)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		os.Remove(p)
		return err
	}
	return f.Close()
}
