package main

import (
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/relayctl/relayctl/agentbin"
	"github.com/relayctl/relayctl/plans"
	"github.com/relayctl/relayctl/rollout"
	"github.com/relayctl/relayctl/rollout/shellhost"
	"github.com/relayctl/relayctl/rollout/sshrun"
	"github.com/relayctl/relayctl/uplink"
)

// sshFlags are shared by every command that talks to hosts.
func sshFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "known-hosts", EnvVars: []string{"RELAYCTL_KNOWN_HOSTS"}, Usage: "known_hosts `FILE` to check host keys against and record accepted ones in (default ~/.ssh/known_hosts); /etc/ssh/ssh_known_hosts is read too"},
		&cli.BoolFlag{Name: "accept-new-host-keys", Usage: "trust hosts not in any known_hosts file and record their keys (a changed key, or a plain key where a @cert-authority line applies, is still refused)"},
		&cli.StringSliceFlag{Name: "identity", Aliases: []string{"i"}, Usage: "private key `FILE` (repeatable); ssh-agent is used too when SSH_AUTH_SOCK is set"},
		&cli.StringFlag{Name: "ssh-config", EnvVars: []string{"RELAYCTL_SSH_CONFIG"}, Usage: "ssh_config `FILE` for host aliases (default ~/.ssh/config)"},
		&cli.DurationFlag{Name: "connect-timeout", Value: 10 * time.Second, Usage: "give up connecting to a host after this long"},
		&cli.DurationFlag{Name: "command-timeout", Value: 60 * time.Second, Usage: "give up on one remote command after this long"},
		&cli.DurationFlag{Name: "server-alive-interval", DefaultText: "the host's ssh_config ServerAliveInterval, else 15s", Usage: "ask each host for an answer this often (keepalive@openssh.com, as ssh's ServerAliveInterval) and cut the connection to a host silent through --server-alive-count-max intervals, as a lost connection (an apply dials it again, --reconnects); 0 sends none"},
		&cli.IntFlag{Name: "server-alive-count-max", DefaultText: "the host's ssh_config ServerAliveCountMax, else 3", Usage: "how many keepalive intervals in a row a host may send nothing (no answer, no output) before its connection is cut"},
		&cli.IntFlag{Name: "parallel", Value: 10, Usage: "hosts worked on at once"},
	}
}

func sshOptions(c *cli.Context) sshrun.Options {
	return sshrun.Options{
		KnownHosts:        c.String("known-hosts"),
		AcceptNewHostKeys: c.Bool("accept-new-host-keys"),
		Identities:        c.StringSlice("identity"),
		SSHConfig:         c.String("ssh-config"),
		ConnectTimeout:    c.Duration("connect-timeout"),
		CommandTimeout:    c.Duration("command-timeout"),
		// Options' 0 means "not given": the host's ssh_config, else the
		// default. --server-alive-interval 0 means none, Options' negative.
		ServerAliveInterval: keepaliveInterval(c),
		ServerAliveCountMax: c.Int("server-alive-count-max"),
	}
}

func keepaliveInterval(c *cli.Context) time.Duration {
	if c.IsSet("server-alive-interval") && c.Duration("server-alive-interval") == 0 {
		return -1
	}
	return c.Duration("server-alive-interval")
}

// checkKeepalive refuses keepalive flags relayctl cannot honour: an
// interval under a second (ssh_config's are whole seconds; one a host's
// sshd answers a thousand times a second is no keepalive), a count below
// one.
func checkKeepalive(c *cli.Context) error {
	if !hasFlag(c, "server-alive-interval") {
		return nil
	}
	if iv := c.Duration("server-alive-interval"); iv < 0 || iv > 0 && iv < time.Second {
		return usageError(prefixed(commandName(c), fmt.Sprintf("--server-alive-interval %s: give 1s or more (0 sends no keepalives)", iv)), helpHint(c))
	}
	if n := c.Int("server-alive-count-max"); c.IsSet("server-alive-count-max") && n < 1 {
		return usageError(prefixed(commandName(c), fmt.Sprintf("--server-alive-count-max %d: give 1 or more (1 cuts a host silent through one interval)", n)), helpHint(c))
	}
	return nil
}

// hasFlag is whether c's command has the flag name.
func hasFlag(c *cli.Context, name string) bool {
	if c.Command == nil {
		return false
	}
	for _, f := range c.Command.Flags {
		if f.Names()[0] == name {
			return true
		}
	}
	return false
}

// sshHosts are the hosts a command talks to: relayctl's host agent over
// SSH. A host named in targets is dialled there ([user@]address[:port],
// an inventory's) and named by its name in everything else.
func sshHosts(c *cli.Context, targets map[string]string) (rollout.HostDialer, error) {
	if testHosts != nil {
		return testHosts, nil
	}
	agents, err := hostAgents()
	if err != nil {
		return nil, err
	}
	return shellhost.Hosts(sshrun.Dialer{Options: sshOptions(c), Targets: targets}, plans.StateDir, agents, agentCache()), nil
}

// hostAgents is the host agent relayctl ships: the one it was built with.
var hostAgents = agentbin.Embedded

// agentCache is where relayctl keeps the agents it ships, the bases of
// the patches that upgrade them (the release cache); nil when it cannot be
// used, which costs the patches, nothing else.
func agentCache() *uplink.Cache {
	dir, err := uplink.DefaultCacheDir()
	if err != nil {
		return nil
	}
	c, err := uplink.OpenCache(dir)
	if err != nil {
		return nil
	}
	return c
}

// testHosts is set by the test binary alone (main_test.go), whose CLI
// scripts drive simulated hosts (rollouttest.FileDialer): the engine and
// the CLI as they are, the host in memory.
var testHosts rollout.HostDialer

// The fleet simulator's measuring points (fleetsim_test.go), set by the
// test binary alone: each ledger save with its bytes and time, and the
// report once an apply's fleet walk has ended.
var (
	testLedgerSave func(bytes int, took time.Duration)
	testApplied    func(*rollout.Report)
)

// timedSave is save, timed for the simulator when it listens.
func timedSave(save func([]byte) error) func([]byte) error {
	return func(b []byte) error {
		if testLedgerSave == nil {
			return save(b)
		}
		t0 := time.Now()
		err := save(b)
		testLedgerSave(len(b), time.Since(t0))
		return err
	}
}

// timedPatch is patch, timed for the simulator when it listens.
func timedPatch(patch func([]byte, int64) error) func([]byte, int64) error {
	return func(b []byte, off int64) error {
		if testLedgerSave == nil {
			return patch(b, off)
		}
		t0 := time.Now()
		err := patch(b, off)
		testLedgerSave(len(b), time.Since(t0))
		return err
	}
}
