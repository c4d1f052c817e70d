package plans

import (
	"fmt"
	"path"
	"strings"

	"github.com/relayctl/relayctl/tune"
)

// planSysctls plans the sysctls and returns the drop-in that persists them.
func planSysctls(h *HostPlan, p *Plan, f *Facts) FileChange {
	planned := map[string]string{}
	for _, s := range p.Sysctl {
		planned[s.Key] = s.Value
	}
	dropIn := planDropIn(p, f, planned)
	files := bootFiles(h, p, f, dropIn.Content)
	decided, _, err := tune.Decide(files)
	if err != nil {
		h.Warnings = append(h.Warnings, fmt.Sprintf("cannot tell which file decides the sysctls at boot: %v", err))
	}
	for _, s := range p.Sysctl {
		h.Sysctls = append(h.Sysctls, planSysctl(h, p, f, s, files, decided))
	}
	// What the kernel checks one key against another, with the host's
	// value of a key the spec does not set.
	inForce := map[string]string{}
	for _, k := range p.ReadKeys() {
		if sf := f.Sysctls[k]; sf.Exists {
			inForce[k] = sf.Value
		}
	}
	for k, v := range planned {
		inForce[k] = v
	}
	if err := tune.CheckPairs(inForce); err != nil {
		h.Blockers = append(h.Blockers, err.Error()+" (this host's values with the plan's)")
	}
	return dropIn
}

// planDropIn is relayctl's sysctl.d file as the plan writes it (removed
// when the spec has no sysctls left).
func planDropIn(p *Plan, f *Facts, planned map[string]string) FileChange {
	content := ""
	if len(p.Sysctl) > 0 {
		content = string(tune.RenderDropIn(planned, DropInHeader(p.Name)))
	}
	cur := fileFact(f, p.Paths.SysctlFile)
	dropIn := fileChange(RoleSysctlDropIn, p.Paths.SysctlFile, cur, content, len(p.Sysctl) == 0)
	for i, l := range dropIn.Diff {
		if k, _, ok := strings.Cut(l.Text, "="); ok {
			_, dropIn.Diff[i].Managed = planned[strings.TrimSpace(k)]
		}
	}
	if dropIn.Change {
		managed := map[string]bool{}
		for k := range planned {
			managed[k] = true
		}
		// Sysctl values are no secret: any user reads them in /proc/sys.
		dropIn.Changes = keyChanges(dropInKeys(cur.Content), dropInKeys(content), managed, noSecret)
	}
	return dropIn
}

// bootFiles are the host's sysctl.d files with our drop-in as planned: what
// decides each key at the next boot. It warns of a drop-in that masks a
// file of the same name, and of files observe did not read.
func bootFiles(h *HostPlan, p *Plan, f *Facts, dropIn string) []tune.ConfFile {
	var files []tune.ConfFile
	for _, cf := range f.SysctlFiles {
		if cf.Path != p.Paths.SysctlFile {
			files = append(files, tune.ConfFile{Path: cf.Path, Content: []byte(cf.Content)})
		}
	}
	if dropIn != "" {
		files = append(files, tune.ConfFile{Path: p.Paths.SysctlFile, Content: []byte(dropIn)})
	}
	if masks, _, err := tune.Masks(files, p.Paths.SysctlFile); err == nil {
		for _, m := range masks {
			h.Warnings = append(h.Warnings, fmt.Sprintf("%s has the same name as %s, which it masks: none of that file's settings will apply at boot any more", p.Paths.SysctlFile, m))
		}
	}
	for _, n := range f.SkippedFiles {
		h.Warnings = append(h.Warnings, fmt.Sprintf("a sysctl.d file with an unusual name was not read (%s): which file decides each key at boot may be wrong", n))
	}
	return files
}

// planSysctl plans one key: whether it changes, which file decides it at
// boot (and whether a later file shadows ours), and what blocks it.
func planSysctl(h *HostPlan, p *Plan, f *Facts, s PlannedSysctl, files []tune.ConfFile, decided map[string]tune.Setting) SysctlChange {
	sf := f.Sysctls[s.Key]
	c := SysctlChange{Key: s.Key, Current: sf.Value, Planned: s.Value, Writable: sf.Writable}
	if !sf.Exists {
		fix := "remove it from the spec or plan for a kernel that has it"
		if near, ok := tune.NearestSysctl(s.Key); ok {
			fix = "did you mean " + near + "? Otherwise " + fix
		}
		h.Blockers = append(h.Blockers, fmt.Sprintf("%s does not exist on this host (kernel %s): nothing can set it; %s", s.Key, f.Kernel, fix))
		return c
	}
	c.Change = !tune.Equal(sf.Value, s.Value)
	by, shadowed, _ := tune.Shadowed(files, p.Paths.SysctlFile, s.Key)
	if ours, ok := decided[s.Key]; ok && !shadowed {
		c.DecidedAtBoot = fmt.Sprintf("%s:%d", ours.Path, ours.Line)
		c.BootValue = tune.Normalize(ours.Value)
	}
	if shadowed {
		c.DecidedAtBoot = fmt.Sprintf("%s:%d", by.Path, by.Line)
		c.BootValue = tune.Normalize(by.Value)
		if by.Line == 0 {
			c.DecidedAtBoot = by.Path
			h.Warnings = append(h.Warnings, fmt.Sprintf("%s: %s masks our drop-in %s, so at the next boot it is not read at all", s.Key, by.Path, p.Paths.SysctlFile))
		} else if !tune.Equal(by.Value, s.Value) {
			c.Shadowed = true
			h.Warnings = append(h.Warnings, fmt.Sprintf("%s: %s sets it to %s and is applied after %s, so at the next boot the kernel gets %s, not %s; move the setting into our drop-in or rename %s", s.Key, c.DecidedAtBoot, c.BootValue, p.Paths.SysctlFile, c.BootValue, s.Value, path.Base(p.Paths.SysctlFile)))
		}
	}
	if c.Change && !sf.Writable {
		h.Blockers = append(h.Blockers, readOnlyBlocker(f, s, sf))
	}
	return c
}

// readOnlyBlocker says why a sysctl cannot be written from where the SSH
// session runs, and what to do.
func readOnlyBlocker(f *Facts, s PlannedSysctl, sf SysctlFact) string {
	where := "where the SSH session runs"
	if !f.InitialNetns {
		where = "in this host's network namespace (the SSH session is in a container or child namespace)"
	}
	fix := "connect as root, or to the machine itself"
	if info, ok := tune.Lookup(s.Key); ok && info.Global {
		fix = "it is global to the machine: plan it on the machine that runs the container (its initial network namespace), then plan this host again"
	}
	return fmt.Sprintf("%s is read-only %s, so apply cannot change it from %s to %s; %s", s.Key, where, tune.Normalize(sf.Value), s.Value, fix)
}
