package sshrun_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/relayctl/relayctl/internal/sshtest"
	"github.com/relayctl/relayctl/rollout/shellhost"
	"github.com/relayctl/relayctl/rollout/sshrun"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"
	"golang.org/x/crypto/ssh/knownhosts"
)

const sshdPath = "/usr/sbin/sshd"

// startSSHD runs the machine's OpenSSH sshd in the foreground on 127.0.0.1
// with a temporary config, an ed25519 and an RSA host key, and key-only
// login for root with the given key. It returns the address and the host
// keys. In CI a missing sshd fails the test: a skipped test proves nothing.
func startSSHD(t *testing.T, client *sshtest.Key, more ...ssh.PublicKey) (string, []ssh.PublicKey) {
	t.Helper()
	if _, err := os.Stat(sshdPath); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("openssh-server is required in CI: %v", err)
		}
		t.Skipf("no sshd: %v", err)
	}
	if os.Geteuid() != 0 {
		t.Skip("sshd logs in as root only when run as root")
	}
	// sshd refuses to start without its privilege separation directory,
	// which the Debian service would create.
	if err := os.MkdirAll("/run/sshd", 0o755); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ed := sshtest.NewKey(t)
	ed.WriteFile(t, filepath.Join(dir, "host_ed25519"))
	rk, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKey(rk, "")
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "host_rsa"), string(pem.EncodeToMemory(block)))
	rsaPub, err := ssh.NewPublicKey(&rk.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	authorized := ssh.MarshalAuthorizedKey(client.PublicKey())
	for _, k := range more {
		authorized = append(authorized, ssh.MarshalAuthorizedKey(k)...)
	}
	writeFile(t, filepath.Join(dir, "authorized_keys"), string(authorized))

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	cfg := filepath.Join(dir, "sshd_config")
	writeFile(t, cfg, fmt.Sprintf(`ListenAddress 127.0.0.1:%d
HostKey %s/host_ed25519
HostKey %s/host_rsa
AuthorizedKeysFile %s/authorized_keys
StrictModes no
UsePAM no
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
PidFile none
`, port, dir, dir, dir))

	cmd := exec.Command(sshdPath, "-D", "-e", "-f", cfg)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start sshd: %v", err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	// Ready when it says so; if it exits instead, its output says why.
	sc := bufio.NewScanner(stderr)
	var log bytes.Buffer
	ready := fmt.Sprintf("Server listening on 127.0.0.1 port %d", port)
	for sc.Scan() {
		log.WriteString(sc.Text() + "\n")
		if strings.Contains(sc.Text(), ready) {
			go func() {
				for sc.Scan() {
				}
			}()
			return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), []ssh.PublicKey{ed.PublicKey(), rsaPub}
		}
	}
	t.Fatalf("sshd did not start:\n%s", log.String())
	return "", nil
}

func TestRealSSHD(t *testing.T) {
	e := newEnv(t)
	addr, hostKeys := startSSHD(t, e.key)
	// Pin only the RSA key: the client must ask for it, not the ed25519
	// key sshd would otherwise show.
	sshtest.WriteKnownHosts(t, e.known, knownhosts.Line([]string{addr}, hostKeys[1]))
	o := e.opts()
	o.CommandTimeout = time.Minute
	c := dial(t, "root@"+addr, o)

	var out, errOut bytes.Buffer
	err := c.Run(context.Background(), "id -u; cat; echo warn >&2; exit 3", strings.NewReader("from stdin\n"), &out, &errOut)
	var ee *shellhost.ExitError
	if !errors.As(err, &ee) || ee.Status != 3 || ee.Stderr != "warn" {
		t.Fatalf("got %v, want exit status 3 with stderr warn", err)
	}
	if got, want := out.String(), "0\nfrom stdin\n"; got != want {
		t.Errorf("got stdout %q, want %q", got, want)
	}

	// A command past its timeout ends the session with ErrTimeout. The
	// KILL that Run sends does not reach it here: OpenSSH (9.2 at least)
	// refuses signals on root sessions ("session signalling requires
	// privilege separation"), so the command goes on running on the host.
	pidFile := filepath.Join(t.TempDir(), "pid")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err = c.Run(ctx, "echo $$ > "+pidFile+"; exec sleep 600", nil, nil, nil)
	if !errors.Is(err, sshrun.ErrTimeout) {
		t.Fatalf("got %v, want ErrTimeout", err)
	}
	if got, want := err.Error(), addr+": run command: timed out after 2s"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if b, err := os.ReadFile(pidFile); err == nil {
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	if got, want := c.Sessions(), 2; got != want {
		t.Errorf("got %d sessions, want %d", got, want)
	}

	// The ed25519 key now pinned instead of RSA: still accepted.
	c.Close()
	sshtest.WriteKnownHosts(t, e.known, knownhosts.Line([]string{addr}, hostKeys[0]))
	dial(t, "root@"+addr, o)
}

// Against OpenSSH, which refuses ssh-rsa (SHA-1) signatures, an RSA key
// in the agent still logs in through the wrapper that notes which key
// signed (it keeps the agent's rsa-sha2 signatures), and the client names
// that key and the host key it checked.
func TestRealSSHDNamesTheRSAKeyItAccepted(t *testing.T) {
	e := newEnv(t)
	rk, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := ssh.NewPublicKey(&rk.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	addr, hostKeys := startSSHD(t, e.key, pub)
	sshtest.WriteKnownHosts(t, e.known, knownhosts.Line([]string{addr}, hostKeys[0]))
	kr := agent.NewKeyring()
	if err := kr.Add(agent.AddedKey{PrivateKey: rk}); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SSH_AUTH_SOCK", serveKeyring(t, kr))
	c := dial(t, "root@"+addr, sshrun.Options{})
	if got, want := c.UserKey(), "ssh-rsa "+ssh.FingerprintSHA256(pub); got != want {
		t.Errorf("user key %q, want %q", got, want)
	}
	if got, want := c.HostKey(), "ssh-ed25519 "+ssh.FingerprintSHA256(hostKeys[0]); got != want {
		t.Errorf("host key %q, want %q", got, want)
	}
}
