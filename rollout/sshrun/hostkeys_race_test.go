package sshrun_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/relayctl/relayctl/internal/sshtest"
	"github.com/relayctl/relayctl/rollout/sshrun"
	"golang.org/x/crypto/ssh"
)

// overlappingFront listens on one address and hands its i-th connection to
// backends[i], but only once every client has begun its SSH version line:
// a client sends it after it has read known_hosts, so every dial has read
// the files before any of them sees a host key. Two inventory names for
// one ansible_host, a shared ProxyJump host, or --parallel overlap so.
func overlappingFront(t *testing.T, backends ...string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		clients := make([]net.Conn, len(backends))
		readers := make([]*bufio.Reader, len(backends))
		for i := range backends {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
			clients[i], readers[i] = c, bufio.NewReader(c)
			if _, err := readers[i].Peek(len("SSH-2.0-")); err != nil {
				return
			}
		}
		for i, b := range backends {
			s, err := net.Dial("tcp", b)
			if err != nil {
				return
			}
			t.Cleanup(func() { s.Close() })
			go io.Copy(s, readers[i])
			go io.Copy(clients[i], s)
		}
	}()
	return ln.Addr().String()
}

// dialTogether dials addr len(n) times at once with --accept-new-host-keys
// and returns each dial's error.
func dialTogether(t *testing.T, e *env, addr string, n int) []error {
	t.Helper()
	o := e.opts()
	o.AcceptNewHostKeys = true
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := sshrun.Dial(context.Background(), "root@"+addr, o)
			if err == nil {
				c.Close()
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	return errs
}

// Two first dials of one address that meet two different host keys (a man
// in the middle on one path, two hosts behind one name) record one key;
// the other dial is refused as a changed key, naming the line the first
// wrote. Without a second look under the lock both keys were recorded, and
// from then on either passed for the host.
func TestAcceptNewOverlappingDialsRecordOneKey(t *testing.T) {
	e := newEnv(t)
	a := sshtest.New(t, sshtest.WithAuthorizedKeys(e.key.PublicKey()))
	b := sshtest.New(t, sshtest.WithAuthorizedKeys(e.key.PublicKey()))
	addr := overlappingFront(t, a.Addr(), b.Addr())
	errs := dialTogether(t, e, addr, 2)

	var ok, changed int
	for _, err := range errs {
		switch {
		case err == nil:
			ok++
		case errors.Is(err, sshrun.ErrHostKeyChanged):
			changed++
			if !strings.Contains(err.Error(), "~/.ssh/known_hosts:1 has ssh-ed25519 ") || !strings.Contains(err.Error(), "recorded by another dial of this address") {
				t.Errorf("got %q, want the changed key naming ~/.ssh/known_hosts:1, recorded by the other dial", err)
			}
		default:
			t.Errorf("dial: %v", err)
		}
	}
	if ok != 1 || changed != 1 {
		t.Errorf("got %d dials through and %d refused as changed (%v), want one of each", ok, changed, errs)
	}
	b2, _ := os.ReadFile(e.known)
	lines := strings.Split(strings.TrimSpace(string(b2)), "\n")
	if len(lines) != 1 || !strings.HasPrefix(lines[0], "["+strings.Replace(addr, ":", "]:", 1)+" ") {
		t.Fatalf("known_hosts after two overlapping first dials:\n%s\nwant one line for %s", b2, addr)
	}
	// The one recorded is a key a server offered.
	_, _, key, _, _, err := ssh.ParseKnownHosts([]byte(lines[0]))
	if err != nil || (keyText(key) != keyText(a.HostKey()) && keyText(key) != keyText(b.HostKey())) {
		t.Errorf("recorded %v (%v), want one of the servers' keys", key, err)
	}
}

// The same key met by overlapping first dials is recorded once, and every
// dial goes through.
func TestAcceptNewOverlappingDialsOfOneHostWriteOneLine(t *testing.T) {
	e := newEnv(t)
	s := sshtest.New(t, sshtest.WithAuthorizedKeys(e.key.PublicKey()))
	addr := overlappingFront(t, s.Addr(), s.Addr(), s.Addr())
	for i, err := range dialTogether(t, e, addr, 3) {
		if err != nil {
			t.Errorf("dial %d: %v", i, err)
		}
	}
	if b, _ := os.ReadFile(e.known); strings.Count(string(b), "\n") != 1 {
		t.Errorf("known_hosts after three overlapping first dials of one host:\n%s\nwant its key once", b)
	}
}
