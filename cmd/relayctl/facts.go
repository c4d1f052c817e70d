package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/relayctl/relayctl/plans"
	"github.com/relayctl/relayctl/rollout"
	"github.com/relayctl/relayctl/tune"
)

func factsCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:      "facts",
		Usage:     "print what relayctl observes on hosts (the input of a plan)",
		ArgsUsage: "[HOST...]",
		Description: `Observes each host over SSH, exactly as plan does, and prints the facts:
kernel, sysctls (value and whether writable), sysctl.d files, the relay's
release, config, process, and its socket read back from the kernel (rb and
drops from ss, /proc/net/udp drops, RcvbufErrors) in the relay's network
namespace. --json output is what plan --facts reads, for a review pipeline
without SSH access to the fleet.

With --spec, hosts default to the spec's and everything else (keys, port,
paths, service) comes from it; without, --port, --key, --pid-file and
--systemd-unit say what to look at. Nothing named on the command line or
in the spec runs on the host: the relay is found through systemd or its pid
file, or, with neither given, as the one process that runs a release and
holds a UDP socket on the port (from the kernel's tables; relayctl says
when it cannot tell), and is read back only if it runs a release.

A host that cannot be read is said on stderr (and listed in --json's
unreachable, which plan --facts plans as unreachable); the others are
printed all the same. Exit status: 0 every host was read, 5 some could not
be, 1 error.

Examples:
   relayctl facts relay-ash-1
   relayctl facts --spec plans/examples/ashburn-rcvbuf.yaml --json > facts.json
   relayctl facts --port 7788 --pid-file /opt/relay/run/relayd.pid lab-1
   relayctl facts --systemd-unit relayd relay-ash-1`,
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "spec", Usage: "take hosts, keys, port, paths and service from `SPEC`"},
			&cli.BoolFlag{Name: "json", Usage: "print the facts document plan --facts reads"},
			&cli.IntFlag{Name: "port", Value: plans.DefaultPort, Usage: "the relay's UDP `PORT` (without --spec)"},
			&cli.StringSliceFlag{Name: "key", Usage: "a sysctl `KEY` to read as well (without --spec; repeatable)"},
			&cli.StringFlag{Name: "pid-file", Usage: "the `FILE` holding the relay's PID, a command-managed relay (without --spec)"},
			&cli.StringFlag{Name: "systemd-unit", Usage: "the relay's systemd `UNIT`, to find its PID (without --spec)"},
			allowProgramFlag(),
		}, sshFlags()...),
		Action: func(c *cli.Context) error { return runFacts(c, e) },
	}
}

func runFacts(c *cli.Context, e *env) error {
	hosts := c.Args().Slice()
	var q rollout.Query
	var to map[string]string
	if file := c.String("spec"); file != "" {
		s, err := readSpec(file, inventoryAllow(c))
		if err != nil {
			return err
		}
		if len(hosts) == 0 {
			hosts = s.Hosts
		}
		q, to = rollout.QueryFor(s), s.Targets
	} else {
		var err error
		if q, err = adHocQuery(c); err != nil {
			return err
		}
	}
	if len(hosts) == 0 {
		return withHint(errors.New("facts needs a HOST or --spec"), "relayctl facts relay-ash-1")
	}
	for _, h := range hosts {
		if err := plans.ValidHost(h); err != nil {
			return fmt.Errorf("host: %w", err)
		}
	}
	d, err := sshHosts(c, to)
	if err != nil {
		return err
	}
	all, errs := rollout.ObserveAll(c.Context, d, hosts, q, c.Int("parallel"))
	facts, down := splitObserved(e, all, errs)
	if c.Bool("json") {
		// No content that may be secret leaves the host in a facts file:
		// the relay config is masked, and a plan made from it hashes it
		// masked (plans.MaskConfig).
		for _, f := range facts {
			if f.Config.Exists && !f.Config.Masked {
				f.Config.Content, f.Config.Masked = plans.MaskConfig(f.Config.Content), true
			}
		}
		ff := plans.FactsFile{FormatVersion: plans.FactsFormatVersion, Hosts: facts}
		for _, h := range hosts {
			if why, ok := down[h]; ok {
				ff.Unreachable = append(ff.Unreachable, plans.UnreachableFact{Host: h, Error: why})
			}
		}
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(ff); err != nil {
			return err
		}
	} else {
		for _, f := range facts {
			printFacts(e.stdout, f)
		}
	}
	if len(down) > 0 {
		return &exitCode{code: exitCouldNotLook, err: withHint(fmt.Errorf("%d of %d host(s) could not be read; the facts of the others are printed", len(down), len(hosts)),
			"relayctl facts again when they are back; plan --facts plans them as unreachable")}
	}
	return nil
}

