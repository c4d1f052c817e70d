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
	plans.RoleRelayConfig:  {KindInstallConfig, "install"},
	plans.RoleSysctlDropIn: {KindPersistDropIn, "persist"},
	plans.RoleUnitDropIn:   {KindUnitDropIn, "install"},
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
	return plans.Step{Phase: plans.PhaseWindow, Kind: k.kind, Key: s.fc.Path, Title: t}
}

// backupName is where the stage keeps the file's content for undo.
func (s installFile) backupName() string { return "backup-" + strings.ReplaceAll(s.fc.Role, " ", "-") }

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
	f := s.fc.Observed(c.after)
	return []Check{fileCheck(s.fc.Role+" "+s.fc.Path, f.Exists, f.Content, s.fc.SHA256, !s.fc.Remove)}
}

func (s installFile) restored(c *checkCtx) []Check {
	f := s.fc.Observed(c.after)
	return []Check{fileCheck(s.fc.Role+" "+s.fc.Path, f.Exists, f.Content, s.fc.CurrentSHA256, s.fc.Exists)}
}
