package rollout

import (
	"fmt"
	"path"
	"strconv"
	"strings"

	"github.com/relayctl/relayctl/plans"
	"github.com/relayctl/relayctl/uplink"
)

// Primitive is one kind of Op a host carries out. This table is the one
// list of them: the host agent (package agent) has a handler per kind, the
// Sim a case per kind, and TestEveryPrimitiveHasAnAgentFunctionAndASimCase
// holds all three to it.
type Primitive struct {
	Kind string
	// Args are the Op's arguments in order, for people.
	Args string
	// Mutates: the primitive changes the host, so the host's journal notes
	// it once done (the journal says where a run that died stopped).
	Mutates bool
	// Payload: what follows the request: its Data bytes, or its Argv lines.
	Payload string
	Doc     string
}

// Payloads of a primitive.
const (
	NoPayload   = ""
	DataPayload = "data"
	ArgvPayload = "argv"
)

// Primitives lists every kind of Op, in the order a run meets them.
var Primitives = []Primitive{
	{Kind: "lock", Args: "OWNER", Doc: "start the host's session and take the host lock, free when nobody holds it (a dead run's too, which the answer names); the first of a session"},
	{Kind: "observe", Doc: "read the host's facts (Op.Query says which); read-only"},
	{Kind: "sample", Args: "PID PORT CONTROL|-", Doc: "read only the relay socket's drop counters and the traffic beside them (ss, /proc/PID/net/udp and snmp in the relay's network namespace, its /status) and the host clock: the soak's light observe; read-only"},
	{Kind: "begin", Args: "PLAN CHECKSUM", Doc: "start a run: a fresh stage folder, the journal opened"},
	{Kind: "step", Args: "TEXT", Doc: "note a step's start or end in the journal, by its kind and title"},
	{Kind: "dir", Args: "PATH", Doc: "PATH is (made) a folder that only root can change, and so is every folder above it"},
	{Kind: "file-ok", Args: "PATH", Doc: "PATH is absent or a regular file, not a symlink"},
	{Kind: "link-ok", Args: "PATH", Doc: "PATH is absent or a symlink"},
	{Kind: "exec-ok", Args: "PATH", Doc: "PATH is a regular executable only root can change"},
	{Kind: "keep", Args: "PATH SHA256 SIZE MODE [LIKE [ENCODING BASE BASESHA]]", Mutates: true, Payload: DataPayload,
		Doc: "PATH holds those bytes: kept when it does already, else NEED without data, or written from the data (temp file, sha256 checked, rename); LIKE (- for none) gives its mode and owner; with ENCODING (gzip, zstd, zstd-patch from BASE, whose sha256 is BASESHA; - for none) the data is decoded first, and a form the host cannot decode is answered NEED and a reason (the next form follows)"},
	{Kind: "fetch", Args: "PATH SHA256 URL MAXSIZE TIMEOUT", Mutates: true,
		Doc: "the same, the host fetching URL itself (http(s) only, at most MAXSIZE bytes, TIMEOUT seconds)"},
	{Kind: "place-release", Args: "DIR FILE SHA256 PROGRAM TREE", Mutates: true,
		Doc: "a binary (TREE -) copied from FILE to DIR/PROGRAM, or a tarball FILE unpacked into DIR; sha256, tree hash and ownership checked on the host before DIR is renamed into place"},
	{Kind: "check-release", Args: "DIR SHA256 PROGRAM TREE", Doc: "DIR holds that release (DIR/PROGRAM's sha256, or DIR's tree hash), and DIR is root's alone all the way down"},
	{Kind: "release-sum", Args: "DIR PROGRAM TREE|-", Doc: "describe the release in DIR for the receipt: its program's sha256, its files' tree hash (with tree), its capabilities marker; empty when DIR holds none; read-only"},
	{Kind: "restore-kept", Args: "FROM PATH SHA256", Mutates: true,
		Doc: "PATH (beside the file it will replace) becomes a copy of FROM, a backup the host kept beside a receipt, with its mode and owner, once its sha256 is checked; nothing written otherwise"},
	{Kind: "backup", Args: "PATH NAME", Doc: "keep PATH's content, mode and owner (or its absence) in the stage folder for restore"},
	{Kind: "backup-link", Args: "PATH NAME", Doc: "keep a symlink's target (or its absence)"},
	{Kind: "sysctl", Args: "KEY VALUE [WANT]", Mutates: true, Doc: "write /proc/sys/KEY; answers what reads back, fails if that is not WANT"},
	{Kind: "rename", Args: "FROM TO", Mutates: true, Doc: "atomic rename in one folder"},
	{Kind: "remove", Args: "PATH", Mutates: true, Doc: "unlink PATH, never what it points at"},
	{Kind: "link", Args: "PATH TARGET", Mutates: true, Doc: "PATH becomes a symlink to TARGET: a new link renamed over it"},
	{Kind: "daemon-reload", Mutates: true, Doc: "systemctl daemon-reload"},
	{Kind: "restart", Args: "systemd UNIT | command NSTOP NSTART", Mutates: true, Payload: ArgvPayload,
		Doc: "restart the relay (the stop then the start words follow); answers the host clock (ns) when it stopped"},
	{Kind: "handoff", Args: "command N", Mutates: true, Payload: ArgvPayload, Doc: "run the handoff command (its words follow); answers the host clock (ns) before it"},
	{Kind: "stop", Args: "systemd UNIT | command NSTOP", Mutates: true, Payload: ArgvPayload, Doc: "stop the relay"},
	{Kind: "reload", Args: "systemd UNIT | command N", Mutates: true, Payload: ArgvPayload,
		Doc: "reload the service (systemctl reload, or the reload words that follow): it re-applies its buffer on the socket it has; answers the host clock (ns) before it"},
	{Kind: "reload-or-restart", Args: "systemd UNIT", Mutates: true, Doc: "a reload's undo: systemctl reload-or-restart"},
	{Kind: "clear-fdstore", Args: "UNIT", Mutates: true,
		Doc: "empty the unit's file-descriptor store (stopped already): systemctl clean --what=fdstore where systemd has it (254+, a preserved store); fails if fds remain"},
	{Kind: "prune", Args: "RELEASES_DIR CURRENT_LINK N", Mutates: true, Payload: ArgvPayload,
		Doc: "after a window that succeeded: remove the releases (v:VERSION) and store entries (s:SHA256) that follow, never the current link's target; answers how many"},
	{Kind: "restore", Args: "PATH NAME", Mutates: true, Doc: "put back what backup kept, with its mode and owner"},
	{Kind: "restore-link", Args: "PATH NAME", Mutates: true, Doc: "put back what backup-link kept"},
	{Kind: "relay-drain", Args: "PID HOST:PORT POST|DELETE", Doc: "the relay's no-new-lobbies mode on or off, through its control plane in its network namespace"},
	{Kind: "unit-log", Args: "UNIT SINCE_NS [INVOCATION]", Doc: "the unit's journal lines since then; with the invocation id of a run that failed, once the journal has that run's first entry (at most 2 s)"},
	{Kind: "relay-log", Args: "PATH", Doc: "the last lines (at most 20, of its last 8000 bytes) of the file the service appends the relay's output to (relay.service.log): what a relay the read-back found not running said last; read only if root alone can have written it (the file and every folder above it root's, writable by no one else, none a symlink); read-only"},
	{Kind: "clock", Doc: "the host clock (ns)"},
	{Kind: "clear", Doc: "archive an unfinished run's journal and stage folder"},
	{Kind: "commit", Args: "NAME OUTCOME KEEP [read-back]", Payload: DataPayload, Doc: "file the receipt (the data) as NAME.json and the journal beside it as NAME.journal, then keep the newest KEEP receipts; the run is over. With read-back (in the window's batch, behind its keep) the receipt is completed first with the window's own read-back: its checks and what it read (CompleteHostReceipt)"},
	{Kind: "record", Args: "NAME OUTCOME KEEP", Payload: DataPayload,
		Doc: "file the receipt (the data) of a run that ends without a commit (unchanged, refused under the lock) as NAME.json, the journal untouched (it is not this run's), then keep the newest KEEP receipts"},
	{Kind: "receipts", Args: "N", Doc: "the newest N receipts filed, newest first (DATA: for each, NAME SIZE on a line, then its bytes); read-only, and the one request a session may begin with instead of lock, without taking it"},
	{Kind: "detach", Args: "ID", Payload: DataPayload,
		Doc: "the ops after it in its Run call are a window the host runs by itself, outside the session, holding the lock (Op.Window: its read-back, checks and rollbacks, sent as its data): their answers follow; then it waits for a verdict, or, the session gone, ends the window by itself"},
	{Kind: "verdict", Args: "keep|undo", Payload: DataPayload,
		Doc: "the run's word to the window waiting for it: keep (it ends, kept), or undo (the ops after it, the rollback, are the window's, sent as its data); fails, saying how, when the window ended by itself first"},
	{Kind: "read-back", Args: "BOUNDARY", Payload: DataPayload,
		Doc: "a window's last op: the host reads itself back (observe, the data's query, framed with BOUNDARY) until it holds as the plan says, stably, or the time runs out, by ReadBack.Judge, the function relayctl's read-back runs (the data: the ReadBack and the query): DATA, the verdict and the reading it ends on, as frames relayctl reads itself; the window then takes a keep only if it held"},
	{Kind: "reopen", Args: "NAME", Mutates: true,
		Doc: "a run filed as NAME in its window's batch (the host's read-back held) that relayctl's own check of that reading does not hold: its receipt taken back, its journal the journal again and the window's backups the stage again, so the window can be rolled back"},
	{Kind: "unlock", Doc: "release the host lock and end the session; the last of a session"},
}

