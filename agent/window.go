package agent

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/relayctl/relayctl/rollout"
)

// A window runs in a process of its own, outside the session: a detach
// request carries its program, which the window's process carries out
// holding the host lock, whatever becomes of the session and its
// connection. The session relays its answers, and relayctl's word (a
// verdict: keep, or undo with relayctl's rollback) to it.
//
// The two talk over a socket pair made before the window's process
// starts: the session's end closes when the session ends in any way
// (relayctl done, its connection gone, the session killed outright), so
// the window learns it at once and decides by itself: a window that
// failed is rolled back; one that did not is read back until it holds,
// stably, and kept, or rolled back when the judge time runs out. Its end
// is the journal's last line ("window kept by=host", ...).
//
// On the socket, window to session: "A N" then an answer of N bytes as it
// goes on the wire, "D" (a verdict taken), "E TEXT" (the window ended, how);
// session to window: "V keep" or "V undo N" then N bytes of requests.
//
// The program (rollout.Window, written by rollout/shellhost):
//
//	relayctl-window 1
//	kind window|rollback
//	await MS     how long to wait for relayctl's word once the window's
//	             requests are done, while the session lives
//	judge MS     how long the host's own read-back may take
//	stable MS    how long it must hold, the same relay process
//	checks N     then N bytes: the host's own checks, one a line
//	observe N    then N bytes: the request that reads the host
//	undo-at I... which rollback (1 on, 0 for none) follows a stop at each
//	             request of the window, and last, at checks that failed
//	undo N       then N bytes of requests: one rollback (as many as needed)
//	window N     then N bytes of requests: the window itself
var windowPrimitives = map[string]handler{
	"detach":  pDetach,
	"verdict": pVerdict,
}

// windowHandle is the session's view of the window it started.
type windowHandle struct {
	id, dir string
	msgs    chan windowMsg // from the window's process; closed when it is gone
	gone    chan struct{}  // closed when its end of the socket closes
	conn    net.Conn
	// readBack is the window's own read-back, as it told it (B), for the
	// receipt a commit behind the window completes with it.
	readBack *rollout.HostReadBack
	n        int // the window's requests, whose answers were relayed
}

type windowMsg struct {
	kind string // A, D, E, H
	text string
	data []byte
}

// maxProgram bounds a window's program and a rollback's requests.
const maxProgram = 16 << 20

// pDetach: ID SHA256 N, with the program as data: the window, run by a
// process of its own; the N answers of its requests follow this one's OK.
func pDetach(s *session, r *request) answer {
	id, sum, n := r.arg(0), r.arg(1), atoi(r.arg(2))
	if n < 0 {
		n = 0
	}
	bad := func(a answer) answer {
		s.emit(s.do2(a))
		s.skipN(n)
		return written()
	}
	if len(id) != 16 || !isHexString(id) {
		return bad(errf("bad window id"))
	}
	if s.win != nil && s.win.alive() {
		return bad(errf("a window is in flight on the host already"))
	}
	prog, err := r.data(maxProgram)
	if err != nil {
		return bad(errf("the window's program: %v", err))
	}
	if got := sha256Hex(prog); got != sum {
		return bad(errf("the window's program holds sha256 %s, relayctl sent %s", got, sum))
	}
	forgetWindows(s.windows)
	w, err := s.startWindow(id, prog)
	if err != nil {
		return bad(errf("could not start the window outside this session: %v (nothing in force changed)", err))
	}
	s.win, w.n = w, n
	s.emit(ok())
	s.relay(n)
	return written()
}

// do2 is an answer a primitive gives of itself, with the bookkeeping do
// makes of one (the batch stops at an ERR).
func (s *session) do2(a answer) answer {
	if a.stops() {
		s.skipping = true
		if s.locked {
			s.note("fail " + clean(a.text))
		}
	}
	return a
}

// skipN answers SKIP n times: requests inside a program that did not run.
func (s *session) skipN(n int) {
	for ; n > 0; n-- {
		s.emit(answer{word: "SKIP"})
	}
}

// relay passes on the window's next n answers as they come. If its
// process ends first, the next is ERR and the rest SKIP.
func (s *session) relay(n int) {
	for i := 0; i < n; i++ {
		s.out.Flush()
		m, ok := <-s.win.msgs
		for ok && m.kind != "A" {
			s.win.heard(m)
			m, ok = <-s.win.msgs
		}
		if !ok {
			s.emit(s.do2(errf("the window's process on the host ended before it answered: %s", readHead(s.win.dir+"/log", 300))))
			s.skipN(n - i - 1)
			return
		}
		s.out.Write(m.data)
		// The session's own requests behind the window are not done after
		// a window's request that stopped it (nor after a NEED).
		if bytes.HasPrefix(m.data, []byte("ERR ")) || bytes.HasPrefix(m.data, []byte("NEED")) {
			s.skipping = true
		}
	}
	// The window's answers go out before the session does anything more:
	// a session whose connection is gone ends here, and the window decides
	// by itself (its read-back), rather than the session carrying out the
	// rest of a batch (the keep, the receipt) whose answers nobody hears.
	if s.out.Flush() != nil {
		s.gone = true
	}
}

