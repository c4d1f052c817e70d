package main

// relayctl and systemd's file-descriptor store, on a lab host
// booted with a real systemd 252 running relay/dist/relayd.service, with
// players from the bench: the store-kept upgrade under load, the first
// store-aware deploy, rollbacks to a store-aware and to a store-unaware
// release, and a failing unit seen at once with its own words.

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/relayctl/relayctl/internal/lab"
	"github.com/relayctl/relayctl/relay/bench"
)

// startStorePlayersLab is a systemd lab host whose relayd (release from,
// built from this tree unless install gives another) runs in the
// machine's network namespace on a port of its own, and a spec to ship
// relayd 1.9.1 to it under systemd.
func startStorePlayersLab(t *testing.T, from string) *playersEnv {
	t.Helper()
	lab.RequireSystemd(t)
	port := lab.FreePort(t)
	conf := fmt.Sprintf("RELAYD_LISTEN=0.0.0.0:%d\nRELAYD_CONTROL=127.0.0.1:%d\nRELAYD_IDLE_TIMEOUT=1s\n", port, port) + lab.BenchExempt
	hosts := []lab.HostOptions{{Systemd: true, NoRelayNetns: true, Relay: &lab.RelayInstall{Binary: lab.BuildRelayd(t, from), Version: from, Config: conf, Start: true}}}
	e := startLab(t, hosts, func(s string) string {
		s = strings.Replace(s, "  port: 7788\n", fmt.Sprintf("  port: %d\n  control: 127.0.0.1:%d\n", port, port), 1)
		s = strings.Replace(s, "version: 1.8.0\n    artifact: "+lab.BuildRelayd(t, "1.8.0"), "version: 1.9.1\n    artifact: "+lab.BuildRelayd(t, "1.9.1"), 1)
		return strings.Replace(s, "    manager: command\n    start: ["+lab.ServiceScript+", start]\n    stop: ["+lab.ServiceScript+", stop]\n    pid_file: "+lab.RelayPIDFile+"\n",
			"    manager: systemd\n    name: relayd\n", 1)
	})
	return &playersEnv{labEnv: e, port: port}
}

