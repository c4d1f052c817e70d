package agent

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// relay: the relay's process, found through systemd, a pid file, or (no
// manager) its socket, and trusted only if it runs the service's program;
// then its socket read back from the kernel in its network namespace, and
// its /status. Without a trusted process, the socket is read in the
// agent's own namespace.
func (o *observer) relay() {
	var pid string
	switch o.q.manager {
	case "systemd":
		pid = o.systemdService()
	case "command":
		pid = o.pidFromFile()
	case "none":
		pid = o.processBySocket()
	}
	pid, exe := o.trusted(pid)
	o.f.value("service", 0, pid)
	if pid == "" {
		relayCounters(o.f, "", o.q.port, false)
		return
	}
	o.f.value("relay-exe", 0, exe)
	o.readlink("relay-netns", netnsPath(pid))
	relayCounters(o.f, pid, o.q.port, true)
	if o.q.control != "" {
		relayStatus(o.f, pid, o.q.control)
	}
}

// trusted is pid, and the executable it runs, if it is a live process
// that runs the service's program: a pid file or unit pointing elsewhere
// (pid 1, a copy in another namespace) is not read back, and says so.
func (o *observer) trusted(pid string) (string, string) {
	if pid == "" || pid == "0" || !digits(pid) || !isDirFollowed("/proc/"+pid) {
		return "", ""
	}
	exe := relayExe(pid)
	if !o.runsProgram(exe) {
		o.f.value("untrusted-pid", 0, pid+" "+exe)
		return "", ""
	}
	return pid, exe
}

// runsProgram: exe (resolved, as /proc/PID/exe gives it) is what the
// service runs: the spec's installed program (a release of kind none),
// or anything in the releases folder.
func (o *observer) runsProgram(exe string) bool {
	if o.q.program == "-" {
		return strings.HasPrefix(exe, o.q.releases+"/")
	}
	return exe == resolved(o.q.program)
}

// resolved is p with every symlink resolved (readlink -f: the last part
// may be missing), or p itself.
func resolved(p string) string {
	if r, err := filepath.EvalSymlinks(p); err == nil {
		return r
	}
	if d, err := filepath.EvalSymlinks(filepath.Dir(p)); err == nil {
		return filepath.Join(d, filepath.Base(p))
	}
	return p
}

// systemdProps are what relayctl reads of the unit (the systemd section,
// as observe.sh asked for it), and ControlGroup, where its processes are.
var systemdProps = []string{"MainPID", "LoadState", "ActiveState", "SubState", "NRestarts", "InvocationID", "FileDescriptorStoreMax", "NFileDescriptorStore", "ControlGroup"}

// systemdService: relayctl's drop-in of the unit, systemd's word on the
// unit, and the unit's processes (workers beside the main one: their
// sockets are the service's); the main pid. One systemctl show for all,
// where observe.sh asked three times.
func (o *observer) systemdService() string {
	if _, err := os.Stat(o.q.unitDropIn); err == nil {
		o.fileOf("unit-dropin", o.q.unitDropIn)
	} else {
		o.f.absent("unit-dropin")
	}
	out, st := systemctlShow(o.q.unit)
	props := map[string]string{}
	var shown bytes.Buffer
	for _, l := range strings.SplitAfter(string(out), "\n") {
		k, v, _ := strings.Cut(strings.TrimSuffix(l, "\n"), "=")
		props[k] = v
		if k != "ControlGroup" {
			shown.WriteString(l)
		}
	}
	o.f.section("systemd", st, shown.Bytes())
	if st != 0 {
		return ""
	}
	o.servicePIDs(props["ControlGroup"])
	return props["MainPID"]
}

// systemctlShow is systemctl show of the unit's properties, its output
// (stderr too: it is the explanation) and exit status.
func systemctlShow(unit string) ([]byte, int) {
	c := []string{"systemctl", "show", "--property=" + strings.Join(systemdProps, ","), "--", unit}
	out, err := run(c...)
	if err != nil {
		return []byte(out), exitStatus(err)
	}
	return []byte(out), 0
}

// servicePIDs frames the processes of the unit's cgroup (cgroup v2, else
// v1's systemd hierarchy), if its path is a plain one.
func (o *observer) servicePIDs(cg string) {
	if !plainCgroup(cg) {
		return
	}
	for _, procs := range []string{"/sys/fs/cgroup" + cg + "/cgroup.procs", "/sys/fs/cgroup/systemd" + cg + "/cgroup.procs"} {
		if isRegular(procs) {
			b, err := headOf(procs, 64<<10)
			o.f.read("service-pids", b, err)
			return
		}
	}
}