// heard takes a message of the window's that is no answer: B, its own
// read-back.
func (w *windowHandle) heard(m windowMsg) {
	if m.kind != "B" {
		return
	}
	var rb rollout.HostReadBack
	if json.Unmarshal(m.data, &rb) == nil {
		w.readBack = &rb
	}
}

// startWindow makes the window's folder (root's alone, in RAM), writes
// its program there, and starts its process: in a session of its own, its
// standard files off the connection, and where systemd runs the host in a
// scope unit of its own (relayctl-window-ID), out of the SSH session's
// cgroup, which a logind teardown or an OOM kill takes whole. It inherits
// the host lock and one end of the socket pair.
func (s *session) startWindow(id string, prog []byte) (*windowHandle, error) {
	dir := s.windows + "/window-" + id
	os.RemoveAll(dir)
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, fmt.Errorf("cannot make %s: %s", dir, errText(err))
	}
	if err := writeNew(dir+"/program", prog, 0o600); err != nil {
		return nil, fmt.Errorf("write %s/program: %s", dir, errText(err))
	}
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	mine, theirs := os.NewFile(uintptr(fds[0]), "window"), os.NewFile(uintptr(fds[1]), "session")
	defer theirs.Close()
	self, err := os.Executable()
	if err != nil {
		mine.Close()
		return nil, err
	}
	logf, err := os.OpenFile(dir+"/log", os.O_WRONLY|os.O_CREATE|os.O_APPEND|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		mine.Close()
		return nil, err
	}
	defer logf.Close()
	// Started through a process of its own that exits at once (spawn), so
	// the window's process is nobody's child here: whatever ends this
	// session and its descendants leaves it be.
	c := exec.Command(self, "spawn", s.state, id, sha256Hex(prog))
	c.Stderr = logf
	c.ExtraFiles = []*os.File{s.lock, theirs}
	if err := c.Run(); err != nil {
		mine.Close()
		return nil, fmt.Errorf("%v %s", err, strings.TrimSpace(readHead(dir+"/log", 300)))
	}
	conn, err := net.FileConn(mine)
	mine.Close()
	if err != nil {
		return nil, err
	}
	w := &windowHandle{id: id, dir: dir, msgs: make(chan windowMsg, 64), gone: make(chan struct{}), conn: conn}
	go readWindowMsgs(conn, w.msgs, w.gone, s.quit)
	select {
	case m, ok := <-w.msgs:
		if ok && m.kind == "H" {
			return w, nil
		}
	case <-time.After(5 * time.Second):
	}
	conn.Close()
	return nil, fmt.Errorf("%s (no process after 5 s)", strings.TrimSpace(readHead(dir+"/log", 300)))
}

// alive says the window's process has not ended (its socket is open).
func (w *windowHandle) alive() bool {
	select {
	case <-w.gone:
		return false
	default:
		return true
	}
}

// readWindowMsgs reads the window's messages until its end of the socket
// closes. X (the window decided by itself while this session still stood:
// relayctl's run has gone quiet, a partition) ends the session at once,
// whatever it waits on, so its hold on the host lock ends with the window.
func readWindowMsgs(conn net.Conn, out chan<- windowMsg, gone chan<- struct{}, quit func()) {
	defer close(out)
	defer close(gone)
	br := bufio.NewReader(conn)
	for {
		m, err := readMsg(br)
		if err != nil {
			return
		}
		if m.kind == "X" {
			quit()
			continue
		}
		out <- m
	}
}

// readMsg reads one message: "KIND [TEXT]" on a line, and for A and V
// with a size, that many bytes.
func readMsg(br *bufio.Reader) (windowMsg, error) {
	line, err := readLine(br, maxRequestLine)
	if err != nil {
		return windowMsg{}, err
	}
	kind, text, _ := strings.Cut(line, " ")
	m := windowMsg{kind: kind, text: text}
	if kind == "A" || kind == "B" || kind == "V" && strings.HasPrefix(text, "undo ") {
		n := atoi(strings.TrimPrefix(text, "undo "))
		if n < 0 || n > maxProgram {
			return m, errors.New("bad message size")
		}
		m.data = make([]byte, n)
		if _, err := io.ReadFull(br, m.data); err != nil {
			return m, err
		}
	}
	return m, nil
}

