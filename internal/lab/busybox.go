package lab

import (
	"bufio"
	"bytes"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// KindBusybox is Host.Kind of a host whose userland is busybox
// (HostOptions.Busybox): every folder an SSH session finds on its PATH
// holds busybox's applets and only four programs of Debian's (ss, ip,
// flock, zstd), plus the sshd that serves the sessions.
const KindBusybox = "busybox"

// busyboxBinary is Debian's busybox (busybox-static: one static binary).
const busyboxBinary = "/bin/busybox"

// busyboxDebianTools are the only Debian programs a busybox host keeps on
// its PATH, in place of busybox's applets of the same name where it has one
// (ip): what a minimal image adds to busybox to tune and read sockets.
var busyboxDebianTools = []string{"ss", "ip", "flock", "zstd"}

// sessionPath is the PATH Debian's sshd gives root's sessions; userPath is
// the one it gives other users. A busybox host hides every folder of both.
const (
	sessionPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	userPath    = "/usr/local/bin:/usr/bin:/bin:/usr/games"
)

// sessionEnv is the environment of root's SSH session on a busybox host,
// for commands the lab runs there itself (Host.Command).
var sessionEnv = []string{"PATH=" + sessionPath, "HOME=/root", "USER=root", "LOGNAME=root", "SHELL=/bin/sh"}

// CheckBusyboxPrerequisites reports what a busybox host needs and the
// machine lacks, wrapped in ErrPrerequisite: Debian's busybox-static (the
// dynamic busybox package, which replaces it, is another build: no su, and
// its sh looks up PATH before its applets), and the four Debian tools.
func CheckBusyboxPrerequisites() error {
	if _, err := busyboxApplets(); err != nil {
		return fmt.Errorf("%w: %v (Debian package: busybox-static)", ErrPrerequisite, err)
	}
	if err := isStatic(busyboxBinary); err != nil {
		return fmt.Errorf("%w: %v (Debian package: busybox-static, not busybox)", ErrPrerequisite, err)
	}
	for _, t := range busyboxDebianTools {
		if _, err := exec.LookPath(t); err != nil {
			return fmt.Errorf("%w: %s not found (Debian packages: iproute2, util-linux, zstd)", ErrPrerequisite, t)
		}
	}
	return nil
}

// isStatic reports an error unless path is a statically linked ELF
// executable (no program interpreter).
func isStatic(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is dynamically linked", path)
		}
	}
	return nil
}

// busyboxApplets lists the machine's busybox applets as it would install
// them (busybox --list-full: "bin/sh", "usr/bin/awk", ...).
func busyboxApplets() ([]string, error) {
	out, err := exec.Command(busyboxBinary, "--list-full").Output()
	if err != nil {
		return nil, fmt.Errorf("%s --list-full: %w", busyboxBinary, err)
	}
	var as []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if a := strings.TrimSpace(sc.Text()); a != "" {
			as = append(as, a)
		}
	}
	if len(as) == 0 {
		return nil, fmt.Errorf("%s --list-full lists no applet", busyboxBinary)
	}
	return as, nil
}

// userland is what a busybox host sees in place of the machine's programs:
// a tree on the machine (under the host's directory) whose folders are
// bound, inside the host's mount namespace only, over the machine's.
type userland struct {
	root string   // the tree: root+"/usr/bin" is bound over /usr/bin
	dirs []string // the folders it hides, as the machine resolves them
}

// pathDirs are the folders a session could find a program in, resolved
// (/bin is usr/bin on Debian 12), each once; the one holding the machine's
// mount last, since the bind over it hides mount from the binds after it.
func pathDirs() []string {
	var ds []string
	for _, d := range strings.Split(sessionPath+":"+userPath+":/usr/local/games", ":") {
		r, err := filepath.EvalSymlinks(d)
		if err != nil || slices.Contains(ds, r) {
			continue // missing: nothing to hide
		}
		ds = append(ds, r)
	}
	if m, err := exec.LookPath("mount"); err == nil {
		if r, err := filepath.EvalSymlinks(m); err == nil {
			if i := slices.Index(ds, filepath.Dir(r)); i >= 0 {
				last := ds[i]
				ds = append(slices.Delete(ds, i, i+1), last)
			}
		}
	}
	return ds
}

