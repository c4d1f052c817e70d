package plans

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/relayctl/relayctl/internal/lazyre"
	"github.com/relayctl/relayctl/tune"
)

// Undo is what one host's window changed, as the receipt of that run keeps
// it for relayctl rollback: each thing as the window found it (was) and as
// it left it (set). The window's backups stay on the host beside that
// receipt (StateDir/receipts/RECEIPT.backups, root's alone, pruned with
// the receipts), so a rollback puts the files back from there, checked by
// sha256: their content (a relay config may hold secrets) never leaves the
// host.
type Undo struct {
	// Receipt is the name of the host's receipt of that run, without
	// .json; its backups are RECEIPT.backups beside it.
	Receipt string       `json:"receipt"`
	Release *UndoRelease `json:"release,omitempty"` // nil: the window kept the release
	Sysctls []UndoSysctl `json:"sysctls,omitempty"`
	Files   []UndoFile   `json:"files,omitempty"`
	Running bool         `json:"relay_running"` // the relay ran before the window
	RB      uint64       `json:"rb"`            // its socket's rb before the window, as ss read it
	// SORcvbuf and Force are the buffer the relay's config asked for
	// before the window: what the release it goes back to asks again.
	SORcvbuf int  `json:"so_rcvbuf"`
	Force    bool `json:"so_rcvbuf_force,omitempty"`
	Listen   bool `json:"listen_changed,omitempty"` // the window changed the relay's listen address
}

// UndoRelease is the release a window switched away from: where it is on
// the host, what its program hashes to (checked on the host before a
// rollback points at it) and what it can do (its marker, read there too).
type UndoRelease struct {
	Was          string   `json:"was"`                   // its version
	WasLink      string   `json:"was_link"`              // the current link's target before the window
	SHA256       string   `json:"sha256"`                // of its program ("" when the host could not hash it)
	TreeSHA256   string   `json:"tree_sha256,omitempty"` // of its files, for a release unpacked from a tarball
	Capabilities []string `json:"capabilities,omitempty"`
	Set          string   `json:"set"` // the version the window switched to
}

// UndoSysctl is one sysctl the window set.
type UndoSysctl struct {
	Key string `json:"key"`
	Was string `json:"was"`
	Set string `json:"set"`
}

// UndoFile is one file the window wrote or removed.
type UndoFile struct {
	Role    string `json:"role"`
	Path    string `json:"path"`
	Existed bool   `json:"existed"`
	SHA256  string `json:"sha256,omitempty"` // of the content it had
	Backup  string `json:"backup,omitempty"` // that content's copy in RECEIPT.backups
	Set     string `json:"set_sha256,omitempty"`
	Removed bool   `json:"removed,omitempty"` // the window removed it
}

// UndoFact is a host's newest receipt of a plan with an Undo in it, as
// observe read it (StateDir/receipts, root's alone), and the backups kept
// beside it: what a rollback of that plan restores on the host.
type UndoFact struct {
	Receipt  string   `json:"receipt"` // its file name, without .json
	Checksum string   `json:"plan_checksum"`
	Outcome  string   `json:"outcome"`
	Undo     *Undo    `json:"undo"`
	Backups  []string `json:"backups"` // the names in RECEIPT.backups
}

var (
	receiptNameRe = lazyre.New(`^[0-9A-Za-z][0-9A-Za-z._-]{0,199}$`)
	backupNameRe  = lazyre.New(`^backup-[a-z-]{1,40}(-[0-9a-f]{12})?$`)
)

// ValidReceiptName reports whether s is a receipt's name as relayctl makes
// them: plain characters, no path.
func ValidReceiptName(s string) error {
	if !receiptNameRe.MatchString(s) || strings.Contains(s, "..") {
		return fmt.Errorf("receipt name %q is not one relayctl makes", clip(s))
	}
	return nil
}

// ValidBackupName reports whether s names a backup as the window's steps
// name them (backup-ROLE[-HASH]).
func ValidBackupName(s string) error {
	if !backupNameRe.MatchString(s) {
		return fmt.Errorf("backup name %q is not one relayctl makes", clip(s))
	}
	return nil
}