func (e *playersEnv) setRelease(t *testing.T, version, artifact string) {
	t.Helper()
	spec, _ := os.ReadFile(e.spec)
	s := strings.Replace(string(spec), "version: 1.9.1\n    artifact: "+lab.BuildRelayd(t, "1.9.1"), "version: "+version+"\n    artifact: "+artifact, 1)
	if err := os.WriteFile(e.spec, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// The principal path: a new release under systemd, the socket and every
// lobby kept in the store across systemctl restart, under load.
func TestLabSystemdStoreKeptUpgradeUnderLoad(t *testing.T) {
	bin := buildRelayctl(t)
	e := startStorePlayersLab(t, "1.9.0")
	code, out, errs := e.relayctl("plan", e.spec, "--out", e.plan, "--detailed-exitcode")
	md, _ := os.ReadFile(e.plan + ".md")
	if code != 2 || !strings.Contains(string(md), "Switch: **restart, socket kept in systemd's store**") {
		t.Fatalf("plan: exit %d, want the store switch\n%s\n%s\n%s", code, out, errs, md)
	}
	inodeBefore := e.status()["socket_inode"]
	var applyCode int
	var applyOut, applyErr string
	rep := e.stepProcess(bin, 16, 4*time.Second, 1500*time.Millisecond, func() {
		applyCode, applyOut, applyErr = e.relayctl("apply", e.plan)
	})
	if applyCode != 0 {
		t.Fatalf("apply: exit %d\nstdout:\n%s\nstderr:\n%s", applyCode, applyOut, applyErr)
	}
	s := rep.Steps[0]
	logStep(t, s)
	if s.Valid && (s.Loss != 0 || s.LostIn != 0 || s.LostOut != 0 || s.ICMPErrors != 0) {
		t.Errorf("the bench counted loss %d (in %d, out %d), %d ICMP errors across the restart; want none", s.Loss, s.LostIn, s.LostOut, s.ICMPErrors)
	}
	if !s.Valid {
		t.Logf("the bench fell behind on the busy machine (%v): its loss figures prove nothing here; the socket and lobby checks below still hold", s.Invalid)
	}
	if len(s.Restarts) != 1 || s.Restarts[0].LobbiesCut != 0 || s.Restarts[0].PlayersCut != 0 {
		t.Errorf("the bench saw %+v, want one restart cutting nothing", s.Restarts)
	}
	rc := receiptOf(t, e.plan)
	if rc.Restarts != 1 || rc.PlayersCut == nil || *rc.PlayersCut != 0 || rc.RBAfter != 8388608 || rc.HandoffGapUS == nil {
		t.Errorf("receipt: %d restarts, cut %v, rb %d, gap %v; want one restart through the store, none cut, rb 8388608, its gap", rc.Restarts, rc.PlayersCut, rc.RBAfter, rc.HandoffGapUS)
	}
	st := e.status()
	if st["socket_inode"] != inodeBefore || st["socket_from"] != "fdstore" || st["version"] != "1.9.1" || st["so_rcvbuf_effective"] != float64(8388608) {
		t.Errorf("after: /status inode %v (was %v), socket_from %v, version %v, rb %v; want the same socket from the store under 1.9.1 at 8388608", st["socket_inode"], inodeBefore, st["socket_from"], st["version"], st["so_rcvbuf_effective"])
	}
	if code, out, errs := e.relayctl("verify", e.plan); code != 0 {
		t.Errorf("verify: exit %d\n%s\n%s", code, out, errs)
	}
}

// storeUnawareRelease is a tarball release 1.8.9 that neither takes nor
// keeps anything in systemd's store, as every relayd before
// fdstore=systemd/1: its program is a wrapper (its marker does not claim
// the store) that runs relayd 1.8.9, beside it in the release, with the
// variables that tell it of the store removed, so it binds a socket of its
// own.
func storeUnawareRelease(t *testing.T) string {
	t.Helper()
	bin, err := os.ReadFile(lab.BuildRelayd(t, "1.8.9"))
	if err != nil {
		t.Fatal(err)
	}
	wrapper := "#!/bin/sh\n# relayd-capabilities: drain=http/1 join=cookie/1 ready=fd/1\nexec env -u LISTEN_PID -u LISTEN_FDS -u LISTEN_FDNAMES -u FDSTORE /opt/relay/current/relayd.real \"$@\"\n"
	var buf bytes.Buffer
	w := tar.NewWriter(&buf)
	w.WriteHeader(&tar.Header{Name: "relayd", Mode: 0o755, Size: int64(len(wrapper)), Typeflag: tar.TypeReg})
	w.Write([]byte(wrapper))
	w.WriteHeader(&tar.Header{Name: "relayd.real", Mode: 0o755, Size: int64(len(bin)), Typeflag: tar.TypeReg})
	w.Write(bin)
	w.Close()
	p := filepath.Join(t.TempDir(), "relay-1.8.9.tar")
	if err := os.WriteFile(p, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// The first deploy of a store-aware release onto a store-unaware one is a
// restart and says so; if it fails, the rollback empties the store the
// new release filled (the old one could not bind beside it) and ends as it
// was; the next window keeps the socket. And a window to a store-unaware
// release empties the store first.
func TestLabSystemdStoreFirstDeployAndRollbacks(t *testing.T) {
	e := startStorePlayersLab(t, "1.8.0")
	h := e.lab.Hosts[0]
	ctx := context.Background()
	unaware := storeUnawareRelease(t)

	// Onto the store-unaware release first: the running 1.8.0 keeps its
	// socket in the store, so the window empties it before 1.8.9 binds.
	spec0, _ := os.ReadFile(e.spec)
	os.WriteFile(e.spec, []byte(strings.Replace(string(spec0), "version: 1.9.1\n    artifact: "+lab.BuildRelayd(t, "1.9.1"), "kind: tarball\n    version: 1.8.9\n    artifact: "+unaware+"\n    program: relayd", 1)), 0o644)
	if code, out, errs := e.relayctl("plan", e.spec, "--out", e.plan, "--detailed-exitcode"); code != 2 {
		t.Fatalf("plan to unaware: exit %d\n%s\n%s", code, out, errs)
	}
	md, _ := os.ReadFile(e.plan + ".md")
	if !strings.Contains(string(md), "empties the store and starts 1.8.9 on a socket of its own; every player is cut") {
		t.Errorf("review of the window to a store-unaware release:\n%s", md)
	}
	if code, out, errs := e.relayctl("apply", e.plan); code != 0 {
		t.Fatalf("apply to unaware: exit %d\n%s\n%s", code, out, errs)
	}
	if st := e.status(); st["fdstore"] != "" || st["version"] != "1.8.9" {
		t.Errorf("after the window to the unaware release: /status fdstore %v version %v", st["fdstore"], st["version"])
	}

	// The first store-aware deploy: a restart, and the review says why.
	os.WriteFile(e.spec, []byte(strings.Replace(string(spec0), "version: 1.9.1\n    artifact: "+lab.BuildRelayd(t, "1.9.1"), "version: 1.9.3\n    artifact: "+lab.BuildRelayd(t, "1.9.3"), 1)), 0o644)
	if code, out, errs := e.relayctl("plan", e.spec, "--out", e.plan, "--detailed-exitcode"); code != 2 {
		t.Fatalf("plan 1.9.3: exit %d\n%s\n%s", code, out, errs)
	}
	md, _ = os.ReadFile(e.plan + ".md")
	if !strings.Contains(string(md), "this window restarts; the next keeps the socket") {
		t.Errorf("review of the first store-aware deploy:\n%s", md)
	}
	// It fails: the new relay is killed as it comes up, twice, and systemd
	// restarts it on its own. The rollback starts the unaware release,
	// which can bind only once the store is empty.
	before := e.status()
	stop := make(chan struct{})
	go func() {
		kills := 0
		for kills < 2 {
			select {
			case <-stop:
				return
			default:
			}
			if pid, _, _ := unitState(t, h); pid != "" && pid != "0" && pid != fmt.Sprint(before["pid"]) {
				h.Exec(ctx, "kill", "-9", pid)
				kills++
				time.Sleep(300 * time.Millisecond)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	code, out, errs := e.relayctl("apply", e.plan)
	close(stop)
	if code != 1 || !strings.Contains(out, "rolled back") {
		t.Fatalf("apply of a release killed as it started: exit %d, want rolled back\n%s\n%s", code, out, errs)
	}
	if st := e.status(); st["version"] != "1.8.9" || st["fdstore"] != "" {
		t.Errorf("after the rollback: /status version %v fdstore %v; want the unaware 1.8.9 back", st["version"], st["fdstore"])
	}
	if n, _ := h.Exec(ctx, "systemctl", "show", "-p", "NFileDescriptorStore", "--value", "relayd"); strings.TrimSpace(string(n)) != "0" {
		t.Errorf("after the rollback the store holds %s fds, want 0", n)
	}

	// Applied for real, then the next window keeps the socket.
	if code, out, errs := e.relayctl("plan", e.spec, "--out", e.plan, "--detailed-exitcode"); code != 2 {
		t.Fatalf("plan 1.9.3 again: exit %d\n%s\n%s", code, out, errs)
	}
	if code, out, errs := e.relayctl("apply", e.plan); code != 0 {
		t.Fatalf("apply 1.9.3: exit %d\n%s\n%s", code, out, errs)
	}
	spec, _ := os.ReadFile(e.spec)
	os.WriteFile(e.spec, []byte(strings.Replace(string(spec), "version: 1.9.3\n    artifact: "+lab.BuildRelayd(t, "1.9.3"), "version: 1.9.4\n    artifact: "+lab.BuildRelayd(t, "1.9.4"), 1)), 0o644)
	code, out, errs = e.relayctl("plan", e.spec, "--out", e.plan, "--detailed-exitcode")
	md, _ = os.ReadFile(e.plan + ".md")
	if code != 2 || !strings.Contains(string(md), "Switch: **restart, socket kept in systemd's store**") {
		t.Errorf("the window after the first store-aware deploy: exit %d\n%s\n%s\n%s", code, out, errs, md)
	}
}

// A store-kept restart into a release that exits at once: systemd restarts
// it on its own, relayctl sees that at once (not after its read-back
// timeout), prints the release's own words, and rolls back to the old
// release, which takes the socket back from the store: the same socket.
func TestLabSystemdStoreRollbackKeepsTheSocket(t *testing.T) {
	e := startStorePlayersLab(t, "1.9.0")
	broken := filepath.Join(t.TempDir(), "relayd")
	os.WriteFile(broken, []byte("#!/bin/sh\n# relayd-capabilities: drain=http/1 fdstore=systemd/1 handoff=unix/1 ready=fd/1\necho 'relayd: error: cannot open the listen socket (broken build 3c1d)' >&2\nexit 1\n"), 0o755)
	e.setRelease(t, "1.9.1", broken)
	if code, out, errs := e.relayctl("plan", e.spec, "--out", e.plan, "--detailed-exitcode"); code != 2 {
		t.Fatalf("plan: exit %d\n%s\n%s", code, out, errs)
	}
	if md, _ := os.ReadFile(e.plan + ".md"); !strings.Contains(string(md), "Switch: **restart, socket kept in systemd's store**") {
		t.Fatalf("plan: want the store switch\n%s", md)
	}
	inodeBefore := e.status()["socket_inode"]
	start := time.Now()
	code, out, errs := e.relayctl("apply", e.plan, "--verify-timeout", "60s")
	took := time.Since(start)
	t.Logf("apply of a release that exits at once ended after %v (read-back timeout 60s)", took.Round(10*time.Millisecond))
	if code != 1 || !strings.Contains(out, "rolled back") || !strings.Contains(out+errs, "cannot open the listen socket (broken build 3c1d)") {
		t.Errorf("apply: exit %d, want rolled back with the release's own words on the terminal\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	if st := e.status(); st["socket_inode"] != inodeBefore || st["version"] != "1.9.0" || st["socket_from"] != "fdstore" {
		t.Errorf("after the rollback: /status inode %v (was %v), version %v, socket_from %v; want 1.9.0 on the same socket, from the store", st["socket_inode"], inodeBefore, st["version"], st["socket_from"])
	}
}

// A unit written as many operators write them (Type=simple,
// Restart=on-failure) whose new release exits at once: seen as failing in
// seconds, its journal's words on the terminal.
func TestLabSystemdSimpleUnitFailureIsSeenAtOnce(t *testing.T) {
	e := startSystemdLab(t, nil)
	h := e.lab.Hosts[0]
	ctx := context.Background()
	dropIn := "[Service]\nType=simple\nRestart=on-failure\nRestartSec=1\n"
	if out, err := h.Exec(ctx, "sh", "-c", "mkdir -p /etc/systemd/system/relayd.service.d && printf '"+strings.ReplaceAll(dropIn, "\n", "\\n")+"' > /etc/systemd/system/relayd.service.d/simple.conf && systemctl daemon-reload && systemctl restart relayd"); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	broken := filepath.Join(t.TempDir(), "relayd")
	os.WriteFile(broken, []byte("#!/bin/sh\necho 'relayd: error: cannot open the listen socket (broken build 9e2f)' >&2\nexit 1\n"), 0o755)
	spec, _ := os.ReadFile(e.spec)
	os.WriteFile(e.spec, []byte(strings.Replace(string(spec), "artifact: "+lab.BuildRelayd(t, "1.8.0"), "artifact: "+broken, 1)), 0o644)
	if code, out, errs := e.relayctl("plan", e.spec, "--out", e.plan, "--detailed-exitcode"); code != 2 {
		t.Fatalf("plan: exit %d\n%s\n%s", code, out, errs)
	}
	start := time.Now()
	code, out, errs := e.relayctl("apply", e.plan, "--verify-timeout", "60s")
	took := time.Since(start)
	t.Logf("a Type=simple unit's failing release: apply ended after %v (read-back timeout 60s)", took.Round(10*time.Millisecond))
	if code != 1 || !strings.Contains(out, "rolled back") || !strings.Contains(out+errs, "cannot open the listen socket (broken build 9e2f)") {
		t.Errorf("apply: exit %d, want rolled back with the release's words\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	if !strings.Contains(out+errs, "systemd") || strings.Contains(out, "relay running: got false") {
		t.Errorf("the reason should be systemd's view of the unit, not a read-back mismatch:\n%s", out)
	}
}

func logStep(t *testing.T, s bench.Step) {
	t.Helper()
	t.Logf("bench: lost %d of %d planned deliveries (in %d, out %d), %d duplicates, %d ICMP errors, restarts %+v",
		s.Loss, s.PlannedDeliveries, s.LostIn, s.LostOut, s.Duplicates, s.ICMPErrors, s.Restarts)
}
