// Package agent is relayctl's host agent: one process a session on the
// host, run as root, that carries out the primitives relayctl sends
// (rollout/primitive.go lists them) and nothing else. It reads and writes
// files, hashes, decodes and reads /proc itself, and starts only the
// service's own commands (the spec's start and stop words, systemctl,
// journalctl) and ss, the independent read-back of the relay's socket.
// Everything from a plan reaches it as data, validated first, never as
// code; it is a constant of relayctl, which checks its sha256 before a
// host runs it (bootstrap.go in rollout/shellhost).
//
// A session's first request takes the host lock (lock), or reads without
// it (observe, receipts). A window runs in a process of its own (window.go)
// that holds the lock whatever becomes of the session.
package agent

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/relayctl/relayctl/rollout"
)

// Exit statuses of a session that could not start.
const (
	exitBusy   = 75 // another run holds the host lock
	exitUnsafe = 77 // the state folder is not root's alone
	exitBad    = 2  // relayctl sent what the agent does not speak
)

// paths are the host's folders the agent works in.
type paths struct {
	state   string // the state folder: lock, journal, stage, receipts
	journal string
	stage   string
	// windows holds runtime files (a window's program and log) in RAM,
	// which a full state disk does not fill: root's alone.
	windows string
}

func pathsOf(state string) paths {
	p := paths{state: state, journal: state + "/journal", stage: state + "/stage", windows: "/run/relayctl"}
	if fi, err := os.Stat("/run"); err != nil || !fi.IsDir() {
		p.windows = state + "/run"
	}
	return p
}

// session is one connection's agent: requests from in, answers to out.
type session struct {
	paths
	in     *bufio.Reader
	out    *bufio.Writer
	locked bool
	lock   *os.File // the host lock, held (flock) while the session lives
	// gone: the connection to relayctl is (an answer could not be sent):
	// the session ends.
	gone bool
	// skipping: a primitive of this batch failed (or needs bytes), so the
	// rest of it up to the sync is answered SKIP.
	skipping bool
	// served counts the requests served; stopAt is the first of them that
	// stopped its batch, stopMsg what it said (a window's rollback choice).
	served, stopAt int
	stopMsg        string
	// inWindow: this is a window's process, which carries out a window's
	// primitives and nothing of the session's.
	inWindow bool
	// emit sends an answer: to out in a session, to the session in a
	// window's process.
	emit func(answer) error
	win  *windowHandle // the window this session started, if any
	// readBack is the window's own read-back, in a window's process
	// (read-back), which it tells its session.
	readBack *rollout.HostReadBack
	now      func() time.Time
	// quit ends the session's process at once: its window decided by
	// itself while it still stood (window.go). A session in a test's own
	// process ends with its input instead.
	quit func()
}

// Main runs the agent: a session on stdin and stdout, or (args[1] window)
// a window's process. It returns the exit status.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) < 3 {
		fmt.Fprintln(stderr, "usage: relayctl-agent serve STATE_DIR | window STATE_DIR ID SHA256 | install STATE_DIR SHA256 SIZE ENCODING")
		return exitBad
	}
	syscall.Umask(0o022)
	os.Setenv("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
	os.Setenv("LC_ALL", "C")
	state := filepath.Clean(args[2])
	switch args[1] {
	case "serve":
		growStdinPipe(stdin)
		s := newSession(pathsOf(state), stdin, stdout)
		s.quit = func() { os.Exit(0) }
		code := s.start()
		s.out.Flush()
		return code
	case "window", "spawn":
		if len(args) != 5 {
			fmt.Fprintln(stderr, "usage: relayctl-agent window STATE_DIR ID SHA256")
			return exitBad
		}
		if args[1] == "spawn" {
			return spawnMain(pathsOf(state), args[3], args[4], stderr)
		}
		return windowMain(pathsOf(state), args[3], args[4], stderr)
	case "install":
		if len(args) != 6 {
			fmt.Fprintln(stderr, "usage: relayctl-agent install STATE_DIR SHA256 SIZE ENCODING")
			return exitBad
		}
		growStdinPipe(stdin)
		return installMain(state, args[3], args[4], args[5], stdin, stdout, stderr)
	}
	fmt.Fprintf(stderr, "relayctl-agent: unknown mode %q\n", args[1])
	return exitBad
}

func newSession(p paths, stdin io.Reader, stdout io.Writer) *session {
	s := &session{paths: p, in: bufio.NewReaderSize(stdin, 64<<10), out: bufio.NewWriterSize(stdout, 64<<10), now: time.Now, quit: func() {}}
	s.emit = func(a answer) error {
		_, err := s.out.Write(a.bytes())
		return err
	}
	return s
}

