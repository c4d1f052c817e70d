package lab_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/relayctl/relayctl/internal/kerneltest"
	"github.com/relayctl/relayctl/internal/lab"
	"github.com/relayctl/relayctl/relay/bench"
	"github.com/relayctl/relayctl/relay/server"
	"github.com/relayctl/relayctl/relay/sockstat"
	"github.com/relayctl/relayctl/tune"
)

// handoffSocket is where lab relays hand over: under /opt/relay, which is
// private to each lab host (/run is the machine's).
const handoffSocket = "/opt/relay/run/handoff.sock"

func handoffConfig(extra string) string {
	return lab.DefaultRelayConfig + "RELAYD_HANDOFF_SOCKET=" + handoffSocket + "\n" + extra
}

// relaySocket reads the relay's UDP socket on port with ss -e -m in the
// relay process's network namespace, as relayctl's read-back does.
func relaySocket(t *testing.T, pid, port int) sockstat.Socket {
	t.Helper()
	out, err := exec.Command("nsenter", "-t", strconv.Itoa(pid), "-n", "ss", "-H", "-e", "-O", "-u", "-l", "-n", "-m", fmt.Sprintf("sport = :%d", port)).Output()
	if err != nil {
		t.Fatalf("ss in the netns of %d: %v", pid, err)
	}
	socks, err := sockstat.ParseSS(out)
	if err != nil || len(socks) != 1 {
		t.Fatalf("ss: %v, %d sockets on port %d:\n%s", err, len(socks), port, out)
	}
	return socks[0]
}

// relayStatus reads /status on 127.0.0.1:7789 in the relay's network
// namespace, with bash's /dev/tcp (as observe does, no curl needed).
func relayStatus(t *testing.T, pid int) server.Status {
	t.Helper()
	const script = `exec 3<>/dev/tcp/127.0.0.1/7789 && printf 'GET /status HTTP/1.0\r\nHost: 127.0.0.1:7789\r\n\r\n' >&3 && cat <&3`
	out, err := exec.Command("nsenter", "-t", strconv.Itoa(pid), "-n", "bash", "-c", script).Output()
	if err != nil {
		t.Fatalf("GET /status in the netns of %d: %v", pid, err)
	}
	_, body, ok := bytes.Cut(out, []byte("\r\n\r\n"))
	var st server.Status
	if !ok || json.Unmarshal(body, &st) != nil {
		t.Fatalf("GET /status: %q", out)
	}
	return st
}

