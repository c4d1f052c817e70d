package plans

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/relayctl/relayctl/internal/lazyre"
)

var labelValueRe = lazyre.New(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

// validInventoryRecord checks the form of a plan's inventory record
// against the spec's inventory: the same file, sha256s that are sha256s,
// vars file paths that are relative paths.
func validInventoryRecord(rec *InventoryRecord, ref *InventoryRef) error {
	if rec == nil {
		return fmt.Errorf("the spec names inventory %s, the plan records none", ref.File)
	}
	if rec.File != ref.File {
		return fmt.Errorf("inventory.file is %s, the spec names %s", orAbsent(Visible(clipText(rec.File))), ref.Source())
	}
	if !slices.Equal(rec.Program, ref.Program) {
		return fmt.Errorf("inventory.program is %s, the spec's is %s", orAbsent(Visible(clipText(ArgvText(rec.Program)))), orAbsent(ArgvText(ref.Program)))
	}
	if ref.Program != nil && len(rec.VarsFiles) > 0 {
		return fmt.Errorf("inventory.vars_files: a program's output has none")
	}
	if !validSHA(rec.SHA256) {
		return fmt.Errorf("inventory.sha256 %q is not a sha256", Visible(clipText(rec.SHA256)))
	}
	for _, v := range rec.VarsFiles {
		if !validSHA(v.SHA256) || v.Path == "" || hostText(v.Path) != nil || strings.HasPrefix(v.Path, "/") || strings.Contains("/"+v.Path+"/", "/../") {
			return fmt.Errorf("inventory.vars_files holds %q", Visible(clipText(v.Path)))
		}
	}
	return nil
}

func validSHA(s string) bool {
	hex, ok := strings.CutPrefix(s, "sha256:")
	return ok && sha256Re.MatchString(hex)
}

func clipText(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}

// validateHostNames checks the plan's hosts against its spec: a listed
// spec's hosts exactly, in order, with no target or label; an inventory
// spec's hosts in a form the selection could give (CheckInventory selects
// them again and compares).
func validateHostNames(p *Plan, s *Spec) error {
	if s.Inventory == nil {
		if len(p.Hosts) != len(s.Hosts) {
			return fmt.Errorf("%d hosts, the spec has %d", len(p.Hosts), len(s.Hosts))
		}
		for i, h := range p.Hosts {
			if h == nil || h.Host != s.Hosts[i] {
				return fmt.Errorf("host %d is not %s, the spec's", i+1, s.Hosts[i])
			}
			if h.Target != "" || len(h.Labels) > 0 {
				return fmt.Errorf("host %s has a target or labels; a listed host has neither", h.Host)
			}
		}
		return nil
	}
	if len(p.Hosts) > MaxFleet {
		return fmt.Errorf("%d hosts; at most %d", len(p.Hosts), MaxFleet)
	}
	seen := make(map[string]bool, len(p.Hosts))
	for i, h := range p.Hosts {
		if h == nil || ValidHost(h.Host) != nil || seen[h.Host] {
			return fmt.Errorf("host %d is not a host name, or is named twice", i+1)
		}
		seen[h.Host] = true
		if h.Target != "" && (ValidHost(h.Target) != nil || h.Target == h.Host) {
			return fmt.Errorf("host %s: target %q", h.Host, Visible(clipText(h.Target)))
		}
		if len(h.Labels) != len(s.Inventory.Labels) {
			return fmt.Errorf("host %s has %d labels, the spec names %d", h.Host, len(h.Labels), len(s.Inventory.Labels))
		}
		for _, k := range s.Inventory.Labels {
			if v, ok := h.Labels[k]; !ok || !labelValueRe.MatchString(v) {
				return fmt.Errorf("host %s: label %s is %q", h.Host, k, Visible(clipText(v)))
			}
		}
	}
	return nil
}

// CheckInventory selects an inventory plan's hosts again, from the
// inventory and vars files as they are now, and compares what they
// resolve to with the plan's: the same hosts in the same order, each with
// the same target and labels (all a plan takes from an inventory). Files
// whose bytes changed (a comment, a variable relayctl does not read, a
// host outside the pattern) but resolve to the same hosts leave the plan
// standing: the note says what changed, the plan keeps its record of the
// sha256s it was made from. Other hosts from changed files are
// ErrFleetChanged, with what changed; other hosts from the same files are
// ErrPlanEdited. A plan of listed hosts passes.
func CheckInventory(p *Plan, in InventoryInput) (note string, err error) {
	s, err := ParseSpec(p.SpecFile, []byte(p.Spec))
	if err != nil {
		return "", fmt.Errorf("%w: the spec recorded in the plan does not parse:\n%v", ErrPlanEdited, err)
	}
	if s.Inventory == nil {
		return "", nil
	}
	if p.Inventory == nil {
		return "", fmt.Errorf("%w: the spec names inventory %s, the plan records none", ErrPlanEdited, s.Inventory.Source())
	}
	_, errs := s.SelectHosts(in)
	if len(errs) > 0 {
		return "", fmt.Errorf("%w: selecting its hosts again: %v", ErrFleetChanged, errs)
	}
	d := recordDiff(p.Inventory, s.InventoryRecord)
	other := otherSelection(p, s)
	switch {
	case other == "" && d != "":
		return d + "; it selects the same hosts, with the same targets and labels: the plan stands", nil
	case other == "":
		return "", nil
	case d != "":
		return "", fmt.Errorf("%w: %s; %s; make a new plan (relayctl plan %s --out PLAN) and review it", ErrFleetChanged, d, hostsDiff(p, s), p.SpecFile)
	}
	return "", fmt.Errorf("%w: %s", ErrPlanEdited, other)
}

// otherSelection says how the plan's hosts differ from what the spec
// selected (its Hosts, Targets, Labels): "" when they are the same, in
// the same order.
func otherSelection(p *Plan, s *Spec) string {
	if len(p.Hosts) != len(s.Hosts) {
		return fmt.Sprintf("%d hosts, its inventory selects %d", len(p.Hosts), len(s.Hosts))
	}
	for i, h := range p.Hosts {
		name := s.Hosts[i]
		if h.Host != name || h.Target != s.Targets[name] || !maps.Equal(h.Labels, s.Labels[name]) {
			return fmt.Sprintf("host %d is %s (target %s, labels %s), its inventory gives %s (target %s, labels %s)", i+1,
				Visible(h.Host), orAbsent(Visible(h.Target)), LabelsText(h.Labels), name, orAbsent(s.Targets[name]), LabelsText(s.Labels[name]))
		}
	}
	return ""
}

// recordDiff names the first inventory or vars file that is not as
// recorded, "" when all are.
func recordDiff(was, now *InventoryRecord) string {
	if was.SHA256 != now.SHA256 {
		return fmt.Sprintf("%s has sha256 %s, the plan was made from %s", now.Source(), short(now.SHA256), short(was.SHA256))
	}
	old := map[string]string{}
	for _, v := range was.VarsFiles {
		old[v.Path] = v.SHA256
	}
	for _, v := range now.VarsFiles {
		switch sum, ok := old[v.Path]; {
		case !ok:
			return fmt.Sprintf("vars file %s is new", v.Path)
		case sum != v.SHA256:
			return fmt.Sprintf("vars file %s has sha256 %s, the plan was made from %s", v.Path, short(v.SHA256), short(sum))
		}
		delete(old, v.Path)
	}
	for _, v := range was.VarsFiles {
		if _, gone := old[v.Path]; gone {
			return fmt.Sprintf("vars file %s is gone", Visible(v.Path))
		}
	}
	return ""
}

// hostsDiff says how the selection changed: hosts added, removed, and
// those whose target or labels changed; else their order (waves and
// canaries follow it).
func hostsDiff(p *Plan, s *Spec) string {
	was := make(map[string]*HostPlan, len(p.Hosts))
	for _, h := range p.Hosts {
		was[h.Host] = h
	}
	var added, changed []string
	for _, name := range s.Hosts {
		h, ok := was[name]
		switch {
		case !ok:
			added = append(added, name)
		case h.Target != s.Targets[name] || !maps.Equal(h.Labels, s.Labels[name]):
			changed = append(changed, name)
		}
		delete(was, name)
	}
	var removed []string
	for _, h := range p.Hosts {
		if _, ok := was[h.Host]; ok {
			removed = append(removed, Visible(h.Host))
		}
	}
	if len(added)+len(removed)+len(changed) == 0 {
		return "it selects the same hosts in another order"
	}
	var parts []string
	for _, x := range []struct {
		what  string
		hosts []string
	}{{"added", added}, {"removed", removed}, {"with another target or labels", changed}} {
		if len(x.hosts) > 0 {
			parts = append(parts, fmt.Sprintf("%d host(s) %s (%s)", len(x.hosts), x.what, FewNames(x.hosts, 5)))
		}
	}
	return "the selection now has " + strings.Join(parts, ", ")
}

// FewNames lists up to n names, then how many more.
func FewNames(names []string, n int) string {
	if len(names) <= n {
		return strings.Join(names, " ")
	}
	return strings.Join(names[:n], " ") + fmt.Sprintf(" and %d more", len(names)-n)
}

// LabelsText is labels as key=value words in the spec's order of keys
// (sorted here: a plan's labels are a map), "(none)" for none.
func LabelsText(l map[string]string) string {
	if len(l) == 0 {
		return "(none)"
	}
	keys := slices.Sorted(maps.Keys(l))
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = k + "=" + Visible(l[k])
	}
	return strings.Join(out, " ")
}

// ErrNeedsInventory is an inventory plan checked without its inventory.
var ErrNeedsInventory = errors.New("the plan's hosts come from an inventory, which must be read to check them")
