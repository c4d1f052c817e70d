// Package approval binds a reviewed plan to the person who approved it,
// with SSH signatures in the format of `ssh-keygen -Y sign` (the reviewer
// already has an SSH key) and an allowed_signers file as `ssh-keygen -Y
// verify` reads it. A plan's checksum only says its bytes were not changed
// by accident: anyone who can write a plan can recompute it. A signature
// can only be made by the key's holder.
package approval

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hiddeco/sshsig"
	"golang.org/x/crypto/ssh"
)

// Namespace is the sshsig namespace of plan approvals, so a signature made
// for something else (a git commit, a file) cannot pass as one:
// ssh-keygen -Y sign -n relayctl-plan.
const Namespace = "relayctl-plan"

// Sentinel errors.
var (
	ErrNoSignature = errors.New("the plan is not signed")
	ErrNotAllowed  = errors.New("the plan's signature is not from an allowed signer")
)

// Sign signs plan bytes as an approval and returns the armored signature
// (the content of PLAN.sig).
func Sign(plan []byte, signer ssh.Signer) ([]byte, error) {
	sig, err := sshsig.Sign(bytes.NewReader(plan), signer, sshsig.HashSHA512, Namespace)
	if err != nil {
		return nil, fmt.Errorf("sign plan: %w", err)
	}
	return sshsig.Armor(sig), nil
}

// Approver is who approved a plan.
type Approver struct {
	Principals  string // as allowed_signers names them
	KeyType     string
	Fingerprint string // SHA256:...
	File        string // allowed_signers file and line
	Line        int
}

func (a Approver) String() string {
	return fmt.Sprintf("%s (%s %s, %s:%d)", a.Principals, a.KeyType, a.Fingerprint, a.File, a.Line)
}

// Verify checks an armored signature over plan bytes against an
// allowed_signers file (name is for messages). It returns the approver, or
// an error that says why the plan is not approved.
func Verify(plan, armored, allowedSigners []byte, name string, now time.Time) (Approver, error) {
	sig, err := sshsig.Unarmor(armored)
	if err != nil {
		return Approver{}, fmt.Errorf("read signature: %w", err)
	}
	if sig.Namespace != Namespace {
		return Approver{}, fmt.Errorf("%w: signed for namespace %q, not %q (sign with relayctl approve, or ssh-keygen -Y sign -n %s)", ErrNotAllowed, sig.Namespace, Namespace, Namespace)
	}
	pub := sig.PublicKey
	if _, ok := pub.(*ssh.Certificate); ok {
		return Approver{}, fmt.Errorf("%w: signed with a certificate; relayctl accepts plain keys listed in allowed_signers", ErrNotAllowed)
	}
	if err := sshsig.Verify(bytes.NewReader(plan), sig, pub, sig.HashAlgorithm, Namespace); err != nil {
		return Approver{}, fmt.Errorf("%w: the signature does not match the plan's bytes (the plan changed after it was signed): %v", ErrNotAllowed, err)
	}
	signers, err := ParseAllowedSigners(allowedSigners, name)
	if err != nil {
		return Approver{}, err
	}
	fp := ssh.FingerprintSHA256(pub)
	var reasons []string
	for _, s := range signers {
		if !bytes.Equal(s.Key.Marshal(), pub.Marshal()) {
			continue
		}
		if s.CertAuthority {
			reasons = append(reasons, fmt.Sprintf("%s:%d is a cert-authority line", name, s.Line))
			continue
		}
		if s.HasNamespaces && matchPatternList(Namespace, s.Namespaces) != 1 {
			reasons = append(reasons, fmt.Sprintf("%s:%d allows namespaces %q only, which %s is not (OpenSSH's pattern lists: a negated match refuses)", name, s.Line, clip(s.Namespaces), Namespace))
			continue
		}
		if !s.ValidAfter.IsZero() && now.Before(s.ValidAfter) {
			reasons = append(reasons, fmt.Sprintf("%s:%d is valid only after %s", name, s.Line, s.ValidAfter.Format(time.RFC3339)))
			continue
		}
		if !s.ValidBefore.IsZero() && !now.Before(s.ValidBefore) {
			reasons = append(reasons, fmt.Sprintf("%s:%d expired at %s", name, s.Line, s.ValidBefore.Format(time.RFC3339)))
			continue
		}
		return Approver{Principals: s.Principals, KeyType: pub.Type(), Fingerprint: fp, File: name, Line: s.Line}, nil
	}
	if len(reasons) > 0 {
		return Approver{}, fmt.Errorf("%w: %s %s: %s", ErrNotAllowed, pub.Type(), fp, strings.Join(reasons, "; "))
	}
	return Approver{}, fmt.Errorf("%w: %s %s is not in %s", ErrNotAllowed, pub.Type(), fp, name)
}

