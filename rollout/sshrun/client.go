// Package sshrun is the SSH transport behind shellhost.Runner: it resolves a
// host through ~/.ssh/config, checks its key against known_hosts (failing
// closed), authenticates with identity files and ssh-agent, follows
// ProxyJump hops, runs one command per session, through sudo -n when the
// remote user is not root, and cuts a connection whose host falls silent
// (keepalive.go).
package sshrun

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kevinburke/ssh_config"
	"github.com/relayctl/relayctl/rollout/shellhost"
	"golang.org/x/crypto/ssh"
)

var (
	// ErrUnknownHost: known_hosts has no key for the host and new keys are
	// not being accepted.
	ErrUnknownHost = errors.New("unknown host")
	// ErrHostKeyChanged: known_hosts has a different key for the host.
	// Accepting new host keys never overrides this.
	ErrHostKeyChanged = errors.New("host key changed")
	// ErrHostKeyRevoked: the host offered a key marked @revoked.
	ErrHostKeyRevoked = errors.New("host key revoked")
	// ErrAuth: the host accepted none of the keys offered.
	ErrAuth = errors.New("authentication failed")
	// ErrSudoPassword: the remote user is not root and sudo -n wants a
	// password.
	ErrSudoPassword = errors.New("sudo requires a password")
	// ErrTimeout: a connect or a command ran past its timeout. Errors that
	// wrap it also match context.DeadlineExceeded.
	ErrTimeout = errors.New("timed out")
	// ErrSilent: the host sent nothing, not even an answer to a keepalive,
	// through ServerAliveCountMax intervals in a row, and the connection
	// was cut: every session on it ends with this.
	ErrSilent = errors.New("the host fell silent")
)

// Options configures Dial and Resolve. The zero value is usable.
type Options struct {
	KnownHosts string // "" = ~/.ssh/known_hosts
	// GlobalKnownHosts are read too (never written); nil means OpenSSH's
	// /etc/ssh/ssh_known_hosts and /etc/ssh/ssh_known_hosts2.
	GlobalKnownHosts  []string
	AcceptNewHostKeys bool          // trust and record hosts not in KnownHosts; never a changed key
	Identities        []string      // identity files to offer first; each must exist and parse
	SSHConfig         string        // "" = ~/.ssh/config (missing is fine); an explicit path must exist
	ConnectTimeout    time.Duration // per hop, TCP connect plus handshake; 0 = 10s
	CommandTimeout    time.Duration // per Run unless ctx has an earlier deadline; 0 = 60s
	// ServerAliveInterval is how often the client asks the host for an
	// answer (keepalive@openssh.com); ServerAliveCountMax how many
	// intervals in a row it may hear nothing from the host before it cuts
	// the connection (keepalive.go). 0 takes the host's ssh_config
	// ServerAliveInterval or ServerAliveCountMax, else 15s and 3; a
	// negative interval sends none.
	ServerAliveInterval time.Duration
	ServerAliveCountMax int
	// Logf, when set, is told about things the user should know that are
	// not errors: a host key recorded by AcceptNewHostKeys.
	Logf func(format string, args ...any)
}

const (
	defaultConnectTimeout = 10 * time.Second
	defaultCommandTimeout = 60 * time.Second
	// maxHops bounds ProxyJump chains, which ssh_config can make cyclic.
	maxHops = 8
)

func (o Options) withDefaults() (Options, error) {
	if o.ConnectTimeout <= 0 {
		o.ConnectTimeout = defaultConnectTimeout
	}
	if o.CommandTimeout <= 0 {
		o.CommandTimeout = defaultCommandTimeout
	}
	if o.KnownHosts == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return o, fmt.Errorf("find known_hosts: %w", err)
		}
		o.KnownHosts = filepath.Join(home, ".ssh", "known_hosts")
	}
	if o.GlobalKnownHosts == nil {
		o.GlobalKnownHosts = []string{"/etc/ssh/ssh_known_hosts", "/etc/ssh/ssh_known_hosts2"}
	}
	kh, err := expandHome(o.KnownHosts)
	if err != nil {
		return o, err
	}
	o.KnownHosts = kh
	return o, nil
}

