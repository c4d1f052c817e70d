// Command relayd is the reference UDP relay that relayctl rolls out and
// benches. See docs/relayd.md.
//
// Output: the version (with --version) on stdout; logs, usage and errors on
// stderr. Exit 0 after SIGTERM or SIGINT, 1 on a runtime error, 2 on bad
// flags or configuration.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"

	"github.com/relayctl/relayctl/relay/capability"
	"github.com/relayctl/relayctl/relay/config"
	"github.com/relayctl/relayctl/relay/fdstore"
	"github.com/relayctl/relayctl/relay/sdnotify"
	"github.com/relayctl/relayctl/relay/server"
)

// Version is the release, stamped at build time with
// go build -ldflags "-X main.Version=1.8.0". A release build (make build,
// lab.BuildFlags: capability.VersionFlags) stamps versionMarker too,
// "relayd-version:1.8.0", which relayctl validate and plan read from the
// binary's bytes, without running it, to check the spec's version; a build
// without it is checked by the -ldflags its Go build information records,
// which -trimpath leaves out (capability.BuildVersion).
var (
	Version       = "devel"
	versionMarker = ""
)

// checkStamps refuses a build whose two stamps name different versions:
// the planner would check one and the relay report the other.
func checkStamps() error {
	if versionMarker == "" {
		return nil // an unmarked build: the planner finds no version to check
	}
	v, ok := strings.CutPrefix(versionMarker, capability.VersionPrefix)
	if !ok || v != Version {
		return fmt.Errorf("stamped main.Version=%s but main.versionMarker=%s: stamp both with one version (capability.VersionFlags does)", Version, versionMarker)
	}
	return nil
}

func main() {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	os.Exit(run(os.Args, os.Environ(), os.Stdout, os.Stderr, sig))
}

// flagKeys maps each flag that sets a config key to its key.
var flagKeys = []struct{ flag, key, usage string }{
	{"listen", "RELAYD_LISTEN", "UDP `address` to relay on, IPv4 only"},
	{"control", "RELAYD_CONTROL", "loopback TCP `address` of /status and /metrics"},
	{"so-rcvbuf", "RELAYD_SO_RCVBUF", "`bytes` to ask with setsockopt(SO_RCVBUF); 0 keeps the kernel default"},
	{"lobby-size", "RELAYD_LOBBY_SIZE", "`players` per lobby"},
	{"max-lobbies", "RELAYD_MAX_LOBBIES", "lobby ids are 0 to this `count` minus 1"},
	{"idle-timeout", "RELAYD_IDLE_TIMEOUT", "remove a player silent this long (Go `duration`)"},
	{"batch", "RELAYD_BATCH", "`datagrams` per recvmmsg/sendmmsg; 1 turns batching off"},
	{"handoff-socket", "RELAYD_HANDOFF_SOCKET", "Unix socket `path` where a running relayd hands over to a new one; empty: no handoff"},
	{"max-players-per-addr", "RELAYD_MAX_PLAYERS_PER_ADDR", "`players` one IPv4 address may hold across all lobbies"},
	{"max-players-per-net", "RELAYD_MAX_PLAYERS_PER_NET", "`players` one /24 may hold across all lobbies"},
	{"exempt-sources", "RELAYD_EXEMPT_SOURCES", "IPv4 `prefixes` held to no limit on players across lobbies (never to all seats of one), comma separated; default none"},
}

