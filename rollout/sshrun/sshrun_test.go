package sshrun_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/relayctl/relayctl/internal/sshtest"
	"github.com/relayctl/relayctl/rollout/shellhost"
	"github.com/relayctl/relayctl/rollout/sshrun"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"
	"golang.org/x/crypto/ssh/knownhosts"
)

// env is a private home for one test: HOME, no agent, one client key
// written as an identity file.
type env struct {
	home   string
	known  string // the default ~/.ssh/known_hosts
	key    *sshtest.Key
	idFile string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("SSH_AUTH_SOCK", "")
	e := &env{home: home, known: filepath.Join(home, ".ssh", "known_hosts"), key: sshtest.NewKey(t)}
	e.idFile = filepath.Join(t.TempDir(), "id_test")
	e.key.WriteFile(t, e.idFile)
	return e
}

func (e *env) opts() sshrun.Options {
	return sshrun.Options{Identities: []string{e.idFile}}
}

// server starts a server that accepts e.key and is pinned in known_hosts.
func (e *env) server(t *testing.T, opts ...sshtest.Option) *sshtest.Server {
	t.Helper()
	s := sshtest.New(t, append([]sshtest.Option{sshtest.WithAuthorizedKeys(e.key.PublicKey())}, opts...)...)
	appendLine(t, e.known, s.KnownHostsLine())
	return s
}

func appendLine(t *testing.T, path, line string) {
	t.Helper()
	old, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(old), "\n"), "\n")
	if len(old) == 0 {
		lines = nil
	}
	sshtest.WriteKnownHosts(t, path, append(lines, line)...)
}

func dial(t *testing.T, spec string, o sshrun.Options) *sshrun.Client {
	t.Helper()
	c, err := sshrun.Dial(context.Background(), spec, o)
	if err != nil {
		t.Fatalf("dial %s: %v", spec, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestRun(t *testing.T) {
	e := newEnv(t)
	s := e.server(t)
	c := dial(t, "root@"+s.Addr(), e.opts())
	tests := []struct {
		name       string
		cmd        string
		stdin      string
		wantOut    string
		wantErr    string
		wantStatus int // 0: want no error
	}{
		{name: "stdout", cmd: "echo hello", wantOut: "hello\n"},
		{name: "stderr and status", cmd: "echo out; echo oops >&2; exit 3", wantOut: "out\n", wantErr: "oops\n", wantStatus: 3},
		{name: "stdin", cmd: "tr a-z A-Z", stdin: "relay\n", wantOut: "RELAY\n"},
		{name: "stdin byte count", cmd: "wc -c", stdin: strings.Repeat("x", 100000), wantOut: "100000\n"},
		{name: "shell syntax", cmd: "for i in 1 2; do printf %s $i; done", wantOut: "12"},
		{name: "not found", cmd: "exec /nonexistent-relayctl", wantStatus: 127},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			var in *strings.Reader
			if tt.stdin != "" {
				in = strings.NewReader(tt.stdin)
			}
			var err error
			if in != nil {
				err = c.Run(context.Background(), tt.cmd, in, &stdout, &stderr)
			} else {
				err = c.Run(context.Background(), tt.cmd, nil, &stdout, &stderr)
			}
			gotStatus := 0
			var ee *shellhost.ExitError
			if errors.As(err, &ee) {
				gotStatus = ee.Status
				if got, want := ee.Stderr, strings.TrimSpace(stderr.String()); got != want {
					t.Errorf("got ExitError.Stderr %q, want %q", got, want)
				}
			} else if err != nil {
				t.Fatalf("run: %v", err)
			}
			if gotStatus != tt.wantStatus {
				t.Errorf("got status %d, want %d", gotStatus, tt.wantStatus)
			}
			if got := stdout.String(); got != tt.wantOut {
				t.Errorf("got stdout %q, want %q", got, tt.wantOut)
			}
			if tt.wantErr != "" && stderr.String() != tt.wantErr {
				t.Errorf("got stderr %q, want %q", stderr.String(), tt.wantErr)
			}
		})
	}
	if got, want := c.Sessions(), len(tests); got != want {
		t.Errorf("got %d sessions, want %d", got, want)
	}
	if got, want := s.Commands(), "echo hello"; len(got) == 0 || got[0] != want {
		t.Errorf("got commands %q, want first %q (root runs without sudo)", got, want)
	}
}

func TestRunSameWriterAndNil(t *testing.T) {
	e := newEnv(t)
	s := e.server(t)
	c := dial(t, "root@"+s.Addr(), e.opts())
	// One buffer for both streams must not race (go test -race).
	var both bytes.Buffer
	if err := c.Run(context.Background(), "for i in 1 2 3 4 5; do echo o$i; echo e$i >&2; done", nil, &both, &both); err != nil {
		t.Fatal(err)
	}
	if got, want := len(strings.Fields(both.String())), 10; got != want {
		t.Errorf("got %d lines %q, want %d", got, both.String(), want)
	}
	if err := c.Run(context.Background(), "echo ignored; echo ignored >&2", nil, nil, nil); err != nil {
		t.Errorf("run with nil writers: %v", err)
	}
}

func TestRunStderrTail(t *testing.T) {
	e := newEnv(t)
	s := e.server(t)
	c := dial(t, "root@"+s.Addr(), e.opts())
	err := c.Run(context.Background(), "i=0; while [ $i -lt 500 ]; do echo line$i >&2; i=$((i+1)); done; exit 2", nil, nil, nil)
	var ee *shellhost.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("got %v, want *shellhost.ExitError", err)
	}
	if !strings.HasSuffix(ee.Stderr, "line499") || !strings.HasPrefix(ee.Stderr, "line") || len(ee.Stderr) > 2048 {
		t.Errorf("got Stderr %d bytes starting %.20q, want a whole-line tail ending line499", len(ee.Stderr), ee.Stderr)
	}
}

