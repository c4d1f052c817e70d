package rollout

import (
	"strings"

	"github.com/relayctl/relayctl/plans"
	"github.com/relayctl/relayctl/relay/capability"
	"github.com/relayctl/relayctl/tune"
)

// undoRecord is the receipt's record of what an applied window changed
// (plans.Undo), for relayctl rollback: from the host plan that ran, the
// host as the lock read it, and the host's description of the release
// the window switched away from (release-sum, heard in the stage). The
// window's backups stay on the host as the receipt's (the commit keeps
// them beside it).
func (hr *hostRun) undoRecord(receipt string) *plans.Undo {
	h, before := hr.h, hr.res.Before
	u := &plans.Undo{Receipt: receipt, Running: h.Previous.RelayRunning, Listen: plans.ListenChanges(h)}
	u.SORcvbuf, u.Force = plans.AskedBefore(hr.p, h)
	if before != nil && before.Socket.Found {
		u.RB = before.Socket.Rcvbuf
	}
	for _, c := range h.Sysctls {
		if c.Change {
			u.Sysctls = append(u.Sysctls, plans.UndoSysctl{Key: c.Key, Was: tune.Normalize(c.Current), Set: c.Planned})
		}
	}
	for _, fc := range h.Files {
		if !fc.Change {
			continue
		}
		uf := plans.UndoFile{Role: fc.Role, Path: fc.Path, Existed: fc.Exists, Removed: fc.Remove, Set: fc.SHA256}
		if fc.Exists {
			uf.SHA256, uf.Backup = fc.CurrentSHA256, newInstallFile(fc).backupName()
		}
		u.Files = append(u.Files, uf)
	}
	if h.Release.Action != plans.ReleaseKeep && h.Release.Current != "" {
		u.Release = &plans.UndoRelease{Was: h.Release.Current, WasLink: h.Previous.CurrentLink, Set: h.Release.Planned}
		u.Release.SHA256, u.Release.TreeSHA256, u.Release.Capabilities = parseReleaseSum(hr.releaseSum)
	}
	return u
}

// parseReleaseSum reads release-sum's answer, "SHA256 TREE|- CAPS" (CAPS
// comma-separated, maybe none), as untrusted host output: what does not
// read as a hash or a capability is left out.
func parseReleaseSum(v string) (sha, tree string, caps []string) {
	f := strings.Fields(v)
	if len(f) < 2 || !plans.IsSHA256(f[0]) {
		return "", "", nil
	}
	sha = f[0]
	if plans.IsSHA256(f[1]) {
		tree = f[1]
	}
	if len(f) > 2 {
		caps, _ = capability.Capabilities([]byte(capability.Prefix + strings.ReplaceAll(f[2], ",", " ") + "\n"))
	}
	return sha, tree, caps
}
