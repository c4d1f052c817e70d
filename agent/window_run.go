package agent

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/relayctl/relayctl/plans"
	"github.com/relayctl/relayctl/rollout"
)

// window is a window's process at work.
type window struct {
	p    paths
	prog *program
	conn net.Conn
	lock *os.File
	mu   sync.Mutex // sends
	// words are relayctl's verdicts as they come; closed when the session
	// is gone.
	words chan windowMsg
	// stopAt and stopMsg: the window's requests stopped there (0: ran whole).
	stopAt  int
	stopMsg string
	// readBack is the window's own read-back, when it had one.
	readBack *rollout.HostReadBack
}

func newWindow(p paths, pr *program, conn net.Conn, lock *os.File) *window {
	w := &window{p: p, prog: pr, conn: conn, lock: lock, words: make(chan windowMsg, 4)}
	go func() {
		defer close(w.words)
		br := bufio.NewReader(conn)
		for {
			m, err := readMsg(br)
			if err != nil {
				return
			}
			if m.kind == "V" {
				w.words <- m
			}
		}
	}()
	return w
}

// send sends a message to the session; one that is gone hears nothing.
func (w *window) send(line string, data ...byte) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.conn.SetWriteDeadline(time.Now().Add(5 * time.Second))
	w.conn.Write(append([]byte(line+"\n"), data...))
}

// session serves requests as the window's process: each answer goes to
// the session.
func (w *window) session(reqs []byte, emit func(answer) error) *session {
	s := &session{paths: w.p, in: bufio.NewReader(bytes.NewReader(reqs)), locked: true, inWindow: true, lock: w.lock, now: time.Now}
	s.out = bufio.NewWriter(&bytes.Buffer{})
	s.emit = emit
	return s
}

// serve answers reqs, each answer sent to the session (a read-back's
// verdict told it first, B), and notes where they stopped.
func (w *window) serve(reqs []byte) (stopAt int, stopMsg string) {
	var s *session
	s = w.session(reqs, func(a answer) error {
		if s.readBack != nil && w.readBack == nil {
			w.readBack = s.readBack
			if b, err := json.Marshal(s.readBack); err == nil {
				w.send("B "+strconv.Itoa(len(b)), b...)
			}
		}
		b := a.bytes()
		w.send("A "+strconv.Itoa(len(b)), b...)
		return nil
	})
	s.serveAll()
	return s.stopAt, s.stopMsg
}

// serveAll answers every request of s.in (a window's part).
func (s *session) serveAll() {
	for {
		r, err := readRequest(s.in)
		if err != nil {
			return
		}
		s.emit(s.do(r))
		if r.drain() != nil {
			return
		}
	}
}

// run carries out the window, then waits for relayctl's word or decides.
func (w *window) run() {
	w.stopAt, w.stopMsg = w.serve(w.prog.window)
	if w.prog.kind == "rollback" {
		w.endByController(w.stopAt, w.stopMsg)
		return
	}
	m, ok := w.await()
	switch {
	case ok && m.text == "keep":
		w.send("D")
		w.end("kept by=controller")
	case ok:
		w.send("D")
		at, msg := w.serve(m.data)
		w.endByController(at, msg)
	default:
		w.judgeAlone()
	}
}

func (w *window) endByController(stopAt int, msg string) {
	if stopAt != 0 {
		w.end("rollback-failed by=controller why=" + msg)
		return
	}
	w.end("rolled-back by=controller")
}

// await waits for relayctl's word while the session lives, at most the
// program's await: ok false means the window decides by itself. A keep
// the window does not take (it stopped, or its own read-back did not
// hold) is refused, and the wait goes on; a rollback that is not the one
// relayctl sent is no word.
func (w *window) await() (windowMsg, bool) {
	timer := time.NewTimer(w.prog.await)
	defer timer.Stop()
	for {
		select {
		case m, ok := <-w.words:
			if !ok {
				return m, false
			}
			if why := w.refusesKeep(); m.text == "keep" && why != "" {
				w.send("R " + clean(why))
				continue
			}
			return m, m.text == "keep" || strings.HasPrefix(m.text, "undo ")
		case <-timer.C:
			// The session still stands but relayctl said nothing: its run has
			// gone quiet (a partition keeps a session that no one talks to). The
			// window decides by itself, and ends the session, so the lock is
			// free once the window is over.
			w.send("X")
			return windowMsg{}, false
		}
	}
}

