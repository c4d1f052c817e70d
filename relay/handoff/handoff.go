// Package handoff moves a running relayd's UDP socket and lobby table to a
// new relayd process, so a restart loses no datagram and cuts no lobby
// (docs/relayd.md, "Handoff").
//
// The kernel queue belongs to the socket, not to the process, so a socket
// passed with SCM_RIGHTS keeps the datagrams queued in it while the
// processes switch. The switch is exact: the old process stops reading
// (after relaying the batch it has read), sends its state as of that
// moment, and the new one starts reading only after it has told the old
// one it took over. Neither reads while the other may, so no datagram is
// read twice or dropped by the switch.
//
// A transport is the seam. Unix (this package, protocol "unix/1") is the
// one that exists: a running relayd listens on a Unix socket and a new
// relayd started with the same config connects to it. The messages, in
// order:
//
//	old → new  HELLO  protocol version, old pid and version, its addresses;
//	                  SCM_RIGHTS: the UDP socket and the control listener
//	new → old  READY  the new process set its socket options and is ready
//	                  (or ABORT with a reason: the old one keeps serving)
//	old → new  STATE  the old process stopped reading: the time of its last
//	                  read, its counters and its lobby table
//	new → old  DONE   the new process reads from now on; the old one exits
//	                  (or ABORT: the old one resumes reading)
//
// Under systemd the other transport is systemd's file-descriptor store
// (package relay/fdstore): the old process stops reading as Pause does,
// keeps the socket and its State (EncodeState) in the store, and exits; the
// next one takes both from LISTEN_FDS and restores as the Unix transport
// does. There is no way back there, and none is needed: a new process that
// fails leaves both in the store for the next start.
package handoff

import (
	"errors"
	"os"
)

// Protocol names the transport and its version, as /status reports it in
// "handoff" and the capability marker in the binary says it.
const Protocol = "unix/1"

// protocolVersion is the number in HELLO; a new process refuses another.
const protocolVersion = 1

// Hello is what the old process says about itself before handing over.
type Hello struct {
	PID     int    // the old process
	Version string // its release
	Listen  string // the UDP socket's address, as it reports it
	Control string // the control listener's address
}

// State is the old process's state at the moment it stopped reading.
type State struct {
	LastRead int64 // Unix nanoseconds of its last read of a datagram, 0 if none
	Paused   int64 // Unix nanoseconds when it stopped reading
	// Counters are its counters by their /status names; a new process
	// carries on from them and ignores names it does not know.
	Counters map[string]uint64
	Table    []byte // the lobby table, lobby.EncodeTable
}

// Relay is what a transport needs of the running relay to hand it over.
type Relay interface {
	Hello() Hello
	// Files returns duplicates of the UDP socket and of the control
	// listener (-1 if it has none to give); the transport closes them.
	// They are plain descriptors, not *os.File: os.File.Fd would put the
	// socket, shared with the running relay, into blocking mode.
	Files() (udp, control int, err error)
	// Pause stops reading the UDP socket once the batch in progress has
	// been relayed, and returns the state as of then. Nothing is read
	// after it returns until Resume.
	Pause() (State, error)
	// Resume reads again after a handoff that did not complete.
	Resume()
	// HandedOver tells the relay that process pid reads the socket now:
	// it must stop for good without reading again.
	HandedOver(pid int)
}

// Incoming is a handoff in progress, seen from the new process.
type Incoming interface {
	From() Hello
	// Files are the inherited sockets; the caller owns and closes them.
	// control is nil when the old process had none to give.
	Files() (udp, control *os.File)
	// Ready says the new process is ready and returns the old one's state
	// once it has stopped reading.
	Ready() (State, error)
	// Commit tells the old process that this one reads from now on. Only
	// after Commit returns nil may the caller read the socket.
	Commit() error
	// Abort gives the socket back: the old process keeps or resumes
	// reading. The caller must not read the socket after it.
	Abort(reason string)
}

var (
	// ErrNoPeer means no relayd answered on the handoff socket: start with
	// a socket of its own.
	ErrNoPeer = errors.New("no relayd to take over from")
	// ErrAborted is the other side's ABORT.
	ErrAborted = errors.New("handoff aborted")
)