// primitive finds a kind in Primitives.
func primitive(kind string) (Primitive, bool) {
	for _, p := range Primitives {
		if p.Kind == kind {
			return p, true
		}
	}
	return Primitive{}, false
}

// Primitive constructors: the only way steps build Ops, so every field is
// checked once (Op.Validate) before it can reach a host.

func op(kind string, args ...string) Op { return Op{Kind: kind, Args: args} }

// validField is a value that travels as one tab-separated field.
func validField(s string) error {
	if s == "" || strings.ContainsAny(s, "\t\n\r\x00") || len(s) > 4096 {
		return fmt.Errorf("value %q is empty or contains a tab, newline or NUL", s)
	}
	return nil
}

// Validate checks an Op before it is sent: a kind of the table, and
// fields that cannot break out of their place.
func (o Op) Validate() error {
	p, ok := primitive(o.Kind)
	if !ok {
		return fmt.Errorf("%q is not a host primitive", o.Kind)
	}
	for _, a := range o.Args {
		if err := validField(a); err != nil {
			return fmt.Errorf("%s: %w", o.Kind, err)
		}
	}
	for _, w := range o.Argv {
		if err := plans.ValidArgWord(w); err != nil {
			return fmt.Errorf("%s: %w", o.Kind, err)
		}
	}
	if o.Kind == "observe" || o.Kind == "read-back" {
		if o.Query == nil {
			return fmt.Errorf("%s without a query", o.Kind)
		}
		if o.Kind == "read-back" && (o.Judge == nil || o.Judge.Plan == nil || o.Judge.Host == nil) {
			return fmt.Errorf("read-back without its plan")
		}
		return o.Query.Validate()
	}
	if o.Kind == "detach" && o.Window == nil {
		return fmt.Errorf("detach without its window")
	}
	if o.Kind == "verdict" && (len(o.Args) != 1 || o.Args[0] != VerdictKeep && o.Args[0] != VerdictUndo) {
		return fmt.Errorf("verdict: want keep or undo, got %q", o.Args)
	}
	if o.Kind == "sample" {
		if err := validSample(o.Args); err != nil {
			return fmt.Errorf("sample: %w", err)
		}
	}
	if err := validPacked(o); err != nil {
		return fmt.Errorf("%s: %w", o.Kind, err)
	}
	if len(o.Data) > 0 && p.Payload != DataPayload || len(o.Argv) > 0 && p.Payload != ArgvPayload {
		return fmt.Errorf("%s takes no %s", o.Kind, map[bool]string{true: "data", false: "command words"}[len(o.Data) > 0])
	}
	return nil
}

