package sshtest_test

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/relayctl/relayctl/internal/sshtest"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

func connect(t *testing.T, s *sshtest.Server, user string, k *sshtest.Key) (*ssh.Client, error) {
	t.Helper()
	return ssh.Dial("tcp", s.Addr(), &ssh.ClientConfig{
		User:            user,
		Auth:            []ssh.AuthMethod{ssh.PublicKeys(k.Signer)},
		HostKeyCallback: ssh.FixedHostKey(s.HostKey()),
	})
}

func TestAuth(t *testing.T) {
	k := sshtest.NewKey(t)
	s := sshtest.New(t, sshtest.WithAuthorizedKeys(k.PublicKey()), sshtest.WithUsers("root", "deploy"))
	tests := []struct {
		name, user string
		key        *sshtest.Key
		wantOK     bool
	}{
		{"accepted user and key", "deploy", k, true},
		{"other user", "mallory", k, false},
		{"other key", "root", sshtest.NewKey(t), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := connect(t, s, tt.user, tt.key)
			if got := err == nil; got != tt.wantOK {
				t.Fatalf("got connected=%v (%v), want %v", got, err, tt.wantOK)
			}
			if c != nil {
				c.Close()
			}
		})
	}
	if got, want := strings.Join(s.Logins(), ","), "deploy"; got != want {
		t.Errorf("got logins %q, want %q", got, want)
	}
}

func TestExec(t *testing.T) {
	k := sshtest.NewKey(t)
	dir := t.TempDir()
	s := sshtest.New(t, sshtest.WithAuthorizedKeys(k.PublicKey()), sshtest.WithEnv("RELAY_TEST=yes"), sshtest.WithDir(dir))
	c, err := connect(t, s, "root", k)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sess, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	sess.Stdin = strings.NewReader("data")
	sess.Stdout, sess.Stderr = &out, &errOut
	err = sess.Run(`cat; echo " $RELAY_TEST $(pwd)"; echo bad >&2; exit 5`)
	var ee *ssh.ExitError
	if !errors.As(err, &ee) || ee.ExitStatus() != 5 {
		t.Fatalf("got %v, want exit status 5", err)
	}
	if got, want := out.String(), "data yes "+dir+"\n"; got != want {
		t.Errorf("got stdout %q, want %q", got, want)
	}
	if got, want := errOut.String(), "bad\n"; got != want {
		t.Errorf("got stderr %q, want %q", got, want)
	}
	if got, want := strings.Join(s.Commands(), "|"), `cat; echo " $RELAY_TEST $(pwd)"; echo bad >&2; exit 5`; got != want {
		t.Errorf("got commands %q, want %q", got, want)
	}
}

func TestDirectTCPIP(t *testing.T) {
	k := sshtest.NewKey(t)
	s := sshtest.New(t, sshtest.WithAuthorizedKeys(k.PublicKey()))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		io.Copy(c, c) // echo until the client closes
	}()
	c, err := connect(t, s, "root", k)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	conn, err := c.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(conn, buf); err != nil {
		t.Fatal(err)
	}
	conn.Close()
	if got, want := string(buf), "ping"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if got, want := strings.Join(s.Forwards(), ","), ln.Addr().String(); got != want {
		t.Errorf("got forwards %q, want %q", got, want)
	}
}

func TestCloseKillsCommands(t *testing.T) {
	k := sshtest.NewKey(t)
	s := sshtest.New(t, sshtest.WithAuthorizedKeys(k.PublicKey()))
	c, err := connect(t, s, "root", k)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sess, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	out, err := sess.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	// sleep runs as a child of sh: Close must reach the whole group.
	if err := sess.Start("sleep 600 & echo started; wait"); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 8)
	if _, err := io.ReadFull(out, buf); err != nil {
		t.Fatal(err)
	}
	s.Close() // returns only once every command has been reaped
	if err := sess.Wait(); err == nil {
		t.Error("got a clean exit, want the session cut off")
	}
}

func TestKnownHostsHelpers(t *testing.T) {
	s := sshtest.New(t)
	path := filepath.Join(t.TempDir(), "sub", "known_hosts")
	sshtest.WriteKnownHosts(t, path, "# comment", s.KnownHostsLine())
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("got mode %v, want 0600", st.Mode().Perm())
	}
	cb, err := knownhosts.New(path)
	if err != nil {
		t.Fatal(err)
	}
	addr, _ := net.ResolveTCPAddr("tcp", s.Addr())
	if err := cb(s.Addr(), addr, s.HostKey()); err != nil {
		t.Errorf("got %v, want the written line to trust the server", err)
	}

	k := sshtest.NewKey(t)
	id := filepath.Join(t.TempDir(), "id")
	k.WriteFile(t, id)
	b, err := os.ReadFile(id)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := ssh.ParsePrivateKey(b)
	if err != nil {
		t.Fatalf("parse written identity: %v", err)
	}
	if !bytes.Equal(signer.PublicKey().Marshal(), k.PublicKey().Marshal()) {
		t.Error("got a different key back from the identity file")
	}
}
