package main

// A silent network (docs/recovery.md, "A silent network: a partition"):
// one lab host's traffic dropped with iptables in the middle of its
// window, both directions, for longer than relayctl's whole budget, its
// sshd and relayctl's agent alive. relayctl notices through its
// keepalives, dials the host again within --reconnects, gives up and
// returns within the documented bound; the host, which had the window's
// whole batch, finishes it by itself (its read-back, the keep, the
// receipt) and lets its lock go while the network is still silent; one
// --resume after the heal converges.

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/relayctl/relayctl/internal/lab"
)

// On the code before, relayctl sent no keepalive: it waited for TCP (with
// nothing in flight Go's probes, 150 s; with data in flight about 15
// minutes), past this test's bound; and the host's session, which sshd
// keeps until its own ClientAlive settings or TCP notice, held the host
// lock after the window had ended, so a --resume after the heal found
// the host busy.
func TestLabPartitionInWindow(t *testing.T) {
	lab.RequireIptables(t)
	bin := buildRelayctl(t)
	e := startLab(t, []lab.HostOptions{{}}, slowStop)
	h := e.lab.Hosts[0]
	// The keepalive from ssh_config, as an operator's would be: every
	// second, the host cut once silent through 2 of them.
	cfg := filepath.Join(e.dir, "ssh_config")
	lab1, err := os.ReadFile(e.lab.SSHConfig)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfg, append(lab1, "Host *\n  ServerAliveInterval 1\n  ServerAliveCountMax 2\n"...), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, errs := e.relayctl("plan", e.spec, "--out", e.plan, "--detailed-exitcode"); code != 2 {
		t.Fatalf("plan: exit %d: %s", code, errs)
	}
	apply := exec.Command(bin, "apply", e.plan, "--verify-timeout", "4s", "--stable-for", "2s", "--reconnects", "2", "--connect-timeout", "2s",
		"--ssh-config", cfg, "--known-hosts", e.lab.KnownHosts, "--identity", e.lab.Identity)
	var out, errb lockedBuffer
	apply.Stdout, apply.Stderr = &out, &errb
	if err := apply.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- apply.Wait() }()
	t.Cleanup(func() { apply.Process.Kill() })

	waitJournal(t, h, "start window")
	heal := h.Partition(t)
	cut := time.Now()

	// relayctl's bound (docs/recovery.md): the cut, (count + 1) ×
	// interval; then each redial's wait and its --connect-timeout.
	bound := 3*time.Second + (250+500)*time.Millisecond + 2*2*time.Second
	select {
	case <-exited:
	case <-time.After(bound + 60*time.Second):
		t.Fatalf("relayctl still runs %v after the partition began, past its bound of %v; stderr so far:\n%s", time.Since(cut).Round(time.Second), bound, errb.String())
	}
	t.Logf("relayctl returned %v after the partition began (bound %v)", time.Since(cut).Round(100*time.Millisecond), bound)
	if code := apply.ProcessState.ExitCode(); code != 1 ||
		!strings.Contains(out.String(), "unknown: the connection was lost inside the window; the host ends its window by itself within") ||
		!strings.Contains(errb.String(), "the host fell silent: nothing heard through 2 keepalives 1s apart; the connection was cut") {
		t.Errorf("the partitioned apply: exit %d, want 1, the host lost in its window, cut by its keepalive\nstdout:\n%s\nstderr:\n%s", code, out.String(), errb.String())
	}

	// The host had the window's whole batch before the network fell
	// silent: it reads itself back, keeps the window, files the run and
	// lets its lock go by itself, its answers written into a connection
	// nobody reads (a silent network does not refuse them).
	waitFiled(t, h, 30*time.Second)
	t.Logf("the host filed the run %v after the partition began", time.Since(cut).Round(time.Second))
	// Its lock is free: the session let it go at the batch's unlock.
	if out, err := h.Exec(context.Background(), "flock", "-n", "/var/lib/relayctl/lock", "true"); err != nil {
		t.Errorf("the host lock is still held once the window has ended: %v %s", err, out)
	}
	if _, rb := awaitRelay(t, h, time.Second); rb != 8388608 {
		t.Errorf("rb %d, want the planned 8388608", rb)
	}

	if err := heal(); err != nil {
		t.Fatal(err)
	}
	if on, err := h.Partitioned(); err != nil || on {
		t.Fatalf("the partition's rules are still there after the heal: %v %v", on, err)
	}
	// The host is as planned, by the run it filed itself: nothing is left
	// for --resume to change there.
	code, stdout, errs := e.relayctl("apply", e.plan, "--resume")
	if code != 0 || !strings.Contains(stdout, "unchanged:     1  lab-1") {
		t.Errorf("apply --resume after the heal: exit %d, want 0, lab-1 unchanged\nstdout:\n%s\nstderr:\n%s", code, stdout, errs)
	}
	converged(t, h)
}

// waitFiled waits up to d for h to have filed its run: no journal open,
// and a filed journal whose window was kept.
func waitFiled(t *testing.T, h *lab.Host, d time.Duration) {
	t.Helper()
	var out []byte
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		out, _ = h.Exec(context.Background(), "sh", "-c", "test -e /var/lib/relayctl/journal && echo open; cat /var/lib/relayctl/receipts/*.journal 2>/dev/null; true")
		if !strings.HasPrefix(string(out), "open") && strings.Contains(string(out), "window kept") {
			return
		}
	}
	t.Fatalf("%s: no run filed with its window kept within %v; the journals:\n%s", h.Name, d, out)
}
