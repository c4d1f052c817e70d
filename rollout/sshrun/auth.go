package sshrun

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"
)

// defaultIdentities are tried, when present, if neither the options nor
// ssh_config name an identity file, as OpenSSH does.
var defaultIdentities = []string{"id_ed25519", "id_ecdsa", "id_rsa"}

// keyring collects the keys offered during one Dial: identity files parsed
// once, and the ssh-agent connection, shared by every hop.
type keyring struct {
	explicit []string
	parsed   map[string]ssh.Signer
	agent    agent.ExtendedAgent
	agentErr error // why the agent is not used, for the auth error
	conn     net.Conn
}

func newKeyring(explicit []string) (*keyring, error) {
	k := &keyring{parsed: map[string]ssh.Signer{}}
	for _, p := range explicit {
		p, err := expandHome(p)
		if err != nil {
			return nil, err
		}
		// An identity the user named must work: a typo should not fall
		// through to other keys and a confusing auth failure.
		s, err := loadIdentity(p)
		if err != nil {
			return nil, err
		}
		k.parsed[p] = s
		k.explicit = append(k.explicit, p)
	}
	sock := os.Getenv("SSH_AUTH_SOCK")
	if sock == "" {
		k.agentErr = errors.New("SSH_AUTH_SOCK is not set")
		return k, nil
	}
	conn, err := net.Dial("unix", sock)
	if err != nil {
		k.agentErr = fmt.Errorf("connect to ssh-agent: %w", err)
		return k, nil
	}
	k.conn = conn
	k.agent = agent.NewClient(conn)
	return k, nil
}

func (k *keyring) close() {
	if k.conn != nil {
		k.conn.Close()
	}
}

// errPassphrase marks an identity file we cannot use without a prompt.
var errPassphrase = errors.New("passphrase-protected: add it to ssh-agent")

func loadIdentity(path string) (ssh.Signer, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read identity: %w", err)
	}
	s, err := ssh.ParsePrivateKey(b)
	var pm *ssh.PassphraseMissingError
	if errors.As(err, &pm) {
		return nil, fmt.Errorf("identity %s: %w", tildePath(path), errPassphrase)
	}
	if err != nil {
		return nil, fmt.Errorf("parse identity %s: %w", tildePath(path), err)
	}
	return s, nil
}

// attempt records what one hop offered, so an auth failure can say so,
// and which key signed, so a success can say which the host accepted.
type attempt struct {
	files       []string
	skipped     []string
	agentKeys   int
	agentNote   string
	noneOffered bool
	used        usedKey
}

// usedKey notes the key that signed a hop's authentication. x/crypto asks
// the server whether it would accept a key before it signs with it, and
// signs with no other once one is accepted, so after a handshake that
// succeeded the last key that signed is the one the host accepted.
type usedKey struct {
	mu  sync.Mutex
	key ssh.PublicKey
}

func (u *usedKey) note(k ssh.PublicKey) {
	u.mu.Lock()
	u.key = k
	u.mu.Unlock()
}

// fingerprint is the accepted key as ssh-keygen -l names it (its type and
// SHA256 fingerprint), "" when none signed.
func (u *usedKey) fingerprint() string {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.key == nil {
		return ""
	}
	return keyText(u.key)
}

// keyText is a public key's type and SHA256 fingerprint.
func keyText(k ssh.PublicKey) string { return k.Type() + " " + ssh.FingerprintSHA256(k) }

// wrap makes s note itself when it signs. It keeps the interfaces s has
// (x/crypto picks rsa-sha2 signatures only from an AlgorithmSigner).
func (u *usedKey) wrap(s ssh.Signer) ssh.Signer {
	r := notingSigner{Signer: s, u: u}
	switch a := s.(type) {
	case ssh.MultiAlgorithmSigner:
		return notingMulti{notingAlgorithm{r, a}, a}
	case ssh.AlgorithmSigner:
		return notingAlgorithm{r, a}
	}
	return r
}

type notingSigner struct {
	ssh.Signer
	u *usedKey
}

func (s notingSigner) Sign(rand io.Reader, data []byte) (*ssh.Signature, error) {
	s.u.note(s.PublicKey())
	return s.Signer.Sign(rand, data)
}

