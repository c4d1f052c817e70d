package agent

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// hostFacts: the kernel, hostname and machine, who the agent runs as, and
// where (its network namespace, and whether it is the initial one).
func (o *observer) hostFacts() {
	var u unix.Utsname
	unix.Uname(&u)
	if v, ok := firstLine("/proc/sys/kernel/osrelease"); ok {
		o.f.value("kernel", 0, v)
	} else {
		o.f.line("kernel", unix.ByteSliceToString(u.Release[:]))
	}
	if v, ok := firstLine("/proc/sys/kernel/hostname"); ok {
		o.f.value("hostname", 0, v)
	} else {
		b, err := headOf("/proc/sys/kernel/hostname", 256)
		o.f.read("hostname", b, err)
	}
	// The machine, for the agent binary relayctl ships to the host.
	o.f.value("arch", 0, unix.ByteSliceToString(u.Machine[:]))
	o.f.line("uid", strconv.Itoa(os.Geteuid()))
	o.readlink("netns-self", "/proc/self/ns/net")
	// Global net.core values are mode 0444 in any network namespace but
	// the initial one (docs/kernel.md): where the session runs, even where
	// /proc/1/ns cannot be read.
	if st, err := lstatT("/proc/sys/net/core/rmem_max"); err == nil {
		o.f.line("netns-probe", modeText(st))
	} else {
		o.f.section("netns-probe", 1, nil)
	}
}

// firstLine is a file's first line, if it has a whole one (the shell's
// read of a short /proc value, which these files give whole to any read).
func firstLine(p string) (string, bool) {
	b, err := headOf(p, 4096)
	if err != nil {
		return "", false
	}
	line, _, ok := strings.Cut(string(b), "\n")
	return line, ok
}

// readlink frames where a symlink points (readlink), or nothing, status 1.
func (o *observer) readlink(name, p string) {
	t, err := os.Readlink(p)
	if err != nil {
		o.f.section(name, 1, nil)
		return
	}
	o.f.line(name, t)
}

// sysctls: each key's runtime value (at most 4096 bytes, read as head -c
// does: the first read at offset 0 takes it whole) and whether it can be
// written here; absent, status 2, if the kernel has no such key. A key
// that is not one (relayctl validates them) reads as absent, never as a
// path outside /proc/sys.
func (o *observer) sysctls() {
	for _, key := range o.q.keys {
		p, ok := procSysPath(key)
		if _, err := os.Stat(p); !ok || err != nil {
			o.f.absent("sysctl " + key)
			continue
		}
		b, err := headOf(p, 4096)
		o.f.read("sysctl "+key, b, err)
		o.f.line("sysctl-writable "+key, yesNo(unix.Access(p, unix.W_OK) == nil))
	}
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// sysctlFiles: the sysctl.d folders' *.conf files in the order relayctl
// gives the folders (tune.SysctlDirs) and by name in each, then
// /etc/sysctl.conf. A folder that is another's alias (/lib -> /usr/lib) is
// read once, under its first name. A file whose name holds characters
// relayctl does not pass through is not read: its folder is reported once
// (observe.sh reported each, and two in one folder made relayctl refuse
// the whole observe as a section seen twice).
func (o *observer) sysctlFiles() {
	seen := map[string]bool{}
	for _, d := range o.q.sysctlDirs {
		if !isDirFollowed(d) {
			continue
		}
		real, err := filepath.EvalSymlinks(d)
		if err != nil || seen[real] {
			continue
		}
		seen[real] = true
		o.sysctlDir(d)
	}
	if isRegular("/etc/sysctl.conf") {
		o.fileOf("file /etc/sysctl.conf", "/etc/sysctl.conf")
	}
}

// sysctlDir frames the regular files d/*.conf, in name order (the shell's
// glob: no dot names), and says once that it left some out.
func (o *observer) sysctlDir(d string) {
	entries, _ := os.ReadDir(d)
	odd := false
	for _, e := range entries {
		n := e.Name()
		if !strings.HasSuffix(n, ".conf") || strings.HasPrefix(n, ".") || !isRegular(d+"/"+n) {
			continue
		}
		if !confName(n) {
			if !odd {
				o.f.value("skipped "+d, 0, "a file name with unusual characters")
			}
			odd = true
			continue
		}
		o.fileOf("file "+d+"/"+n, d+"/"+n)
	}
}

// confName: a sysctl.d file name relayctl passes through.
func confName(n string) bool {
	for _, c := range n {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("._+@:-", c)) {
			return false
		}
	}
	return true
}

// fileOf frames a regular file's first MAXFILE+1 bytes: one more than
// relayctl takes tells it the file was cut.
func (o *observer) fileOf(name, p string) {
	b, err := headOf(p, o.q.maxFile+1)
	o.f.read(name, b, err)
}