// ValidateRun checks the ops of one Run call, as a backend must before it
// sends any: each Op (Validate), and a detach's, or a verdict undo's, ops
// (Enclosed) as a window the host runs by itself. After a detach's window
// the call may go on with the session's own: a verdict keep and what a
// run that holds does next (prune, commit, unlock), in the same batch.
func ValidateRun(ops []Op) error {
	for i := 0; i < len(ops); i++ {
		o := ops[i]
		if err := o.Validate(); err != nil {
			return err
		}
		if o.Kind == "unlock" && i != len(ops)-1 {
			return fmt.Errorf("run on host: unlock must end the ops")
		}
		switch {
		case o.Kind == "detach":
			j := Enclosed(ops, i)
			if err := o.Window.Validate(ops[i+1 : j]); err != nil {
				return err
			}
			if j < len(ops) && ops[j].Args[0] != VerdictKeep {
				return fmt.Errorf("run on host: only a keep may follow a window in its call")
			}
			i = j - 1
		case o.Kind == "verdict" && o.Args[0] == VerdictUndo:
			return windowOps(ops[i+1:])
		}
	}
	return nil
}

// Enclosed is where the ops the op at i encloses (Encloses) end: at the
// next verdict of the call, which is the session's, or at its end.
func Enclosed(ops []Op, i int) int {
	for j := i + 1; j < len(ops); j++ {
		if ops[j].Kind == "verdict" {
			return j
		}
	}
	return len(ops)
}

