// Package fdstore keeps relayd's UDP socket and its lobby table in
// systemd's file-descriptor store, so that `systemctl restart relayd` (and
// a crash that Restart= answers) hands both to the next process instead of
// closing the socket: datagrams wait in its queue while no process reads,
// no player gets an ICMP error, and no lobby is cut (docs/systemd.md, "The
// file-descriptor store").
//
// What relayd keeps there, by name (FDNAME=):
//
//	relayd-udp      the UDP socket
//	relayd-state-a  a sealed memfd holding the state (EncodeSaved): the
//	relayd-state-b  lobby table, the counters, who wrote it and when
//
// Two state names, because systemd 252 handles a message's FDSTORE=1
// before its FDSTOREREMOVE=1: one message cannot replace a descriptor of
// the same name. A save stores the new state under the name the store does
// not hold, then removes the other, so the store always holds a whole
// state. At most three descriptors at once, hence MinStoreMax.
//
// The next process finds them by name in LISTEN_FDS/LISTEN_FDNAMES
// (Inherited), takes the socket if it is bound where its config says, takes
// the newest state that decodes, and removes from the store what it does
// not use.
package fdstore

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/relayctl/relayctl/relay/sdnotify"
)

// Protocol names this transport and its version, as /status reports it in
// "fdstore" and the capability marker says it (capability.FDStore).
const Protocol = "systemd/1"

// The names relayd gives its descriptors in the store.
const (
	NameUDP    = "relayd-udp"
	NameStateA = "relayd-state-a"
	NameStateB = "relayd-state-b"
)

// MinStoreMax is the smallest FileDescriptorStoreMax= relayd can use: the
// socket and, while a save replaces one state with the next, two states.
const MinStoreMax = 3

// EnvMax is the variable that says how many descriptors the store holds.
// systemd 254 and later set it from FileDescriptorStoreMax=; 252 does not,
// so relay/dist/relayd.service sets it to the same number.
const EnvMax = "FDSTORE"

// barrierTimeout bounds the wait for systemd to have handled what relayd
// stored before it exits.
const barrierTimeout = 5 * time.Second

// Why a Store is not available.
var (
	ErrNoNotifySocket = errors.New("NOTIFY_SOCKET is not set: not run by systemd as Type=notify")
	ErrNoStoreMax     = errors.New("FDSTORE is not set: systemd 254 and later set it from FileDescriptorStoreMax=; on older systemd the unit must set Environment=FDSTORE=N with the same N (relay/dist/relayd.service does)")
	ErrStoreTooSmall  = errors.New("the fd store is too small")
)

// Store is the unit's file-descriptor store, reached through systemd's
// notify socket.
type Store struct {
	socket string
	max    int
}

// FromEnviron returns the store of the unit relayd runs in, or an error
// saying why relayd cannot use one: not run by systemd, the store's size
// not known, or too small for what relayd keeps there.
func FromEnviron(environ []string) (*Store, error) {
	socket := sdnotify.SocketFromEnviron(environ)
	if socket == "" {
		return nil, ErrNoNotifySocket
	}
	v, ok := lookup(environ, EnvMax)
	if !ok {
		return nil, ErrNoStoreMax
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return nil, fmt.Errorf("FDSTORE=%q: want the store's size, a decimal integer", v)
	}
	if n < MinStoreMax {
		return nil, fmt.Errorf("%w: FDSTORE=%d, relayd keeps up to %d descriptors there (FileDescriptorStoreMax=%d or more)", ErrStoreTooSmall, n, MinStoreMax, MinStoreMax)
	}
	return &Store{socket: socket, max: n}, nil
}

// Max is the store's size, FileDescriptorStoreMax= as FDSTORE says it.
func (s *Store) Max() int { return s.max }

// Put stores fd under name. systemd keeps a duplicate, never watched
// (FDPOLL=0: a UDP socket may raise POLLERR, and systemd would close it);
// the caller keeps and closes its own. Storing a descriptor of an open
// file the store already holds changes nothing.
func (s *Store) Put(name string, fd int) error {
	if err := checkName(name); err != nil {
		return err
	}
	state := sdnotify.FDStore + "\nFDNAME=" + name + "\n" + sdnotify.FDPollOff
	if err := sdnotify.Send(s.socket, state, fd); err != nil {
		return fmt.Errorf("store %s: %w", name, err)
	}
	return nil
}

// Remove closes every stored descriptor named name.
func (s *Store) Remove(name string) error {
	if err := checkName(name); err != nil {
		return err
	}
	if err := sdnotify.Send(s.socket, sdnotify.FDStoreRemove+"\nFDNAME="+name); err != nil {
		return fmt.Errorf("remove %s from the store: %w", name, err)
	}
	return nil
}

// Sync returns once systemd has handled every message sent before it
// (sdnotify.Barrier).
func (s *Store) Sync() error { return sdnotify.Barrier(s.socket, barrierTimeout) }

// checkName applies systemd's rule for FDNAME= (fdname_is_valid): 1 to
// 255 printable ASCII characters, no colon (LISTEN_FDNAMES separates
// names with colons).
func checkName(name string) error {
	if name == "" || len(name) > 255 {
		return fmt.Errorf("fd name %q: want 1 to 255 characters", name)
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; c < ' ' || c > '~' || c == ':' {
			return fmt.Errorf("fd name %q: want printable ASCII without ':'", name)
		}
	}
	return nil
}

func lookup(environ []string, key string) (string, bool) {
	for _, kv := range environ { // the first one wins, as in os.Getenv
		if v, ok := strings.CutPrefix(kv, key+"="); ok {
			return v, true
		}
	}
	return "", false
}