// prepareBusybox lays out the host's userland under its directory: an
// empty folder for each folder on PATH, busybox and a symlink to it for
// each applet where busybox --install -s would put it, copies of the
// Debian tools and the sshd at their own paths, and /etc/passwd with a
// login shell the host has (root's: busybox sh).
func (h *Host) prepareBusybox() error {
	u := userland{root: filepath.Join(h.dir, "userland"), dirs: pathDirs()}
	for _, d := range u.dirs {
		if err := os.MkdirAll(filepath.Join(u.root, d), 0o755); err != nil {
			return fmt.Errorf("%s: busybox userland: %w", h.Name, err)
		}
	}
	bb, err := u.install(busyboxBinary)
	if err != nil {
		return fmt.Errorf("%s: busybox userland: %w", h.Name, err)
	}
	for _, t := range append(slices.Clone(busyboxDebianTools), sshdBinary) {
		p, err := exec.LookPath(t)
		if err == nil {
			_, err = u.install(p)
		}
		if err != nil {
			return fmt.Errorf("%s: busybox userland: %w", h.Name, err)
		}
	}
	if err := u.linkApplets(bb); err != nil {
		return fmt.Errorf("%s: busybox userland: %w", h.Name, err)
	}
	if err := u.writePasswd(); err != nil {
		return fmt.Errorf("%s: busybox userland: %w", h.Name, err)
	}
	h.userland = u
	return nil
}

// install copies the machine's program at path to where it resolves, in
// the tree, and returns that path as the host sees it.
func (u userland) install(path string) (string, error) {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return "", fmt.Errorf("install %s: %w", path, err)
	}
	if !slices.Contains(u.dirs, filepath.Dir(real)) {
		return "", fmt.Errorf("install %s: %s is in no folder on PATH", path, real)
	}
	if err := copyFile(real, filepath.Join(u.root, real), 0o755); err != nil {
		return "", fmt.Errorf("install %s: %w", path, err)
	}
	return real, nil
}

// linkApplets makes a symlink to busybox (bb, as the host sees it) for
// each applet in a folder on PATH, as busybox --install -s does, but none
// named as a Debian tool: PATH finds Debian's ip, not busybox's.
func (u userland) linkApplets(bb string) error {
	applets, err := busyboxApplets()
	if err != nil {
		return err
	}
	for _, a := range applets {
		dir, err := filepath.EvalSymlinks(filepath.Join("/", filepath.Dir(a)))
		if err != nil || !slices.Contains(u.dirs, dir) {
			continue // linuxrc, at /: on no PATH
		}
		name := filepath.Base(a)
		if slices.Contains(busyboxDebianTools, name) || name == "busybox" {
			continue
		}
		link := filepath.Join(u.root, dir, name)
		if err := os.Symlink(bb, link); err != nil {
			return fmt.Errorf("link applet %s: %w", a, err)
		}
	}
	return nil
}

// writePasswd writes the machine's /etc/passwd with every login shell the
// host lacks (bash, root's on Debian) made /bin/sh, busybox's: sshd runs
// every session's command with the user's shell.
func (u userland) writePasswd() error {
	b, err := os.ReadFile("/etc/passwd")
	if err != nil {
		return fmt.Errorf("read /etc/passwd: %w", err)
	}
	lines := strings.Split(string(b), "\n")
	for i, l := range lines {
		f := strings.Split(l, ":")
		if len(f) == 7 && !u.has(f[6]) {
			f[6] = "/bin/sh"
			lines[i] = strings.Join(f, ":")
		}
	}
	p := filepath.Join(u.root, "etc/passwd")
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	return os.WriteFile(p, []byte(strings.Join(lines, "\n")), 0o644)
}

// has reports whether the host has the program at path (as the machine
// resolves its folder: /bin/sh is usr/bin/sh in the tree).
func (u userland) has(path string) bool {
	dir, err := filepath.EvalSymlinks(filepath.Dir(path))
	if err != nil || !slices.Contains(u.dirs, dir) {
		return false
	}
	_, err = os.Lstat(filepath.Join(u.root, dir, filepath.Base(path)))
	return err == nil
}

// binds are the userland's (source, target) pairs for the host's mount
// script: /etc/passwd first, then the folders on PATH, the one holding
// mount last.
func (u userland) binds() []string {
	bs := []string{filepath.Join(u.root, "etc/passwd"), "/etc/passwd"}
	for _, d := range u.dirs {
		bs = append(bs, filepath.Join(u.root, d), d)
	}
	return bs
}
