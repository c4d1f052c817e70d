package fdstore

import (
	"fmt"
	"sync"

	"golang.org/x/sys/unix"
)

// Found is a state read from a descriptor systemd passed.
type Found struct {
	Name  string
	Saved Saved
}

// Newest reads every state in files and returns the one with the highest
// sequence that reads and decodes (ok false if none does), and why each
// other one was passed over. It does not close the files.
func Newest(files []File) (best Found, ok bool, refused []error) {
	for _, f := range files {
		b, err := ReadMemfd(f.FD)
		var s Saved
		if err == nil {
			s, err = DecodeSaved(b)
		}
		switch {
		case err != nil:
			refused = append(refused, fmt.Errorf("%s (fd %d): %w", f.Name, f.FD, err))
		case !ok || s.Seq > best.Saved.Seq:
			if ok {
				refused = append(refused, fmt.Errorf("%s: sequence %d, older than %s's %d", best.Name, best.Saved.Seq, f.Name, s.Seq))
			}
			best, ok = Found{Name: f.Name, Saved: s}, true
		default:
			refused = append(refused, fmt.Errorf("%s: sequence %d, not newer than %s's %d", f.Name, s.Seq, best.Name, best.Saved.Seq))
		}
	}
	return best, ok, refused
}

// Keeper saves relayd's state in the store, one save at a time.
type Keeper struct {
	store *Store
	mu    sync.Mutex
	cur   string // the name that holds the newest whole state, "" none
	seq   uint64 // its sequence
}

// NewKeeper saves into store, after the state named cur with sequence seq
// (cur "" when the store holds none). The caller has removed any other
// state from the store.
func NewKeeper(store *Store, cur string, seq uint64) *Keeper {
	return &Keeper{store: store, cur: cur, seq: seq}
}

// Save stores s, its Seq set to the next number, under the state name the
// store does not hold, then removes the other one: at every moment the
// store holds a whole state. It returns the name and the bytes stored.
func (k *Keeper) Save(s Saved) (name string, size int, err error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	s.Seq = k.seq + 1
	b, err := EncodeSaved(s)
	if err != nil {
		return "", 0, err
	}
	fd, err := WriteMemfd(b)
	if err != nil {
		return "", 0, fmt.Errorf("save state: %w", err)
	}
	defer unix.Close(fd) // systemd has its own copy once Put returns
	name = NameStateA
	if k.cur == NameStateA {
		name = NameStateB
	}
	if err := k.store.Put(name, fd); err != nil {
		return "", 0, fmt.Errorf("save state: %w", err)
	}
	prev := k.cur
	k.cur, k.seq = name, s.Seq
	if prev != "" {
		if err := k.store.Remove(prev); err != nil {
			// Two states in the store: the next start takes the newer.
			return name, len(b), fmt.Errorf("save state: %w", err)
		}
	}
	return name, len(b), nil
}

// Holds reports whether the store holds a state this keeper knows of.
func (k *Keeper) Holds() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.cur != ""
}

// Sync is Store.Sync: systemd holds what was saved once it returns.
func (k *Keeper) Sync() error { return k.store.Sync() }