func adHocQuery(c *cli.Context) (rollout.Query, error) {
	q := rollout.Query{Port: c.Int("port"), Paths: plans.PlanPaths(plans.DefaultPaths)}
	if q.Port < 1 || q.Port > 65535 {
		return q, fmt.Errorf("--port %d: want 1 to 65535", q.Port)
	}
	keys := append([]string{}, plans.ObservedKeys...)
	for _, k := range c.StringSlice("key") {
		if err := tune.ValidKey(k); err != nil {
			return q, fmt.Errorf("--key: %w", err)
		}
		keys = append(keys, k)
	}
	sort.Strings(keys)
	q.Keys = keys
	switch {
	case c.String("pid-file") != "" && c.String("systemd-unit") != "":
		return q, errors.New("give --pid-file or --systemd-unit, not both")
	case c.String("pid-file") != "":
		if err := plans.ValidHostPath(c.String("pid-file")); err != nil {
			return q, fmt.Errorf("--pid-file: %w", err)
		}
		q.Service = plans.PlanService{Manager: "command", PIDFile: c.String("pid-file")}
	case c.String("systemd-unit") != "":
		if err := plans.ValidUnit(c.String("systemd-unit")); err != nil {
			return q, fmt.Errorf("--systemd-unit: %w", err)
		}
		q.Service = plans.PlanService{Manager: "systemd", Name: c.String("systemd-unit")}
	default:
		q.Service = plans.PlanService{Manager: "none"}
	}
	return q, q.Validate()
}

func printFacts(w io.Writer, f *plans.Facts) {
	fmt.Fprintf(w, "%s (%s as %s): %s, kernel %s", plans.Visible(f.Host), plans.Visible(f.Address), plans.Visible(f.User), plans.Visible(f.Hostname), plans.Visible(f.Kernel))
	if !f.InitialNetns {
		fmt.Fprint(w, ", SSH session in a child network namespace")
	}
	fmt.Fprintln(w)
	keys := make([]string, 0, len(f.Sysctls))
	for k := range f.Sysctls {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		s := f.Sysctls[k]
		switch {
		case !s.Exists:
			fmt.Fprintf(w, "  sysctl %s: absent\n", k)
		case s.Writable:
			fmt.Fprintf(w, "  sysctl %s = %s\n", k, tune.Normalize(s.Value))
		default:
			fmt.Fprintf(w, "  sysctl %s = %s (read-only here)\n", k, tune.Normalize(s.Value))
		}
	}
	var files []string
	for _, cf := range f.SysctlFiles {
		files = append(files, cf.Path)
	}
	fmt.Fprintf(w, "  sysctl files: %s\n", plans.Visible(strings.Join(files, " ")))
	cur := f.Release.Current
	if cur == "" {
		cur = "(none)"
	}
	fmt.Fprintf(w, "  release: current %s (link %s); installed %s\n", plans.Visible(cur), plans.Visible(f.Release.CurrentRaw), plans.Visible(strings.Join(f.Release.Installed, " ")))
	switch {
	case f.Service.Running && f.Service.FoundBy != "":
		fmt.Fprintf(w, "  relay: running, pid %d, %s (found by %s; --pid-file or --systemd-unit names it)\n", f.Service.PID, plans.Visible(f.Release.RunningExe), plans.Visible(f.Service.FoundBy))
	case f.Service.Running:
		fmt.Fprintf(w, "  relay: running, pid %d, %s\n", f.Service.PID, plans.Visible(f.Release.RunningExe))
	case strings.HasPrefix(f.Service.Detail, "cannot tell"):
		fmt.Fprintf(w, "  relay: %s\n", plans.Visible(f.Service.Detail))
	default:
		fmt.Fprintf(w, "  relay: not running: %s\n", plans.Visible(f.Service.Detail))
	}
	if f.Socket.Found {
		ns := ""
		if f.Socket.OwnNetns {
			ns = " (in the relay's own network namespace)"
		}
		fmt.Fprintf(w, "  socket udp/%d%s: rb %d, drops %d; /proc/net/udp drops %d; RcvbufErrors %d\n",
			f.Socket.Port, ns, f.Socket.Rcvbuf, f.Socket.Drops, f.Socket.ProcUDPDrops, f.Socket.RcvbufErrors)
	} else if !f.Service.Running && strings.HasPrefix(f.Service.Detail, "cannot tell") {
		fmt.Fprintf(w, "  socket udp/%d: not found where the SSH session runs; the relay's own network namespace is read once its process is known\n", f.Socket.Port)
	} else {
		fmt.Fprintf(w, "  socket udp/%d: not found\n", f.Socket.Port)
	}
}
