package agent

import (
	"io"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// wantPipe is the stdin pipe a session asks for: more than the 2 MiB
// window OpenSSH's sshd opens a session's channel with, so sshd can always
// hand what it received to the agent at once.
const wantPipe = 4 << 20

// growStdinPipe enlarges the session's stdin pipe, the one sshd copies the
// channel into, from the kernel's 64 KiB. Why: when a burst of an upload
// finds the pipe full, sshd keeps the rest in a buffer it regrows for
// every packet that arrives, copying and zeroing all of it into fresh
// pages each time. On the lab's machines that cost the hosts' sshds more
// CPU than the whole upload cost the agent (docs/host-agent.md, "Uploads
// and sshd's buffers"). Best effort: where root may not pass
// /proc/sys/fs/pipe-max-size (no CAP_SYS_RESOURCE, as in a container) the
// pipe gets that size; stdin that is not a pipe is left alone.
func growStdinPipe(stdin io.Reader) {
	f, ok := stdin.(*os.File)
	if !ok || f == nil {
		return
	}
	fi, err := f.Stat()
	if err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
		return
	}
	fd := int(f.Fd())
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETPIPE_SZ, wantPipe); err == nil {
		return
	}
	if n := pipeMaxSize(); n > 0 && n < wantPipe {
		unix.FcntlInt(uintptr(fd), unix.F_SETPIPE_SZ, n)
	}
}

// pipeMaxSize is the largest pipe an unprivileged process may ask for, 0
// if it cannot be read.
func pipeMaxSize() int {
	b, err := os.ReadFile("/proc/sys/fs/pipe-max-size")
	if err != nil {
		return 0
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || n < 0 {
		return 0
	}
	return n
}
