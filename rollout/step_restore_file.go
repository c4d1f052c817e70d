package rollout

import "github.com/relayctl/relayctl/plans"

// restoreFile puts beside a file (PATH.relayctl-new, not yet in place) the
// content a window it undoes found there: the host's own backup of it,
// kept beside that window's receipt, checked against the sha256 the
// receipt records. A rollback's counterpart of stageFile: the content
// (a relay config may hold secrets) never leaves the host.
type restoreFile struct {
	noStep
	fc     plans.FileChange
	backup string // the backup's path on the host
}

func newRestoreFile(p *plans.Plan, u *plans.Undo, fc plans.FileChange) restoreFile {
	return restoreFile{fc: fc, backup: keptBackups(p, u) + "/" + fc.Restore}
}

// keptBackups is where a host keeps the backups of the window u records.
func keptBackups(p *plans.Plan, u *plans.Undo) string {
	return p.Paths.StateDir + "/receipts/" + u.Receipt + ".backups"
}

func (s restoreFile) describe() plans.Step {
	return plans.Step{Phase: plans.PhaseStage, Kind: KindRestoreFile, Key: s.fc.Path,
		Title: titlef("restore %s: beside %s (not yet in place) from the host's backup %s, sha256 %s checked there", s.fc.Role, s.fc.Path, s.backup, short12(s.fc.SHA256))}
}

// do copies the backup (its mode and owner with it) and checks its
// sha256; a backup that is gone or is not those bytes writes nothing.
func (s restoreFile) do() []Op {
	return []Op{refusing(op("restore-kept", s.backup, s.fc.Path+".relayctl-new", s.fc.SHA256))}
}
