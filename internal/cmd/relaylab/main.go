// Command relaylab starts and stops lab hosts outside of go test, for
// `make demo` and benchmark scripts (see internal/lab).
//
// Output: results (paths, hosts, a command's own output) go to stdout;
// progress and errors ("relaylab: error: …") to stderr.
//
// Usage:
//
//	relaylab up --dir DIR [--hosts N] [--systemd N] [--base-port P] [--sshd-in-netns] [--no-relay-netns] [--busybox]
//	            [--relayd PATH --relay-version V [--start-relay=false]]
//	relaylab down --dir DIR
//	relaylab status --dir DIR
//	relaylab stop --dir DIR HOST
//	relaylab start --dir DIR HOST
//	relaylab exec --dir DIR HOST -- CMD [ARG...]
//
// up stops what it has started if it fails or is interrupted (SIGINT,
// SIGTERM, SIGHUP), and refuses a DIR that holds a lab not stopped. stop
// stops one host's sshd and its SSH sessions (its relay goes on), so that
// relayctl finds it unreachable; start starts it again, the same host.
// status exits 0 when every host of the lab runs, 3 when one does not:
// "stopped" (relaylab stop) or "down" (it ended some other way: down
// cleans up after it).
//
// Examples:
//
//	relaylab up --dir /tmp/lab --hosts 3 --relayd bin/relayd --relay-version 1.7.0
//	ssh -F /tmp/lab/ssh_config lab-1 /opt/relay/bin/relay-service status
//	relaylab up --dir /tmp/sd --systemd 2 --relayd bin/relayd --relay-version 1.8.0
//	ssh -F /tmp/sd/ssh_config lab-1 systemctl status relayd
//	relaylab up --dir /tmp/bb --busybox --relayd bin/relayd --relay-version 1.8.0
//	relaylab exec --dir /tmp/lab lab-2 -- cat /etc/sysctl.d/90-relayctl.conf
//	relaylab stop --dir /tmp/lab lab-3
//	relaylab start --dir /tmp/lab lab-3
//	relaylab status --dir /tmp/lab
//	relaylab down --dir /tmp/lab
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"github.com/relayctl/relayctl/internal/lab"
)

func main() {
	os.Exit(run(os.Args, os.Stdin, os.Stdout, os.Stderr))
}

const usage = `usage:
  relaylab up --dir DIR [--hosts N] [--systemd N] [--base-port P] [--sshd-in-netns] [--no-relay-netns] [--busybox]
              [--relayd PATH --relay-version V [--start-relay=false]]
  relaylab down --dir DIR
  relaylab status --dir DIR
  relaylab stop --dir DIR HOST     (its sshd: relayctl finds it unreachable; its relay goes on)
  relaylab start --dir DIR HOST
  relaylab exec --dir DIR HOST -- CMD [ARG...]

examples:
  relaylab up --dir /tmp/lab --hosts 3 --relayd bin/relayd --relay-version 1.7.0
  ssh -F /tmp/lab/ssh_config lab-1 /opt/relay/bin/relay-service status
  relaylab up --dir /tmp/sd --systemd 2 --relayd bin/relayd --relay-version 1.8.0
  ssh -F /tmp/sd/ssh_config lab-1 systemctl status relayd
  relaylab up --dir /tmp/bb --busybox --relayd bin/relayd --relay-version 1.8.0
  relaylab exec --dir /tmp/lab lab-2 -- cat /etc/sysctl.d/90-relayctl.conf
  relaylab stop --dir /tmp/lab lab-3
  relaylab start --dir /tmp/lab lab-3
  relaylab status --dir /tmp/lab
  relaylab down --dir /tmp/lab
`

// errUsage makes run print the usage and exit 2.
var errUsage = errors.New("usage")

// exitStatus passes a command's own exit status through (relaylab exec).
type exitStatus int