func TestHostKeyChanged(t *testing.T) {
	for _, acceptNew := range []bool{false, true} {
		t.Run(fmt.Sprintf("accept-new=%v", acceptNew), func(t *testing.T) {
			e := newEnv(t)
			s := sshtest.New(t, sshtest.WithAuthorizedKeys(e.key.PublicKey()))
			old := sshtest.NewKey(t)
			other := sshtest.New(t)
			// Line 3 holds the stale key for this host.
			sshtest.WriteKnownHosts(t, e.known,
				"# pinned by hand",
				other.KnownHostsLine(),
				strings.Replace(s.KnownHostsLine(), keyText(s.HostKey()), keyText(old.PublicKey()), 1),
			)
			before, _ := os.ReadFile(e.known)
			o := e.opts()
			o.AcceptNewHostKeys = acceptNew
			_, err := sshrun.Dial(context.Background(), "root@"+s.Addr(), o)
			if !errors.Is(err, sshrun.ErrHostKeyChanged) {
				t.Fatalf("got %v, want ErrHostKeyChanged", err)
			}
			want := fmt.Sprintf("%s: host key changed: ~/.ssh/known_hosts:3 has ssh-ed25519 %s, the host offered %s; if the host was reinstalled, delete that line and connect again with --accept-new-host-keys",
				s.Addr(), ssh.FingerprintSHA256(old.PublicKey()), ssh.FingerprintSHA256(s.HostKey()))
			if acceptNew {
				want += " (--accept-new-host-keys trusts only hosts not yet known)"
			}
			if err.Error() != want {
				t.Errorf("got  %q\nwant %q", err, want)
			}
			after, _ := os.ReadFile(e.known)
			if !bytes.Equal(before, after) {
				t.Errorf("known_hosts changed from %q to %q, want untouched", before, after)
			}
			if got := s.Logins(); len(got) != 0 {
				t.Errorf("got logins %q, want none (no auth before the key is trusted)", got)
			}
		})
	}
}

func keyText(k ssh.PublicKey) string {
	return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(k)))
}

func TestUnknownHostThenAcceptNew(t *testing.T) {
	e := newEnv(t)
	s := sshtest.New(t, sshtest.WithAuthorizedKeys(e.key.PublicKey()))
	// No ~/.ssh at all yet.
	_, err := sshrun.Dial(context.Background(), "root@"+s.Addr(), e.opts())
	if !errors.Is(err, sshrun.ErrUnknownHost) {
		t.Fatalf("got %v, want ErrUnknownHost", err)
	}
	for _, want := range []string{s.Addr() + ": unknown host: ~/.ssh/known_hosts has no key for [127.0.0.1]:", ssh.FingerprintSHA256(s.HostKey()), "--accept-new-host-keys"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("got %q, want it to contain %q", err, want)
		}
	}
	if _, err := os.Stat(e.known); !os.IsNotExist(err) {
		t.Errorf("got stat error %v, want known_hosts not created without the option", err)
	}

	var logged []string
	o := e.opts()
	o.AcceptNewHostKeys = true
	o.Logf = func(f string, a ...any) { logged = append(logged, fmt.Sprintf(f, a...)) }
	c := dial(t, "root@"+s.Addr(), o)
	if err := c.Run(context.Background(), "true", nil, nil, nil); err != nil {
		t.Fatal(err)
	}
	c.Close()
	b, err := os.ReadFile(e.known)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(b), s.KnownHostsLine()+"\n"; got != want {
		t.Errorf("got known_hosts %q, want %q", got, want)
	}
	if !strings.HasPrefix(s.KnownHostsLine(), "[127.0.0.1]:") {
		t.Errorf("got line %q, want [host]:port form", s.KnownHostsLine())
	}
	for path, want := range map[string]os.FileMode{e.known: 0o600, filepath.Dir(e.known): 0o700 | os.ModeDir} {
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode() != want {
			t.Errorf("got mode %v for %s, want %v", st.Mode(), path, want)
		}
	}
	if len(logged) != 1 || !strings.Contains(logged[0], "recorded new host key ssh-ed25519 "+ssh.FingerprintSHA256(s.HostKey())) {
		t.Errorf("got log %q, want one line about the recorded key", logged)
	}
	// Trusted now, without the option.
	dial(t, "root@"+s.Addr(), e.opts())
}

