package agent

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"syscall"
)

// readOwned frames a file relayctl writes, which may hold secrets (the
// relay config above all): read only where root alone could have put it,
// in a folder neither its group nor others can write, and never through a
// symlink (whose target could be any file). Else NAME-unsafe says why;
// absent, status 2, if there is nothing.
func (o *observer) readOwned(name, p string) {
	fi, err := os.Lstat(p)
	switch {
	case err != nil:
		o.f.absent(name)
		return
	case fi.Mode()&fs.ModeSymlink != 0:
		o.f.value(name+"-unsafe", 0, p+" is a symlink")
		return
	}
	dir := folderOf(p)
	if why := othersCanWrite(dir); why != "" {
		o.f.value(name+"-unsafe", 0, fmt.Sprintf("%s (the folder of %s) %s: others can write it", dir, p, why))
		return
	}
	f, _, err := openHostFile(p, true)
	if err != nil {
		o.f.section(name, 1, nil)
		return
	}
	defer f.Close()
	b, err := readUpTo(f, o.q.maxFile+1)
	o.f.read(name, b, err)
}

// folderOf is the folder a path names a file in, as the shell's ${p%/*}
// gives it ("/" for a file in /).
func folderOf(p string) string {
	i := strings.LastIndexByte(p, '/')
	switch {
	case i < 0:
		return p
	case i == 0:
		return "/"
	}
	return p[:i]
}

// othersCanWrite says how someone other than root could change folder dir
// (itself, not followed: a symlink there could have been meant anywhere),
// "" if nobody can: "is owned by uid U with mode M". The rule is the
// mode's, whole: observe.sh's pattern of stat's digits also refused root's
// folders of modes under 010, which nobody else can write.
func othersCanWrite(dir string) string {
	st, err := lstatT(dir)
	if err != nil {
		return "cannot be examined (" + errText(err) + ")"
	}
	if st.Uid != 0 || st.Mode&0o022 != 0 || st.Mode&syscall.S_IFMT == syscall.S_IFLNK {
		return fmt.Sprintf("is owned by uid %d with mode %s", st.Uid, modeText(st))
	}
	return ""
}

// unfinishedRun: an apply that did not finish leaves its journal (its
// last MiB framed) and the lock owner behind.
func (o *observer) unfinishedRun() {
	if j := o.q.state + "/journal"; isRegular(j) {
		b, err := tailOf(j, 1<<20)
		o.f.read("journal", b, err)
	}
	if p := o.q.state + "/lock.owner"; nonEmpty(p) {
		b, err := headOf(p, 4096)
		o.f.read("lock-owner", b, err)
	}
}

// nonEmpty: p is there, and not empty (test -s).
func nonEmpty(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Size() > 0
}

// receiptsNewestFirst are the receipts relayctl filed (their names begin
// with their UTC time), newest first: regular files, no symlink, and
// only names relayctl gives. Anything else is not read.
func (o *observer) receiptsNewestFirst() []string {
	dir := o.q.state + "/receipts"
	if !isDirFollowed(dir) {
		return nil
	}
	names := receiptNames(o.q.state, ".json")
	var out []string
	for i := len(names) - 1; i >= 0; i-- {
		p := dir + "/" + names[i]
		if plainName(names[i]) && isRegular(p) && !isSymlink(p) {
			out = append(out, names[i])
		}
	}
	return out
}

// lastApply: the newest receipt that read the relay back after a window
// (a staged run's has no drops_after), its name a section of its own:
// verify's baseline of the drop rate.
func (o *observer) lastApply() {
	dir := o.q.state + "/receipts/"
	for _, n := range o.receiptsNewestFirst() {
		b, err := headOf(dir+n, o.q.maxFile+1)
		if err != nil || !bytes.Contains(b, []byte(`"drops_after"`)) {
			continue
		}
		o.f.value("last-apply-name", 0, n)
		o.f.read("last-apply", b, nil)
		return
	}
}

// undoReceipt: the newest receipt of the plan with checksum sha256:sum
// that records what its window changed (what relayctl rollback of it goes
// back to), read as any file relayctl writes (readOwned), with the names
// of the backups kept beside it.
func (o *observer) undoReceipt(sum string) {
	if sum == "" || !isHexString(sum) {
		sum = "none"
	}
	dir := o.q.state + "/receipts/"
	for _, n := range o.receiptsNewestFirst() {
		b, err := headOf(dir+n, o.q.maxFile+1)
		if err != nil || !recordsUndoOf(b, sum) {
			continue
		}
		base := strings.TrimSuffix(n, ".json")
		o.f.value("undo-name", 0, base)
		o.readOwned("undo-receipt", dir+n)
		if backups := dir + base + ".backups"; isDirFollowed(backups) && !isSymlink(backups) {
			names, err := listNames(backups)
			o.f.section("undo-backups", lsStatus(err), linesOf(names))
		}
		return
	}
}

// recordsUndoOf: a receipt's text names the plan sum and, after it, holds
// a record of what the window changed.
func recordsUndoOf(b []byte, sum string) bool {
	_, after, ok := bytes.Cut(b, []byte(`"plan_checksum": "sha256:`+sum+`"`))
	return ok && bytes.Contains(after, []byte(`"undo": {`))
}