// Client is one SSH connection to a host (through its jump hosts, if any).
// It is safe for concurrent use; each Run opens its own session.
type Client struct {
	target   Target
	conn     *ssh.Client
	jumps    []*ssh.Client // outermost first, closed after conn
	o        Options
	sessions atomic.Int64
	keys     hopKeys // the target's: the key it accepted and its host key
	alive    alive
	tcp      net.Conn // the first hop's TCP connection: closing it cuts every hop
	silent   atomic.Pointer[silentError]
}

// hopKeys are the keys of one hop's handshake: the user key the host
// accepted and the host key that was checked, each as keyText names it.
type hopKeys struct{ user, host string }

var _ shellhost.Runner = (*Client)(nil)

// Dial resolves spec (see Resolve), connects, checks the host key and
// authenticates. Every error names the host.
func Dial(ctx context.Context, spec string, o Options) (*Client, error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	cfg, err := loadSSHConfig(o.SSHConfig)
	if err != nil {
		return nil, err
	}
	t, err := resolve(spec, cfg)
	if err != nil {
		return nil, err
	}
	a, err := aliveFor(o, t, cfg)
	if err != nil {
		return nil, err
	}
	keys, err := newKeyring(o.Identities)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", t, err)
	}
	// The agent is needed only for the handshakes.
	defer keys.close()
	d := &dialer{o: o, cfg: cfg, keys: keys}
	conn, jumps, hk, err := d.connect(ctx, t, 0)
	if err != nil {
		return nil, err
	}
	c := &Client{target: t, conn: conn, jumps: jumps, o: o, keys: hk, alive: a, tcp: d.tcp}
	if a.interval > 0 {
		// On the target's connection: through jump hosts, its silence is
		// theirs too.
		go keepAlive(conn, d.heard, a, c.cut)
	}
	return c, nil
}

type dialer struct {
	o     Options
	cfg   *ssh_config.Config
	keys  *keyring
	tcp   net.Conn   // the first hop's TCP connection
	heard *heardConn // the hop dialled last: the target's, once connect returns
}

// connect reaches t, through its ProxyJump hops if it has any. As with
// OpenSSH's "ProxyJump a,b", a is reached first (with a's own ssh_config
// ProxyJump, if any), then b through a, then t through b.
// The keys returned are t's own, not its jump hosts'.
func (d *dialer) connect(ctx context.Context, t Target, depth int) (*ssh.Client, []*ssh.Client, hopKeys, error) {
	if depth > maxHops {
		return nil, nil, hopKeys{}, fmt.Errorf("%s: connect: more than %d ProxyJump hops (a loop in ssh config?)", t, maxHops)
	}
	if len(t.ProxyJump) == 0 {
		c, k, err := d.hop(ctx, t, nil)
		return c, nil, k, err
	}
	n := len(t.ProxyJump)
	jt, err := resolve(t.ProxyJump[n-1], d.cfg)
	if err != nil {
		return nil, nil, hopKeys{}, fmt.Errorf("%s: resolve jump host: %w", t, err)
	}
	if n > 1 {
		jt.ProxyJump = t.ProxyJump[:n-1]
	}
	jc, js, _, err := d.connect(ctx, jt, depth+1)
	if err != nil {
		return nil, nil, hopKeys{}, fmt.Errorf("%s: through %w", t, err)
	}
	jumps := append(js, jc)
	c, k, err := d.hop(ctx, t, jc)
	if err != nil {
		closeAll(jumps)
		return nil, nil, hopKeys{}, err
	}
	return c, jumps, k, nil
}