func TestAcceptNewAppendsAfterUnterminatedLine(t *testing.T) {
	e := newEnv(t)
	s := sshtest.New(t, sshtest.WithAuthorizedKeys(e.key.PublicKey()))
	other := sshtest.New(t)
	known := filepath.Join(t.TempDir(), "kh")
	if err := os.WriteFile(known, []byte(other.KnownHostsLine()), 0o600); err != nil {
		t.Fatal(err)
	}
	o := e.opts()
	o.KnownHosts = known
	o.AcceptNewHostKeys = true
	dial(t, "root@"+s.Addr(), o)
	b, _ := os.ReadFile(known)
	if got, want := string(b), other.KnownHostsLine()+"\n"+s.KnownHostsLine()+"\n"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestAgentAuth(t *testing.T) {
	e := newEnv(t)
	s := e.server(t)
	sock := serveAgent(t, e.key)
	t.Setenv("SSH_AUTH_SOCK", sock)
	c := dial(t, "root@"+s.Addr(), sshrun.Options{}) // no identity files at all
	if err := c.Run(context.Background(), "true", nil, nil, nil); err != nil {
		t.Fatal(err)
	}

	// An agent holding only a wrong key: the refusal says what was tried.
	t.Setenv("SSH_AUTH_SOCK", serveAgent(t, sshtest.NewKey(t)))
	_, err := sshrun.Dial(context.Background(), "deploy@"+s.Addr(), sshrun.Options{})
	if !errors.Is(err, sshrun.ErrAuth) {
		t.Fatalf("got %v, want ErrAuth", err)
	}
	want := s.Addr() + ": authentication failed as deploy: tried no identity files and 1 ssh-agent keys; check that one of these keys is in ~deploy/.ssh/authorized_keys on the host"
	if err.Error() != want {
		t.Errorf("got  %q\nwant %q", err, want)
	}
}

// serveAgent serves an in-process agent holding k on a unix socket.
func serveAgent(t *testing.T, k *sshtest.Key) string {
	t.Helper()
	kr := agent.NewKeyring()
	if err := kr.Add(agent.AddedKey{PrivateKey: k.Private}); err != nil {
		t.Fatal(err)
	}
	return serveKeyring(t, kr)
}

func TestAuthErrors(t *testing.T) {
	e := newEnv(t)
	s := e.server(t)
	wrong := filepath.Join(t.TempDir(), "id_wrong")
	sshtest.NewKey(t).WriteFile(t, wrong)
	tests := []struct {
		name string
		o    sshrun.Options
		want string // exact error
	}{
		{
			name: "wrong identity",
			o:    sshrun.Options{Identities: []string{wrong}},
			want: s.Addr() + ": authentication failed as root: tried identity files " + wrong + " and no ssh-agent (SSH_AUTH_SOCK is not set); check that one of these keys is in ~root/.ssh/authorized_keys on the host",
		},
		{
			name: "nothing to offer",
			o:    sshrun.Options{},
			want: s.Addr() + ": authentication failed as root: tried no identity files and no ssh-agent (SSH_AUTH_SOCK is not set); pass --identity or load a key into ssh-agent",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := sshrun.Dial(context.Background(), "root@"+s.Addr(), tt.o)
			if !errors.Is(err, sshrun.ErrAuth) {
				t.Fatalf("got %v, want ErrAuth", err)
			}
			if err.Error() != tt.want {
				t.Errorf("got  %q\nwant %q", err, tt.want)
			}
		})
	}
	t.Run("missing explicit identity", func(t *testing.T) {
		_, err := sshrun.Dial(context.Background(), "root@"+s.Addr(), sshrun.Options{Identities: []string{filepath.Join(t.TempDir(), "nope")}})
		if err == nil || !os.IsNotExist(errors.Unwrap(errors.Unwrap(err))) && !strings.Contains(err.Error(), "no such file") {
			t.Errorf("got %v, want a read identity error", err)
		}
	})
}

