package handoff

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// How long each side waits for the other. The old process keeps serving
// while it waits for READY, so that wait can be long; between STATE and
// DONE nobody reads the socket, so a new process that does not answer in
// time is killed and the old one resumes.
var (
	helloTimeout = 10 * time.Second
	readyTimeout = 30 * time.Second
	stateTimeout = 10 * time.Second
	doneTimeout  = 10 * time.Second
)

// CheckFolder makes sure the folder of a handoff socket is one only the
// user relayd runs as can write: it creates it (mode 0700) if missing, and
// refuses a symlink, another owner, or group or world write permission.
// Whoever can write there could hand a relayd a socket and a lobby table of
// its own making. Every folder above it must be as safe (checkAbove).
func CheckFolder(path string) error {
	dir := filepath.Dir(path)
	if err := checkAbove(dir); err != nil {
		return err
	}
	fi, err := os.Lstat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("create handoff socket folder: %w", err)
		}
		fi, err = os.Lstat(dir)
	}
	if err != nil {
		return fmt.Errorf("check handoff socket folder: %w", err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		return fmt.Errorf("handoff socket folder %s is a symlink: use the real folder", dir)
	case !fi.IsDir():
		return fmt.Errorf("handoff socket folder %s is not a folder", dir)
	case !ok:
		return fmt.Errorf("handoff socket folder %s: no owner information", dir)
	case int(st.Uid) != os.Geteuid():
		return fmt.Errorf("handoff socket folder %s is owned by uid %d, not by uid %d that relayd runs as: chown it", dir, st.Uid, os.Geteuid())
	case fi.Mode().Perm()&0o022 != 0:
		return fmt.Errorf("handoff socket folder %s is group- or world-writable (mode %04o): chmod go-w it", dir, fi.Mode().Perm())
	}
	return nil
}

