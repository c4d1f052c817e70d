package sshrun

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// hostKeys checks one hop's host key against known_hosts and keeps the
// refusal, since the handshake error only carries it as text in older
// versions and names no host.
type hostKeys struct {
	target    Target
	file      string   // the user's known_hosts: read, and where accepted keys go
	global    []string // the global known_hosts files, read too
	files     []string // every known_hosts file read: the user's and the global ones
	acceptNew bool
	logf      func(string, ...any)
	db        ssh.HostKeyCallback
	refusal   error
}

// knownHostsDBs are the known_hosts files parsed, for every dial to share
// (knownhosts' callback only reads its database).
var knownHostsDBs parsed[ssh.HostKeyCallback]

// newHostKeys reads the user's known_hosts and the global ones (as OpenSSH
// does: a host pinned in /etc/ssh/ssh_known_hosts is known, not new).
// Missing files are skipped.
func newHostKeys(t Target, file string, global []string, acceptNew bool, logf func(string, ...any)) (*hostKeys, error) {
	files, db, err := readKnownHosts(file, global)
	if err != nil {
		return nil, err
	}
	return &hostKeys{target: t, file: file, global: global, files: files, acceptNew: acceptNew, logf: logf, db: db}, nil
}

// readKnownHosts is the shared parse of those of file and global that
// exist, and their names.
func readKnownHosts(file string, global []string) ([]string, ssh.HostKeyCallback, error) {
	var files []string
	for _, f := range append([]string{file}, global...) {
		if _, err := os.Stat(f); errors.Is(err, fs.ErrNotExist) {
			continue
		}
		files = append(files, f)
	}
	db, err := knownHostsDBs.get(files, func() (ssh.HostKeyCallback, error) { return knownhosts.New(files...) })
	if err != nil {
		return nil, nil, fmt.Errorf("read known hosts: %w", err)
	}
	return files, db, nil
}

// probeKey is a key no host has, offered to the database to learn which keys
// it holds for an address (knownhosts has no lookup of its own).
var probeKey, _ = ssh.NewPublicKey(ed25519.PublicKey(make([]byte, ed25519.PublicKeySize)))

// algorithms orders the host key algorithms so that the types known_hosts
// already holds for the address come first, as OpenSSH does; otherwise a
// host with several keys may present one we do not have and look changed.
func (h *hostKeys) algorithms() []string {
	var ke *knownhosts.KeyError
	err := h.db(h.target.Addr(), &net.TCPAddr{IP: net.IPv4zero}, probeKey)
	if !errors.As(err, &ke) || len(ke.Want) == 0 {
		return nil
	}
	supported := ssh.SupportedAlgorithms().HostKeys
	var algos []string
	add := func(a string) {
		if slices.Contains(supported, a) && !slices.Contains(algos, a) {
			algos = append(algos, a)
		}
	}
	for _, k := range ke.Want {
		if k.Key.Type() == ssh.KeyAlgoRSA {
			add(ssh.KeyAlgoRSASHA512)
			add(ssh.KeyAlgoRSASHA256)
			continue
		}
		add(k.Key.Type())
	}
	for _, a := range supported {
		add(a)
	}
	return algos
}

func fingerprint(k ssh.PublicKey) string { return ssh.FingerprintSHA256(k) }

func (h *hostKeys) check(hostname string, remote net.Addr, key ssh.PublicKey) error {
	err := h.db(hostname, remote, key)
	if err == nil {
		return nil
	}
	var ke *knownhosts.KeyError
	if errors.As(err, &ke) && len(ke.Want) == 0 {
		// A certificate authority vouches for this host: a plain key (or a
		// certificate it did not sign) is a host we cannot trust, never a
		// new one to record.
		if caFile, caLine, ok := certAuthorityFor(h.files, h.target.Addr()); ok {
			h.refusal = fmt.Errorf("%s: %w: %s:%d trusts a certificate authority for this host, but it offered %s %s, which that authority did not sign; check the host, its key may have been replaced",
				h.target, ErrHostKeyChanged, tildePath(caFile), caLine, key.Type(), fingerprint(key))
			return h.refusal
		}
		if h.acceptNew {
			h.refusal = h.record(hostname, remote, key)
			return h.refusal
		}
	}
	note := ""
	if h.acceptNew {
		note = " (--accept-new-host-keys trusts only hosts not yet known)"
	}
	h.refusal = h.refuse(err, key, note)
	return h.refusal
}

