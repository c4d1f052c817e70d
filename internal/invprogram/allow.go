package invprogram

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/relayctl/relayctl/internal/trust"
)

// A spec's inventory program is code its author chose, run on the machine
// that validates, plans or applies it, with that user's rights (often
// root's). So it runs only where that machine's operator allows it: for
// this run, by typing --allow-inventory-program (Allow.Typed), or for
// every run, by listing the program in a file only root can change
// (Allow.List, /etc/relayctl/inventory-programs), which is what a fleet's
// CI keeps. Allowing a program trusts it with whatever arguments a spec
// gives it; the files those arguments name are still checked (safe.go).

// Allow is what lets a program run on this machine.
type Allow struct {
	Typed bool   // the operator typed --allow-inventory-program
	List  string // the machine's list of programs; "" or absent: none
}

// maxListSize bounds the list file.
const maxListSize = 64 << 10

// ErrNotAllowed is a program this machine has not allowed.
var ErrNotAllowed = errors.New("not allowed on this machine")

// check allows the program at path (absolute, as found), or says how to.
func (a Allow) check(path string) error {
	if a.Typed {
		return nil
	}
	listed, err := a.listed(path)
	switch {
	case err != nil:
		return err
	case listed:
		return nil
	}
	list := a.List
	if list == "" {
		list = "the machine's list of programs"
	}
	return fmt.Errorf("%s is %w: a spec's inventory program runs with your rights (often root), so relayctl runs one only where you allow it: give --allow-inventory-program for this run, or have root list %s in %s (one absolute path a line)", path, ErrNotAllowed, path, list)
}

// listed reports whether the list names the program at path, as it is or
// as both resolve through symlinks. A list that exists must be root's
// alone, with every folder above it, and read as relayctl writes it.
func (a Allow) listed(path string) (bool, error) {
	if a.List == "" {
		return false, nil
	}
	data, err := readList(a.List)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	entries, err := parseList(a.List, data)
	if err != nil {
		return false, err
	}
	real, _ := filepath.EvalSymlinks(path)
	for _, e := range entries {
		if e == path {
			return true, nil
		}
		if r, err := filepath.EvalSymlinks(e); err == nil && r == real {
			return true, nil
		}
	}
	return false, nil
}

// readList reads the list, only if root alone can change it: whoever can
// write it chooses what runs as root.
func readList(file string) ([]byte, error) {
	if _, err := os.Lstat(file); err != nil {
		return nil, err
	}
	if err := trust.RootChain(file); err != nil {
		return nil, fmt.Errorf("the list of inventory programs %s is not root's alone (%w): whoever can change it chooses what relayctl runs; chown root and chmod go-w it and its folders", file, err)
	}
	f, err := os.Open(file)
	if err != nil {
		return nil, fmt.Errorf("read the list of inventory programs: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxListSize+1))
	if err != nil {
		return nil, fmt.Errorf("read the list of inventory programs: %w", err)
	}
	if len(data) > maxListSize {
		return nil, fmt.Errorf("the list of inventory programs %s is over %d bytes", file, maxListSize)
	}
	return data, nil
}

// parseList reads the list's lines: an absolute path each, clean; blank
// lines and lines starting with # are left out.
func parseList(file string, data []byte) ([]string, error) {
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if !filepath.IsAbs(line) || filepath.Clean(line) != line || strings.ContainsAny(line, " \t") {
			return nil, fmt.Errorf("%s:%d: want the absolute path of a program, one a line (# starts a comment), got %q", file, n, line)
		}
		out = append(out, line)
	}
	return out, sc.Err()
}