// pVerdict: keep|undo SHA256 N (undo: N requests as data, relayctl's
// rollback), relayctl's word to the window waiting for it. keep: VAL how
// it ended; undo: OK, then the N answers, relayed. If the window decided
// by itself first: ERR saying how it ended.
func pVerdict(s *session, r *request) answer {
	word, sum, n := r.arg(0), r.arg(1), atoi(r.arg(2))
	if word != "undo" || n < 0 {
		n = 0
	}
	if word != "keep" && word != "undo" {
		return errf("bad verdict %s", word)
	}
	bad := func(a answer) answer {
		s.emit(s.do2(a))
		s.skipN(n)
		return written()
	}
	if s.win == nil {
		return bad(errf("no window is in flight on the host"))
	}
	msg := "V keep\n"
	var undo []byte
	if word == "undo" {
		var err error
		if undo, err = r.data(maxProgram); err != nil {
			return bad(errf("the rollback: %v", err))
		}
		if got := sha256Hex(undo); got != sum {
			return bad(errf("the rollback holds sha256 %s, relayctl sent %s", got, sum))
		}
		msg = "V undo " + strconv.Itoa(len(undo)) + "\n"
	}
	s.win.conn.Write(append([]byte(msg), undo...))
	m := s.win.next("D", "E", "R")
	switch m.kind {
	case "R": // it refused the keep: it goes on waiting for a word
		return bad(errf("%s", m.text))
	case "D":
	default:
		return bad(errf("the window on the host ended by itself: %s", endText(m)))
	}
	if word == "keep" {
		return val(endText(s.win.next("E")))
	}
	s.emit(ok())
	s.relay(n)
	return written()
}

// next is the window's next message of one of kinds (others are passed
// over); kind "" when its process is gone.
func (w *windowHandle) next(kinds ...string) windowMsg {
	for m := range w.msgs {
		w.heard(m)
		for _, k := range kinds {
			if m.kind == k {
				return m
			}
		}
	}
	return windowMsg{}
}

func endText(m windowMsg) string {
	if m.kind != "E" {
		return "its process is gone"
	}
	return m.text
}

// forgetWindow removes the session's window folder (its run is over).
func (s *session) forgetWindow() {
	if s.win != nil {
		os.RemoveAll(s.win.dir)
	}
}

// end ends the session: its end of the window's socket closes (the
// window's process learns the session is gone), and its hold on the lock
// (a window's process holds it on by its own descriptor).
func (s *session) end() {
	if s.win != nil {
		s.win.conn.Close()
	}
	if s.lock != nil {
		s.lock.Close()
	}
}

// forgetWindows removes the folders of windows whose process is gone, a
// minute after (a window in another host's hands, where hosts share /run,
// holds its folder's alive lock).
func forgetWindows(windows string) {
	entries, _ := os.ReadDir(windows)
	for _, e := range entries {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), "window-") {
			continue
		}
		dir := windows + "/" + e.Name()
		if fi, err := os.Lstat(dir); err != nil || time.Since(fi.ModTime()) < time.Minute {
			continue
		}
		if !heldBySomeone(dir + "/alive") {
			os.RemoveAll(dir)
		}
	}
}

// heldBySomeone: a process holds p's lock (a window's process holds its
// folder's alive file locked for its life).
func heldBySomeone(p string) bool {
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return false
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB); err != nil {
		return true
	}
	return false
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// program is a window's program, split into its parts.
type program struct {
	kind                 string
	await, judge, stable time.Duration
	checks, observe      []byte
	undoAt               []int
	undo                 [][]byte
	window               []byte
}

