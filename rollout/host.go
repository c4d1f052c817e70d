package rollout

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/relayctl/relayctl/plans"
)

// Host is one relay host as apply, verify and plan use it: the one seam
// between the engine and the outside. Everything is a primitive (the
// table in primitive.go): a session starts with "lock" (or is a lone
// "observe", read-only), and the engine batches by composing Run calls.
// The real implementation is shellhost.Host (relayctl's host agent over
// SSH); rollouttest.Sim is a host in memory for the engine's unit tests.
// Both implement exactly this: no optional interfaces.
type Host interface {
	// Run sends ops in order and stops at the first that fails (or whose
	// each returns an error), returning that error. each hears every
	// answer as it comes. A backend may send the ops as one batch (one
	// round trip): the host itself then does nothing after a failure.
	//
	// "lock" must be the first Op of a session; its error wraps ErrLocked
	// or ErrUnsafeHost, and its answer names the owner of a dead run whose
	// lock was free and is taken over ("" for none). "observe" answers Result.Facts.
	// "unlock" ends the session and must end its ops. "detach" makes the
	// ops after it, up to a verdict keep or the end of its call, a window
	// the host runs by itself (window.go): their answers come as any
	// others'; "verdict" is the run's word to it, and a verdict undo's later
	// ops are the window's rollback. After a window's ops its call may go
	// on with the session's: a verdict keep, a prune, a commit and the
	// unlock, which run only if the window held (its read-back did). A lost
	// connection is an error for which IsConnLost is true.
	Run(ctx context.Context, ops []Op, each func(i int, r Result) error) error
	// Address is the host:port dialled; User the remote user; Identity
	// the key the host accepted and its host key, as the receipt records
	// them.
	Address() string
	User() string
	Identity() SSHIdentity
	// RoundTrips is how many times relayctl waited on the host's answer.
	RoundTrips() int
	// Close ends the session (a lock not released stays behind for the
	// next run to report) and the connection.
	Close() error
}

// HostDialer opens hosts by the names a spec gives them.
type HostDialer interface {
	DialHost(ctx context.Context, name string) (Host, error)
}

// Op is one host primitive (see Primitives). Steps render their actions as
// Ops; a backend sends them to the host, a fake applies them in memory.
type Op struct {
	Kind string
	Args []string
	Data []byte // keep, commit: the bytes that follow the request
	// Offer sends Data only if the host lacks it: keep offers bytes by
	// their sha256 (the host answers NEED when it does not hold them, and
	// the bytes follow), and a host that has them already (staged ahead,
	// or the same release under another version) is sent nothing.
	Offer bool
	// Send: the host was seen lacking the bytes (observe, in the session
	// that holds the lock), so they go with the request, in its first form,
	// and no offer costs a round trip. The host still refuses a form it
	// cannot take (NEED and why), and the next follows.
	Send bool
	// Packed are smaller forms of Data for the wire (package wire), best
	// first: a keep sends the host the first one it can decode and Data
	// itself after them all, so a host that cannot decode a form (no
	// zstd, a patch's base that is not the one planned, bytes that do not
	// decode to the sha256) is sent the next. The host checks the sha256
	// of whatever it decoded, as of Data.
	Packed []Packed
	Argv   []string // restart, stop, handoff: the command words
	Query  *Query   // observe, read-back: what to read
	Window *Window  // detach: the window the later ops of its Run call make
	// Judge is a read-back's: how the host judges its own readings
	// (ReadBack.Judge, on the host).
	Judge *ReadBack

	// expect checks the answer (a sysctl's read-back); an error stops the
	// run there. An Op with an expect ends its batch unless hostChecked
	// says the host makes the same check itself and stops the batch on it
	// (the agent's sysctl WANT).
	expect      func(Result) error
	hostChecked bool
	// refuses: a failure of this primitive means nothing was written (a
	// folder others can write, a release that is not the reviewed bytes):
	// the host is refused rather than failed.
	refuses bool
	// clock: the answer is the host clock (ns) when the relay stopped, the
	// start of the window as players see it.
	clock bool
	// upload: the release's own upload, whose answer is the receipt's
	// Upload.
	upload bool
	// undoing: part of a rollback, which a host carries out even when its
	// journal cannot note it (a full disk): an undo is better done than not.
	undoing bool
	// specValue: a failure means the host refuses a value of the spec (the
	// kernel would not take a sysctl, or reads back another): applying the
	// same plan again fails the same way.
	specValue bool
	// heard hears the answer's value (release-sum's, for the receipt): a
	// listener, not a check, so it does not end the batch.
	heard func(string)
}