// hop connects to t directly, or through the jump client when there is one.
// Each hop gets the whole ConnectTimeout, counted once the hops before it
// are up.
func (d *dialer) hop(ctx context.Context, t Target, jump *ssh.Client) (*ssh.Client, hopKeys, error) {
	cctx, cancel := context.WithTimeout(ctx, d.o.ConnectTimeout)
	defer cancel()
	var conn net.Conn
	var err error
	if jump != nil {
		conn, err = jump.DialContext(cctx, "tcp", t.Addr())
	} else {
		conn, err = (&net.Dialer{}).DialContext(cctx, "tcp", t.Addr())
	}
	if err != nil {
		return nil, hopKeys{}, d.connectError(ctx, cctx, t, fmt.Errorf("connect: %w", err))
	}
	if jump == nil {
		d.tcp = conn
	}
	d.heard = &heardConn{Conn: conn}
	return d.handshake(ctx, cctx, t, d.heard)
}

func (d *dialer) handshake(ctx, cctx context.Context, t Target, conn net.Conn) (*ssh.Client, hopKeys, error) {
	hk, err := newHostKeys(t, d.o.KnownHosts, d.o.GlobalKnownHosts, d.o.AcceptNewHostKeys, d.o.Logf)
	if err != nil {
		conn.Close()
		return nil, hopKeys{}, fmt.Errorf("%s: %w", t, err)
	}
	methods, tried := d.keys.methods(t)
	var hostKey string
	cfg := &ssh.ClientConfig{
		User: t.User,
		Auth: methods,
		// The host key the check accepted, for the receipt.
		HostKeyCallback: func(host string, remote net.Addr, key ssh.PublicKey) error {
			err := hk.check(host, remote, key)
			if err == nil {
				hostKey = keyText(key)
			}
			return err
		},
		HostKeyAlgorithms: hk.algorithms(),
	}
	// NewClientConn has no context: closing the connection is what stops it.
	stop := context.AfterFunc(cctx, func() { conn.Close() })
	sc, chans, reqs, err := ssh.NewClientConn(conn, t.Addr(), cfg)
	if !stop() {
		if err == nil {
			sc.Close()
		}
		return nil, hopKeys{}, d.connectError(ctx, cctx, t, fmt.Errorf("ssh handshake: %w", context.Cause(cctx)))
	}
	switch {
	case hk.refusal != nil:
		conn.Close()
		return nil, hopKeys{}, hk.refusal
	case err != nil && strings.Contains(err.Error(), "unable to authenticate"):
		conn.Close()
		return nil, hopKeys{}, d.keys.authError(t, tried)
	case err != nil:
		conn.Close()
		return nil, hopKeys{}, fmt.Errorf("%s: %w", t, err)
	}
	return ssh.NewClient(sc, chans, reqs), hopKeys{user: tried.used.fingerprint(), host: hostKey}, nil
}

// connectError names a connect timeout as such; the net error for it
// ("i/o timeout", "operation was canceled") does not say which limit hit.
func (d *dialer) connectError(ctx, cctx context.Context, t Target, err error) error {
	if ctx.Err() == nil && errors.Is(cctx.Err(), context.DeadlineExceeded) {
		return &timeoutError{what: t.String() + ": connect", after: d.o.ConnectTimeout}
	}
	if ctx.Err() != nil {
		return fmt.Errorf("%s: connect: %w", t, ctx.Err())
	}
	return fmt.Errorf("%s: %w", t, err)
}

func closeAll(cs []*ssh.Client) {
	for i := len(cs) - 1; i >= 0; i-- {
		cs[i].Close()
	}
}

// timeoutError reads "host: connect: timed out after 10s" and matches both
// ErrTimeout and context.DeadlineExceeded.
type timeoutError struct {
	what  string
	after time.Duration
}

func (e *timeoutError) Error() string {
	return fmt.Sprintf("%s: %s after %s", e.what, ErrTimeout, e.after)
}