// parseProgram splits a window's program (see the package comment above).
func parseProgram(b []byte) (*program, error) {
	br := bufio.NewReader(bytes.NewReader(b))
	p := &program{}
	line := func(key string) (string, error) {
		l, err := readLine(br, maxRequestLine)
		k, v, _ := strings.Cut(l, " ")
		if err != nil || k != key {
			return "", fmt.Errorf("the window's program cannot be read: want %s", key)
		}
		return v, nil
	}
	part := func(key string) ([]byte, error) {
		v, err := line(key)
		n := atoi(v)
		if err != nil || n < 0 || n > maxProgram {
			return nil, fmt.Errorf("the window's program cannot be read: %s", key)
		}
		out := make([]byte, n)
		_, err = io.ReadFull(br, out)
		return out, err
	}
	if l, err := readLine(br, 100); err != nil || l != "relayctl-window 1" {
		return nil, errors.New("the window's program cannot be read")
	}
	var err error
	if p.kind, err = line("kind"); err != nil || p.kind != "window" && p.kind != "rollback" {
		return nil, errors.New("the window's program has a bad setting")
	}
	for _, d := range []struct {
		key string
		to  *time.Duration
	}{{"await", &p.await}, {"judge", &p.judge}, {"stable", &p.stable}} {
		v, err := line(d.key)
		if err != nil || atoi(v) < 0 {
			return nil, errors.New("the window's program has a bad setting")
		}
		*d.to = time.Duration(atoi(v)) * time.Millisecond
	}
	if p.checks, err = part("checks"); err != nil {
		return nil, err
	}
	if p.observe, err = part("observe"); err != nil {
		return nil, err
	}
	v, err := line("undo-at")
	if err != nil {
		return nil, err
	}
	for _, f := range strings.Fields(v) {
		if atoi(f) < 0 {
			return nil, errors.New("the window's program has a bad setting")
		}
		p.undoAt = append(p.undoAt, atoi(f))
	}
	for {
		l, err := readLine(br, maxRequestLine)
		k, v, _ := strings.Cut(l, " ")
		n := atoi(v)
		if err != nil || n < 0 || n > maxProgram || k != "undo" && k != "window" {
			return nil, errors.New("the window's program cannot be read")
		}
		data := make([]byte, n)
		if _, err := io.ReadFull(br, data); err != nil {
			return nil, errors.New("the window's program cannot be read")
		}
		if k == "window" {
			p.window = data
			return p, nil
		}
		p.undo = append(p.undo, data)
	}
}

// spawnMain starts the window's process and exits: in a session of its
// own (setsid), its standard files off the connection, and where systemd
// runs the host in a scope unit of its own (relayctl-window-ID), out of
// the SSH session's cgroup, which a logind teardown or an OOM kill takes
// whole. It passes on fd 3 (the host lock) and fd 4 (the socket).
func spawnMain(p paths, id, sum string, stderr io.Writer) int {
	if len(id) != 16 || !isHexString(id) {
		fmt.Fprintln(stderr, "bad window id")
		return exitBad
	}
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	argv := []string{self, "window", p.state, id, sum}
	if isDir("/run/systemd/system") {
		argv = append([]string{"systemd-run", "--scope", "--quiet", "--collect", "--unit=relayctl-window-" + id, "--"}, argv...)
	}
	c := exec.Command(argv[0], argv[1:]...)
	if argv[0] == self {
		c.Args[0] = "relayctl-window" // what ps shows
	}
	c.Stderr = stderr
	c.ExtraFiles = []*os.File{os.NewFile(3, "lock"), os.NewFile(4, "session")}
	c.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := c.Start(); err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	return 0
}

// windowMain is the window's process: fd 3 holds the host lock, fd 4 its
// end of the socket to the session.
func windowMain(p paths, id, sum string, stderr io.Writer) int {
	signal.Ignore(syscall.SIGHUP)
	fail := func(why string) int {
		fmt.Fprintln(stderr, why)
		return 1
	}
	if len(id) != 16 || !isHexString(id) {
		return fail("bad window id")
	}
	dir := p.windows + "/window-" + id
	// Inherited without close-on-exec: set it again, or every command the
	// window runs (the relay's start above all) would hold the host lock
	// and the session's socket for as long as it lives.
	syscall.CloseOnExec(3)
	syscall.CloseOnExec(4)
	lock, conn := os.NewFile(3, "lock"), os.NewFile(4, "session")
	if !sameFile(lock, p.state+"/lock") {
		return fail("the window's process does not hold the host lock")
	}
	alive, err := os.OpenFile(dir+"/alive", os.O_WRONLY|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
	if err != nil || syscall.Flock(int(alive.Fd()), syscall.LOCK_EX) != nil {
		return fail("cannot hold " + dir + "/alive")
	}
	prog, err := os.ReadFile(dir + "/program")
	if err != nil || sha256Hex(prog) != sum {
		return fail("the window's program is not the one relayctl sent")
	}
	pr, err := parseProgram(prog)
	if err != nil {
		return fail(err.Error())
	}
	sc, err := net.FileConn(conn)
	conn.Close()
	if err != nil {
		return fail("the session's socket: " + err.Error())
	}
	w := newWindow(p, pr, sc, lock)
	w.send("H " + strconv.Itoa(os.Getpid()))
	w.run()
	return 0
}

// sameFile: f is the file at path.
func sameFile(f *os.File, path string) bool {
	a, err1 := f.Stat()
	b, err2 := os.Stat(path)
	return err1 == nil && err2 == nil && os.SameFile(a, b)
}
