// Package invprogram runs a spec's inventory program (hosts.inventory.program,
// docs/inventory.md): a program on the machine relayctl runs on, never on a
// host, that prints the JSON ansible-inventory --list prints, such as
// [ansible-inventory, -i, aws_ec2.yml, --list] or an inventory script.
//
// The program runs as its argv, without a shell, in the spec's folder, with
// relayctl's environment (a cloud inventory needs its credentials) and no
// standard input, for at most a timeout, and what it prints is read up to a
// cap. It runs only where the machine allows it (allow.go: a flag the
// operator types, or the machine's list of programs), and only if no one
// but root or the caller can change it, nor the files its arguments name,
// nor the folder it runs in (safe.go): relayctl often runs as root, and
// whoever could rewrite what it runs or reads would run as root.
package invprogram

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// maxStderr is how much of its stderr is kept for messages: the end,
// where errors are.
const maxStderr = 8 << 10

// Options say where and how long the program runs.
type Options struct {
	Name      string        // the program as messages name it, e.g. its argv as the spec writes it
	Dir       string        // where it runs; a program path with a slash is relative to it
	Timeout   time.Duration // more than 0
	MaxOutput int           // bytes of standard output read; more is an error
	Allow     Allow         // whether this machine lets it run
}

// Result is what a program that succeeded printed.
type Result struct {
	Output []byte
	// Stderr is the end of what it printed on standard error (Ansible
	// prints its warnings there), "" when nothing.
	Stderr string
}

// Run runs argv and returns its standard output. Every failure names the
// program: one that cannot be found, is not allowed here or is not safe to
// run, a non-zero exit status or a signal (with the end of its stderr),
// the timeout, more output than MaxOutput.
func Run(ctx context.Context, argv []string, o Options) (Result, error) {
	name := o.Name
	if len(argv) == 0 || argv[0] == "" || o.Timeout <= 0 {
		return Result{}, errors.New("run inventory program: no program, or no timeout")
	}
	path, err := prepare(argv, o)
	if err != nil {
		return Result{}, fmt.Errorf("run inventory program %s: %w", name, err)
	}
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, path)
	cmd.Args, cmd.Dir, cmd.Env = argv, o.Dir, environment()
	// Its own process group, so the timeout ends whatever it started too,
	// and a child that keeps the pipes open does not keep relayctl waiting.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = time.Second
	out := &capped{max: o.MaxOutput, over: cancel}
	var stderr tail
	cmd.Stdout, cmd.Stderr = out, &stderr
	err = cmd.Run()
	res := Result{Output: out.buf.Bytes(), Stderr: stderr.String()}
	switch {
	case out.exceeded:
		return Result{}, fmt.Errorf("inventory program %s printed more than %d bytes; relayctl reads at most %d", name, o.MaxOutput, o.MaxOutput)
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return Result{}, fmt.Errorf("inventory program %s did not finish within %s (hosts.inventory.timeout), and was killed%s", name, o.Timeout, stderrText(res.Stderr))
	case ctx.Err() != nil:
		return Result{}, fmt.Errorf("inventory program %s was stopped: relayctl was interrupted", name)
	case err != nil:
		return Result{}, fmt.Errorf("inventory program %s %s%s", name, failure(err), stderrText(res.Stderr))
	}
	return res, nil
}

// failure says how a program that ran failed.
func failure(err error) string {
	if errors.Is(err, exec.ErrWaitDelay) {
		return "exited, but left a process behind that holds its output open (relayctl stopped reading a second later, so the output may be cut short)"
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return "failed: " + err.Error()
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return "was killed by signal " + ws.Signal().String()
	}
	return "exited with status " + strconv.Itoa(ee.ExitCode())
}

func stderrText(s string) string {
	if s = strings.TrimSpace(s); s == "" {
		return "; it printed nothing on stderr"
	}
	return "; its stderr:\n" + s
}

// environment is relayctl's, with one setting for ansible-inventory: a
// source it cannot parse is an error, not an empty inventory (Ansible's
// default is a warning), unless the operator set otherwise.
func environment() []string {
	env := os.Environ()
	if _, set := os.LookupEnv("ANSIBLE_INVENTORY_UNPARSED_FAILED"); !set {
		env = append(env, "ANSIBLE_INVENTORY_UNPARSED_FAILED=True")
	}
	return env
}

// capped keeps up to max bytes and notes more, ending the program.
type capped struct {
	buf      bytes.Buffer
	max      int
	exceeded bool
	over     func()
}

func (c *capped) Write(p []byte) (int, error) {
	if c.buf.Len()+len(p) > c.max {
		c.exceeded = true
		c.over()
		return 0, errors.New("output over the cap")
	}
	return c.buf.Write(p)
}

// tail keeps the last maxStderr bytes written.
type tail struct{ b []byte }

func (t *tail) Write(p []byte) (int, error) {
	t.b = append(t.b, p...)
	if len(t.b) > maxStderr {
		t.b = append(t.b[:0], t.b[len(t.b)-maxStderr:]...)
	}
	return len(p), nil
}

func (t *tail) String() string { return string(t.b) }