func TestDefaultIdentityFile(t *testing.T) {
	e := newEnv(t)
	s := e.server(t)
	// ~/.ssh/id_ed25519 is offered when nothing else names a key.
	e.key.WriteFile(t, filepath.Join(e.home, ".ssh", "id_ed25519"))
	dial(t, "root@"+s.Addr(), sshrun.Options{})
}

func TestSSHConfigAliasDial(t *testing.T) {
	e := newEnv(t)
	s := e.server(t, sshtest.WithUsers("deployer"))
	cfg := filepath.Join(t.TempDir(), "config")
	writeFile(t, cfg, fmt.Sprintf("Host relay-ash-1\n  HostName 127.0.0.1\n  Port %d\n  User deployer\n  IdentityFile %s\n", s.Port(), e.idFile))
	// No Identities: the key comes from IdentityFile.
	c := dial(t, "relay-ash-1", sshrun.Options{SSHConfig: cfg})
	want := sshrun.Target{Alias: "relay-ash-1", HostName: "127.0.0.1", User: "deployer", Port: s.Port(), IdentityFiles: []string{e.idFile}}
	if got := c.Target(); fmt.Sprint(got) != fmt.Sprint(want) || len(got.IdentityFiles) != 1 {
		t.Errorf("got target %+v, want %+v", got, want)
	}
	// The server records a login only after its side of the handshake
	// returns, which may be after the client's: wait for it (bounded).
	for i := 0; i < 200 && len(s.Logins()) == 0; i++ {
		time.Sleep(10 * time.Millisecond)
	}
	if got, want := s.Logins(), []string{"deployer"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("got logins %q, want %q", got, want)
	}
}