// record appends key to the user's known_hosts as the target's. Under the
// file's lock it reads the files again first: a dial that overlapped this
// one (two inventory names for one address, a shared ProxyJump host,
// --parallel) may have recorded a key for the address since this one read
// them. The same key is then known already and not written twice; another
// key is a changed key, refused as any other, so two first dials never
// leave two keys that each pass for the host.
func (h *hostKeys) record(hostname string, remote net.Addr, key ssh.PublicKey) error {
	var meanwhile error
	line := knownhosts.Line([]string{h.target.Addr()}, key)
	wrote, err := appendKnownHost(h.file, line, func() (bool, error) {
		_, db, err := readKnownHosts(h.file, h.global)
		if err != nil {
			return false, err
		}
		meanwhile = db(hostname, remote, key)
		var ke *knownhosts.KeyError
		return errors.As(meanwhile, &ke) && len(ke.Want) == 0, nil
	})
	switch {
	case err != nil:
		return fmt.Errorf("%s: record host key: %w", h.target, err)
	case !wrote && meanwhile != nil:
		return h.refuse(meanwhile, key, " (recorded by another dial of this address while this one checked it)")
	case wrote && h.logf != nil:
		h.logf("%s: recorded new host key %s %s in %s", h.target, key.Type(), fingerprint(key), tildePath(h.file))
	}
	return nil
}

// refuse is the error for a key the known_hosts files do not accept (err,
// from knownhosts), naming the file and line that decided; note ends the
// changed-key message.
func (h *hostKeys) refuse(err error, key ssh.PublicKey, note string) error {
	var ke *knownhosts.KeyError
	var re *knownhosts.RevokedError
	switch {
	case errors.As(err, &ke) && len(ke.Want) == 0:
		return fmt.Errorf("%s: %w: %s has no key for %s (the host offered %s %s); check the fingerprint, then connect again with --accept-new-host-keys to trust and record it",
			h.target, ErrUnknownHost, tildePath(h.file), knownhosts.Normalize(h.target.Addr()), key.Type(), fingerprint(key))
	case errors.As(err, &ke):
		// Name the line of the same key type if there is one: that is the
		// key this host should have offered.
		want := ke.Want[0]
		for _, k := range ke.Want {
			if k.Key.Type() == key.Type() {
				want = k
				break
			}
		}
		offered := fingerprint(key)
		if key.Type() != want.Key.Type() {
			offered = key.Type() + " " + offered
		}
		return fmt.Errorf("%s: %w: %s:%d has %s %s, the host offered %s; if the host was reinstalled, delete that line and connect again with --accept-new-host-keys%s",
			h.target, ErrHostKeyChanged, tildePath(want.Filename), want.Line, want.Key.Type(), fingerprint(want.Key), offered, note)
	case errors.As(err, &re):
		return fmt.Errorf("%s: %w: %s:%d revokes %s %s",
			h.target, ErrHostKeyRevoked, tildePath(re.Revoked.Filename), re.Revoked.Line, key.Type(), fingerprint(key))
	}
	return fmt.Errorf("%s: check host key: %w", h.target, err)
}

// knownHostsMu serialises appends within this process; flock covers other
// relayctl processes writing the same file.
var knownHostsMu sync.Mutex

// appendKnownHost adds line to file, creating the file (0600) and its
// directory (0700) if missing, when stillNew, called under the lock, says
// so. It reports whether it wrote.
func appendKnownHost(file, line string, stillNew func() (bool, error)) (bool, error) {
	knownHostsMu.Lock()
	defer knownHostsMu.Unlock()
	if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
		return false, fmt.Errorf("create directory: %w", err)
	}
	f, err := os.OpenFile(file, os.O_RDWR|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return false, err
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		return false, fmt.Errorf("lock %s: %w", file, err)
	}
	// stillNew reads file by its name: it must be the file locked here.
	if named, err := os.Stat(file); err != nil || !sameFile(f, named) {
		return false, fmt.Errorf("%s was replaced while it was being locked; connect again", file)
	}
	if ok, err := stillNew(); err != nil || !ok {
		return false, err
	}
	// A file that does not end in a newline would glue our line to its last.
	prefix := ""
	if st, err := f.Stat(); err == nil && st.Size() > 0 {
		last := make([]byte, 1)
		if _, err := f.ReadAt(last, st.Size()-1); err != nil && err != io.EOF {
			return false, fmt.Errorf("read %s: %w", file, err)
		}
		if last[0] != '\n' {
			prefix = "\n"
		}
	}
	if _, err := f.WriteString(prefix + line + "\n"); err != nil {
		return false, fmt.Errorf("write %s: %w", file, err)
	}
	return true, f.Close()
}

func sameFile(f *os.File, named fs.FileInfo) bool {
	st, err := f.Stat()
	return err == nil && os.SameFile(st, named)
}
