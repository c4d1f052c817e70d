// Package sshtest runs an in-process SSH server for tests of the transport.
//
// The server listens on real loopback TCP (127.0.0.1:0), authenticates by
// public key, runs "exec" requests with the machine's own sh -c, and forwards
// direct-tcpip channels so a second server can act as a ProxyJump host. Each
// server has an ephemeral ed25519 host key unless one is given, so tests pin
// it in a temporary known_hosts with KnownHostsLine.
package sshtest

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/binary"
	"encoding/pem"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// Key is a client or host key pair for tests.
type Key struct {
	Private ed25519.PrivateKey
	Signer  ssh.Signer
}

// NewKey generates an ed25519 key pair.
func NewKey(t testing.TB) *Key {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatalf("generate ed25519 key: %v", err)
	}
	s, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatalf("make signer: %v", err)
	}
	return &Key{Private: priv, Signer: s}
}

// PublicKey is the SSH public half of k.
func (k *Key) PublicKey() ssh.PublicKey { return k.Signer.PublicKey() }

// WriteFile writes the private key in OpenSSH format to path with mode 0600,
// as ssh-keygen would, so it can be used as an identity file.
func (k *Key) WriteFile(t testing.TB, path string) {
	t.Helper()
	block, err := ssh.MarshalPrivateKey(k.Private, "sshtest")
	if err != nil {
		t.Fatalf("marshal private key: %v", err)
	}
	if err := os.WriteFile(path, pem.EncodeToMemory(block), 0o600); err != nil {
		t.Fatalf("write identity file: %v", err)
	}
}

// WriteKnownHosts writes lines to path as a known_hosts file (mode 0600),
// creating its directory.
func WriteKnownHosts(t testing.TB, path string, lines ...string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatalf("create known_hosts directory: %v", err)
	}
	var b bytes.Buffer
	for _, l := range lines {
		b.WriteString(l)
		b.WriteByte('\n')
	}
	if err := os.WriteFile(path, b.Bytes(), 0o600); err != nil {
		t.Fatalf("write known_hosts: %v", err)
	}
}

// Option configures a Server.
type Option func(*Server)

// WithAuthorizedKeys adds public keys the server accepts. A server without
// any accepts no one.
func WithAuthorizedKeys(keys ...ssh.PublicKey) Option {
	return func(s *Server) { s.authorized = append(s.authorized, keys...) }
}

// WithUsers restricts the user names the server accepts; by default any
// name is accepted (and recorded, see Logins).
func WithUsers(names ...string) Option {
	return func(s *Server) { s.users = append(s.users, names...) }
}

// WithHostKey makes the server present k instead of a fresh key, so a test
// can restart a "host" with the same key or give it a different one.
func WithHostKey(k *Key) Option {
	return func(s *Server) { s.hostKey = k }
}

// WithExtraHostKey makes the server offer another host key besides its own,
// as sshd does with one key of each type; the client picks which to verify.
func WithExtraHostKey(k ssh.Signer) Option {
	return func(s *Server) { s.extraHostKeys = append(s.extraHostKeys, k) }
}

// WithEnv adds KEY=value entries to the environment of every command; a
// later entry for the same key wins, so "PATH=dir:"+os.Getenv("PATH") puts
// a fake command first.
func WithEnv(env ...string) Option {
	return func(s *Server) { s.env = append(s.env, env...) }
}

// WithDir sets the working directory of every command.
func WithDir(dir string) Option {
	return func(s *Server) { s.dir = dir }
}

// Server is an in-process SSH server.
type Server struct {
	authorized    []ssh.PublicKey
	users         []string
	hostKey       *Key
	extraHostKeys []ssh.Signer
	env           []string
	dir           string

	ln  net.Listener
	cfg *ssh.ServerConfig
	wg  sync.WaitGroup

	mu       sync.Mutex
	closed   bool
	conns    map[net.Conn]bool
	procs    map[*os.Process]bool
	logins   []string
	commands []string
	signals  []string
	forwards []string
	globals  []string
	voice    chan struct{} // closed while the server speaks; open while it is silent
}