func writeFile(t *testing.T, path, text string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestResolve(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	cfg := filepath.Join(t.TempDir(), "config")
	writeFile(t, cfg, `
Host relay-ash-1
  HostName 10.0.0.5
  User deploy
  Port 2222
  IdentityFile ~/.ssh/relay_key
  IdentityFile /keys/%h-%r
  ProxyJump bastion

Host bastion
  HostName bastion.example.net
  User jump
  ProxyJump none

Host two-hops
  ProxyJump ops@j1:2200, j2

Host *.relay
  HostName %h.example.net

Host v6
  HostName ::1

Host *
  User fallback
`)
	o := sshrun.Options{SSHConfig: cfg}
	tests := []struct {
		spec string
		want sshrun.Target
	}{
		{"relay-ash-1", sshrun.Target{Alias: "relay-ash-1", HostName: "10.0.0.5", User: "deploy", Port: 2222,
			IdentityFiles: []string{home + "/.ssh/relay_key", "/keys/10.0.0.5-deploy"}, ProxyJump: []string{"bastion"}}},
		{"root@relay-ash-1:22", sshrun.Target{Alias: "relay-ash-1", HostName: "10.0.0.5", User: "root", Port: 22,
			IdentityFiles: []string{home + "/.ssh/relay_key", "/keys/10.0.0.5-root"}, ProxyJump: []string{"bastion"}}},
		{"bastion", sshrun.Target{Alias: "bastion", HostName: "bastion.example.net", User: "jump", Port: 22}},
		{"two-hops", sshrun.Target{Alias: "two-hops", HostName: "two-hops", User: "fallback", Port: 22, ProxyJump: []string{"ops@j1:2200", "j2"}}},
		{"ash.relay", sshrun.Target{Alias: "ash.relay", HostName: "ash.relay.example.net", User: "fallback", Port: 22}},
		{"10.1.2.3", sshrun.Target{Alias: "10.1.2.3", HostName: "10.1.2.3", User: "fallback", Port: 22}},
		{"me@10.1.2.3:2022", sshrun.Target{Alias: "10.1.2.3", HostName: "10.1.2.3", User: "me", Port: 2022}},
		{"[::1]:2022", sshrun.Target{Alias: "::1", HostName: "::1", User: "fallback", Port: 2022}},
		{"u@[fe80::1]", sshrun.Target{Alias: "fe80::1", HostName: "fe80::1", User: "u", Port: 22}},
		{"fe80::2", sshrun.Target{Alias: "fe80::2", HostName: "fe80::2", User: "fallback", Port: 22}},
		{"v6", sshrun.Target{Alias: "v6", HostName: "::1", User: "fallback", Port: 22}},
	}
	for _, tt := range tests {
		t.Run(tt.spec, func(t *testing.T) {
			got, err := sshrun.Resolve(tt.spec, o)
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprintf("%#v", got) != fmt.Sprintf("%#v", tt.want) {
				t.Errorf("got  %#v\nwant %#v", got, tt.want)
			}
		})
	}
}

func TestResolveStringAndAddr(t *testing.T) {
	t.Setenv("HOME", t.TempDir())
	tests := []struct{ spec, wantAddr, wantString string }{
		{"root@10.0.0.1", "10.0.0.1:22", "10.0.0.1:22"},
		{"root@[::1]:2200", "[::1]:2200", "[::1]:2200"},
	}
	for _, tt := range tests {
		got, err := sshrun.Resolve(tt.spec, sshrun.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Addr() != tt.wantAddr || got.String() != tt.wantString {
			t.Errorf("%s: got %q, %q, want %q, %q", tt.spec, got.Addr(), got.String(), tt.wantAddr, tt.wantString)
		}
	}
	a := sshrun.Target{Alias: "relay-ash-1", HostName: "127.0.0.2", Port: 22}
	if got, want := a.String(), "relay-ash-1 (127.0.0.2:22)"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestResolveErrors(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	cfg := filepath.Join(t.TempDir(), "config")
	writeFile(t, cfg, "Host badport\n  Port 99999\nHost pc\n  ProxyCommand nc %h %p\nHost uri\n  ProxyJump ssh://j\n")
	tests := []struct {
		spec, config, want string
	}{
		{"", cfg, "empty host"},
		{"@host", cfg, "empty user"},
		{"host:", cfg, "empty port"},
		{"host:http", cfg, `invalid port "http"`},
		{"[::1", cfg, "missing ]"},
		{"[::1]x", cfg, "want [address]:port"},
		{"host;rm", cfg, "invalid character"},
		{"-oProxyCommand=x", cfg, "invalid character"},
		{"badport", cfg, `ssh config Port: invalid port "99999"`},
		{"pc", cfg, "ProxyCommand is not supported"},
		{"uri", cfg, "URI form is not supported"},
		{"host", filepath.Join(home, "missing-config"), "no such file"},
	}
	for _, tt := range tests {
		t.Run(tt.spec, func(t *testing.T) {
			_, err := sshrun.Resolve(tt.spec, sshrun.Options{SSHConfig: tt.config})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want an error containing %q", err, tt.want)
			}
		})
	}
	// The default ~/.ssh/config may be missing.
	if _, err := sshrun.Resolve("host", sshrun.Options{}); err != nil {
		t.Errorf("got %v with no ~/.ssh/config, want nil", err)
	}
}

func TestProxyJump(t *testing.T) {
	e := newEnv(t)
	target := e.server(t)
	j1 := e.server(t)
	j2 := e.server(t)
	cfg := filepath.Join(t.TempDir(), "config")
	writeFile(t, cfg, fmt.Sprintf(`
Host relay
  HostName 127.0.0.1
  Port %d
  User root
  ProxyJump j1,j2
Host relay-one
  HostName 127.0.0.1
  Port %d
  User root
  ProxyJump j2
Host j1
  HostName 127.0.0.1
  Port %d
Host j2
  HostName 127.0.0.1
  Port %d
`, target.Port(), target.Port(), j1.Port(), j2.Port()))
	o := e.opts()
	o.SSHConfig = cfg

	c := dial(t, "relay", o)
	var out bytes.Buffer
	if err := c.Run(context.Background(), "echo through", nil, &out, nil); err != nil {
		t.Fatal(err)
	}
	if got, want := out.String(), "through\n"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	// j1 forwarded to j2, and j2 to the target.
	if got, want := fmt.Sprint(j1.Forwards()), fmt.Sprint([]string{j2.Addr()}); got != want {
		t.Errorf("got j1 forwards %s, want %s", got, want)
	}
	if got, want := fmt.Sprint(j2.Forwards()), fmt.Sprint([]string{target.Addr()}); got != want {
		t.Errorf("got j2 forwards %s, want %s", got, want)
	}
	if got := len(target.Commands()); got != 1 {
		t.Errorf("got %d commands on the target, want 1", got)
	}
	c.Close()

	// A jump host whose key changed is refused like any other host, and
	// the error says which hop.
	sshtest.WriteKnownHosts(t, e.known, target.KnownHostsLine(),
		strings.Replace(j2.KnownHostsLine(), keyText(j2.HostKey()), keyText(sshtest.NewKey(t).PublicKey()), 1))
	_, err := sshrun.Dial(context.Background(), "relay-one", o)
	if !errors.Is(err, sshrun.ErrHostKeyChanged) {
		t.Fatalf("got %v, want ErrHostKeyChanged", err)
	}
	if want := fmt.Sprintf("relay-one (%s): through j2 (%s): host key changed: ~/.ssh/known_hosts:2", target.Addr(), j2.Addr()); !strings.HasPrefix(err.Error(), want) {
		t.Errorf("got %q, want prefix %q", err, want)
	}
}

func TestProxyJumpLoop(t *testing.T) {
	e := newEnv(t)
	cfg := filepath.Join(t.TempDir(), "config")
	writeFile(t, cfg, "Host a\n  ProxyJump b\nHost b\n  ProxyJump a\n")
	o := e.opts()
	o.SSHConfig = cfg
	_, err := sshrun.Dial(context.Background(), "a", o)
	if err == nil || !strings.Contains(err.Error(), "ProxyJump hops") {
		t.Errorf("got %v, want a hop-limit error", err)
	}
}

// fakeBin puts an executable "sudo" with the given script on a new PATH.
func fakeSudo(t *testing.T, script string) sshtest.Option {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "sudo"), []byte("#!/bin/sh\n"+script), 0o755); err != nil {
		t.Fatal(err)
	}
	return sshtest.WithEnv("PATH=" + dir + ":" + os.Getenv("PATH"))
}

