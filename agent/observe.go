package agent

import (
	"fmt"
	"strconv"
	"strings"
)

// observe: BOUNDARY, then observe.sh's arguments as argv lines: DATA, every
// fact relayctl needs of the host as framed sections (frame.go), the
// sections observe.sh printed, in its order, with its contents and
// statuses, so relayctl's parser (rollout/shellhost facts.go) makes the
// same facts of them; but for arch, the host's machine (uname), which
// observe.sh did not report, and decoders, the forms of an upload the
// agent decodes itself, in place of observe.sh's look at the host's gzip
// and zstd. Read-only: it is a session's lockless first
// request (plan, verify), a request in a locked session, and the window's
// own read-back.
//
// Nothing here runs a command named by a spec or reaches a shell: files
// and /proc are read by the agent, bounded; it runs only systemctl show
// and ss, the read-back of the relay socket that does not trust the
// relay.
func observe(s *session, r *request) answer {
	if r.argvLeft > maxObserveWords {
		return errf("observe: %d words, more than %d", r.argvLeft, maxObserveWords)
	}
	words, ok := r.argv(r.argvLeft)
	switch {
	case !ok:
		return errf("observe: short argv")
	case !validBoundary(r.arg(0)):
		return errf("observe: bad frame boundary")
	}
	q, err := parseObserveArgs(words)
	if err != nil {
		return errf("observe: %s", err)
	}
	o := &observer{q: q, f: &framer{boundary: r.arg(0)}}
	o.run(nowNanos(s))
	return dataAnswer(o.f.out.Bytes())
}

// maxObserveWords bounds observe's words: 15 arguments and the sysctl.d
// folders.
const maxObserveWords = 64

// observeArgs are observe.sh's positional arguments (relayctl's
// rollout/shellhost observe.go args), validated there and again here.
type observeArgs struct {
	port                             string
	current, releases, config, state string
	manager, unit, pidFile           string
	keys                             []string
	control                          string // host:port in the relay's namespace, "" for none
	maxFile                          int64  // each file read is cut at maxFile+1 bytes
	unitDropIn                       string // relayctl's drop-in of a systemd unit
	program                          string // the installed program a service runs, "-": a release
	files                            []string
	receipt                          string // last-apply, undo:HEX or -
	sysctlDirs                       []string
}

// maxFileLimit bounds MAXFILE: relayctl sends 256 KiB.
const maxFileLimit = 16 << 20

func parseObserveArgs(w []string) (*observeArgs, error) {
	if len(w) < 15 {
		return nil, fmt.Errorf("want at least 15 words, got %d", len(w))
	}
	q := &observeArgs{port: w[0], current: w[1], releases: w[2], config: w[3], state: w[4], manager: w[5], unit: w[6], pidFile: w[7],
		keys: shellSplit(w[8]), control: w[9], unitDropIn: w[11], program: w[12], receipt: w[14], sysctlDirs: w[15:]}
	if w[13] != "-" {
		q.files = shellSplit(w[13])
	}
	n, err := strconv.ParseInt(w[10], 10, 64)
	switch {
	case !validPort(q.port):
		return nil, fmt.Errorf("bad port %q", q.port)
	case err != nil || n < 0 || n > maxFileLimit || !digits(w[10]):
		return nil, fmt.Errorf("bad file size bound %q", w[10])
	case q.manager != "systemd" && q.manager != "command" && q.manager != "none":
		return nil, fmt.Errorf("unknown manager %q", q.manager)
	case q.control != "" && !validControl(q.control):
		return nil, fmt.Errorf("bad control address %q", q.control)
	}
	q.maxFile = n
	return q, nil
}

// shellSplit is a comma-separated list as observe.sh's IFS=, split it: no
// word in an empty list, and none after a final comma.
func shellSplit(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(strings.TrimSuffix(s, ","), ",")
}

// observer is one observe at work: its arguments and its output.
type observer struct {
	q *observeArgs
	f *framer
}

// run reads the host, section by section, in observe.sh's order.
func (o *observer) run(clock string) {
	o.f.line("clock", clock)
	o.hostFacts()
	o.sysctls()
	o.sysctlFiles()
	if o.q.program == "-" {
		o.releaseFacts()
	}
	o.readOwned("relay-config", o.q.config)
	for _, p := range o.q.files {
		o.readOwned("written "+p, p)
	}
	o.unfinishedRun()
	switch {
	case o.q.receipt == "last-apply":
		o.lastApply()
	case strings.HasPrefix(o.q.receipt, "undo:"):
		o.undoReceipt(strings.TrimPrefix(o.q.receipt, "undo:"))
	}
	o.relay()
}