func run(args, environ []string, stdout, stderr io.Writer, sig <-chan os.Signal) int {
	fs := flag.NewFlagSet("relayd", flag.ContinueOnError)
	fs.SetOutput(stderr)
	configPath := fs.String("config", config.DefaultPath, "environment `file` of RELAYD_* keys (a missing default file is fine)")
	showVersion := fs.Bool("version", false, "print the version and exit")
	readyFD := fs.Int("ready-fd", 0, "write a line READY to this open `fd` once the socket is bound and its SO_RCVBUF read back, then close it (for a service manager without sd_notify; 0: none)")
	showCaps := fs.Bool("capabilities", false, "print the capability marker (handoff, drain) that planners read from the binary, and exit")
	var fromFlags []setting
	for _, f := range flagKeys {
		fs.Func(f.flag, f.usage+" (default "+config.Default().Get(f.key)+", env "+f.key+")", func(v string) error {
			fromFlags = append(fromFlags, setting{f.key, v})
			return nil
		})
	}
	fs.BoolFunc("so-rcvbuf-force", "use SO_RCVBUFFORCE (needs CAP_NET_ADMIN), which ignores net.core.rmem_max (env RELAYD_SO_RCVBUF_FORCE)", func(v string) error {
		fromFlags = append(fromFlags, setting{"RELAYD_SO_RCVBUF_FORCE", v})
		return nil
	})
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: relayd [flags]\n\nRelays UDP between the players of each lobby. Precedence: flag > environment > config file > default.\nThe configuration is read at start; SIGHUP reads it again and sets a new RELAYD_SO_RCVBUF (and _FORCE) on the live socket, without closing it; any other change needs a restart.\n\nFlags:\n")
		fs.PrintDefaults()
		fmt.Fprintf(stderr, "\nExamples:\n  relayd --listen 0.0.0.0:7788 --so-rcvbuf 4194304\n  RELAYD_BATCH=1 relayd --config ./relayd.env\n  curl -s 127.0.0.1:7789/status\n  curl -s -X POST 127.0.0.1:7789/drain   # no new lobbies\n  relayd --handoff-socket /run/relayd/handoff.sock   # a second one started the same way takes over\n")
	}
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "relayd: error: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if *readyFD == 1 || *readyFD == 2 || *readyFD < 0 {
		fmt.Fprintf(stderr, "relayd: error: --ready-fd %d: want an open descriptor from 3 up (0: none)\n", *readyFD)
		return 2
	}
	if err := checkStamps(); err != nil {
		fmt.Fprintf(stderr, "relayd: error: %v\n", err)
		return 2
	}
	if *showVersion {
		fmt.Fprintln(stdout, version())
		return 0
	}
	if *showCaps {
		// Printing the marker whole is also what keeps it in the binary.
		fmt.Fprint(stdout, capability.Marker)
		return 0
	}

	explicit := false
	fs.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "config" })
	cfg, err := config.Load(*configPath, explicit)
	if err == nil {
		cfg, err = config.FromEnv(cfg, environ)
	}
	for _, s := range fromFlags {
		if err != nil {
			break
		}
		if err = cfg.Set(s.key, s.value); err != nil {
			err = fmt.Errorf("flag: %w", err)
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "relayd: error: %v\n", err)
		return 2
	}

	log := slog.New(slog.NewTextHandler(stderr, nil))
	// What systemd kept for this unit (its fd store), looked up by name; a
	// malformed LISTEN_* is logged and nothing it names is used.
	files, err := fdstore.Inherited(environ, os.Getpid())
	if err != nil {
		log.Warn("ignoring the descriptors systemd passed", "err", err)
	}
	store, why := fdstore.FromEnviron(environ)
	srv, err := server.New(cfg, version(), log, server.WithSystemd(files, store, why))
	if err != nil {
		fmt.Fprintf(stderr, "relayd: error: %v\n", err)
		return 1
	}
	// New has bound the socket and read its SO_RCVBUF back, and the control
	// port accepts: under systemd (Type=notify), systemctl start and restart
	// return only now.
	st := srv.Status()
	notify(environ, log, fmt.Sprintf("%s\nSTATUS=relaying on %s, SO_RCVBUF read back %d, socket %s",
		sdnotify.Ready, srv.ListenAddr(), st.SORcvbufEffective, socketWords(st)))
	if *readyFD > 0 {
		// The service manager waits on this descriptor (a FIFO): a line
		// when ready, end of file when relayd exits first.
		f := os.NewFile(uintptr(*readyFD), "ready-fd")
		if _, err := f.WriteString("READY\n"); err != nil {
			log.Warn("cannot write READY to --ready-fd", "fd", *readyFD, "err", err)
		}
		f.Close()
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		for s := range sig {
			if s == syscall.SIGHUP {
				notify(environ, log, sdnotify.Reloading())
				reload(srv, cfg, *configPath, explicit, environ, fromFlags, log)
				notify(environ, log, sdnotify.Ready)
				continue
			}
			log.Info("stopping", "signal", s.String())
			notify(environ, log, sdnotify.Stopping)
			cancel()
			return
		}
	}()
	if err := srv.Run(ctx); err != nil {
		log.Error("relayd stopped", "err", err)
		return 1
	}
	if to := srv.HandedTo(); to > 0 {
		log.Info("relayd stopped: handed over", "to_pid", to)
		return 0
	}
	log.Info("relayd stopped")
	return 0
}

