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
	var files []string
	for _, f := range append([]string{file}, global...) {
		if _, err := os.Stat(f); errors.Is(err, fs.ErrNotExist) {
			continue
		}
		files = append(files, f)
	}
	db, err := knownHostsDBs.get(files, func() (ssh.HostKeyCallback, error) { return knownhosts.New(files...) })
	if err != nil {
		return nil, fmt.Errorf("read known hosts: %w", err)
	}
	return &hostKeys{target: t, file: file, files: files, acceptNew: acceptNew, logf: logf, db: db}, nil
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
	var re *knownhosts.RevokedError
	file := tildePath(h.file)
	if errors.As(err, &ke) && len(ke.Want) == 0 {
		// A certificate authority vouches for this host: a plain key (or a
		// certificate it did not sign) is a host we cannot trust, never a
		// new one to record.
		if caFile, caLine, ok := certAuthorityFor(h.files, h.target.Addr()); ok {
			h.refusal = fmt.Errorf("%s: %w: %s:%d trusts a certificate authority for this host, but it offered %s %s, which that authority did not sign; check the host, its key may have been replaced",
				h.target, ErrHostKeyChanged, tildePath(caFile), caLine, key.Type(), fingerprint(key))
			return h.refusal
		}
	}
	switch {
	case errors.As(err, &ke) && len(ke.Want) == 0 && h.acceptNew:
		line := knownhosts.Line([]string{h.target.Addr()}, key)
		if err := appendKnownHost(h.file, line); err != nil {
			h.refusal = fmt.Errorf("%s: record host key: %w", h.target, err)
			return h.refusal
		}
		if h.logf != nil {
			h.logf("%s: recorded new host key %s %s in %s", h.target, key.Type(), fingerprint(key), file)
		}
		return nil
	case errors.As(err, &ke) && len(ke.Want) == 0:
		h.refusal = fmt.Errorf("%s: %w: %s has no key for %s (the host offered %s %s); check the fingerprint, then connect again with --accept-new-host-keys to trust and record it",
			h.target, ErrUnknownHost, file, knownhosts.Normalize(h.target.Addr()), key.Type(), fingerprint(key))
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
		note := ""
		if h.acceptNew {
			note = " (--accept-new-host-keys trusts only hosts not yet known)"
		}
		h.refusal = fmt.Errorf("%s: %w: %s:%d has %s %s, the host offered %s; if the host was reinstalled, delete that line and connect again with --accept-new-host-keys%s",
			h.target, ErrHostKeyChanged, tildePath(want.Filename), want.Line, want.Key.Type(), fingerprint(want.Key), offered, note)
	case errors.As(err, &re):
		h.refusal = fmt.Errorf("%s: %w: %s:%d revokes %s %s",
			h.target, ErrHostKeyRevoked, tildePath(re.Revoked.Filename), re.Revoked.Line, key.Type(), fingerprint(key))
	default:
		h.refusal = fmt.Errorf("%s: check host key: %w", h.target, err)
	}
	return h.refusal
}

// knownHostsMu serialises appends within this process; flock covers other
// relayctl processes writing the same file.
var knownHostsMu sync.Mutex

// appendKnownHost adds line to file, creating the file (0600) and its
// directory (0700) if missing.
func appendKnownHost(file, line string) error {
	knownHostsMu.Lock()
	defer knownHostsMu.Unlock()
	if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
		return fmt.Errorf("create directory: %w", err)
	}
	f, err := os.OpenFile(file, os.O_RDWR|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("lock %s: %w", file, err)
	}
	// A file that does not end in a newline would glue our line to its last.
	prefix := ""
	if st, err := f.Stat(); err == nil && st.Size() > 0 {
		last := make([]byte, 1)
		if _, err := f.ReadAt(last, st.Size()-1); err != nil && err != io.EOF {
			return fmt.Errorf("read %s: %w", file, err)
		}
		if last[0] != '\n' {
			prefix = "\n"
		}
	}
	if _, err := f.WriteString(prefix + line + "\n"); err != nil {
		return fmt.Errorf("write %s: %w", file, err)
	}
	return f.Close()
}