// refusesKeep is why the window takes no keep ("" when it does): it
// stopped, or its own read-back did not hold.
func (w *window) refusesKeep() string {
	switch {
	case w.stopAt != 0:
		return "the window stopped: " + w.stopMsg
	case w.readBack != nil && !w.readBack.Result.Held:
		return "the window's own read-back does not hold: " + w.readBack.Result.Why
	}
	return ""
}

// end notes how the window ended in the journal and tells the session.
func (w *window) end(how string) {
	s := w.session(nil, func(answer) error { return nil })
	s.note("window " + how)
	w.send("E " + clean(how))
}

// judgeAlone: the window decided on the host. A window that stopped is
// rolled back; else it is read back until the checks hold, twice the
// stable time apart with the same relay process, or the judge time runs
// out.
func (w *window) judgeAlone() {
	if w.stopAt != 0 {
		w.undoAt(w.stopAt, "window: "+w.stopMsg)
		return
	}
	if rb := w.readBack; rb != nil { // it read itself back already, by the plan's own checks
		if rb.Result.Held {
			w.end(rollout.KeptByHost(heldPID(rb.Result.After)))
		} else {
			w.undoAt(len(w.prog.undoAt), "read-back: "+rb.Result.Why)
		}
		return
	}
	deadline := time.Now().Add(w.prog.judge)
	held := ""
	for {
		fail, pid := w.hostRead()
		switch {
		case fail == "" && (w.prog.stable == 0 || held == pid):
			w.end(rollout.KeptByHost(pidOf(pid)))
			return
		case fail == "":
			held = pid
		default:
			held = ""
		}
		if !time.Now().Before(deadline) {
			if fail == "" {
				fail = fmt.Sprintf("the relay read back as planned but did not stay up for %s (pid %s)", w.prog.stable, pid)
			}
			w.undoAt(len(w.prog.undoAt), "read-back: "+fail)
			return
		}
		if fail == "" {
			time.Sleep(w.prog.stable)
		} else {
			time.Sleep(200 * time.Millisecond)
		}
	}
}

// heldPID is the relay process a read-back held (0 for none), which the
// window's line names so relayctl back after a lost connection need not
// hold it again.
func heldPID(after *plans.Facts) int {
	if after == nil {
		return 0
	}
	return after.Service.PID
}

// pidOf is a pid as a reading wrote it, 0 for anything not written as
// Linux writes one (rollout.KeptByHost names no pid then).
func pidOf(pid string) int {
	n, err := strconv.Atoi(pid)
	if err != nil || strconv.Itoa(n) != pid {
		return 0
	}
	return n
}

// undoAt runs the rollback planned for a stop at request i (the last
// entry: checks that did not hold), then ends the window.
func (w *window) undoAt(i int, why string) {
	list := w.prog.undoAt
	if i > len(list) {
		i = len(list)
	}
	v := 0
	if i >= 1 {
		v = list[i-1]
	}
	if v == 0 || v > len(w.prog.undo) {
		w.end("rolled-back by=host why=" + why)
		return
	}
	at, msg := w.serve(w.prog.undo[v-1])
	if at != 0 {
		w.end("rollback-failed by=host why=" + why + "; rollback: " + msg)
		return
	}
	w.end("rolled-back by=host why=" + why)
}

// hostRead reads the host as the program's observe request does, and
// checks the reading: what does not hold ("" when all does), and the
// relay's pid read.
func (w *window) hostRead() (fail, pid string) {
	var reading answer
	s := w.session(w.prog.observe, func(a answer) error { reading = a; return nil })
	r, err := readRequest(s.in)
	if err != nil {
		return "the window's read-back request cannot be read", ""
	}
	s.emit(s.do(r))
	if reading.word != "DATA" {
		return "read-back: " + reading.text, ""
	}
	return hostChecks(reading.data, r.arg(0), w.prog.checks)
}

