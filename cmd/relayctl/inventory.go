package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/urfave/cli/v2"

	"github.com/relayctl/relayctl/internal/invprogram"
	"github.com/relayctl/relayctl/plans"
	"github.com/relayctl/relayctl/plans/inventory"
)

// systemInventoryPrograms is the machine's list of the programs a spec's
// inventory may run (hosts.inventory.program), one absolute path a line,
// root's alone: what a fleet's CI keeps, where an operator at a terminal
// types --allow-inventory-program instead. Tests point it elsewhere;
// nothing else changes it. The help names the machine's.
var systemInventoryPrograms = machineInventoryPrograms

const machineInventoryPrograms = "/etc/relayctl/inventory-programs"

// allowProgramFlag is the flag of every command that may run a spec's
// inventory program.
func allowProgramFlag() cli.Flag {
	return &cli.BoolFlag{Name: "allow-inventory-program", Usage: "run the spec's inventory program (hosts.inventory.program) on this machine, with your rights, although " + machineInventoryPrograms + " does not list it"}
}

// inventoryAllow is what lets this run run a spec's inventory program.
func inventoryAllow(c *cli.Context) invprogram.Allow {
	return invprogram.Allow{Typed: c.Bool("allow-inventory-program"), List: systemInventoryPrograms}
}

// inventoryPath is where a spec's inventory file is: relative to the
// spec's folder, as the artifact is.
func inventoryPath(specFile, file string) string {
	if filepath.IsAbs(file) {
		return file
	}
	return filepath.Join(filepath.Dir(specFile), file)
}

// readInventory reads the inventory a spec names: the file and its
// folder (for group_vars/ and host_vars/), or what its program prints
// where allow lets it run.
func readInventory(specFile string, ref *plans.InventoryRef, allow invprogram.Allow) (plans.InventoryInput, error) {
	if ref.Program != nil {
		return runInventory(specFile, ref, allow)
	}
	path := inventoryPath(specFile, ref.File)
	data, err := readRegular(path, inventory.MaxSize)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return plans.InventoryInput{}, fmt.Errorf("cannot read inventory %s (%v); the path is relative to the spec's folder", path, errors.Unwrap(err))
		}
		return plans.InventoryInput{}, fmt.Errorf("read inventory: %w", err)
	}
	return plans.InventoryInput{Path: path, Data: data, Dir: os.DirFS(filepath.Dir(path))}, nil
}

// runInventory runs the spec's inventory program in the spec's folder
// (internal/invprogram). Ctrl-C while it runs ends it, and then relayctl.
func runInventory(specFile string, ref *plans.InventoryRef, allow invprogram.Allow) (plans.InventoryInput, error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	timeout := ref.Timeout
	if timeout == 0 {
		timeout = plans.DefaultInventoryTimeout
	}
	res, err := invprogram.Run(ctx, ref.Program, invprogram.Options{
		Name: plans.ArgvText(ref.Program), Dir: filepath.Dir(specFile), Timeout: timeout, MaxOutput: inventory.MaxSize, Allow: allow,
	})
	if err != nil {
		return plans.InventoryInput{}, err
	}
	return plans.InventoryInput{Data: res.Output, Stderr: res.Stderr}, nil
}

// selectHosts reads the inventory a spec names and selects its hosts
// (plans.Spec.SelectHosts): errors and warnings are added to sc's.
func (sc *specFindings) selectHosts(allow invprogram.Allow) {
	s := sc.spec
	if s.Inventory == nil || s.Inventory.File == "" && s.Inventory.Program == nil {
		return
	}
	in, err := readInventory(s.File, s.Inventory, allow)
	if err != nil {
		field := "hosts.inventory"
		if s.Inventory.Program != nil {
			field += ".program"
		}
		sc.errs = append(sc.errs, &plans.SpecError{File: s.File, Line: s.Inventory.Line, Field: field, Msg: err.Error()})
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
// as it is now, for rollout.CheckPlanFrom: where the spec recorded in the
// plan says it is, or what its program prints now.
func planInventory(p *plans.Plan, allow invprogram.Allow) (plans.InventoryInput, error) {
	s, err := plans.ParseSpec(p.SpecFile, []byte(p.Spec))
	switch {
	case err != nil:
		return plans.InventoryInput{}, fmt.Errorf("%w: the spec recorded in the plan does not parse:\n%v", plans.ErrPlanEdited, err)
	case s.Inventory == nil:
		return plans.InventoryInput{}, fmt.Errorf("%w: the spec recorded in the plan names no inventory, but the plan records one", plans.ErrPlanEdited)
	}
	in, err := readInventory(p.SpecFile, s.Inventory, allow)
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
