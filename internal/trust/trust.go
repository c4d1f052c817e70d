// Package trust says whether a local file relayctl is about to trust (an
// allowed_signers file, an inventory program and the files it reads) can
// be changed by someone other than root or the user running relayctl.
package trust

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// Owned: p belongs to root or to the user running relayctl, and no one
// else may write it (a folder with the sticky bit, such as /tmp, keeps
// others from replacing what is in it).
func Owned(p string) error { return owned(p, false) }

// RootOwned is Owned with root as the only owner: for what the machine
// itself decides, such as which programs a spec may run.
func RootOwned(p string) error { return owned(p, true) }

func owned(p string, rootOnly bool) error {
	st, err := os.Stat(p)
	if err != nil {
		return err
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("cannot tell who owns %s", p)
	}
	switch {
	case rootOnly && sys.Uid != 0:
		return fmt.Errorf("%s belongs to uid %d, not root", p, sys.Uid)
	case sys.Uid != 0 && int(sys.Uid) != os.Geteuid():
		return fmt.Errorf("%s belongs to uid %d, neither root nor you", p, sys.Uid)
	}
	if st.Mode().Perm()&0o022 != 0 && !(st.IsDir() && st.Mode()&os.ModeSticky != 0) {
		return fmt.Errorf("%s is writable by others (mode %04o)", p, st.Mode().Perm())
	}
	return nil
}

// Chain is Owned of p and of every folder above it, up to /, both as p is
// written and as it resolves through symlinks: whoever can write any of
// those folders can put another file in p's place (or a symlink in one
// folder's), so they count as much as the file.
func Chain(p string) error { return chain(p, Owned) }

// RootChain is Chain with RootOwned.
func RootChain(p string) error { return chain(p, RootOwned) }

func chain(p string, check func(string) error) error {
	abs, err := filepath.Abs(p)
	if err != nil {
		return err
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return err
	}
	seen := map[string]bool{}
	for _, q := range append(above(real), above(abs)[1:]...) {
		if seen[q] {
			continue
		}
		seen[q] = true
		if err := check(q); err != nil {
			return err
		}
	}
	return nil
}

// above is p and every folder above it, p first, / last (p absolute and
// clean).
func above(p string) []string {
	out := []string{p}
	for d := filepath.Dir(p); ; d = filepath.Dir(d) {
		out = append(out, d)
		if d == "/" {
			return out
		}
	}
}
