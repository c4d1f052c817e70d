package main

// Reading the files a user points relayctl at (specs, plans, facts), with
// a hint for each way of pointing at the wrong one: a path that is not
// there, a spec given where a plan goes (or the other way round), a file
// relayctl may not read.

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/relayctl/relayctl/plans"
)

// readSpecFile reads a spec for plan, validate, verify, facts and size.
func readSpecFile(file string) ([]byte, error) {
	data, err := readRegular(file, plans.MaxSpecSize)
	if err != nil {
		return nil, withHint(fmt.Errorf("read spec: %w", err), specHint(file, err))
	}
	return data, nil
}

// readPlanFile reads a plan for apply, stage, show, approve and verify.
func readPlanFile(file string) ([]byte, error) {
	data, err := readRegular(file, plans.MaxPlanSize)
	if err != nil {
		return nil, withHint(fmt.Errorf("read plan: %w", err), planHint(file, err))
	}
	return data, nil
}

func specHint(file string, err error) string {
	switch {
	case looksLikePlan(file):
		return fmt.Sprintf("%s looks like a plan: give it to relayctl apply, show or verify; plan takes the spec (YAML) it was made from", file)
	case errors.Is(err, os.ErrNotExist):
		return "a spec is a YAML file you write (docs/spec.md); relayctl validate SPEC checks one without connecting"
	}
	return readHint(file, err)
}

func planHint(file string, err error) string {
	switch {
	case looksLikeSpec(file):
		return fmt.Sprintf("%s looks like a spec: relayctl plan %s --out PLAN makes the plan to give here", file, file)
	case errors.Is(err, os.ErrNotExist):
		return fmt.Sprintf("a plan is the file relayctl plan SPEC --out %s writes; make it first", file)
	}
	return readHint(file, err)
}

// readHint is the hint for a file that exists but cannot be read.
func readHint(file string, err error) string {
	if errors.Is(err, os.ErrPermission) {
		return fmt.Sprintf("relayctl reads %s as the user running it: check its owner and mode (ls -l %s)", file, file)
	}
	return fmt.Sprintf("give the path of a regular file (%s is not one relayctl can read)", file)
}

// notAPlanHint is the hint for a file that is not a plan at all.
func notAPlanHint(file string) string {
	if looksLikeSpec(file) {
		return fmt.Sprintf("%s looks like a spec: relayctl plan %s --out PLAN makes the plan to give here", file, file)
	}
	return "a plan is the JSON file relayctl plan SPEC --out PLAN writes; give that file"
}

func looksLikeSpec(file string) bool {
	ext := strings.ToLower(filepath.Ext(file))
	return ext == ".yaml" || ext == ".yml"
}

func looksLikePlan(file string) bool {
	return strings.ToLower(filepath.Ext(file)) == ".plan"
}
