package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/relayctl/relayctl/plans"
	"github.com/relayctl/relayctl/plans/inventory"
)

// inventoryPath is where a spec's inventory file is: relative to the
// spec's folder, as the artifact is.
func inventoryPath(specFile, file string) string {
	if filepath.IsAbs(file) {
		return file
	}
	return filepath.Join(filepath.Dir(specFile), file)
}

// readInventory reads an inventory file and hands its folder on for
// group_vars/ and host_vars/.
func readInventory(specFile, file string) (plans.InventoryInput, error) {
	path := inventoryPath(specFile, file)
	data, err := readRegular(path, inventory.MaxSize)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return plans.InventoryInput{}, fmt.Errorf("cannot read inventory %s (%v); the path is relative to the spec's folder", path, errors.Unwrap(err))
		}
		return plans.InventoryInput{}, fmt.Errorf("read inventory: %w", err)
	}
	return plans.InventoryInput{Path: path, Data: data, Dir: os.DirFS(filepath.Dir(path))}, nil
}

// selectHosts reads the inventory a spec names and selects its hosts
// (plans.Spec.SelectHosts): errors and warnings are added to sc's.
func (sc *specFindings) selectHosts() {
	s := sc.spec
	if s.Inventory == nil || s.Inventory.File == "" {
		return
	}
	in, err := readInventory(s.File, s.Inventory.File)
	if err != nil {
		sc.errs = append(sc.errs, &plans.SpecError{File: s.File, Line: s.Inventory.Line, Field: "hosts.inventory", Msg: err.Error()})
		return
	}
	warns, errs := s.SelectHosts(in)
	sc.warnings = append(sc.warnings, warns...)
	sc.errs = append(sc.errs, errs...)
	if len(errs) == 0 {
		sc.errs = append(sc.errs, s.CheckLabelValues()...)
	}
}

// planInventory reads the inventory of a plan whose hosts came from one,
// as it is now, for rollout.CheckPlanFrom.
func planInventory(p *plans.Plan) (plans.InventoryInput, error) {
	in, err := readInventory(p.SpecFile, p.Inventory.File)
	if err != nil {
		return in, withHint(err, "the plan's hosts come from that inventory, selected again before anything connects; run relayctl where the spec and its inventory are")
	}
	return in, nil
}

// targets are where each host is dialled when that is not its name.
func targets(p *plans.Plan) map[string]string {
	out := map[string]string{}
	for _, h := range p.Hosts {
		if h.Target != "" {
			out[h.Host] = h.Target
		}
	}
	return out
}