// Encloses says the ops after this one in its Run call run inside the
// host's window: a detach's, a verdict undo's.
func (o Op) Encloses() bool {
	return o.Kind == "detach" || o.Kind == "verdict" && len(o.Args) == 1 && o.Args[0] == VerdictUndo
}

// Mutates reports whether the Op changes the host (the journal notes it).
func (o Op) Mutates() bool {
	p, _ := primitive(o.Kind)
	return p.Mutates
}

// validSample checks a sample's arguments: a PID, a port and the relay's
// control address (or -): the agent enters that process's network
// namespace and asks that address for /status.
func validSample(args []string) error {
	if len(args) != 3 {
		return fmt.Errorf("want PID PORT CONTROL, got %d arguments", len(args))
	}
	pid, err := strconv.Atoi(args[0])
	if err != nil || pid < 1 || strconv.Itoa(pid) != args[0] {
		return fmt.Errorf("bad pid %q", args[0])
	}
	port, err := strconv.Atoi(args[1])
	if err != nil || port < 1 || port > 65535 || strconv.Itoa(port) != args[1] {
		return fmt.Errorf("bad port %q", args[1])
	}
	if args[2] != "-" {
		return plans.ValidControl(args[2])
	}
	return nil
}

// validPacked checks an Op's forms of its data: only a keep's, each a
// known encoding, a patch's base an absolute path with its sha256, and
// nothing that cannot travel as one field.
func validPacked(o Op) error {
	if len(o.Packed) > 0 && o.Kind != "keep" {
		return fmt.Errorf("only keep sends packed forms")
	}
	for _, pk := range o.Packed {
		switch {
		case pk.Data == nil:
			return fmt.Errorf("a %s form without data", pk.Encoding)
		case pk.Encoding != uplink.Gzip && pk.Encoding != uplink.Zstd && pk.Encoding != uplink.ZstdPatch:
			return fmt.Errorf("%q is not an encoding", pk.Encoding)
		case pk.Encoding != uplink.ZstdPatch && (pk.Base != "" || pk.BaseSHA != ""):
			return fmt.Errorf("a %s form has a base", pk.Encoding)
		case pk.Encoding == uplink.ZstdPatch && (validField(pk.Base) != nil || !path.IsAbs(pk.Base) || path.Clean(pk.Base) != pk.Base):
			return fmt.Errorf("patch base %q is not a clean absolute path", pk.Base)
		case pk.Encoding == uplink.ZstdPatch && (len(pk.BaseSHA) != 64 || strings.Trim(pk.BaseSHA, "0123456789abcdef") != ""):
			return fmt.Errorf("patch base sha256 %q is not a sha256", pk.BaseSHA)
		}
	}
	return nil
}