// checkAbove: every folder above dir, as written and as resolved, belongs
// to root or to the user relayd runs as, and nobody else can write it
// unless it is sticky (as /tmp: nobody can rename what is not theirs
// there). Whoever could write one could put a folder or a symlink of their
// own in dir's place between the checks and the bind, remove and chmod
// that follow, and have a relayd that runs as root make, remove or chmod
// a file where they chose.
func checkAbove(dir string) error {
	parent, err := filepath.Abs(filepath.Dir(dir))
	if err != nil {
		return fmt.Errorf("check handoff socket folder %s: %w", dir, err)
	}
	real, err := filepath.EvalSymlinks(parent)
	if err != nil {
		return fmt.Errorf("check handoff socket folder %s: %w", dir, err)
	}
	for _, p := range append(prefixes(parent), prefixes(real)...) {
		fi, err := os.Lstat(p)
		if err != nil {
			return fmt.Errorf("check handoff socket folder %s: %w", dir, err)
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		switch {
		case !ok:
			return fmt.Errorf("handoff socket folder %s: %s has no owner information", dir, p)
		case st.Uid != 0 && int(st.Uid) != os.Geteuid():
			return fmt.Errorf("handoff socket folder %s: %s above it is owned by uid %d, not by root or uid %d that relayd runs as: chown it, or choose a folder under one of theirs", dir, p, st.Uid, os.Geteuid())
		case fi.Mode()&fs.ModeSymlink == 0 && fi.Mode().Perm()&0o022 != 0 && fi.Mode()&fs.ModeSticky == 0:
			return fmt.Errorf("handoff socket folder %s: %s above it is group- or world-writable (mode %04o) and not sticky: chmod go-w it, or choose another folder", dir, p, fi.Mode().Perm())
		}
	}
	return nil
}

// prefixes are "/" and every folder from it down to the absolute path p.
func prefixes(p string) []string {
	out := []string{"/"}
	for i := 1; i < len(p); i++ {
		if p[i] == '/' {
			out = append(out, p[:i])
		}
	}
	if p != "/" {
		out = append(out, p)
	}
	return out
}

// Listener is a running relayd's handoff socket.
type Listener struct {
	path string
	ln   *net.UnixListener
	dev  uint64
	ino  uint64
	log  *slog.Logger
}

// Listen makes the handoff socket at path (mode 0600), replacing a socket
// file left there (by a process that died, or the one this process took
// over from). Anything else at path is an error.
func Listen(path string, log *slog.Logger) (*Listener, error) {
	if err := CheckFolder(path); err != nil {
		return nil, err
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != fs.ModeSocket {
			return nil, fmt.Errorf("handoff socket %s exists and is not a socket: remove it", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("replace handoff socket: %w", err)
		}
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("listen on handoff socket: %w", err)
	}
	// Close unlinks the path only while it is still this socket: after a
	// handoff it is the new process's.
	ln.SetUnlinkOnClose(false)
	l := &Listener{path: path, ln: ln, log: log}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("listen on handoff socket: %w", err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("listen on handoff socket: %w", err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	l.dev, l.ino = st.Dev, st.Ino
	return l, nil
}

// Path is where the listener is.
func (l *Listener) Path() string { return l.path }

// Close stops listening, and removes the socket file if it is still this
// listener's.
func (l *Listener) Close() error {
	err := l.ln.Close()
	if fi, serr := os.Stat(l.path); serr == nil {
		if st := fi.Sys().(*syscall.Stat_t); st.Dev == l.dev && st.Ino == l.ino {
			err = errors.Join(err, os.Remove(l.path))
		}
	}
	return err
}

// Leave stops listening and leaves the socket file alone: after a handoff
// the path belongs to the new process, which replaces it.
func (l *Listener) Leave() error { return l.ln.Close() }

// Serve hands r over to the first new relayd that completes a handoff, and
// returns its pid. A handoff that fails leaves r serving (resumed if it had
// paused) and Serve waits for the next. It returns 0 and nil once the
// listener is closed.
func (l *Listener) Serve(r Relay) (int, error) {
	for {
		c, err := l.ln.AcceptUnix()
		if errors.Is(err, net.ErrClosed) {
			return 0, nil
		}
		if err != nil {
			return 0, fmt.Errorf("accept on handoff socket: %w", err)
		}
		if pid, ok := l.give(c, r); ok {
			return pid, nil
		}
	}
}

// give runs one handoff from the old process's side.
func (l *Listener) give(c *net.UnixConn, r Relay) (int, bool) {
	defer c.Close()
	cred, err := peerCred(c)
	if err != nil {
		l.log.Warn("handoff refused", "err", err)
		return 0, false
	}
	pid := int(cred.Pid)
	log := l.log.With("new_pid", pid)
	if int(cred.Uid) != os.Geteuid() {
		log.Warn("handoff refused: the connecting process runs as another user", "uid", cred.Uid)
		return 0, false
	}
	// A pidfd, so a new process that stops answering after we paused can be
	// killed without the risk of signalling a reused pid.
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		log.Warn("handoff refused: open the new process", "err", err)
		return 0, false
	}
	defer unix.Close(pidfd)

	udp, ctl, err := r.Files()
	if err != nil {
		log.Error("handoff refused: duplicate the sockets", "err", err)
		writeFrame(c, msgAbort, encodeAbort(err.Error()), nil)
		return 0, false
	}
	fds := []int{udp}
	if ctl >= 0 {
		fds = append(fds, ctl)
	}
	c.SetDeadline(time.Now().Add(readyTimeout))
	err = writeFrame(c, msgHello, encodeHello(r.Hello()), fds)
	for _, fd := range fds {
		unix.Close(fd)
	}
	if err != nil {
		log.Warn("handoff failed: send the sockets; still serving", "err", err)
		return 0, false
	}
	log.Info("handoff: sockets sent, waiting for the new relayd to be ready")
	t, p, err := readFrame(c)
	switch {
	case err != nil:
		log.Warn("handoff failed before the new relayd was ready; still serving", "err", err)
		return 0, false
	case t == msgAbort:
		log.Warn("handoff aborted by the new relayd before it took over; still serving", "reason", decodeAbort(p))
		return 0, false
	case t != msgReady:
		log.Warn("handoff failed; still serving", "err", fmt.Sprintf("got %v, want READY", t))
		return 0, false
	}

	st, err := r.Pause()
	if err != nil {
		log.Error("handoff failed: stop reading", "err", err)
		writeFrame(c, msgAbort, encodeAbort("the old relayd could not stop reading: "+err.Error()), nil)
		return 0, false
	}
	payload, err := encodeState(st)
	if err == nil {
		c.SetDeadline(time.Now().Add(doneTimeout))
		err = writeFrame(c, msgState, payload, nil)
	}
	if err != nil {
		log.Error("handoff failed: send the state; reading again", "err", err)
		r.Resume()
		return 0, false
	}
	t, p, err = readFrame(c)
	switch {
	case err == nil && t == msgDone:
		r.HandedOver(pid)
		return pid, true
	case err == nil && t == msgAbort:
		log.Warn("handoff aborted by the new relayd after it got the state; reading again", "reason", decodeAbort(p))
	case isTimeout(err):
		// It may still read later: kill it before reading again, or both
		// would read the socket.
		log.Error("handoff failed: the new relayd did not confirm in time; killing it and reading again", "timeout", doneTimeout.String())
		unix.PidfdSendSignal(pidfd, unix.SIGKILL, nil, 0)
		c.SetDeadline(time.Now().Add(doneTimeout))
		io.Copy(io.Discard, c) // until it is gone: the kernel closes its end
	default:
		// It closed the connection without DONE, so it never read: it
		// reads only after DONE is written.
		log.Warn("handoff failed: the new relayd went away before it took over; reading again", "err", errOrType(err, t))
	}
	r.Resume()
	return 0, false
}

func errOrType(err error, t msgType) string {
	if err != nil {
		return err.Error()
	}
	return fmt.Sprintf("got %v, want DONE", t)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func writeFrame(c *net.UnixConn, t msgType, payload []byte, fds []int) error {
	b := appendFrame(nil, t, payload)
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	n, _, err := c.WriteMsgUnix(b, oob, nil)
	if err == nil && n < len(b) {
		// The rights went with the first bytes; the rest is plain data.
		_, err = c.Write(b[n:])
	}
	if err != nil {
		return fmt.Errorf("send %v: %w", t, err)
	}
	return nil
}

func peerCred(c *net.UnixConn) (*unix.Ucred, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("read peer credentials: %w", err)
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return nil, fmt.Errorf("read peer credentials: %w", err)
	}
	if cerr != nil {
		return nil, fmt.Errorf("read peer credentials: %w", cerr)
	}
	return cred, nil
}

// incoming is the new process's side of a Unix handoff.
type incoming struct {
	c    *net.UnixConn
	r    io.Reader // what HELLO's read left, then the connection
	from Hello
	udp  *os.File
	ctl  *os.File
}

// Dial connects to the relayd listening on the handoff socket at path and
// receives its sockets. It returns ErrNoPeer when nobody listens there (no
// socket file, or one nobody accepts on), so the caller starts afresh.
func Dial(path string) (Incoming, error) {
	if err := CheckFolder(path); err != nil {
		return nil, err
	}
	if fi, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
		return nil, ErrNoPeer
	} else if err != nil {
		return nil, fmt.Errorf("check handoff socket: %w", err)
	} else if fi.Mode().Type() != fs.ModeSocket {
		return nil, fmt.Errorf("handoff socket %s exists and is not a socket: remove it", path)
	}
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
	if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOENT) {
		return nil, ErrNoPeer
	}
	if err != nil {
		return nil, fmt.Errorf("connect to handoff socket: %w", err)
	}
	in, err := receive(c)
	if err != nil {
		c.Close()
		return nil, err
	}
	return in, nil
}

// receive reads HELLO and the sockets that come with it.
func receive(c *net.UnixConn) (*incoming, error) {
	cred, err := peerCred(c)
	if err != nil {
		return nil, err
	}
	if int(cred.Uid) != os.Geteuid() {
		return nil, fmt.Errorf("the relayd on the handoff socket (pid %d) runs as uid %d, not %d", cred.Pid, cred.Uid, os.Geteuid())
	}
	c.SetDeadline(time.Now().Add(helloTimeout))
	buf := make([]byte, 4096) // HELLO is under 800 bytes
	oob := make([]byte, unix.CmsgSpace(4*4))
	n, oobn, flags, _, err := c.ReadMsgUnix(buf, oob)
	if err != nil {
		return nil, fmt.Errorf("receive HELLO: %w", err)
	}
	files, err := rights(oob[:oobn], flags)
	if err != nil {
		return nil, err
	}
	in := &incoming{c: c, r: io.MultiReader(bytes.NewReader(buf[:n]), c)}
	fail := func(err error) (*incoming, error) {
		for _, f := range files {
			f.Close()
		}
		return nil, err
	}
	t, p, err := readFrame(in.r)
	switch {
	case err != nil:
		return fail(fmt.Errorf("receive HELLO: %w", err))
	case t == msgAbort:
		return fail(fmt.Errorf("%w by the running relayd: %s", ErrAborted, decodeAbort(p)))
	case t != msgHello:
		return fail(fmt.Errorf("receive HELLO: got %v", t))
	}
	if in.from, err = decodeHello(p); err != nil {
		return fail(err)
	}
	if len(files) < 1 || len(files) > 2 {
		return fail(fmt.Errorf("receive HELLO: %d sockets came with it, want 1 or 2", len(files)))
	}
	in.udp = files[0]
	if len(files) == 2 {
		in.ctl = files[1]
	}
	return in, nil
}

// rights turns the SCM_RIGHTS of a message into files.
func rights(oob []byte, flags int) ([]*os.File, error) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, fmt.Errorf("receive HELLO: parse control message: %w", err)
	}
	var files []*os.File
	for _, m := range msgs {
		fds, err := unix.ParseUnixRights(&m)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			files = append(files, os.NewFile(uintptr(fd), fmt.Sprintf("handoff-fd-%d", fd)))
		}
	}
	if flags&unix.MSG_CTRUNC != 0 {
		for _, f := range files {
			f.Close()
		}
		return nil, errors.New("receive HELLO: more sockets than expected came with it (control message truncated)")
	}
	return files, nil
}

func (in *incoming) From() Hello                    { return in.from }
func (in *incoming) Files() (udp, control *os.File) { return in.udp, in.ctl }

func (in *incoming) Ready() (State, error) {
	in.c.SetDeadline(time.Now().Add(stateTimeout))
	if err := writeFrame(in.c, msgReady, binary.BigEndian.AppendUint32(nil, uint32(os.Getpid())), nil); err != nil {
		return State{}, err
	}
	t, p, err := readFrame(in.r)
	switch {
	case err != nil:
		return State{}, fmt.Errorf("receive STATE: %w", err)
	case t == msgAbort:
		return State{}, fmt.Errorf("%w by the running relayd: %s", ErrAborted, decodeAbort(p))
	case t != msgState:
		return State{}, fmt.Errorf("receive STATE: got %v", t)
	}
	return decodeState(p)
}

func (in *incoming) Commit() error {
	in.c.SetDeadline(time.Now().Add(stateTimeout))
	err := writeFrame(in.c, msgDone, nil, nil)
	in.c.Close()
	return err
}

func (in *incoming) Abort(reason string) {
	in.c.SetDeadline(time.Now().Add(time.Second))
	writeFrame(in.c, msgAbort, encodeAbort(reason), nil)
	in.c.Close()
}