func TestSudo(t *testing.T) {
	e := newEnv(t)
	t.Run("password required", func(t *testing.T) {
		s := e.server(t, fakeSudo(t, "echo 'sudo: a password is required' >&2\nexit 1\n"))
		c := dial(t, "deploy@"+s.Addr(), e.opts())
		err := c.Run(context.Background(), "cat /proc/sys/net/core/rmem_max", nil, nil, nil)
		if !errors.Is(err, sshrun.ErrSudoPassword) {
			t.Fatalf("got %v, want ErrSudoPassword", err)
		}
		want := s.Addr() + ": run as deploy through sudo -n: sudo requires a password; configure NOPASSWD for deploy in sudoers, or connect as root"
		if err.Error() != want {
			t.Errorf("got  %q\nwant %q", err, want)
		}
	})
	t.Run("wrapped command", func(t *testing.T) {
		// A sudo that runs what follows "-n --", so the quoting is exercised
		// by a real shell.
		s := e.server(t, fakeSudo(t, "[ \"$1\" = -n ] && [ \"$2\" = -- ] || exit 99\nshift 2\nexec \"$@\"\n"))
		c := dial(t, "deploy@"+s.Addr(), e.opts())
		cmd := `printf '%s|' "it's" $(echo a b)`
		var out bytes.Buffer
		if err := c.Run(context.Background(), cmd, strings.NewReader("in"), &out, nil); err != nil {
			t.Fatal(err)
		}
		if got, want := out.String(), "it's|a|b|"; got != want {
			t.Errorf("got %q, want %q", got, want)
		}
		if got, want := s.Commands()[0], "sudo -n -- sh -c "+shellhost.Quote(cmd); got != want {
			t.Errorf("got command %q, want %q", got, want)
		}
		// Another non-zero exit through sudo is an ordinary ExitError.
		err := c.Run(context.Background(), "echo 'sudo: a password is required' >&2; exit 4", nil, nil, nil)
		var ee *shellhost.ExitError
		if !errors.As(err, &ee) || ee.Status != 4 || errors.Is(err, sshrun.ErrSudoPassword) {
			t.Errorf("got %v, want ExitError status 4", err)
		}
	})
}