// setting is a config key as a flag set it.
type setting struct{ key, value string }

// reload is SIGHUP: the config read again as at start (file, then the
// environment and flags given at start, which still win), and a new
// receive buffer set on the socket relayd serves, which stays open: no
// datagram and no player is lost. Any other key that changed is reported
// and left as it was (it needs a restart); a config that does not load
// changes nothing.
func reload(srv *server.Server, running config.Config, path string, explicit bool, environ []string, flags []setting, log *slog.Logger) {
	cfg, err := config.Load(path, explicit)
	if err == nil {
		cfg, err = config.FromEnv(cfg, environ)
	}
	for _, s := range flags {
		if err == nil {
			err = cfg.Set(s.key, s.value)
		}
	}
	if err != nil {
		log.Error("SIGHUP: the config does not load; nothing changed", "err", err)
		return
	}
	for _, k := range config.Keys() {
		if k != "RELAYD_SO_RCVBUF" && k != "RELAYD_SO_RCVBUF_FORCE" && cfg.Get(k) != running.Get(k) {
			log.Warn("SIGHUP: "+k+" changed; relayd applies it only at a restart", "running", running.Get(k), "config", cfg.Get(k))
		}
	}
	st := srv.Status()
	if cfg.SORcvbuf == st.SORcvbufRequested && cfg.SORcvbufForce == st.SORcvbufForce {
		log.Info("SIGHUP: the receive buffer is as configured", "so_rcvbuf_requested", cfg.SORcvbuf, "so_rcvbuf_effective", st.SORcvbufEffective)
		return
	}
	if _, err := srv.SetRcvbuf(cfg.SORcvbuf, cfg.SORcvbufForce); err != nil {
		log.Error("SIGHUP: the new receive buffer was not set; the socket keeps its own", "err", err)
	}
}

// socketWords says where the socket came from, for systemctl status.
func socketWords(st server.Status) string {
	switch {
	case st.SocketFrom == server.SocketFDStore && st.HandoffFromPID != 0:
		return fmt.Sprintf("and %d lobbies kept in systemd's fd store", st.HandoffLobbies)
	case st.SocketFrom == server.SocketFDStore:
		return "kept in systemd's fd store"
	case st.SocketFrom == server.SocketHandoff:
		return fmt.Sprintf("handed over by pid %d", st.HandoffFromPID)
	case st.FDStore != "":
		return "bound, now kept in systemd's fd store"
	}
	return "bound"
}

// notify tells systemd the relay's state when it runs relayd as a
// Type=notify unit (NOTIFY_SOCKET set); a failure is logged, not fatal.
func notify(environ []string, log *slog.Logger, state string) {
	if _, err := sdnotify.Notify(environ, state); err != nil {
		log.Warn("cannot notify systemd", "err", err)
	}
}

// version is the stamped Version, or the module version when relayd was
// installed with go install and not stamped.
func version() string {
	if Version != "devel" {
		return Version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return Version
}
