// Package whoami says who runs relayctl, for its records (a receipt's
// operator, the --skip-approval user, a host lock's owner): the uid, which
// the kernel gives and no one can claim, and a name for it with where the
// name came from.
//
// Go's os/user in a static build (CGO_ENABLED=0, the release build) reads
// /etc/passwd only, and for a uid without a line there (an LDAP or SSSD
// user) answers with $USER, which whoever starts relayctl sets: uid 4242
// with USER=alice was recorded as "alice". So the name is looked up here
// the same way in every build: /etc/passwd, else the system's user
// database through getent (NSS: LDAP, SSSD, systemd-homed), else $USER,
// and the record says which, so a reader knows the last is a claim.
package whoami

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
	"unicode"
)

// Where a name came from.
const (
	FromPasswd = "passwd"      // the uid's line in /etc/passwd
	FromNSS    = "nss"         // getent passwd UID: the system's user database
	FromEnv    = "environment" // $USER: a claim of whoever started relayctl
	FromNone   = "none"        // no name: the uid alone
)

// Identity is who runs relayctl.
type Identity struct {
	UID    int
	Name   string // "" when none was found
	Source string // FromPasswd, FromNSS, FromEnv or FromNone
}

// Current is the identity of the user running relayctl (its real uid).
func Current() Identity {
	return Lookup(os.Getuid(), Sources{Passwd: "/etc/passwd", Getent: getent, Env: os.Getenv})
}

// Sources are where Lookup looks, so tests can give their own.
type Sources struct {
	Passwd string                        // the passwd file
	Getent func(uid int) ([]byte, error) // getent passwd UID's output
	Env    func(string) string
}

// Lookup names uid from the first source that knows it.
func Lookup(uid int, s Sources) Identity {
	if data, err := os.ReadFile(s.Passwd); err == nil {
		if name, ok := passwdName(data, uid); ok {
			return Identity{UID: uid, Name: name, Source: FromPasswd}
		}
	}
	if s.Getent != nil {
		if out, err := s.Getent(uid); err == nil {
			if name, ok := passwdName(out, uid); ok {
				return Identity{UID: uid, Name: name, Source: FromNSS}
			}
		}
	}
	if name := s.Env("USER"); validName(name) {
		return Identity{UID: uid, Name: name, Source: FromEnv}
	}
	return Identity{UID: uid, Source: FromNone}
}

// passwdName finds uid's name in passwd lines (NAME:PW:UID:...): the
// first line with that uid and a name fit to record.
func passwdName(data []byte, uid int) (string, bool) {
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := strings.Split(sc.Text(), ":")
		if len(f) < 7 || f[2] != strconv.Itoa(uid) {
			continue
		}
		if validName(f[0]) {
			return f[0], true
		}
	}
	return "", false
}

// validName: a name fit for a record and a host's lock file: 1 to 64
// printable characters, no space, no colon.
func validName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	return strings.IndexFunc(s, func(r rune) bool { return !unicode.IsPrint(r) || unicode.IsSpace(r) || r == ':' }) < 0
}

// getentPaths are where getent is looked for: fixed places, not $PATH,
// which under sudo -E is the invoking user's.
var getentPaths = []string{"/usr/bin/getent", "/bin/getent"}

// getent asks the system's user database for uid, for at most two
// seconds (a directory server may be slow; the record is not worth more).
func getent(uid int) ([]byte, error) {
	for _, p := range getentPaths {
		if _, err := os.Stat(p); err != nil {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		return exec.CommandContext(ctx, p, "passwd", strconv.Itoa(uid)).Output()
	}
	return nil, os.ErrNotExist
}

// String is the identity as a person reads it in a record: the name, the
// uid, and where the name came from unless /etc/passwd said it.
func (id Identity) String() string {
	uid := "uid " + strconv.Itoa(id.UID)
	switch id.Source {
	case FromPasswd:
		return id.Name + " (" + uid + ")"
	case FromNSS:
		return id.Name + " (" + uid + ", by NSS)"
	case FromEnv:
		return id.Name + " (" + uid + "; the name is $USER's claim)"
	}
	return uid
}
