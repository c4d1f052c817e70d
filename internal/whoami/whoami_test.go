package whoami

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// The name comes from /etc/passwd, else NSS, else $USER, and the identity
// says which; the uid is always there.
func TestLookup(t *testing.T) {
	passwd := filepath.Join(t.TempDir(), "passwd")
	os.WriteFile(passwd, []byte("root:x:0:0:root:/root:/bin/bash\n#comment\nbroken:x\nbob:x:1000:1000::/home/bob:/bin/sh\n"), 0o644)
	ldap := func(uid int) ([]byte, error) {
		if uid == 4242 {
			return []byte("alice.ldap:*:4242:4242:Alice:/home/alice:/bin/bash\n"), nil
		}
		return nil, errors.New("exit status 2")
	}
	lies := func(int) ([]byte, error) { return []byte("mallory:x:4243:1::/:/bin/sh\n"), nil } // another uid's line
	env := func(user string) func(string) string {
		return func(k string) string {
			if k == "USER" {
				return user
			}
			return ""
		}
	}
	for _, tt := range []struct {
		name   string
		uid    int
		getent func(int) ([]byte, error)
		user   string
		want   Identity
		text   string
	}{
		{"in /etc/passwd", 1000, ldap, "mallory", Identity{1000, "bob", FromPasswd}, "bob (uid 1000)"},
		{"root", 0, nil, "alice", Identity{0, "root", FromPasswd}, "root (uid 0)"},
		{"only in NSS", 4242, ldap, "mallory", Identity{4242, "alice.ldap", FromNSS}, "alice.ldap (uid 4242, by NSS)"},
		{"nowhere but $USER", 4242, nil, "alice", Identity{4242, "alice", FromEnv}, "alice (uid 4242; the name is $USER's claim)"},
		{"getent answers for another uid", 4242, lies, "alice", Identity{4242, "alice", FromEnv}, "alice (uid 4242; the name is $USER's claim)"},
		{"a $USER unfit to record", 4242, nil, "alice\nroot (uid 0)", Identity{4242, "", FromNone}, "uid 4242"},
		{"no name at all", 4242, nil, "", Identity{4242, "", FromNone}, "uid 4242"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := Lookup(tt.uid, Sources{Passwd: passwd, Getent: tt.getent, Env: env(tt.user)})
			if got != tt.want || got.String() != tt.text {
				t.Errorf("got %+v %q, want %+v %q", got, got.String(), tt.want, tt.text)
			}
		})
	}
}

// getent answers for a uid the system knows, and fails for one it does not.
func TestGetent(t *testing.T) {
	out, err := getent(0)
	if err != nil {
		t.Fatalf("getent passwd 0: %v", err)
	}
	if name, ok := passwdName(out, 0); !ok || name != "root" {
		t.Errorf("getent passwd 0: %q", out)
	}
	if out, err := getent(4242424); err == nil {
		t.Errorf("getent passwd 4242424: %q, want an error", out)
	}
}
