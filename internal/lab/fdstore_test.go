package lab_test

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/relayctl/relayctl/internal/kerneltest"
	"github.com/relayctl/relayctl/internal/lab"
	"github.com/relayctl/relayctl/relay/bench"
	"github.com/relayctl/relayctl/relay/fdstore"
	"github.com/relayctl/relayctl/relay/server"
	"github.com/relayctl/relayctl/tune"
)

// storeHost is a systemd lab host whose relayd.service (relay/dist, without
// the netns drop-in) runs in the machine's network namespace on a port of
// its own, so that a bench in the test process reaches it.
type storeHost struct {
	t    *testing.T
	l    *lab.Lab
	h    *lab.Host
	port int // the control port, and the UDP port unless a test moves it
}

func (s storeHost) ssh(cmd string) string { s.t.Helper(); return sshOK(s.t, s.l, s.h.Name, cmd) }

// show reads unit properties with systemctl show.
func (s storeHost) show(props ...string) map[string]string {
	s.t.Helper()
	out := s.ssh("systemctl show relayd -p " + strings.Join(props, " -p "))
	m := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		k, v, _ := strings.Cut(line, "=")
		m[k] = v
	}
	return m
}

func (s storeHost) stored() int {
	s.t.Helper()
	n, err := strconv.Atoi(s.show("NFileDescriptorStore")["NFileDescriptorStore"])
	if err != nil {
		s.t.Fatal(err)
	}
	return n
}

// status reads relayd's /status from the test process.
func (s storeHost) status() server.Status {
	s.t.Helper()
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/status", s.port))
	if err != nil {
		s.t.Fatalf("get /status: %v", err)
	}
	defer resp.Body.Close()
	var st server.Status
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		s.t.Fatalf("decode /status: %v", err)
	}
	return st
}

// socket reads the relay's UDP socket with ss -e -m, as relayctl does.
func (s storeHost) socket(udpPort int) (int, uint64, uint64) {
	s.t.Helper()
	pid, err := s.h.RelayPID(s.t.Context())
	if err != nil {
		s.t.Fatal(err)
	}
	mp, err := s.h.MachinePID(pid)
	if err != nil {
		s.t.Fatal(err)
	}
	sock := relaySocket(s.t, mp, udpPort)
	return pid, sock.Inode, sock.Rcvbuf
}

// config writes relayd's config file, for the next start.
func (s storeHost) config(conf string) {
	s.t.Helper()
	p, err := s.h.Path(lab.RelayConfig)
	if err != nil {
		s.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(conf), 0o644); err != nil {
		s.t.Fatal(err)
	}
}

func (s storeHost) install(version, binary, conf string) {
	s.t.Helper()
	if err := s.h.InstallRelay(s.t.Context(), lab.RelayInstall{Binary: binary, Version: version, Config: conf}); err != nil {
		s.t.Fatal(err)
	}
}

// restart is `systemctl restart relayd`, as an operator types it. The
// start limit (5 starts in 10 s) counts these restarts too, and a unit that
// hits it fails and loses its store: this test restarts more often than
// that on purpose, so it resets the count first.
func (s storeHost) restart() error {
	_, err := s.h.Exec(s.t.Context(), "sh", "-c", "systemctl reset-failed relayd; systemctl restart relayd")
	return err
}