// New starts a server on 127.0.0.1:0 and stops it when the test ends.
func New(t testing.TB, opts ...Option) *Server {
	t.Helper()
	s := &Server{conns: map[net.Conn]bool{}, procs: map[*os.Process]bool{}, voice: make(chan struct{})}
	close(s.voice)
	for _, o := range opts {
		o(s)
	}
	if s.hostKey == nil {
		s.hostKey = NewKey(t)
	}
	s.cfg = &ssh.ServerConfig{PublicKeyCallback: s.checkKey}
	s.cfg.AddHostKey(s.hostKey.Signer)
	for _, k := range s.extraHostKeys {
		s.cfg.AddHostKey(k)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	s.ln = ln
	s.wg.Add(1)
	go s.accept()
	t.Cleanup(s.Close)
	return s
}

// Addr is the server's host:port.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Port is the server's TCP port.
func (s *Server) Port() int { return s.ln.Addr().(*net.TCPAddr).Port }

// HostKey is the public host key the server presents.
func (s *Server) HostKey() ssh.PublicKey { return s.hostKey.PublicKey() }

// KnownHostsLine is the known_hosts line that trusts this server at Addr
// ("[127.0.0.1]:port ssh-ed25519 ...").
func (s *Server) KnownHostsLine() string {
	return knownhosts.Line([]string{s.Addr()}, s.HostKey())
}

// Logins lists the user names that authenticated, in order.
func (s *Server) Logins() []string { return s.snapshot(&s.logins) }

// Commands lists the exec requests received, in order, exactly as sent.
func (s *Server) Commands() []string { return s.snapshot(&s.commands) }

// Signals lists the signal names received on sessions ("KILL").
func (s *Server) Signals() []string { return s.snapshot(&s.signals) }

// Forwards lists the host:port destinations of direct-tcpip channels.
func (s *Server) Forwards() []string { return s.snapshot(&s.forwards) }

// GlobalRequests lists the global requests received, in order, each as its
// type and, when the client asked for an answer, " want-reply"
// ("keepalive@openssh.com want-reply"). The server answers each with a
// failure, as sshd does a request it does not know.
func (s *Server) GlobalRequests() []string { return s.snapshot(&s.globals) }

// Silence makes the server fall silent, as a host whose traffic a network
// drops: it sends nothing more on its connections (not even an answer to
// a keepalive) and reads nothing more from them, until Speak. Its sockets
// stay open and its commands run on.
func (s *Server) Silence() {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.voice:
		s.voice = make(chan struct{})
	default:
	}
}

// Speak ends a Silence: what was held back is read and sent.
func (s *Server) Speak() {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.voice:
	default:
		close(s.voice)
	}
}

// speaking is closed while the server speaks.
func (s *Server) speaking() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.voice
}

// gatedConn is a connection of the server's that waits out a Silence
// before each read and write.
type gatedConn struct {
	net.Conn
	s      *Server
	closed chan struct{}
	once   sync.Once
}

func (c *gatedConn) wait() error {
	select {
	case <-c.s.speaking():
		return nil
	case <-c.closed:
		return net.ErrClosed
	}
}

func (c *gatedConn) Read(p []byte) (int, error) {
	if err := c.wait(); err != nil {
		return 0, err
	}
	return c.Conn.Read(p)
}

func (c *gatedConn) Write(p []byte) (int, error) {
	if err := c.wait(); err != nil {
		return 0, err
	}
	return c.Conn.Write(p)
}

func (c *gatedConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return c.Conn.Close()
}

func (s *Server) snapshot(p *[]string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), (*p)...)
}

func (s *Server) record(p *[]string, v string) {
	s.mu.Lock()
	*p = append(*p, v)
	s.mu.Unlock()
}

// Close stops the server, drops its connections, kills the commands still
// running and waits for every goroutine it started.
func (s *Server) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	s.ln.Close()
	for c := range s.conns {
		c.Close()
	}
	for p := range s.procs {
		// Negative pid: the whole process group, so children of sh go too.
		syscall.Kill(-p.Pid, syscall.SIGKILL)
	}
	s.mu.Unlock()
	s.wg.Wait()
}

func (s *Server) checkKey(meta ssh.ConnMetadata, key ssh.PublicKey) (*ssh.Permissions, error) {
	if len(s.users) > 0 {
		ok := false
		for _, u := range s.users {
			ok = ok || u == meta.User()
		}
		if !ok {
			return nil, errors.New("user not accepted")
		}
	}
	for _, k := range s.authorized {
		if bytes.Equal(k.Marshal(), key.Marshal()) {
			return &ssh.Permissions{}, nil
		}
	}
	return nil, errors.New("key not authorized")
}

func (s *Server) accept() {
	defer s.wg.Done()
	for {
		raw, err := s.ln.Accept()
		if err != nil {
			return
		}
		c := &gatedConn{Conn: raw, s: s, closed: make(chan struct{})}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			c.Close()
			return
		}
		s.conns[c] = true
		s.wg.Add(1)
		s.mu.Unlock()
		go s.serveConn(c)
	}
}

func (s *Server) serveConn(c net.Conn) {
	defer s.wg.Done()
	defer func() {
		c.Close()
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
	}()
	sc, chans, reqs, err := ssh.NewServerConn(c, s.cfg)
	if err != nil {
		return
	}
	defer sc.Close()
	s.record(&s.logins, sc.User())
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for req := range reqs {
			name := req.Type
			if req.WantReply {
				name += " want-reply"
			}
			s.record(&s.globals, name)
			if req.WantReply {
				req.Reply(false, nil)
			}
		}
	}()
	for nc := range chans {
		switch nc.ChannelType() {
		case "session":
			ch, creqs, err := nc.Accept()
			if err != nil {
				continue
			}
			s.wg.Add(1)
			go s.serveSession(ch, creqs)
		case "direct-tcpip":
			s.forward(nc)
		default:
			nc.Reject(ssh.UnknownChannelType, "unsupported channel type")
		}
	}
}