func (e exitStatus) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	var err error
	if len(args) < 2 {
		err = errUsage
	} else {
		switch args[1] {
		case "up":
			err = up(args[2:], stdout, stderr)
		case "down":
			err = down(args[2:], stdout, stderr)
		case "status":
			err = status(args[2:], stdout, stderr)
		case "exec":
			err = execCmd(args[2:], stdin, stdout, stderr)
		case "stop", "start":
			err = stopStart(args[1], args[2:], stdout, stderr)
		case "-h", "-help", "--help", "help":
			fmt.Fprint(stdout, usage)
			return 0
		default:
			err = errUsage
		}
	}
	var es exitStatus
	switch {
	case err == nil:
		return 0
	case errors.As(err, &es):
		return int(es)
	case errors.Is(err, errUsage), errors.Is(err, flag.ErrHelp):
		fmt.Fprint(stderr, usage)
		return 2
	default:
		fmt.Fprintf(stderr, "relaylab: error: %v\n", err)
		return 1
	}
}

func flags(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("relaylab "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

func up(args []string, stdout, stderr io.Writer) error {
	fs := flags("up", stderr)
	dir := fs.String("dir", "", "directory for the lab's files (required)")
	hosts := fs.Int("hosts", 1, "number of hosts with sshd in a mount namespace (default 1, or 0 with --systemd)")
	systemd := fs.Int("systemd", 0, "number of hosts booted with a real systemd (relayd as relayd.service), after the --hosts ones")
	basePort := fs.Int("base-port", lab.DefaultBasePort, "sshd port on every host")
	inNetns := fs.Bool("sshd-in-netns", false, "run each sshd in a child network namespace (rmem_max read-only)")
	noRelayNetns := fs.Bool("no-relay-netns", false, "run each relay in its sshd's network namespace")
	busybox := fs.Bool("busybox", false, "give the --hosts hosts a busybox userland (docs/lab.md)")
	relayd := fs.String("relayd", "", "relayd binary to install on every host")
	version := fs.String("relay-version", "", "release version for --relayd")
	startRelay := fs.Bool("start-relay", true, "start the installed relay")
	if err := fs.Parse(args); err != nil {
		return errUsage
	}
	hostsSet := false
	fs.Visit(func(f *flag.Flag) { hostsSet = hostsSet || f.Name == "hosts" })
	if *systemd > 0 && !hostsSet {
		*hosts = 0
	}
	if *dir == "" || *hosts < 0 || *systemd < 0 || *hosts+*systemd < 1 || fs.NArg() > 0 || (*relayd == "") != (*version == "") {
		return errUsage
	}
	o := lab.Options{Dir: *dir, BasePort: *basePort}
	for i := range *hosts + *systemd {
		ho := lab.HostOptions{SSHDInNetns: *inNetns, NoRelayNetns: *noRelayNetns, Busybox: *busybox}
		if i >= *hosts {
			ho = lab.HostOptions{Systemd: true}
		}
		if *relayd != "" {
			ho.Relay = &lab.RelayInstall{Binary: *relayd, Version: *version, Start: *startRelay}
		}
		o.Hosts = append(o.Hosts, ho)
	}
	// A Ctrl-C (or a kill) ends the start, and Start stops what it had
	// started: no sshd or namespace outlives an up that did not finish.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	start := time.Now()
	l, err := lab.Start(ctx, o)
	if err != nil && ctx.Err() != nil {
		return fmt.Errorf("up interrupted; stopped what it had started: %w", err)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "relaylab: started %d hosts in %.2fs\n", len(l.Hosts), time.Since(start).Seconds())
	fmt.Fprintf(stdout, "ssh_config  %s\nknown_hosts %s\nidentity    %s\n", l.SSHConfig, l.KnownHosts, l.Identity)
	for _, h := range l.Hosts {
		if h.Kind == lab.KindSystemd {
			rss, pss, _ := h.Memory()
			fmt.Fprintf(stdout, "%s %s systemd init_pid=%d sshd_pid=%d ssh_ready=%dms running=%dms rss=%.1fMiB pss=%.1fMiB\n", h.Name, h.Addr,
				h.InitPID, h.SSHDPID, h.Boot.SSHReady.Milliseconds(), h.Boot.Running.Milliseconds(), float64(rss)/(1<<20), float64(pss)/(1<<20))
			continue
		}
		ns := h.RelayNetns
		if ns == "" {
			ns = "-"
		}
		userland := "debian"
		if h.Kind == lab.KindBusybox {
			userland = "busybox"
		}
		fmt.Fprintf(stdout, "%s %s sshd_pid=%d relay_netns=%s userland=%s\n", h.Name, h.Addr, h.SSHDPID, ns, userland)
	}
	fmt.Fprintf(stdout, "try: ssh -F %s %s true\n", l.SSHConfig, l.Hosts[0].Name)
	return nil
}

func down(args []string, stdout, stderr io.Writer) error {
	fs := flags("down", stderr)
	dir := fs.String("dir", "", "the lab's directory (required)")
	if err := fs.Parse(args); err != nil || *dir == "" || fs.NArg() > 0 {
		return errUsage
	}
	l, err := lab.Load(*dir)
	if err != nil {
		return err
	}
	if err := l.Close(); err != nil {
		return err
	}
	if err := os.Remove(filepath.Join(*dir, "lab.json")); err != nil {
		return fmt.Errorf("remove lab.json: %w", err)
	}
	fmt.Fprintf(stdout, "stopped %d hosts\n", len(l.Hosts))
	return nil
}

// errNotRunning makes status exit 3, as relay-service status does.
var errNotRunning = exitStatus(3)

func status(args []string, stdout, stderr io.Writer) error {
	fs := flags("status", stderr)
	dir := fs.String("dir", "", "the lab's directory (required)")
	if err := fs.Parse(args); err != nil || *dir == "" || fs.NArg() > 0 {
		return errUsage
	}
	l, err := lab.Load(*dir)
	if err != nil {
		return err
	}
	stopped := l.Stopped()
	all := true
	for _, h := range l.Hosts {
		state := "running"
		switch {
		case h.SSHDStopped:
			state = "stopped" // relaylab stop: relaylab start starts it
		case slices.Contains(stopped, h.Name):
			state = "down"
		}
		all = all && state == "running"
		fmt.Fprintf(stdout, "%s %s %s\n", h.Name, h.Addr, state)
	}
	if !all {
		return errNotRunning
	}
	return nil
}

// stopStart is relaylab stop HOST and relaylab start HOST.
func stopStart(verb string, args []string, stdout, stderr io.Writer) error {
	fs := flags(verb, stderr)
	dir := fs.String("dir", "", "the lab's directory (required)")
	if err := fs.Parse(args); err != nil || *dir == "" || fs.NArg() != 1 {
		return errUsage
	}
	l, err := lab.Load(*dir)
	if err != nil {
		return err
	}
	name := fs.Arg(0)
	if verb == "stop" {
		if err := l.StopSSHD(name); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s: sshd stopped: relayctl finds %s unreachable; its relay goes on (relaylab start --dir %s %s)\n", name, name, *dir, name)
		return nil
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := l.StartSSHD(ctx, name); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s: sshd started\n", name)
	return nil
}

func execCmd(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flags("exec", stderr)
	dir := fs.String("dir", "", "the lab's directory (required)")
	if err := fs.Parse(args); err != nil || *dir == "" {
		return errUsage
	}
	rest := fs.Args()
	if len(rest) < 3 || rest[1] != "--" {
		return errUsage
	}
	l, err := lab.Load(*dir)
	if err != nil {
		return err
	}
	h := l.Host(rest[0])
	if h == nil {
		return fmt.Errorf("exec: no host %q in %s", rest[0], *dir)
	}
	cmd := h.Command(context.Background(), rest[2:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, stdout, stderr
	err = cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() > 0 {
		return exitStatus(ee.ExitCode())
	}
	if err != nil {
		return fmt.Errorf("exec on %s: %w", h.Name, err)
	}
	return nil
}