// plainCgroup: cg is an absolute cgroup path of plain characters, none of
// them a way out (..).
func plainCgroup(cg string) bool {
	if !strings.HasPrefix(cg, "/") || strings.Contains(cg, "..") {
		return false
	}
	for _, c := range cg {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("@._:/-", c)) {
			return false
		}
	}
	return true
}

// pidFromFile: the pid the pid file names, trusted only if nobody but
// root can write it: a regular file (no symlink) of root's, no special
// bits, that neither its group nor others can write, read from the very
// file that was checked (observe.sh checked the path, then read it). Its
// words are joined (observe.sh's reading: blanks and newlines dropped).
func (o *observer) pidFromFile() string {
	p := o.q.pidFile
	if fi, err := os.Lstat(p); err != nil || !fi.Mode().IsRegular() {
		return ""
	}
	f, _, err := openHostFile(p, true)
	if err != nil {
		return ""
	}
	defer f.Close()
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		return ""
	}
	if st.Uid != 0 || st.Mode&0o7022 != 0 {
		o.f.value("pidfile-untrusted", 0, fmt.Sprintf("%s is owned by uid %d with mode %s: only root may write it", p, st.Uid, modeText(&st)))
		return ""
	}
	b, _ := readUpTo(f, 32)
	return strings.Join(strings.FieldsFunc(string(b), func(r rune) bool { return r == ' ' || r == '\t' || r == '\n' }), "")
}

// processBySocket: nothing names the relay's process (facts without
// --pid-file or --systemd-unit): the one process that runs the service's
// program and has a UDP socket bound to the port, from the kernel's own
// tables. It is read back only as a pid file's would be (trusted).
func (o *observer) processBySocket() string {
	what := "a release in " + o.q.releases
	if o.q.program != "-" {
		what = o.q.program
	}
	port, _ := strconv.Atoi(o.q.port)
	var found []string
	for _, pid := range procPIDs() {
		if exe, err := os.Readlink("/proc/" + pid + "/exe"); err == nil && o.runsProgram(exe) && bindsUDP(pid, port) {
			found = append(found, pid)
		}
	}
	switch len(found) {
	case 1:
		o.f.value("found-by", 0, fmt.Sprintf("its socket: the one process running %s with udp/%s", what, o.q.port))
		return found[0]
	case 0:
		o.f.value("found-by", 1, fmt.Sprintf("no process running %s has udp/%s", what, o.q.port))
	default:
		o.f.value("found-by", 1, fmt.Sprintf("%d processes running %s have udp/%s: %s", len(found), what, o.q.port, strings.Join(found, " ")))
	}
	return ""
}

// procPIDs are the processes in /proc, in name order (the shell's glob).
func procPIDs() []string {
	entries, _ := os.ReadDir("/proc")
	var out []string
	for _, e := range entries {
		if n := e.Name(); n[0] >= '0' && n[0] <= '9' {
			out = append(out, n)
		}
	}
	return out
}

// bindsUDP: process pid's network namespace has a UDP socket (IPv4 or
// IPv6) bound to port.
func bindsUDP(pid string, port int) bool {
	for _, t := range []string{"udp", "udp6"} {
		b, err := procFile("/proc/" + pid + "/net/" + t)
		if err == nil && udpTableHasPort(b, port) {
			return true
		}
	}
	return false
}

// udpTableHasPort: a /proc/net/udp table has a socket whose local address
// has port ("  12: 0100007F:1E6C 00000000:0000 07 ...").
func udpTableHasPort(table []byte, port int) bool {
	want := fmt.Sprintf(":%04X", port)
	for _, l := range strings.Split(string(table), "\n") {
		slot, rest, ok := strings.Cut(strings.TrimLeft(l, " "), ": ")
		local, _, spaced := strings.Cut(rest, " ")
		if ok && spaced && (slot == "" || digits(slot)) && strings.HasSuffix(local, want) && isUpperHex(strings.TrimSuffix(local, want)) {
			return true
		}
	}
	return false
}

func isUpperHex(s string) bool {
	for _, c := range s {
		if !(c >= '0' && c <= '9' || c >= 'A' && c <= 'F') {
			return false
		}
	}
	return true
}

// exitStatus is a finished command's exit status (1 if it had none).
func exitStatus(err error) int {
	type exitCoder interface{ ExitCode() int }
	if ec, ok := err.(exitCoder); ok && ec.ExitCode() > 0 {
		return ec.ExitCode()
	}
	return 1
}