// start reads the session's first request: lock (then every request
// after it), or a read-only observe or receipts alone.
func (s *session) start() int {
	first, err := readLine(s.in, maxRequestLine)
	if err != nil {
		return 0
	}
	f := strings.Split(first, "\t")
	switch f[0] {
	case "receipts", "observe":
		// Read-only, without the lock: one request, one answer, then exit.
		r, err := readRequest(bufio.NewReader(strings.NewReader(first + "\n")))
		if err != nil {
			s.emit(errf("bad request line"))
			return exitBad
		}
		r.in = s.in
		s.emit(primitives[f[0]](s, r))
		return 0
	case "lock":
	default:
		s.emit(errf("the first request must be lock"))
		return exitBad
	}
	owner, wait := "", ""
	if len(f) > 1 {
		owner = f[1]
	}
	if len(f) > 2 {
		wait = f[2]
	}
	if code := s.takeLock(owner, wait); code != 0 {
		return code
	}
	defer s.end()
	pruneAgents(s.state)
	return s.serve()
}

// serve answers requests until relayctl is done (stdin ends) or unlock.
func (s *session) serve() int {
	for {
		if s.in.Buffered() == 0 {
			if err := s.out.Flush(); err != nil {
				return 0
			}
		}
		r, err := readRequest(s.in)
		if errors.Is(err, errBadRequest) {
			s.emit(errf("bad request line"))
			return exitBad
		}
		if err != nil {
			return 0
		}
		a := s.do(r)
		if err := s.emit(a); err != nil || s.gone {
			return 0
		}
		if r.kind == "unlock" && a.done() {
			return 0
		}
		if err := r.drain(); err != nil {
			return exitBad
		}
	}
}

// do carries out one request: its primitive, unless the batch stopped
// before it; a change the journal is asked to note is noted once done.
func (s *session) do(r *request) answer {
	s.served++
	was := s.skipping
	var a answer
	h, known := primitives[r.kind]
	switch {
	case s.skipping && r.kind != "sync":
		a = answer{word: "SKIP"}
	case !known || s.inWindow && sessionOnly[r.kind]:
		a = errf("unknown request %s", clean(r.kind))
	default:
		a = h(s, r)
	}
	if a.done() && (r.journal == 1 || r.journal == 2) {
		if err := s.note("ok " + r.kind + " " + r.arg(0)); err != nil && r.journal == 1 {
			a = errf("%s was done, but the journal %s could not be written (a full disk?)", r.kind, s.journal)
		}
	}
	switch a.word {
	case "ERR":
		s.skipping = true
		if s.locked && isDir(s.state) {
			s.note("fail " + clean(a.text))
		}
	case "NEED":
		s.skipping = true
	}
	if !was && s.skipping && s.stopAt == 0 {
		s.stopAt, s.stopMsg = s.served, clean(a.text)
	}
	// An unlock ends its batch, with no sync after it (one that runs ends
	// the session): one skipped after a failure ends the batch as a sync
	// would, so the next batch (a rollback's) runs.
	if r.kind == "unlock" && a.word == "SKIP" {
		s.skipping = false
	}
	return a
}

// note appends a line to the journal, with the host's UTC time.
func (s *session) note(text string) error {
	f, err := os.OpenFile(s.journal, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(f, "%s %s\n", s.now().UTC().Format("2006-01-02T15:04:05.000Z"), clean(text))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// handler carries out one primitive.
type handler func(s *session, r *request) answer

// primitives is the agent's table: one handler for each kind of
// rollout.Primitives (the test that holds the Sim to the table holds this
// to it too), and the session's own sync.
var primitives map[string]handler

// sessionOnly are the primitives a window's process does not carry out:
// the session's, and those that need relayctl between them and the next.
var sessionOnly = map[string]bool{
	"lock": true, "unlock": true, "sync": true, "detach": true, "verdict": true, "begin": true,
	"commit": true, "clear": true, "keep": true, "fetch": true, "prune": true,
}

func init() {
	primitives = map[string]handler{
		"sync": func(s *session, r *request) answer { s.skipping = false; return ok() },
		"lock": func(s *session, r *request) answer {
			return errf("the host is locked already: lock is a session's first request")
		},
	}
	for _, family := range []map[string]handler{filePrimitives, journalPrimitives, sysctlPrimitives, servicePrimitives, releasePrimitives, relayPrimitives, windowPrimitives, readBackPrimitives} {
		for k, h := range family {
			primitives[k] = h
		}
	}
}

func isDir(p string) bool {
	fi, err := os.Lstat(p)
	return err == nil && fi.IsDir()
}

// Kinds are the primitives the agent carries out, sync included.
func Kinds() []string {
	out := make([]string, 0, len(primitives))
	for k := range primitives {
		out = append(out, k)
	}
	return out
}