// Signer is one line of an allowed_signers file (ssh-keygen(1), ALLOWED
// SIGNERS): principals, options, a public key.
type Signer struct {
	Principals    string
	CertAuthority bool
	HasNamespaces bool   // a namespaces= option was given, even ""
	Namespaces    string // its pattern list, as ssh-keygen reads it
	ValidAfter    time.Time
	ValidBefore   time.Time
	Key           ssh.PublicKey
	Line          int
}

// ParseAllowedSigners reads an allowed_signers file. Every malformed line
// is an error naming it: an approval check must not skip what it cannot
// read.
func ParseAllowedSigners(data []byte, name string) ([]Signer, error) {
	var out []Signer
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		s, err := parseSignerLine(line)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %v", name, n, err)
		}
		s.Line = n
		out = append(out, s)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s has no signers: add a line such as \"alice@example.com ssh-ed25519 AAAA...\"", name)
	}
	return out, nil
}

func parseSignerLine(line string) (Signer, error) {
	var s Signer
	if strings.ContainsRune(line, 0) {
		return s, errors.New("a NUL byte in the line")
	}
	principals, rest := nextField(line)
	if principals == "" {
		return s, errors.New("no principals")
	}
	s.Principals = principals
	// At most one field of options comes before the key, as OpenSSH reads
	// it (sshsig.c): it may hold quoted spaces.
	rest = strings.TrimLeft(rest, " \t")
	if rest == "" {
		return s, errors.New("no public key")
	}
	if !looksLikeKey(rest) {
		opts, r, err := advancePastOptions(rest)
		if err != nil {
			return s, err
		}
		if err := parseOptions(opts, &s); err != nil {
			return s, err
		}
		rest = strings.TrimLeft(r, " \t")
		if rest == "" {
			return s, errors.New("no public key")
		}
	}
	key, _, keyOpts, _, err := ssh.ParseAuthorizedKey([]byte(rest))
	if err != nil {
		return s, fmt.Errorf("public key: %v", err)
	}
	if len(keyOpts) > 0 {
		return s, fmt.Errorf("public key: %q before it is not a key (options go in one field, before the key)", strings.Join(keyOpts, ","))
	}
	s.Key = key
	return s, nil
}

func looksLikeKey(s string) bool {
	return strings.HasPrefix(s, "ssh-") || strings.HasPrefix(s, "ecdsa-") || strings.HasPrefix(s, "sk-")
}

// nextField splits off the first whitespace-separated field, keeping
// double-quoted spans together.
func nextField(s string) (string, string) {
	s = strings.TrimLeft(s, " \t")
	quoted := false
	for i, r := range s {
		switch {
		case r == '"':
			quoted = !quoted
		case (r == ' ' || r == '\t') && !quoted:
			return s[:i], s[i:]
		}
	}
	return s, ""
}

// parseSignerTime reads YYYYMMDD[HHMM[SS]][Z], as ssh-keygen does (UTC
// with Z, local time without).
func parseSignerTime(v string) (time.Time, error) {
	loc := time.Local
	if strings.HasSuffix(v, "Z") {
		v, loc = strings.TrimSuffix(v, "Z"), time.UTC
	}
	for _, layout := range []string{"20060102150405", "200601021504", "20060102"} {
		if len(v) == len(layout) {
			if t, err := time.ParseInLocation(layout, v, loc); err == nil {
				return t, nil
			}
		}
	}
	return time.Time{}, fmt.Errorf("time %q: want YYYYMMDD[HHMM[SS]][Z]", v)
}