func TestCommandTimeout(t *testing.T) {
	e := newEnv(t)
	s := e.server(t)
	o := e.opts()
	o.CommandTimeout = 200 * time.Millisecond
	c := dial(t, "root@"+s.Addr(), o)
	var out bytes.Buffer
	err := c.Run(context.Background(), "echo started; exec sleep 600", nil, &out, nil)
	if !errors.Is(err, sshrun.ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want ErrTimeout and DeadlineExceeded", err)
	}
	if got, want := err.Error(), s.Addr()+": run command: timed out after 200ms"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	// The connection is still usable after a timed-out session.
	if err := c.Run(context.Background(), "true", nil, nil, nil); err != nil {
		t.Errorf("run after timeout: %v", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := c.Run(ctx, "sleep 600", nil, nil, nil); !errors.Is(err, context.Canceled) || errors.Is(err, sshrun.ErrTimeout) {
		t.Errorf("got %v, want context.Canceled", err)
	}
	if got, want := c.Sessions(), 2; got != want {
		t.Errorf("got %d sessions, want %d (none for a cancelled context)", got, want)
	}
	// Closing both ends waits for the server to have handled every request
	// sent before, so the KILL is recorded by now.
	c.Close()
	s.Close()
	if got, want := fmt.Sprint(s.Signals()), "[KILL]"; got != want {
		t.Errorf("got signals %s, want %s", got, want)
	}
}

func TestRunKilledBySignal(t *testing.T) {
	e := newEnv(t)
	s := e.server(t)
	c := dial(t, "root@"+s.Addr(), e.opts())
	err := c.Run(context.Background(), "kill -9 $$", nil, nil, nil)
	var ee *shellhost.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("got %v, want *shellhost.ExitError", err)
	}
	if got, want := *ee, (shellhost.ExitError{Status: 137, Stderr: "killed by signal KILL"}); got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

func TestHostWithSeveralKeys(t *testing.T) {
	// x/crypto prefers RSA host keys; a host that also has one, pinned by
	// its ed25519 key, must still be verified by that key.
	e := newEnv(t)
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	rsaSigner, err := ssh.NewSignerFromKey(rsaKey)
	if err != nil {
		t.Fatal(err)
	}
	s := e.server(t, sshtest.WithExtraHostKey(rsaSigner))
	dial(t, "root@"+s.Addr(), e.opts())

	// And pinned by the RSA key only, RSA is what gets checked.
	sshtest.WriteKnownHosts(t, e.known, knownhosts.Line([]string{s.Addr()}, rsaSigner.PublicKey()))
	dial(t, "root@"+s.Addr(), e.opts())
}

func TestConnectTimeout(t *testing.T) {
	e := newEnv(t)
	// Accepts TCP and never speaks SSH.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	conns := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			conns <- c
		}
		close(conns)
	}()
	defer func() {
		ln.Close()
		for c := range conns {
			c.Close()
		}
	}()
	o := e.opts()
	o.ConnectTimeout = 100 * time.Millisecond
	_, err = sshrun.Dial(context.Background(), "root@"+ln.Addr().String(), o)
	if !errors.Is(err, sshrun.ErrTimeout) {
		t.Fatalf("got %v, want ErrTimeout", err)
	}
	if got, want := err.Error(), ln.Addr().String()+": connect: timed out after 100ms"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestSessionsConcurrent(t *testing.T) {
	e := newEnv(t)
	s := e.server(t)
	c := dial(t, "root@"+s.Addr(), e.opts())
	errs := make(chan error, 8)
	for i := 0; i < 8; i++ {
		go func() { errs <- c.Run(context.Background(), "true", nil, nil, nil) }()
	}
	for i := 0; i < 8; i++ {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if got, want := c.Sessions(), 8; got != want {
		t.Errorf("got %d sessions, want %d", got, want)
	}
}

// A host pinned only in the global known_hosts is known, not new: with
// --accept-new-host-keys a different key (a man in the middle) is refused,
// naming the global file's line, and nothing is recorded.
func TestGlobalKnownHostsIsRead(t *testing.T) {
	e := newEnv(t)
	s := sshtest.New(t, sshtest.WithAuthorizedKeys(e.key.PublicKey()))
	global := filepath.Join(t.TempDir(), "ssh_known_hosts")
	sshtest.WriteKnownHosts(t, global, s.KnownHostsLine())
	o := e.opts()
	o.GlobalKnownHosts = []string{global}
	c := dial(t, "root@"+s.Addr(), o)
	c.Close()

	other := sshtest.NewKey(t)
	line := strings.Fields(s.KnownHostsLine())[0] + " " + string(bytes.TrimSpace(ssh.MarshalAuthorizedKey(other.PublicKey())))
	sshtest.WriteKnownHosts(t, global, line)
	o.AcceptNewHostKeys = true
	_, err := sshrun.Dial(context.Background(), "root@"+s.Addr(), o)
	if !errors.Is(err, sshrun.ErrHostKeyChanged) || !strings.Contains(err.Error(), global+":1") {
		t.Errorf("got %v, want the changed key refused naming %s:1", err, global)
	}
	if _, err := os.Stat(e.known); !os.IsNotExist(err) {
		t.Error("a key was recorded for a host the global file pins")
	}
}

// A host a @cert-authority line covers offering a plain key is refused,
// even with --accept-new-host-keys: it is never a new host to record.
func TestCertAuthorityHostIsNeverNew(t *testing.T) {
	e := newEnv(t)
	s := sshtest.New(t, sshtest.WithAuthorizedKeys(e.key.PublicKey()))
	ca := sshtest.NewKey(t)
	caLine := "@cert-authority [127.0.0.1]:* " + string(bytes.TrimSpace(ssh.MarshalAuthorizedKey(ca.PublicKey())))
	sshtest.WriteKnownHosts(t, e.known, caLine)
	o := e.opts()
	o.AcceptNewHostKeys = true
	_, err := sshrun.Dial(context.Background(), "root@"+s.Addr(), o)
	if !errors.Is(err, sshrun.ErrHostKeyChanged) || !strings.Contains(err.Error(), "trusts a certificate authority") {
		t.Errorf("got %v, want the plain key refused", err)
	}
	if b, _ := os.ReadFile(e.known); strings.Count(string(b), "\n") != 1 {
		t.Errorf("known_hosts changed:\n%s", b)
	}
}

// An inventory host is dialled at its target, [user@]address[:port],
// without any ssh_config alias, and named by its name everywhere else;
// a host with no target is dialled by its name.
func TestDialerTargets(t *testing.T) {
	e := newEnv(t)
	s := e.server(t, sshtest.WithUsers("deployer"))
	d := sshrun.Dialer{Options: sshrun.Options{Identities: []string{e.idFile}, SSHConfig: filepath.Join(t.TempDir(), "empty")},
		Targets: map[string]string{"relay-1.ash": fmt.Sprintf("deployer@127.0.0.1:%d", s.Port())}}
	writeFile(t, d.Options.SSHConfig, "")
	c, err := d.Dial(context.Background(), "relay-1.ash")
	if err != nil {
		t.Fatalf("dial relay-1.ash at its target: %v", err)
	}
	defer c.Close()
	if got, want := c.Address()+" "+c.User(), fmt.Sprintf("127.0.0.1:%d deployer", s.Port()); got != want {
		t.Errorf("dialled %s, want %s", got, want)
	}
	if _, err := d.Dial(context.Background(), "relay-2.ash"); err == nil || !strings.Contains(err.Error(), "relay-2.ash") {
		t.Errorf("a host without a target is dialled by its name: %v", err)
	}
}

// The client names the key the host accepted and the host key it checked,
// as the receipt records them: with a refused identity file offered first
// and an accepted RSA key in the agent, the RSA key (signed with rsa-sha2,
// which the noting wrapper must keep offering); with one identity file,
// that file's key.
func TestClientNamesTheKeysUsed(t *testing.T) {
	e := newEnv(t)
	rk, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	rsaSigner, err := ssh.NewSignerFromKey(rk)
	if err != nil {
		t.Fatal(err)
	}
	s := e.server(t, sshtest.WithAuthorizedKeys(rsaSigner.PublicKey()))
	c := dial(t, "root@"+s.Addr(), e.opts())
	if got, want := c.UserKey(), "ssh-ed25519 "+ssh.FingerprintSHA256(e.key.PublicKey()); got != want {
		t.Errorf("identity file: user key %q, want %q", got, want)
	}
	if got, want := c.HostKey(), s.HostKey().Type()+" "+ssh.FingerprintSHA256(s.HostKey()); got != want {
		t.Errorf("host key %q, want %q", got, want)
	}

	wrong := filepath.Join(t.TempDir(), "id_wrong")
	sshtest.NewKey(t).WriteFile(t, wrong)
	kr := agent.NewKeyring()
	if err := kr.Add(agent.AddedKey{PrivateKey: rk}); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SSH_AUTH_SOCK", serveKeyring(t, kr))
	c = dial(t, "root@"+s.Addr(), sshrun.Options{Identities: []string{wrong}})
	if got, want := c.UserKey(), "ssh-rsa "+ssh.FingerprintSHA256(rsaSigner.PublicKey()); got != want {
		t.Errorf("a refused file, then the agent's RSA key: user key %q, want %q", got, want)
	}
	if err := c.Run(context.Background(), "true", nil, nil, nil); err != nil {
		t.Fatal(err)
	}
}

// serveKeyring serves an in-process agent holding kr on a unix socket.
func serveKeyring(t *testing.T, kr agent.Agent) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "agent.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				agent.ServeAgent(kr, c)
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return sock
}
