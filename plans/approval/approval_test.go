package approval

import (
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
)

func newSigner(t *testing.T) ssh.Signer {
	t.Helper()
	_, k, _ := ed25519.GenerateKey(rand.Reader)
	s, err := ssh.NewSignerFromKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func line(opts string, s ssh.Signer) string {
	return "alice@example.com " + opts + " " + strings.TrimSpace(string(ssh.MarshalAuthorizedKey(s.PublicKey())))
}

func TestVerify(t *testing.T) {
	s := newSigner(t)
	plan := []byte(`{"format_version": 2}` + "\n")
	sig, err := Sign(plan, s)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		name    string
		allowed string
		plan    []byte
		want    string // "" accepted
	}{
		{"plain line", line("", s), plan, ""},
		{"namespaces", line(`namespaces="file,relayctl-*"`, s), plan, ""},
		{"other namespace only", line(`namespaces="git"`, s), plan, `allows namespaces "git" only`},
		{"valid window", line(`valid-after="20261130",valid-before="20261202Z"`, s), plan, ""},
		{"expired", line(`valid-before="20261130Z"`, s), plan, "expired"},
		{"not yet", line(`valid-after="202612020000Z"`, s), plan, "valid only after"},
		{"cert authority", line("cert-authority", s), plan, "cert-authority line"},
		{"other key", line("", newSigner(t)), plan, "is not in allowed_signers"},
		{"plan changed", line("", s), append([]byte(" "), plan...), "does not match the plan's bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			who, err := Verify(tt.plan, sig, []byte("# team\n\n"+tt.allowed+"\n"), "allowed_signers", now)
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("got %v, want accepted", err)
			case tt.want == "" && (who.Principals != "alice@example.com" || who.Line != 3):
				t.Errorf("approver %+v", who)
			case tt.want != "" && (!errors.Is(err, ErrNotAllowed) || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("got %v, want ErrNotAllowed with %q", err, tt.want)
			}
		})
	}
}

func TestParseAllowedSignersErrors(t *testing.T) {
	s := newSigner(t)
	for _, tt := range []struct{ in, want string }{
		{"", "has no signers"},
		{"alice", "a:1: no public key"},
		{line("bogus-option", s), "a:1: unknown option"},
		{line(`valid-after="tomorrow"`, s), `a:1: time "tomorrow"`},
		{"alice ssh-ed25519 AAAA-not-base64", "a:1: public key"},
		{line(`namespaces=relayctl-plan`, s), "a:1: options: namespaces wants its value in double quotes"},
		{line(`namespaces="git",namespaces="relayctl-plan"`, s), `a:1: options: "namespaces" is given twice`},
		{line(`namespaces="relayctl-plan",`, s), "a:1: options: a comma ends them"},
		{line(`namespaces="relayctl-plan`, s), "a:1: options: a quote is not closed"},
		{line(`valid-after="20261201",valid-before="20261130"`, s), `a:1: options: "valid-before" is not after "valid-after"`},
		{line(`cert-authority namespaces="relayctl-plan"`, s), "a:1: public key: \"namespaces=\\\"relayctl-plan\\\"\" before it is not a key"},
		{"alice\x00 " + line("", s), "a:1: a NUL byte"},
	} {
		if _, err := ParseAllowedSigners([]byte(tt.in), "a"); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: got %v, want %q", tt.in, err, tt.want)
		}
	}
}