// hostChecks are the window's checks, one a line (KIND and its words,
// tab-separated), against a reading (observe's framed output): what does
// not hold, and the relay process read. They are few and simple on
// purpose; relayctl, when it is there, reads the host back in full:
//
//	sysctl KEY VALUE  /proc/sys/KEY reads VALUE (blanks squeezed)
//	link TARGET       the current link points at TARGET
//	pid OLD DIR       the relay runs, as a pid other than OLD (- any),
//	                  from the release folder DIR (- any)
//	rb WANT           every socket of that pid on the port, in its network
//	                  namespace, has rb WANT (and there is one)
func hostChecks(reading []byte, boundary string, checks []byte) (fail, pid string) {
	sec := func(name string) string { return section(reading, boundary, name) }
	pid = sec("service")
	if !digits(pid) {
		pid = ""
	}
	var fails []string
	for _, line := range strings.Split(strings.TrimRight(string(checks), "\n"), "\n") {
		if line == "" {
			continue
		}
		f := strings.Split(line, "\t")
		for len(f) < 3 {
			f = append(f, "")
		}
		if why := hostCheck(f[0], f[1], f[2], pid, sec); why != "" {
			fails = append(fails, why)
		}
	}
	return strings.Join(fails, "; "), pid
}

// hostCheck is one check of hostChecks: "" when it holds.
func hostCheck(kind, x, y, pid string, sec func(string) string) string {
	switch kind {
	case "sysctl":
		if got := squeeze(sec("sysctl " + x)); got != squeeze(y) {
			return fmt.Sprintf("sysctl %s: got %s, want %s", x, got, y)
		}
	case "link":
		if got := sec("current-link"); got != x {
			if got == "" {
				got = "none"
			}
			return fmt.Sprintf("release link: got %s, want %s", got, x)
		}
	case "pid":
		exe := sec("relay-exe")
		switch {
		case pid == "":
			return "relay running: got false, want true"
		case pid == x:
			return fmt.Sprintf("relay restarted: got the same pid %s, want a new one", x)
		case y != "-":
			dir := y
			if real, err := filepath.EvalSymlinks(y); err == nil {
				dir = real // /proc/PID/exe is resolved: so is the folder
			}
			if !strings.HasPrefix(exe, dir+"/") {
				if exe == "" {
					exe = "nothing"
				}
				return fmt.Sprintf("relay runs the release in %s: got %s", y, exe)
			}
		}
	case "rb":
		var socks []string
		for _, l := range strings.Split(sec("ss"), "\n") {
			if !strings.HasPrefix(l, "ESTAB") && pid != "" && strings.Contains(l, "pid="+pid+",") {
				socks = append(socks, l)
			}
		}
		if len(socks) == 0 {
			return "ss rb: no socket of the relay on its port"
		}
		var got []string
		bad := false
		for _, l := range socks {
			if !strings.Contains(l, "rb"+x+",") {
				bad = true
			}
			if i := strings.Index(l, "rb"); i >= 0 {
				j := i + 2
				for j < len(l) && l[j] >= '0' && l[j] <= '9' {
					j++
				}
				got = append(got, l[i:j])
			}
		}
		if bad {
			return fmt.Sprintf("ss rb: got %s, want rb%s", strings.Join(got, " "), x)
		}
	default:
		return "unknown check " + kind
	}
	return ""
}

// section is the content of observe's first frame NAME in a reading,
// without the newlines it ends with (observe adds one before its end line).
func section(reading []byte, boundary, name string) string {
	head, end := boundary+" "+name, boundary+" end "
	var out []string
	on := false
	for _, l := range strings.Split(string(reading), "\n") {
		switch {
		case !on && l == head:
			on = true
		case on && strings.HasPrefix(l, end):
			return strings.TrimRight(strings.Join(out, "\n"), "\n")
		case on:
			out = append(out, l)
		}
	}
	return strings.TrimRight(strings.Join(out, "\n"), "\n")
}