type notingAlgorithm struct {
	notingSigner
	a ssh.AlgorithmSigner
}

func (s notingAlgorithm) SignWithAlgorithm(rand io.Reader, data []byte, algorithm string) (*ssh.Signature, error) {
	s.u.note(s.PublicKey())
	return s.a.SignWithAlgorithm(rand, data, algorithm)
}

type notingMulti struct {
	notingAlgorithm
	m ssh.MultiAlgorithmSigner
}

func (s notingMulti) Algorithms() []string { return s.m.Algorithms() }

// methods builds the one publickey method for t: explicit identities, then
// the ssh_config ones (or the defaults), then the agent's keys, without
// offering one key twice. A single method, because x/crypto tries each
// method name only once.
func (k *keyring) methods(t Target) ([]ssh.AuthMethod, *attempt) {
	a := &attempt{}
	var signers []ssh.Signer
	seen := map[string]bool{}
	add := func(s ssh.Signer) bool {
		id := string(s.PublicKey().Marshal())
		if seen[id] {
			return false
		}
		seen[id] = true
		signers = append(signers, a.used.wrap(s))
		return true
	}
	for _, p := range k.explicit {
		if add(k.parsed[p]) {
			a.files = append(a.files, tildePath(p))
		}
	}
	files := t.IdentityFiles
	optional := false
	if len(files) == 0 {
		home, err := os.UserHomeDir()
		if err == nil {
			for _, n := range defaultIdentities {
				files = append(files, filepath.Join(home, ".ssh", n))
			}
			optional = true
		}
	}
	for _, p := range files {
		s, ok := k.parsed[p]
		if !ok {
			var err error
			s, err = loadIdentity(p)
			if err != nil {
				// Like OpenSSH, a missing or unusable configured identity
				// is passed over; it is named if auth then fails.
				if !(optional && errors.Is(err, fs.ErrNotExist)) {
					a.skipped = append(a.skipped, errorText(p, err))
				}
				continue
			}
			k.parsed[p] = s
		}
		if add(s) {
			a.files = append(a.files, tildePath(p))
		}
	}
	cb := func() ([]ssh.Signer, error) {
		if k.agent != nil {
			as, err := k.agent.Signers()
			if err != nil {
				a.agentNote = "ssh-agent: " + err.Error()
			}
			for _, s := range as {
				if add(s) {
					a.agentKeys++
				}
			}
		}
		a.noneOffered = len(signers) == 0
		return signers, nil
	}
	return []ssh.AuthMethod{ssh.PublicKeysCallback(cb)}, a
}

func errorText(path string, err error) string {
	if errors.Is(err, fs.ErrNotExist) {
		return tildePath(path) + " (missing)"
	}
	if errors.Is(err, errPassphrase) {
		return tildePath(path) + " (" + errPassphrase.Error() + ")"
	}
	return tildePath(path) + " (" + err.Error() + ")"
}

// authError says what was offered as which user, which is what a person
// needs to fix a refusal.
func (k *keyring) authError(t Target, a *attempt) error {
	var tried []string
	if len(a.files) > 0 {
		tried = append(tried, "identity files "+strings.Join(a.files, ", "))
	} else {
		tried = append(tried, "no identity files")
	}
	switch {
	case k.agent == nil:
		tried = append(tried, "no ssh-agent ("+k.agentErr.Error()+")")
	case a.agentNote != "":
		tried = append(tried, a.agentNote)
	default:
		tried = append(tried, fmt.Sprintf("%d ssh-agent keys", a.agentKeys))
	}
	var rest strings.Builder
	if len(a.skipped) > 0 {
		fmt.Fprintf(&rest, "; not used: %s", strings.Join(a.skipped, ", "))
	}
	if a.noneOffered {
		rest.WriteString("; pass --identity or load a key into ssh-agent")
	} else {
		fmt.Fprintf(&rest, "; check that one of these keys is in ~%s/.ssh/authorized_keys on the host", t.User)
	}
	return fmt.Errorf("%s: %w as %s: tried %s%s", t, ErrAuth, t.User, strings.Join(tried, " and "), rest.String())
}