// Undoing says the Op is part of a rollback (see Op.undoing).
func (o Op) Undoing() bool { return o.undoing }

// Check runs the Op's own check of its answer, if it has one.
func (o Op) Check(r Result) error {
	if o.expect == nil {
		return nil
	}
	return o.expect(r)
}

// EndsBatch says a backend must wait for this Op's answer before it sends
// anything after it: relayctl checks the answer itself (Check) and the
// host does not.
func (o Op) EndsBatch() bool { return o.expect != nil && !o.hostChecked }

// Packed is one form of an Op's Data on the wire.
type Packed struct {
	Encoding string // wire.ZstdPatch, wire.Zstd or wire.Gzip
	// Base and BaseSHA are a patch's: the file on the host it is made
	// from, and that file's sha256, which the host checks before it
	// decodes (a base that is not the one planned is no base).
	Base, BaseSHA string
	// Data are the form's bytes, made when first asked for and then shared
	// by every host (an error: relayctl could not make them, and the host
	// is sent the next form).
	Data func() ([]byte, error)
}

// Result is what the host answered to one Op.
type Result struct {
	Value string // VAL's text, or DATA's bytes
	// Sent is the bytes of the Op's data that went to the host: of Data,
	// or of the forms of it it was sent (Packed), those it refused
	// included.
	Sent int
	// Form is what a keep that sent its bytes sent last, the form the host
	// took: a Packed encoding, or wire.Raw for Data itself; "" when
	// nothing was sent (the host had the bytes). Refused says why the host
	// took none of the forms before it, one reason each.
	Form    string
	Refused []string
	Facts   *plans.Facts // observe's answer; read-back's, the reading it ended on
	// ReadBack is a read-back's verdict as the host gave it: whether its
	// readings held (Held, Why); relayctl checks Facts itself.
	ReadBack *ReadBackResult
	Drops    *plans.DropCounters // sample's answer
	At       time.Time           // when the answer came (relayctl's clock)
}

// OpError is an Op the host refused or failed, with the host's own words.
type OpError struct {
	Op  Op
	Msg string
}

func (e *OpError) Error() string { return e.Msg }

// Sentinel errors of the host lock and the host's folders.
var (
	ErrLocked     = errors.New("another apply holds the host lock")
	ErrUnsafeHost = errors.New("the host's state folder is not safe for root to write in")
)

// connLost is a transport failure (not a refusal by the host): inside the
// window it means nobody knows how far the host got but its journal.
type connLost struct{ err error }

func (e *connLost) Error() string { return "connection lost: " + e.err.Error() }
func (e *connLost) Unwrap() error { return e.err }

// ConnLost marks a transport failure, for backends.
func ConnLost(err error) error { return &connLost{err} }

// IsConnLost reports whether err is a lost connection.
func IsConnLost(err error) bool {
	var c *connLost
	return errors.As(err, &c)
}

func isConnLost(err error) bool { return IsConnLost(err) }

// lockOp, observeOp and unlockOp are the session's own primitives.
// With wait, the host waits up to that long for the lock (a run back
// after a lost connection, whose window is still ending on the host).
func lockOp(owner string, wait ...time.Duration) Op {
	// The owner is one line of text in the host's lock owner file.
	owner = strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f {
			return ' '
		}
		return r
	}, owner)
	if len(owner) > 1000 {
		owner = owner[:1000]
	}
	if strings.TrimSpace(owner) == "" {
		owner = "relayctl"
	}
	if len(wait) > 0 {
		return op("lock", owner, strconv.Itoa(int(wait[0].Seconds()+1)))
	}
	return op("lock", owner)
}

func observeOp(q Query) Op { return Op{Kind: "observe", Query: &q} }

func unlockOp() Op { return op("unlock") }

// sampleOp reads the drop counters of the relay process pid, on port, and
// its /status at control ("" for none).
func sampleOp(pid, port int, control string) Op {
	if control == "" {
		control = "-"
	}
	return op("sample", strconv.Itoa(pid), strconv.Itoa(port), control)
}
