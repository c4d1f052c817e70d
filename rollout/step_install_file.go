package rollout

import (
	"strings"

	"github.com/relayctl/relayctl/plans"
)

// installFile puts a planned file in place in the window (the one staged
// beside it, with a rename) or removes it, and for a unit drop-in has
// systemd read it again; its undo puts back the backup its preparation
// took. One step type for every file of HostPlan.Files.
type installFile struct {
	noStep
	fc     plans.FileChange
	reload bool // systemctl daemon-reload after it
}

// installKinds are how journals and receipts name the step for a role, and
// the verb of its title.
var installKinds = map[string]struct{ kind, verb string }{
	plans.RoleRelayConfig:   {KindInstallConfig, "install"},
	plans.RoleSysctlDropIn:  {KindPersistDropIn, "persist"},
	plans.RoleUnitDropIn:    {KindUnitDropIn, "install"},
	plans.RoleConfigDropIn:  {KindInstallDropIn, "install"},
	plans.RoleServiceDropIn: {KindUnitDropIn, "install"},
}

func newInstallFile(fc plans.FileChange) installFile {
	r, _ := plans.Role(fc.Role)
	return installFile{fc: fc, reload: r.Reload}
}

func (s installFile) describe() plans.Step {
	k := installKinds[s.fc.Role]
	t := titlef("%s %s: %s put in place (atomic rename)", k.verb, s.fc.Role, s.fc.Path)
	if s.fc.Remove {
		t = titlef("remove %s: %s", s.fc.Role, s.fc.Path)
	}
	if s.reload {
		t += ", then systemctl daemon-reload"
	}
	return plans.Step{Phase: plans.PhaseWindow, Kind: k.kind, Key: s.fc.Path, Title: t, Undo: s.undoText()}
}

// undoText is what the undo does: put back the backup the stage took,
// which for a file that was not there is its absence.
func (s installFile) undoText() string {
	t := titlef("put %s %s back as it was, from the backup taken before the window", s.fc.Role, s.fc.Path)
	if !s.fc.Exists {
		t = titlef("remove %s %s again (it did not exist)", s.fc.Role, s.fc.Path)
	}
	if s.reload {
		t += ", then systemctl daemon-reload"
	}
	return t
}

// backupName is where the stage keeps the file's content for undo: by
// role, and for a role templates may have several of, by path too.
func (s installFile) backupName() string {
	name := "backup-" + strings.ReplaceAll(s.fc.Role, " ", "-")
	if s.fc.Role == plans.RoleConfigDropIn || s.fc.Role == plans.RoleServiceDropIn {
		name += "-" + plans.SHA256(s.fc.Path)[:12]
	}
	return name
}

func (s installFile) prepare() []Op { return []Op{op("backup", s.fc.Path, s.backupName())} }

func (s installFile) do() []Op {
	ops := []Op{op("rename", s.fc.Path+".relayctl-new", s.fc.Path)}
	if s.fc.Remove {
		ops = []Op{op("remove", s.fc.Path)}
	}
	return s.reloaded(ops)
}

func (s installFile) undo() []Op { return s.reloaded([]Op{op("restore", s.fc.Path, s.backupName())}) }

func (s installFile) reloaded(ops []Op) []Op {
	if s.reload {
		ops = append(ops, op("daemon-reload"))
	}
	return ops
}

func (s installFile) checks(c *checkCtx) []Check {
	return []Check{s.check(c.after, false)}
}

func (s installFile) restored(c *checkCtx) []Check {
	return []Check{s.check(c.after, true)}
}

// check compares the file read back with the planned content (or, for a
// rollback, the content it had), hashed as the plan hashed it.
func (s installFile) check(after *plans.Facts, current bool) Check {
	f := s.fc.Observed(after)
	wantExists, wantSHA := !s.fc.Remove, s.fc.SHA256
	if current {
		wantExists, wantSHA = s.fc.Exists, s.fc.CurrentSHA256
	}
	what := s.fc.Role + " " + s.fc.Path
	switch {
	case !f.Exists || !wantExists:
		return fileCheck(what, f.Exists, f.Content, wantSHA, wantExists)
	case s.fc.Holds(f.Content, current):
		return check(what, "sha256 "+short12(wantSHA), "sha256 "+short12(wantSHA))
	}
	return fileCheck(what, f.Exists, f.Content, wantSHA, wantExists)
}
