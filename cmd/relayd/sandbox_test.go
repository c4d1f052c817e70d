package main

import (
	"fmt"
	"os"
	"runtime"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// noNetlinkEnv, set to 1 in this test binary's environment, makes it a
// wrapper that runs its arguments without netlink sockets: a seccomp
// filter makes socket(AF_NETLINK, ...) fail with EAFNOSUPPORT, as systemd's
// RestrictAddressFamilies= does for a family it leaves out (relayd.service
// before it listed AF_NETLINK), and the arguments are exec'd under it.
const noNetlinkEnv = "TEST_RELAYD_NO_NETLINK"

// runWrapper runs the wrapper when this binary was started as one; it
// returns only when it was not.
func runWrapper() {
	if os.Getenv(noNetlinkEnv) != "1" {
		return
	}
	os.Unsetenv(noNetlinkEnv)
	err := execWithoutNetlink(os.Args[1:])
	fmt.Fprintf(os.Stderr, "%s: %v\n", noNetlinkEnv, err)
	os.Exit(1)
}

// execWithoutNetlink installs the filter on this thread and execs argv
// from it: the new program keeps the filter.
func execWithoutNetlink(argv []string) error {
	if len(argv) == 0 {
		return fmt.Errorf("nothing to run")
	}
	arch, ok := map[string]uint32{"amd64": unix.AUDIT_ARCH_X86_64, "arm64": unix.AUDIT_ARCH_AARCH64}[runtime.GOARCH]
	if !ok {
		return fmt.Errorf("no seccomp filter written for %s", runtime.GOARCH)
	}
	const (
		ld  = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
		jeq = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
		ret = unix.BPF_RET | unix.BPF_K
	)
	filter := []unix.SockFilter{
		{Code: ld, K: 4},                       // seccomp_data.arch
		{Code: jeq, K: arch, Jf: 4},            // another architecture's call: allow
		{Code: ld, K: 0},                       // seccomp_data.nr
		{Code: jeq, K: unix.SYS_SOCKET, Jf: 2}, // not socket(2): allow
		{Code: ld, K: 16},                      // args[0], its low word (little-endian)
		{Code: jeq, K: unix.AF_NETLINK, Jt: 1}, // the family
		{Code: ret, K: unix.SECCOMP_RET_ALLOW}, // 6
		{Code: ret, K: unix.SECCOMP_RET_ERRNO | uint32(unix.EAFNOSUPPORT)}, // 7
	}
	prog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	runtime.LockOSThread()
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("prctl no_new_privs: %w", err)
	}
	if err := unix.Prctl(unix.PR_SET_SECCOMP, unix.SECCOMP_MODE_FILTER, uintptr(unsafe.Pointer(&prog)), 0, 0); err != nil {
		return fmt.Errorf("prctl seccomp: %w", err)
	}
	return syscall.Exec(argv[0], argv, os.Environ())
}