func relayLog(t *testing.T, h *lab.Host) string {
	t.Helper()
	p, err := h.Path(lab.RelayLog)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestServiceHandoff is the incident's fix shipped without a restart: the
// running relayd asked for 4 MiB under rmem_max 212992 and got 425984;
// rmem_max is raised and relay-service handoff starts the new release, which
// sets SO_RCVBUF again on the inherited socket: ss shows the same inode with
// rb 8388608, and /status agrees.
func TestServiceHandoff(t *testing.T) {
	lab.Require(t)
	kerneltest.Lock(t)
	kerneltest.Set(t, "net.core.rmem_max", "212992")
	conf := handoffConfig("RELAYD_SO_RCVBUF=4194304\n")
	l := lab.StartT(t, lab.Options{Hosts: []lab.HostOptions{{Relay: &lab.RelayInstall{
		Binary: lab.BuildRelayd(t, "1.9.0"), Version: "1.9.0", Config: conf, Start: true}}}})
	h := l.Hosts[0]
	old, err := h.RelayPID(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	before := relaySocket(t, old, 7788)
	if before.Rcvbuf != 425984 || before.Inode == 0 {
		t.Fatalf("before: rb %d ino %d, want 425984 and an inode", before.Rcvbuf, before.Inode)
	}
	if st := relayStatus(t, old); st.Handoff != "unix/1" || st.SocketInode != before.Inode || st.HandoffSocket != handoffSocket {
		t.Fatalf("before: /status handoff %q inode %d socket %q", st.Handoff, st.SocketInode, st.HandoffSocket)
	}

	kerneltest.Set(t, "net.core.rmem_max", "8388608")
	if err := h.InstallRelay(t.Context(), lab.RelayInstall{Binary: lab.BuildRelayd(t, "1.9.1"), Version: "1.9.1", Config: conf}); err != nil {
		t.Fatal(err)
	}
	out := sshOK(t, l, h.Name, lab.ServiceScript+" handoff")
	nw, err := h.RelayPID(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("relayd handed over (pid %d -> %d, listening on udp port 7788)", old, nw); !strings.Contains(out, want) {
		t.Errorf("handoff printed %q, want %q", out, want)
	}
	if nw == old || running(old) {
		t.Errorf("after handoff: pid %d (was %d, still running: %v)", nw, old, running(old))
	}
	after := relaySocket(t, nw, 7788)
	want := tune.ExpectRcvbuf(4194304, false, 8388608, 0).Effective
	if after.Inode != before.Inode || after.Rcvbuf != uint64(want) {
		t.Errorf("after: ino %d rb %d; want the same inode %d with rb %d", after.Inode, after.Rcvbuf, before.Inode, want)
	}
	st := relayStatus(t, nw)
	if st.Version != "1.9.1" || st.SocketInode != before.Inode || st.SORcvbufEffective != want ||
		st.RmemMaxAtStart != 8388608 || st.HandoffFromPID != old || st.Handoff != "unix/1" {
		t.Errorf("after: /status version %s inode %d rb %d rmem_max %d from %d handoff %q", st.Version, st.SocketInode,
			st.SORcvbufEffective, st.RmemMaxAtStart, st.HandoffFromPID, st.Handoff)
	}
	log := relayLog(t, h)
	for _, want := range []string{fmt.Sprintf(`msg="handed over" to_pid=%d`, nw), fmt.Sprintf("handoff_from_pid=%d handoff_from_version=1.9.0", old)} {
		if !strings.Contains(log, want) {
			t.Errorf("relay log lacks %q:\n%s", want, log)
		}
	}
}

// TestServiceHandoffFails: a new release that cannot take over is stopped,
// the running relayd keeps serving, the pid file keeps naming it, and
// relay-service says so with the new release's log.
func TestServiceHandoffFails(t *testing.T) {
	t.Parallel()
	l := lab.StartT(t, lab.Options{Hosts: []lab.HostOptions{{Relay: &lab.RelayInstall{
		Binary: lab.BuildRelayd(t, "1.9.0"), Version: "1.9.0", Config: handoffConfig(""), Start: true}}}})
	h := l.Hosts[0]
	svc := lab.ServiceScript
	old, err := h.RelayPID(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	ino := relaySocket(t, old, 7788).Inode
	stillServing := func(t *testing.T) {
		t.Helper()
		if pid, err := h.RelayPID(t.Context()); err != nil || pid != old {
			t.Errorf("relay-service pid: %d, %v; want the old relayd %d", pid, err, old)
		}
		if st := relayStatus(t, old); st.PID != old || st.SocketInode != ino || st.Handoff != "unix/1" {
			t.Errorf("old relayd: pid %d inode %d handoff %q", st.PID, st.SocketInode, st.Handoff)
		}
	}
	install := func(t *testing.T, version, bin, conf string) {
		t.Helper()
		if err := h.InstallRelay(t.Context(), lab.RelayInstall{Binary: bin, Version: version, Config: conf}); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("config differs from the socket", func(t *testing.T) {
		// It gets the socket, finds it bound to another port than its
		// config says, and gives it back.
		conf := strings.Replace(handoffConfig(""), "RELAYD_LISTEN=0.0.0.0:7788", "RELAYD_LISTEN=0.0.0.0:7799", 1)
		install(t, "1.9.1", lab.BuildRelayd(t, "1.9.1"), conf)
		_, errs, code := sshRun(t, l, h.Name, svc+" handoff", "")
		for _, want := range []string{"the new relayd exited (status 1) before it took over", "does not match RELAYD_LISTEN",
			"which keeps serving", fmt.Sprintf("the old relayd (pid %d) still serves", old)} {
			if !strings.Contains(errs, want) {
				t.Errorf("stderr lacks %q:\n%s", want, errs)
			}
		}
		if code != 1 {
			t.Errorf("exit %d, want 1", code)
		}
		stillServing(t)
	})
	t.Run("no handoff socket in the config", func(t *testing.T) {
		install(t, "1.9.1", lab.BuildRelayd(t, "1.9.1"), lab.DefaultRelayConfig)
		_, errs, code := sshRun(t, l, h.Name, svc+" handoff", "")
		if code != 1 || !strings.Contains(errs, "RELAYD_HANDOFF_SOCKET is not set in /etc/relay/relayd.env") {
			t.Errorf("exit %d, stderr %q; want 1 and the missing key", code, errs)
		}
		stillServing(t)
	})
	t.Run("new release hangs", func(t *testing.T) {
		bin := filepath.Join(t.TempDir(), "relayd")
		if err := os.WriteFile(bin, []byte("#!/bin/sh\necho 'relayd: stuck'\nwhile :; do sleep 1; done\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		install(t, "1.9.2-stuck", bin, handoffConfig(""))
		p, err := h.Path(lab.ServiceEnv)
		if err != nil {
			t.Fatal(err)
		}
		f, err := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintln(f, "RELAY_WAIT=1")
		f.Close()
		_, errs, code := sshRun(t, l, h.Name, svc+" handoff", "")
		if code != 1 || !strings.Contains(errs, fmt.Sprintf("relayd (pid %d) has not handed over", old)) ||
			!strings.Contains(errs, "after 1s, stopping the new one") || !strings.Contains(errs, "relayd: stuck") {
			t.Errorf("exit %d, stderr %q", code, errs)
		}
		stillServing(t)
	})
	t.Run("not running", func(t *testing.T) {
		install(t, "1.9.1", lab.BuildRelayd(t, "1.9.1"), handoffConfig(""))
		sshOK(t, l, h.Name, svc+" stop")
		out := sshOK(t, l, h.Name, svc+" handoff")
		if !strings.Contains(out, "relayd not running: starting it instead of a handoff") || !strings.Contains(out, "relayd started") {
			t.Errorf("handoff when stopped printed %q", out)
		}
	})
}

// TestServiceHandoffUnderLoad runs the bench through a lab host's relayd
// and, in the middle of a step, hands it over with relay-service: first to
// a release that cannot hold the lobbies (lobby size 4 for lobbies of 8),
// which gets the state after the old relayd stopped reading and gives it
// back; then to one that takes over. By the bench's own count of every
// datagram, neither loses one or delivers one twice, and no lobby is cut.
func TestServiceHandoffUnderLoad(t *testing.T) {
	t.Parallel()
	port := lab.FreePort(t)
	conf := func(extra string) string {
		return fmt.Sprintf("RELAYD_LISTEN=0.0.0.0:%d\nRELAYD_CONTROL=127.0.0.1:%d\nRELAYD_SO_RCVBUF=1048576\nRELAYD_HANDOFF_SOCKET=%s\n%s%s",
			port, port, handoffSocket, lab.BenchExempt, extra)
	}
	l := lab.StartT(t, lab.Options{Hosts: []lab.HostOptions{{NoRelayNetns: true, Relay: &lab.RelayInstall{
		Binary: lab.BuildRelayd(t, "1.9.0"), Version: "1.9.0", Config: conf(""), Start: true}}}})
	h := l.Hosts[0]

	var lobbyBase uint32
	step := func(t *testing.T, switchRelay func() error) (bench.Step, error) {
		t.Helper()
		return loadStep(t, port, 16, &lobbyBase, switchRelay)
	}
	handoff := func() error {
		_, err := h.Exec(t.Context(), lab.ServiceScript, "handoff")
		return err
	}
	noLoss := checkNoLoss

	t.Run("new release gives the socket back", func(t *testing.T) {
		old, err := h.RelayPID(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if err := h.InstallRelay(t.Context(), lab.RelayInstall{Binary: lab.BuildRelayd(t, "1.9.1"), Version: "1.9.1", Config: conf("RELAYD_LOBBY_SIZE=4\n")}); err != nil {
			t.Fatal(err)
		}
		s, err := step(t, handoff)
		if err == nil || !strings.Contains(err.Error(), "more than this relay's lobby size 4") || !strings.Contains(err.Error(), "still serves") {
			t.Errorf("relay-service handoff: got %v, want it to fail with the lobby that does not fit, the old relayd still serving", err)
		}
		noLoss(t, s)
		if len(s.Restarts) != 0 {
			t.Errorf("got restarts %+v, want the old relayd serving throughout", s.Restarts)
		}
		if pid, err := h.RelayPID(t.Context()); err != nil || pid != old {
			t.Errorf("relay pid %d, %v; want the old relayd %d", pid, err, old)
		}
		if log := relayLog(t, h); !strings.Contains(log, "handoff: stopped reading") || !strings.Contains(log, "handoff: reading again") {
			t.Errorf("the old relayd's log lacks stopping and reading again:\n%s", log)
		}
	})
	t.Run("new release takes over", func(t *testing.T) {
		if err := h.InstallRelay(t.Context(), lab.RelayInstall{Binary: lab.BuildRelayd(t, "1.9.1"), Version: "1.9.1", Config: conf("")}); err != nil {
			t.Fatal(err)
		}
		s, err := step(t, handoff)
		if err != nil {
			t.Fatalf("relay-service handoff: %v", err)
		}
		noLoss(t, s)
		if len(s.Restarts) != 1 || !s.Restarts[0].Handoff || s.Restarts[0].LobbiesCut != 0 || s.Restarts[0].PlayersCut != 0 {
			t.Errorf("restarts: got %+v, want one handoff cutting nothing", s.Restarts)
		}
	})
}