// serveSession handles one session channel: one exec, then exit-status.
func (s *Server) serveSession(ch ssh.Channel, reqs <-chan *ssh.Request) {
	defer s.wg.Done()
	defer func() {
		ch.Close()
		// Requests may still arrive until the client closes its side too.
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			ssh.DiscardRequests(reqs)
		}()
	}()
	var (
		cmd  *exec.Cmd
		done = make(chan struct{})
	)
	for {
		select {
		case req, ok := <-reqs:
			if !ok {
				// Client went away: do not leave its command running.
				if cmd != nil {
					syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
					<-done
				}
				return
			}
			switch req.Type {
			case "exec":
				var p struct{ Command string }
				if cmd != nil || ssh.Unmarshal(req.Payload, &p) != nil {
					req.Reply(false, nil)
					continue
				}
				s.record(&s.commands, p.Command)
				c, err := s.start(p.Command, ch)
				if err != nil {
					req.Reply(false, nil)
					continue
				}
				req.Reply(true, nil)
				cmd = c
				s.wg.Add(1)
				go func() {
					defer s.wg.Done()
					defer close(done)
					s.finish(c, ch)
				}()
			case "signal":
				var p struct{ Signal string }
				if ssh.Unmarshal(req.Payload, &p) == nil {
					s.record(&s.signals, p.Signal)
					if sig, ok := signals[p.Signal]; ok && cmd != nil {
						syscall.Kill(-cmd.Process.Pid, sig)
					}
				}
				if req.WantReply {
					req.Reply(true, nil)
				}
			default:
				// env, pty-req, shell, subsystem: not offered.
				if req.WantReply {
					req.Reply(false, nil)
				}
			}
		case <-done:
			return
		}
	}
}

var signals = map[string]syscall.Signal{
	"KILL": syscall.SIGKILL, "TERM": syscall.SIGTERM, "INT": syscall.SIGINT, "HUP": syscall.SIGHUP,
}

func (s *Server) start(command string, ch ssh.Channel) (*exec.Cmd, error) {
	cmd := exec.Command("/bin/sh", "-c", command)
	cmd.Env = append(os.Environ(), s.env...)
	cmd.Dir = s.dir
	cmd.Stdout = ch
	cmd.Stderr = ch.Stderr()
	// A process group of its own, so a signal or cleanup reaches the
	// children of sh as well.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, errors.New("server closed")
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s.procs[cmd.Process] = true
	// Not waited for: a command may exit without reading its stdin, and the
	// copy ends when the channel does.
	go func() {
		io.Copy(stdin, ch)
		stdin.Close()
	}()
	return cmd, nil
}

// finish waits for cmd and reports how it ended, as sshd does.
func (s *Server) finish(cmd *exec.Cmd, ch ssh.Channel) {
	err := cmd.Wait()
	s.mu.Lock()
	delete(s.procs, cmd.Process)
	s.mu.Unlock()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			name := "KILL"
			for n, sig := range signals {
				if sig == ws.Signal() {
					name = n
				}
			}
			ch.SendRequest("exit-signal", false, ssh.Marshal(struct {
				Signal     string
				CoreDumped bool
				Msg, Lang  string
			}{name, false, "", ""}))
			return
		}
	}
	status := uint32(0)
	if cmd.ProcessState != nil {
		status = uint32(cmd.ProcessState.ExitCode())
	}
	ch.SendRequest("exit-status", false, binary.BigEndian.AppendUint32(nil, status))
}

// forward serves a direct-tcpip channel (what ProxyJump and ssh -W use).
func (s *Server) forward(nc ssh.NewChannel) {
	var p struct {
		Host       string
		Port       uint32
		OriginHost string
		OriginPort uint32
	}
	if err := ssh.Unmarshal(nc.ExtraData(), &p); err != nil {
		nc.Reject(ssh.ConnectionFailed, "bad direct-tcpip request")
		return
	}
	dest := net.JoinHostPort(p.Host, strconv.Itoa(int(p.Port)))
	s.record(&s.forwards, dest)
	c, err := net.Dial("tcp", dest)
	if err != nil {
		nc.Reject(ssh.ConnectionFailed, err.Error())
		return
	}
	ch, reqs, err := nc.Accept()
	if err != nil {
		c.Close()
		return
	}
	s.mu.Lock()
	s.conns[c] = true
	s.mu.Unlock()
	s.wg.Add(3)
	go func() {
		defer s.wg.Done()
		ssh.DiscardRequests(reqs)
	}()
	go func() {
		defer s.wg.Done()
		io.Copy(c, ch)
		c.(*net.TCPConn).CloseWrite()
	}()
	go func() {
		defer s.wg.Done()
		io.Copy(ch, c)
		ch.Close()
		c.Close()
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
	}()
}