// validUndo checks an Undo read from a host or a plan: plain names, paths
// the plan's spec writes, hashes, versions and values of one line.
func validUndo(p *Plan, u *Undo) error {
	if err := ValidReceiptName(u.Receipt); err != nil {
		return err
	}
	if r := u.Release; r != nil {
		if ValidVersion(r.Was) != nil || ValidVersion(r.Set) != nil || hostText(r.WasLink) != nil {
			return errors.New("its release is not two versions and a link")
		}
		if r.SHA256 != "" && !sha256Re.MatchString(r.SHA256) || r.TreeSHA256 != "" && !sha256Re.MatchString(r.TreeSHA256) {
			return errors.New("its release's sha256 is not a sha256")
		}
		for _, c := range r.Capabilities {
			if hostText(c) != nil || len(c) > 64 || !strings.Contains(c, "=") {
				return fmt.Errorf("its release's capabilities hold %q", clip(c))
			}
		}
	}
	if len(u.Files) > len(PlannedFiles(p)) {
		return errors.New("more files than the plan's spec writes")
	}
	if err := undoSysctlsOfSpec(p, u); err != nil {
		return err
	}
	for _, f := range u.Files {
		if !slices.Contains(PlannedFiles(p), PlannedFile{f.Role, f.Path}) {
			return fmt.Errorf("a file the plan's spec does not write: %s %s", clip(f.Role), clip(f.Path))
		}
		if f.Existed && (!sha256Re.MatchString(f.SHA256) || ValidBackupName(f.Backup) != nil) || f.Set != "" && !sha256Re.MatchString(f.Set) {
			return fmt.Errorf("file %s: a hash or backup name that is not relayctl's", clip(f.Path))
		}
	}
	return nil
}

// undoSysctlsOfSpec checks the sysctls a host's receipt says its window
// set: each a key the plan's spec sets, once, with values of one line. A
// rollback writes only what the spec manages, whatever a receipt names
// (kernel.core_pattern would make the kernel run a program as root).
func undoSysctlsOfSpec(p *Plan, u *Undo) error {
	spec := map[string]bool{}
	for _, s := range p.Sysctl {
		spec[s.Key] = true
	}
	seen := map[string]bool{}
	for _, s := range u.Sysctls {
		switch {
		case tune.ValidKey(s.Key) != nil || hostText(s.Was) != nil || hostText(s.Set) != nil:
			return fmt.Errorf("sysctl %q", clip(s.Key))
		case !spec[s.Key]:
			return fmt.Errorf("sysctl %s, which the plan's spec does not set", clip(s.Key))
		case seen[s.Key]:
			return fmt.Errorf("sysctl %s twice", clip(s.Key))
		}
		seen[s.Key] = true
	}
	return nil
}

// SameUndo reports whether two records of one window agree.
func SameUndo(a, b *Undo) bool {
	if a == nil || b == nil {
		return a == b
	}
	return flattenEqual(a, b)
}

func flattenEqual(a, b any) bool {
	fa, fb := flatten(a), flatten(b)
	if len(fa) != len(fb) {
		return false
	}
	for k, v := range fa {
		if fb[k] != v {
			return false
		}
	}
	return true
}

// AskedBefore is the buffer a host's relay config asked for before a
// window of h: the plan's when the window leaves the config as it is,
// else what the config's keys said (absent: 0, and no force).
func AskedBefore(p *Plan, h *HostPlan) (int, bool) {
	so, force := p.Relay.SORcvbuf, p.Relay.SORcvbufForce
	fc := h.File(RoleRelayConfig)
	if fc == nil || !fc.Change {
		return so, force
	}
	keys := p.Relay.Config.Keys
	so, force = 0, false
	for _, k := range fc.Changes {
		switch {
		case k.Key == keys.SORcvbuf && k.Current != "":
			so, _ = strconv.Atoi(k.Current)
		case k.Key == keys.SORcvbufForce && k.Current != "":
			force, _ = strconv.ParseBool(k.Current)
		}
	}
	return so, force
}

// IsSHA256 reports whether s is a sha256 in hex, as plans record them.
func IsSHA256(s string) bool { return sha256Re.MatchString(s) }