func (e *timeoutError) Is(target error) bool {
	return target == ErrTimeout || target == context.DeadlineExceeded
}

// Target is the resolved host this client is connected to.
func (c *Client) Target() Target { return c.target }

// UserKey is the key the host accepted, HostKey the host key relayctl
// checked, each as its type and SHA256 fingerprint (as ssh-keygen -l).
func (c *Client) UserKey() string { return c.keys.user }
func (c *Client) HostKey() string { return c.keys.host }

// Sessions is how many sessions (one per Run, one round trip each) this
// client has opened.
func (c *Client) Sessions() int { return int(c.sessions.Load()) }

// Keepalive is how often the client asks the host for an answer, and
// through how many intervals of silence it cuts the connection; 0, 0 when
// it sends none.
func (c *Client) Keepalive() (interval time.Duration, count int) {
	return c.alive.interval, c.alive.count
}

// cut ends a connection whose host fell silent: its first hop's TCP
// connection is closed, so nothing above it waits on a write (a channel
// close through a jump host would), and every session ends with the
// cause.
func (c *Client) cut() {
	c.silent.Store(&silentError{target: c.target, a: c.alive})
	c.tcp.Close()
}

// lost is err, or the keepalive's cut when that is what ended it.
func (c *Client) lost(err error) error {
	if s := c.silent.Load(); s != nil {
		return s
	}
	return err
}

// Close closes the connection and those to its jump hosts.
func (c *Client) Close() error {
	err := c.conn.Close()
	closeAll(c.jumps)
	return err
}

// sudoPrompts are what sudo -n prints when it would need a password.
var sudoPrompts = []string{
	"sudo: a password is required",
	"sudo: a terminal is required to read the password",
	"no tty present and no askpass program specified",
}

// Run runs cmd in one new session. For a user other than root it runs as
// sudo -n -- sh -c 'cmd', so cmd is the same shell text either way. stdin,
// stdout and stderr may be nil. A non-zero exit is a *shellhost.ExitError
// (not prefixed with the host, callers add their own context); every other
// error names the host. A command past its timeout is sent KILL, its
// session is closed and the error matches ErrTimeout; OpenSSH refuses
// signals on root sessions ("session signalling requires privilege
// separation", seen with 9.2), so there the command may go on running.
func (c *Client) Run(ctx context.Context, cmd string, stdin io.Reader, stdout, stderr io.Writer) error {
	limit := c.o.CommandTimeout
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < limit {
		limit = time.Until(dl)
	}
	rctx, cancel := context.WithTimeout(ctx, limit)
	if shellhost.CommandTimeoutDisabled(ctx) {
		// The host lock lives as long as the apply, not one command.
		rctx, cancel = context.WithCancel(ctx)
	}
	defer cancel()

	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%s: run command: %w", c.target, err)
	}
	sudo := c.target.User != "root"
	remote := cmd
	if sudo {
		remote = "sudo -n -- sh -c " + shellhost.Quote(cmd)
	}
	s, err := c.conn.NewSession()
	if err != nil {
		return c.lost(fmt.Errorf("%s: open session: %w", c.target, err))
	}
	c.sessions.Add(1)
	defer s.Close()

	// The session copies output in goroutines of its own that may outlive
	// Run after a timeout: the gate stops them touching the caller's
	// writers once Run returns, and serialises writes when stdout and
	// stderr are the same writer.
	g := &gate{}
	defer g.shut()
	tail := &tailBuffer{max: 2048}
	s.Stdout = g.writer(stdout)
	s.Stderr = g.writer(io.MultiWriter(orDiscard(stderr), tail))
	var in *stdinCopy
	if stdin != nil {
		w, err := s.StdinPipe()
		if err != nil {
			return fmt.Errorf("%s: open stdin: %w", c.target, err)
		}
		in = &stdinCopy{r: stdin, w: w}
	}
	if err := s.Start(remote); err != nil {
		return c.lost(fmt.Errorf("%s: start command: %w", c.target, err))
	}
	in.start()
	done := make(chan error, 1)
	go func() { done <- s.Wait() }()
	select {
	case err = <-done:
	case <-rctx.Done():
		// OpenSSH delivers signals since 7.9, but not to root sessions;
		// where it does not, closing the session is all we can do.
		s.Signal(ssh.SIGKILL)
		s.Close()
		if ctx.Err() == nil || errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return &timeoutError{what: c.target.String() + ": run command", after: roundLimit(limit)}
		}
		return fmt.Errorf("%s: run command: %w", c.target, ctx.Err())
	}
	if err == nil {
		if rerr := in.readErr(); rerr != nil {
			return fmt.Errorf("%s: read command input: %w", c.target, rerr)
		}
		return nil
	}
	g.shut() // the tail is complete once Wait has returned
	return c.exitError(err, sudo, tail.String())
}

