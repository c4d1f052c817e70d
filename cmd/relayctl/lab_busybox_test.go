package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/relayctl/relayctl/internal/lab"
	"github.com/relayctl/relayctl/rollout"
)

// On a host whose userland is busybox (plus ss, ip, flock and zstd from
// Debian: internal/lab's busybox host), relayctl does what it does on
// Debian, one host and one lab for the three jobs in turn: an upgrade in
// three round trips, a broken release rolled back, and a window the host
// judges alone, the relay coming up a second late, kept. The shell agent
// rolled the last one back at its first read-back: busybox's date has no
// %N, so its deadline was empty.
func TestLabBusyboxHost(t *testing.T) {
	e := startLab(t, []lab.HostOptions{{Busybox: true}}, nil)
	h := e.lab.Hosts[0]
	if h.Kind != lab.KindBusybox {
		t.Fatalf("lab host kind %q, want %q", h.Kind, lab.KindBusybox)
	}

	// The upgrade: 1.7.0 to 1.8.0 with the sysctl, in three round trips
	// outside the restart (the agent's install, on a first contact, is
	// one more).
	e.mustPlan(e.spec, e.plan)
	if code, out, errs := e.relayctl("apply", e.plan); code != 0 {
		t.Fatalf("upgrade: exit %d\n%s\n%s", code, out, errs)
	}
	if _, rb, ok := relayOn(h); !ok || rb != 8388608 {
		t.Fatalf("after the upgrade: rb %d (a relay: %v), want 8388608", rb, ok)
	}
	if r := readReceipt(t, e.plan+".receipt.json"); r.Hosts[0].Outcome != "applied" || r.Hosts[0].RoundTrips > 4 {
		t.Errorf("upgrade receipt: %s in %d round trips, want applied in at most 3 (4 with the agent's install)", r.Hosts[0].Outcome, r.Hosts[0].RoundTrips)
	}
	// The same upgrade's work again, planned anew, is nothing to do; a
	// plan's read of a kept agent costs no install.
	if code, _, errs := e.relayctl("plan", e.spec, "--out", e.plan+".again", "--detailed-exitcode"); code != 0 {
		t.Errorf("plan after the upgrade: exit %d, want 0\n%s", code, errs)
	}

	// A broken release: it cannot start, the window rolls back to 1.8.0,
	// which serves again with its rb.
	broken := filepath.Join(e.dir, "relayd-broken")
	os.WriteFile(broken, []byte("#!/bin/sh\necho 'relayd: cannot start: broken build' >&2\nexit 1\n"), 0o755)
	spec := e.busyboxSpec("broken", "1.9.0", broken, false)
	before, _, _ := relayOn(h)
	e.mustPlan(spec, e.dir+"/broken.plan")
	code, out, errs := e.relayctl("apply", e.dir+"/broken.plan")
	if code != 1 || !strings.Contains(out, "rolled back:") {
		t.Fatalf("broken release: exit %d, want 1 and rolled back\n%s\n%s", code, out, errs)
	}
	after, rb, ok := relayOn(h)
	if !ok || rb != 8388608 || after == before {
		t.Errorf("after the rollback: pid %d → %d, rb %d (a relay: %v); want 1.8.0 started again on 8388608", before, after, rb, ok)
	}
	if link, _ := h.Exec(context.Background(), "readlink", "/opt/relay/current"); !strings.HasSuffix(strings.TrimSpace(string(link)), "1.8.0") {
		t.Errorf("current after the rollback: %q, want 1.8.0", link)
	}

	// The host alone: the connection dies once the window's restart
	// began, and the relay (1.8.1) comes up a second late. The host reads
	// it back until --verify-timeout and keeps the window, as on Debian;
	// --resume files it with no restart.
	spec = e.busyboxSpec("late", "1.8.1", lab.BuildRelayd(t, "1.8.1"), true)
	e.mustPlan(spec, e.dir+"/late.plan")
	done := make(chan result, 1)
	go func() {
		c, o, er := e.relayctl("apply", e.dir+"/late.plan", "--reconnects", "0")
		done <- result{c, o, er}
	}()
	waitJournal(t, h, "start restart")
	if out, err := exec.Command("pkill", "-KILL", "-P", strconv.Itoa(h.SSHDPID)).CombinedOutput(); err != nil {
		t.Fatalf("pkill: %v %s", err, out)
	}
	if r := <-done; r.code != 1 || !strings.Contains(r.out, "the host ends its window by itself") {
		t.Errorf("the cut apply: exit %d, want 1 and the host ending its window\n%s\n%s", r.code, r.out, r.err)
	}
	if end := windowEnd(t, h, 30*time.Second); !strings.HasPrefix(end, "window kept by=host pid=") {
		t.Fatalf("the host alone: %q, want window kept by=host, naming the relay's pid", end)
	}
	pid, rb, ok := relayOn(h)
	if !ok || rb != 8388608 {
		t.Fatalf("after the host kept its window: rb %d (a relay: %v), want 8388608", rb, ok)
	}
	code, out, errs = e.relayctl("apply", e.dir+"/late.plan", "--resume")
	if code != 0 || !strings.Contains(out, rollout.RecoveryCompletedByHost) {
		t.Errorf("--resume: exit %d, want 0 and %s\n%s\n%s", code, rollout.RecoveryCompletedByHost, out, errs)
	}
	if p, _, _ := relayOn(h); p != pid {
		t.Errorf("--resume restarted the relay: pid %d → %d", pid, p)
	}
}

// busyboxSpec writes a spec NAME.yaml like the lab's, for release VERSION
// from artifact, and returns its path. late: the start command returns at
// once and the relay comes up a second later, so the window's first
// read-back finds none.
func (e *labEnv) busyboxSpec(name, version, artifact string, late bool) string {
	e.t.Helper()
	s := strings.Replace(mustRead(e.t, e.spec), "name: lab-rcvbuf", "name: "+name, 1)
	s = strings.Replace(s, "version: 1.8.0", "version: "+version, 1)
	s = strings.Replace(s, "artifact: "+lab.BuildRelayd(e.t, "1.8.0"), "artifact: "+artifact, 1)
	if late {
		s = strings.Replace(s, "start: ["+lab.ServiceScript+", start]",
			fmt.Sprintf(`start: [/bin/sh, -c, "(sleep 1; exec %s start) </dev/null >/dev/null 2>&1 &"]`, lab.ServiceScript), 1)
	}
	file := filepath.Join(e.dir, name+".yaml")
	if err := os.WriteFile(file, []byte(s), 0o644); err != nil {
		e.t.Fatal(err)
	}
	return file
}
