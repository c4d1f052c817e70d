package agent

import (
	"bytes"
	"context"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// The service primitives: the relay stopped, started, restarted, reloaded
// or handed over, by systemd or by the spec's own command words, run as
// they are (no shell). The answer is the host clock when it stopped, the
// start of the window as players see it.
var servicePrimitives = map[string]handler{
	"restart":           func(s *session, r *request) answer { return service(s, r, "restart") },
	"stop":              func(s *session, r *request) answer { return service(s, r, "stop") },
	"reload":            func(s *session, r *request) answer { return service(s, r, "reload") },
	"reload-or-restart": func(s *session, r *request) answer { return service(s, r, "reload-or-restart") },
	"handoff":           pHandoff,
	"clear-fdstore":     pClearFDStore,
	"daemon-reload":     pDaemonReload,
	"unit-log":          pUnitLog,
	"relay-log":         pRelayLog,
}

// commandTimeout bounds a service command: one that never ends would
// hold the window (and the lock) forever.
const commandTimeout = 10 * time.Minute

// run runs argv with no shell, stdin empty, and returns what it printed
// (stdout and stderr together); no words run nothing. A daemon it leaves
// behind holding the output is not waited for beyond a moment.
func run(argv ...string) (string, error) {
	if len(argv) == 0 {
		return "", nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	c := exec.CommandContext(ctx, argv[0], argv[1:]...)
	var out bytes.Buffer
	c.Stdout, c.Stderr = &out, &out
	c.WaitDelay = 2 * time.Second
	err := c.Run()
	return out.String(), err
}

// tail is the last n bytes of s.
func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

func nowNanos(s *session) string { return strconv.FormatInt(s.now().UnixNano(), 10) }

// service: VERB by systemd UNIT, or by the stop (and start) words that
// follow the request (command NSTOP [NSTART]).
func service(s *session, r *request, verb string) answer {
	t := nowNanos(s)
	switch r.arg(0) {
	case "systemd":
		unit := r.arg(1)
		// A unit that failed into its start limit (a release that could not
		// start, a crash loop) refuses every start until reset-failed:
		// without it a rollback could not start the old release.
		if verb == "restart" || verb == "reload-or-restart" {
			run("systemctl", "reset-failed", "--", unit)
		}
		if out, err := run("systemctl", verb, "--", unit); err != nil {
			return errf("systemctl %s %s: %s", verb, unit, tail(out, 300))
		}
		return val(t)
	case "command":
		if verb == "reload" {
			return runWords(r, "reload", t, 1)
		}
		stop, ok1 := r.argv(atoi(r.arg(1)))
		var start []string
		ok2 := true
		if verb == "restart" {
			start, ok2 = r.argv(atoi(r.arg(2)))
		}
		if !ok1 || !ok2 {
			return errf("short argv")
		}
		if hasEmpty(stop) || hasEmpty(start) {
			return emptyArgv(r)
		}
		if out, err := run(stop...); err != nil {
			return errf("stop: %s", tail(out, 300))
		}
		if out, err := run(start...); err != nil {
			return errf("start: %s", tail(out, 300))
		}
		return val(t)
	}
	return errf("unknown manager %s", r.arg(0))
}

// pHandoff: command N, then the handoff's words: VAL the host clock before.
func pHandoff(s *session, r *request) answer { return runWords(r, "handoff", nowNanos(s), 1) }

// runWords runs the N words (argument at) that follow the request as a
// command: VAL t, or ERR what: the tail of its output.
func runWords(r *request, what, t string, at int) answer {
	words, ok := r.argv(atoi(r.arg(at)))
	if !ok {
		return errf("short argv")
	}
	if hasEmpty(words) {
		return emptyArgv(r)
	}
	if out, err := run(words...); err != nil {
		return errf("%s: %s", what, tail(out, 400))
	}
	return val(t)
}

func emptyArgv(r *request) answer {
	return errf("%s: a command word is empty; relayctl runs no command with one (without a shell it would vanish)", r.kind)
}

func hasEmpty(words []string) bool {
	for _, w := range words {
		if w == "" {
			return true
		}
	}
	return false
}

func atoi(s string) int {
	if !digits(s) {
		return -1
	}
	n, _ := strconv.Atoi(s)
	return n
}

// pClearFDStore: UNIT's file-descriptor store empty (after a stop, which
// empties it on systemd 252; 254+ keeps a preserved one until cleaned).
func pClearFDStore(s *session, r *request) answer {
	unit := r.arg(0)
	n := fdStore(unit)
	if n != "0" && n != "" {
		run("systemctl", "clean", "--what=fdstore", "--", unit)
		n = fdStore(unit)
	}
	if n == "0" || n == "" {
		return ok()
	}
	return errf("systemctl clean --what=fdstore %s: %s fds still in the store", unit, n)
}

func fdStore(unit string) string {
	out, err := run("systemctl", "show", "--property=NFileDescriptorStore", "--value", "--", unit)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(out)
}

func pDaemonReload(s *session, r *request) answer {
	if out, err := run("systemctl", "daemon-reload"); err != nil {
		return errf("systemctl daemon-reload: %s", tail(out, 300))
	}
	return ok()
}

// pUnitLog: UNIT SINCE_NS [INVOCATION], DATA the unit's journal lines
// since then. systemctl can say a run failed before journald has written
// how: with the failed run's invocation id, wait up to 2 s for systemd's
// "Main process exited" of that run, then journalctl --sync, which returns
// once journald has read what was sent before it (the process's own last
// words included).
func pUnitLog(s *session, r *request) answer {
	unit, since, inv := r.arg(0), atoi(r.arg(1)), r.arg(2)
	if since < 0 {
		since = 0
	}
	if inv != "" && isHexString(inv) {
		for i := 0; i < 20; i++ {
			out, _ := run("journalctl", "-q", "--no-pager", "-n", "1", "-o", "cat", "INVOCATION_ID="+inv, "MESSAGE_ID=98e322203f7a4ed290d09fe03c09fe15")
			if strings.TrimSpace(out) != "" {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		run("journalctl", "--sync")
	}
	// Not -n 20: with --since, journalctl gives the first lines after it,
	// not the last.
	out, _ := run("journalctl", "-u", unit, "--since", "@"+strconv.Itoa(since/1e9), "--no-pager", "-o", "short-iso")
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) > 20 {
		lines = lines[len(lines)-20:]
	}
	return dataAnswer([]byte(tail(strings.Join(lines, "\n"), 8000)))
}

func isHexString(s string) bool {
	for _, c := range s {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return s != ""
}

// relayLogTail bounds what relay-log reads of a log: its end, where a
// relay that died wrote its last words.
const relayLogTail = 8000

// pRelayLog: PATH, DATA the last lines (at most 20, of its last 8000
// bytes) of the file the service appends the relay's output to (the
// spec's relay.service.log): what a relay that died said last. Read only
// where root alone can have written it (rootOnlyTail): a log another user
// could write, or a symlink put in its place, would put their words, or
// another file's, in the receipt as the relay's.
func pRelayLog(s *session, r *request) answer {
	p := r.arg(0)
	b, err := rootOnlyTail(p, relayLogTail)
	if err != nil {
		return errf("%s", clean(err.Error()))
	}
	text := string(b)
	if len(b) == relayLogTail {
		if i := strings.IndexByte(text, '\n'); i >= 0 {
			text = text[i+1:] // a line cut by the bound
		}
	}
	lines := strings.Split(strings.TrimRight(text, "\n"), "\n")
	if len(lines) > 20 {
		lines = lines[len(lines)-20:]
	}
	return dataAnswer([]byte(strings.Join(lines, "\n")))
}