// exitError is a command that did not succeed: its exit status and the
// tail of its stderr, or a sudo that wanted a password.
func (c *Client) exitError(err error, sudo bool, msg string) error {
	var ee *ssh.ExitError
	if !errors.As(err, &ee) {
		return c.lost(fmt.Errorf("%s: run command: %w", c.target, err))
	}
	if sudo && ee.ExitStatus() == 1 {
		for _, p := range sudoPrompts {
			if strings.Contains(msg, p) {
				return fmt.Errorf("%s: run as %s through sudo -n: %w; configure NOPASSWD for %s in sudoers, or connect as root",
					c.target, c.target.User, ErrSudoPassword, c.target.User)
			}
		}
	}
	if msg == "" && ee.Signal() != "" {
		msg = "killed by signal " + ee.Signal()
	}
	return &shellhost.ExitError{Status: ee.ExitStatus(), Stderr: msg}
}

func roundLimit(d time.Duration) time.Duration {
	if d >= time.Second {
		return d.Round(time.Second)
	}
	return d.Round(time.Millisecond)
}

func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}

// gate passes writes through until shut, one at a time.
type gate struct {
	mu     sync.Mutex
	closed bool
}

func (g *gate) shut() {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
}

func (g *gate) writer(w io.Writer) io.Writer {
	return gateWriter{g: g, w: orDiscard(w)}
}

type gateWriter struct {
	g *gate
	w io.Writer
}

func (gw gateWriter) Write(p []byte) (int, error) {
	gw.g.mu.Lock()
	defer gw.g.mu.Unlock()
	if gw.g.closed {
		return 0, io.ErrClosedPipe
	}
	return gw.w.Write(p)
}

// stdinCopy feeds the session's stdin and remembers a failure to read it,
// which would otherwise look like a command given short input.
type stdinCopy struct {
	r   io.Reader
	w   io.WriteCloser
	mu  sync.Mutex
	err error
}

// start copies in the background. Run does not wait for the copy, since a
// reader may block after the command is done.
func (c *stdinCopy) start() {
	if c == nil {
		return
	}
	go func() {
		// Write errors mean the command stopped reading: not ours to report.
		io.Copy(c.w, readerFunc(func(p []byte) (int, error) {
			n, err := c.r.Read(p)
			if err != nil && err != io.EOF {
				c.mu.Lock()
				c.err = err
				c.mu.Unlock()
			}
			return n, err
		}))
		c.w.Close()
	}()
}

func (c *stdinCopy) readErr() error {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	max       int
	buf       []byte
	truncated bool
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
		t.truncated = true
	}
	return len(p), nil
}

// String is the tail, trimmed, starting at a line boundary when cut.
func (t *tailBuffer) String() string {
	s := string(t.buf)
	if t.truncated {
		if i := strings.IndexByte(s, '\n'); i >= 0 {
			s = s[i+1:]
		}
	}
	return strings.TrimSpace(s)
}