// TestSystemdFDStore runs relayd as relay/dist/relayd.service on a real
// systemd 252 and restarts it the ways an operator and systemd do, under
// load from the bench: a restart keeps the socket (same inode), applies the
// new release's SO_RCVBUF to it, keeps every lobby and player and loses no
// datagram; a crash (SIGKILL) keeps the lobbies; daemon-reload keeps the
// store; a new listen address gets a new socket and the old one is closed;
// stop then start empties the store; a release that does not know the store
// cannot bind while systemd holds the port.
func TestSystemdFDStore(t *testing.T) {
	lab.RequireSystemd(t)
	kerneltest.Lock(t)
	kerneltest.Set(t, "net.core.rmem_max", "8388608")
	port := lab.FreePort(t)
	conf := func(udpPort, rcvbuf int) string {
		return fmt.Sprintf("RELAYD_LISTEN=0.0.0.0:%d\nRELAYD_CONTROL=127.0.0.1:%d\nRELAYD_SO_RCVBUF=%d\n", udpPort, port, rcvbuf) + lab.BenchExempt
	}
	v190, v191 := lab.BuildRelayd(t, "1.9.0"), lab.BuildRelayd(t, "1.9.1")
	l := lab.StartT(t, lab.Options{Hosts: []lab.HostOptions{{Systemd: true, NoRelayNetns: true,
		Relay: &lab.RelayInstall{Binary: v190, Version: "1.9.0", Config: conf(port, 1<<20), Start: true}}}})
	s := storeHost{t: t, l: l, h: l.Hosts[0], port: port}
	var lobbyBase uint32
	rb := func(asked int) uint64 { return uint64(tune.ExpectRcvbuf(asked, false, 8388608, 0).Effective) }

	t.Run("first start stores the socket", func(t *testing.T) {
		s.t = t
		st := s.status()
		if st.FDStore != fdstore.Protocol || st.SocketFrom != server.SocketBound || st.FDStoreMax != 4 || st.FDStoreState != "" {
			t.Errorf("/status: fdstore %q socket_from %q max %d state %q; want systemd/1, bound, 4, none", st.FDStore, st.SocketFrom, st.FDStoreMax, st.FDStoreState)
		}
		// The socket at start, its first state at the saver's first tick.
		waitUntil(t, func() bool { return s.stored() == 2 })
	})

	t.Run("restart under load keeps the socket and the players", func(t *testing.T) {
		s.t = t
		_, ino, _ := s.socket(port)
		before := s.show("NRestarts")
		s.install("1.9.1", v191, conf(port, 2<<20))
		var held server.Status // the old relayd's lobbies as it was stopped
		restart := func() error {
			held = s.status()
			return s.restart()
		}
		step, err := loadStep(t, port, 16, &lobbyBase, restart)
		if err != nil {
			t.Fatalf("systemctl restart: %v", err)
		}
		checkNoLoss(t, step)
		if len(step.Restarts) != 1 || !step.Restarts[0].Handoff || step.Restarts[0].LobbiesCut != 0 || step.Restarts[0].PlayersCut != 0 {
			t.Errorf("the bench saw %+v, want one switch that kept the counters and cut nothing", step.Restarts)
		}
		_, after, gotRb := s.socket(port)
		if after != ino || gotRb != rb(2<<20) {
			t.Errorf("after the restart: inode %d rb %d; want the same inode %d with rb %d", after, gotRb, ino, rb(2<<20))
		}
		st := s.status()
		if st.Version != "1.9.1" || st.SocketFrom != server.SocketFDStore || st.FDStoreState != server.StateFinal ||
			st.HandoffPlayers != held.Players || st.HandoffLobbies != held.Lobbies || held.Players < 16 || st.SocketInode != ino || st.SORcvbufEffective != int(rb(2<<20)) {
			t.Errorf("/status after the restart: version %s socket_from %q state %q, %d lobbies and %d players restored (of %d and %d), inode %d, rb %d",
				st.Version, st.SocketFrom, st.FDStoreState, st.HandoffLobbies, st.HandoffPlayers, held.Lobbies, held.Players, st.SocketInode, st.SORcvbufEffective)
		}
		if got := s.show("NRestarts"); got["NRestarts"] != before["NRestarts"] {
			t.Errorf("NRestarts %s, was %s: systemctl restart is not an automatic restart", got["NRestarts"], before["NRestarts"])
		}
		if journal := s.ssh("journalctl -u relayd --no-pager -o cat -n 30"); !strings.Contains(journal, `msg="state kept in systemd's fd store"`) ||
			!strings.Contains(journal, fmt.Sprintf("players=%d", held.Players)) {
			t.Errorf("journal lacks the final save of 16 players:\n%s", journal)
		}
	})

	t.Run("daemon-reload keeps the store", func(t *testing.T) {
		s.t = t
		_, ino, _ := s.socket(port)
		n := s.stored()
		s.ssh("systemctl daemon-reload")
		if got := s.stored(); got != n {
			t.Errorf("NFileDescriptorStore %d after daemon-reload, was %d", got, n)
		}
		if err := s.restart(); err != nil {
			t.Fatal(err)
		}
		if _, after, _ := s.socket(port); after != ino {
			t.Errorf("inode %d after daemon-reload and restart, want %d", after, ino)
		}
	})

	t.Run("crash restart keeps the lobbies", func(t *testing.T) {
		s.t = t
		_, ino, _ := s.socket(port)
		nr := s.show("NRestarts")["NRestarts"]
		var killed int
		var held server.Status // the old relayd's lobbies as it was killed
		crash := func() error {
			pid, err := s.h.RelayPID(t.Context())
			if err != nil {
				return err
			}
			killed, held = pid, s.status()
			if _, err := s.h.Exec(t.Context(), "kill", "-KILL", strconv.Itoa(pid)); err != nil {
				return err
			}
			// Restart=on-failure starts the next one after RestartSec=1s.
			waitUntil(t, func() bool {
				p := s.show("ActiveState", "MainPID")
				return p["ActiveState"] == "active" && p["MainPID"] != "0" && p["MainPID"] != strconv.Itoa(pid)
			})
			return nil
		}
		step, err := anyStep(t, port, 16, &lobbyBase, crash)
		if err != nil {
			t.Fatal(err)
		}
		logStep(t, step)
		if !step.Valid {
			t.Logf("the step is not valid: %s", strings.Join(step.Invalid, "; "))
		}
		if step.ICMPErrors != 0 {
			t.Errorf("%d ICMP errors: the port closed while systemd held the socket", step.ICMPErrors)
		}
		if got := s.show("NRestarts")["NRestarts"]; got == nr {
			t.Errorf("NRestarts %s after SIGKILL, want one more", got)
		}
		_, after, _ := s.socket(port)
		st := s.status()
		if after != ino || st.SocketFrom != server.SocketFDStore || st.FDStoreState != server.StatePeriodic ||
			st.HandoffFromPID != killed || st.HandoffLobbies != held.Lobbies || st.HandoffPlayers != held.Players || held.Players < 16 {
			t.Errorf("after SIGKILL: inode %d (was %d), socket_from %q, state %q from pid %d with %d lobbies and %d players; want the same socket and the %d lobbies and %d players pid %d held, from its last periodic save",
				after, ino, st.SocketFrom, st.FDStoreState, st.HandoffFromPID, st.HandoffLobbies, st.HandoffPlayers, held.Lobbies, held.Players, killed)
		}
	})

	t.Run("a new listen address gets a new socket", func(t *testing.T) {
		s.t = t
		_, ino, _ := s.socket(port)
		port2 := lab.FreePort(t)
		s.config(conf(port2, 2<<20))
		if err := s.restart(); err != nil {
			t.Fatal(err)
		}
		_, after, _ := s.socket(port2)
		st := s.status()
		if after == ino || st.SocketFrom != server.SocketBound || st.Listen != fmt.Sprintf("0.0.0.0:%d", port2) || st.FDStoreState != server.StateFinal {
			t.Errorf("after the move: inode %d (was %d), /status socket_from %q listen %s state %q", after, ino, st.SocketFrom, st.Listen, st.FDStoreState)
		}
		// Nothing holds the old port: not relayd, not systemd's store.
		if c, err := net.ListenPacket("udp4", fmt.Sprintf("0.0.0.0:%d", port)); err != nil {
			t.Errorf("bind the old port %d: %v; want it free", port, err)
		} else {
			c.Close()
		}
		if n := s.stored(); n != 2 {
			t.Errorf("NFileDescriptorStore %d, want 2: the new socket and the state", n)
		}
		s.config(conf(port, 2<<20))
		if err := s.restart(); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("stop then start empties the store", func(t *testing.T) {
		s.t = t
		_, ino, _ := s.socket(port)
		s.ssh("systemctl stop relayd")
		if n := s.stored(); n != 0 {
			t.Errorf("NFileDescriptorStore %d after stop, want 0", n)
		}
		s.ssh("systemctl start relayd")
		_, after, _ := s.socket(port)
		st := s.status()
		if after == ino || st.SocketFrom != server.SocketBound || st.FDStore != fdstore.Protocol || st.FDStoreState != "" || st.HandoffFromPID != 0 {
			t.Errorf("after stop and start: inode %d (was %d), /status %+v; want a new socket, kept in the store, nothing restored", after, ino, st)
		}
	})

	t.Run("a release that does not know the store", func(t *testing.T) {
		s.t = t
		unaware := storeUnaware(t)
		s.install("1.8.9", unaware, conf(port, 2<<20))
		// It binds a socket of its own, and systemd holds the port.
		if err := s.restart(); err == nil {
			t.Fatal("systemctl restart of a release that binds while the store holds the port: succeeded")
		}
		// Restart=on-failure tries again every RestartSec=1s until the
		// start limit (5 starts in 10 s) fails the unit.
		start := time.Now()
		waitUntil(t, func() bool { return s.show("ActiveState")["ActiveState"] == "failed" })
		t.Logf("the unit failed %v after the restart, after %s automatic restarts", time.Since(start).Round(100*time.Millisecond), s.show("NRestarts")["NRestarts"])
		if journal := s.ssh("journalctl -u relayd --no-pager -o cat -n 40"); !strings.Contains(journal, "bind: address already in use") {
			t.Errorf("journal lacks the bind failure:\n%s", journal)
		}
		// The start limit fails the unit, which empties the store; then it binds.
		if n := s.stored(); n != 0 {
			t.Errorf("NFileDescriptorStore %d after the start limit, want 0", n)
		}
		s.ssh("systemctl reset-failed relayd && systemctl start relayd")
		if st := s.status(); st.SocketFrom != server.SocketBound || st.FDStore != "" {
			t.Errorf("the unaware release: socket_from %q fdstore %q", st.SocketFrom, st.FDStore)
		}
		if n := s.stored(); n != 0 {
			t.Errorf("NFileDescriptorStore %d with the unaware release, want 0", n)
		}
		// Back to a release that knows the store: its first start binds.
		s.install("1.9.2", v191, conf(port, 2<<20))
		if err := s.restart(); err != nil {
			t.Fatal(err)
		}
		if st := s.status(); st.SocketFrom != server.SocketBound || st.FDStore != fdstore.Protocol {
			t.Errorf("the first store-aware start: socket_from %q fdstore %q", st.SocketFrom, st.FDStore)
		}
	})
}

// storeUnaware is a release that neither takes nor keeps anything in the
// store, as every relayd before fdstore=systemd/1 does: relayd 1.9.1 (as
// installed) with the variables that tell it of the store removed, so it
// binds a socket of its own. exec keeps the pid, so it stays MainPID; the
// descriptors systemd passed stay open in it, unused.
func storeUnaware(t *testing.T) string {
	t.Helper()
	wrapper := filepath.Join(t.TempDir(), "relayd")
	script := "#!/bin/sh\nexec env -u LISTEN_PID -u LISTEN_FDS -u LISTEN_FDNAMES -u FDSTORE /opt/relay/releases/1.9.1/relayd \"$@\"\n"
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return wrapper
}

func logStep(t *testing.T, s bench.Step) {
	t.Helper()
	t.Logf("bench: lost %d of %d planned deliveries (in %d, out %d), %d duplicates, %d ICMP errors, restarts %+v",
		s.Loss, s.PlannedDeliveries, s.LostIn, s.LostOut, s.Duplicates, s.ICMPErrors, s.Restarts)
}
