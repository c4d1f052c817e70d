package invprogram

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/relayctl/relayctl/internal/trust"
)

// What relayctl checks before a program runs, beyond whether the machine
// allows it (allow.go). Whoever can change a file the program runs or
// reads runs code with the program's rights, which are relayctl's, often
// root's: [sh, inventory/open.sh] runs open.sh as surely as
// [inventory/open.sh] does, and ansible-inventory runs what an inventory
// folder, its group_vars/ or an ansible.cfg tells it to. So every file
// relayctl can name is held to one rule (trust.Chain): it, and every
// folder above it as written and as resolved, belongs to root or the
// caller and no one else can write it (a sticky folder such as /tmp
// excepted). A program may read more than relayctl can name (a file its
// own code opens, ~/.ansible.cfg): those it is trusted with.

// maxTreeEntries bounds the files checked under the folders a program is
// given (an inventory folder, group_vars/): more is an error, not a guess.
const maxTreeEntries = 10000

// prepare finds the program, and checks that this machine allows it and
// that it and everything it is given are safe to run and read. It returns
// the program's path.
func prepare(argv []string, o Options) (string, error) {
	path, err := resolve(argv[0], o.Dir)
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(path); err != nil {
		return "", err
	}
	if err := o.Allow.check(path); err != nil {
		return "", err
	}
	if err := programSafe(path); err != nil {
		return "", err
	}
	for _, p := range namedFiles(argv[1:], o.Dir) {
		if err := fileSafe(p, "a file it is given"); err != nil {
			return "", err
		}
	}
	if err := workFolderSafe(o.Dir); err != nil {
		return "", err
	}
	return path, nil
}

// resolve finds the program: a name with a slash relative to dir (or
// absolute), any other in PATH, as a shell finds it.
func resolve(prog, dir string) (string, error) {
	path := prog
	if strings.Contains(prog, "/") {
		if !filepath.IsAbs(prog) {
			path = filepath.Join(dir, prog)
		}
	} else {
		found, err := exec.LookPath(prog)
		if err != nil {
			return "", fmt.Errorf("%s is not in PATH (%s); give its path", prog, os.Getenv("PATH"))
		}
		path = found
	}
	return filepath.Abs(path)
}

// programSafe: a regular executable file that no one but root or the
// caller can change, nor any folder above it.
func programSafe(path string) error {
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() || st.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("%s is not an executable file (mode %s); chmod +x it", path, st.Mode())
	}
	if err := trust.Chain(path); err != nil {
		return unsafe(err, "it")
	}
	return nil
}

// namedFiles are the files and folders the arguments name that exist: an
// argument, what follows the = of an option (--config=FILE), or what
// follows a short option's letter (-iFILE), as a path relative to dir. A word that names nothing on disk is not a file.
func namedFiles(args []string, dir string) []string {
	var out []string
	for _, a := range args {
		words := []string{a}
		if _, v, ok := strings.Cut(a, "="); ok && strings.HasPrefix(a, "-") {
			words = append(words, v)
		}
		if len(a) > 2 && a[0] == '-' && a[1] != '-' {
			words = append(words, a[2:])
		}
		for _, w := range words {
			if w == "" {
				continue
			}
			if !filepath.IsAbs(w) {
				w = filepath.Join(dir, w)
			}
			// Only what can hold code or settings: not a device, a pipe
			// (/dev/stdout) or a link that leads nowhere.
			if st, err := os.Stat(w); err == nil && (st.Mode().IsRegular() || st.IsDir()) {
				out = append(out, w)
			}
		}
	}
	return out
}

// fileSafe checks a file or folder the program reads (what, in messages):
// it and every folder above it, everything under it when it is a folder,
// and the group_vars/ and host_vars/ Ansible reads beside an inventory.
func fileSafe(p, what string) error {
	if err := trust.Chain(p); err != nil {
		return unsafe(err, what+", "+p+",")
	}
	budget := maxTreeEntries
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return err
	}
	if st, err := os.Stat(real); err == nil && st.IsDir() {
		if err := treeSafe(real, &budget); err != nil {
			return unsafe(err, what+", "+p+",")
		}
	}
	for _, vars := range []string{"group_vars", "host_vars"} {
		d := filepath.Join(filepath.Dir(real), vars)
		if _, err := os.Lstat(d); err != nil {
			continue
		}
		if err := trust.Chain(d); err != nil {
			return unsafe(err, "Ansible's "+vars+"/ beside "+p+",")
		}
		if err := treeSafe(d, &budget); err != nil {
			return unsafe(err, "Ansible's "+vars+"/ beside "+p+",")
		}
	}
	return nil
}

// treeSafe checks everything under the folder dir (whose own chain is
// checked): each file and folder, and where a symlink leads (its target's
// chain, and the target's tree when it is a folder). At most *budget
// entries in all.
func treeSafe(dir string, budget *int) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case p == dir:
			return nil
		case *budget <= 0:
			return fmt.Errorf("more than %d files and folders under what it is given: relayctl checks each one, and stops there", maxTreeEntries)
		}
		*budget--
		switch t := d.Type(); {
		case t.IsRegular() || t.IsDir():
			return trust.Owned(p)
		case t&fs.ModeSymlink == 0:
			return nil // a device, pipe or socket holds no code
		}
		if err := trust.Chain(p); err != nil {
			return err
		}
		real, err := filepath.EvalSymlinks(p)
		if err != nil {
			return err
		}
		if st, err := os.Stat(real); err == nil && st.IsDir() && !strings.HasPrefix(real+"/", dir+"/") {
			return treeSafe(real, budget)
		}
		return nil
	})
}

// workFolderSafe checks the folder the program runs in (the spec's) and
// the configuration Ansible reads from it, ./ansible.cfg, or from
// $ANSIBLE_CONFIG: a plugin path set there is code ansible-inventory runs.
func workFolderSafe(dir string) error {
	if err := trust.Chain(dir); err != nil {
		return unsafe(err, "the folder it runs in, "+dir+",")
	}
	cfgs := []string{filepath.Join(dir, "ansible.cfg")}
	if c := os.Getenv("ANSIBLE_CONFIG"); c != "" {
		if !filepath.IsAbs(c) {
			c = filepath.Join(dir, c)
		}
		cfgs = append(cfgs, c)
	}
	for _, c := range cfgs {
		if _, err := os.Lstat(c); errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err := trust.Chain(c); err != nil {
			return unsafe(err, "the Ansible configuration "+c+", which ansible-inventory reads,")
		}
	}
	return nil
}

// unsafe says why a file that fails the rule is not run or read.
func unsafe(err error, what string) error {
	return fmt.Errorf("%w: whoever can change %s would run as you (often root); chown it to root or yourself and chmod go-w it and every folder above it", err, what)
}
