package main

// Lab tests of a hostile host: what another user, or the relay
// itself, can plant on a relay host must not bend what root does there.

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/relayctl/relayctl/internal/lab"
)

// Planning, verifying and reading facts run nothing the spec names: the
// service's start and stop commands run only in apply's window.
func TestLabPlanRunsNothingFromTheSpec(t *testing.T) {
	e := startLab(t, []lab.HostOptions{{}}, func(s string) string {
		s = strings.Replace(s, "start: ["+lab.ServiceScript+", start]", "start: [/usr/bin/touch, /opt/relay/pwned-start]", 1)
		return strings.Replace(s, "stop: ["+lab.ServiceScript+", stop]", "stop: [/usr/bin/touch, /opt/relay/pwned-stop]", 1)
	})
	h := e.lab.Hosts[0]
	if code, out, errs := e.relayctl("plan", e.spec, "--out", e.plan, "--detailed-exitcode"); code != 2 {
		t.Fatalf("plan: exit %d\n%s\n%s", code, out, errs)
	}
	e.relayctl("verify", e.plan)
	e.relayctl("verify", e.spec)
	e.relayctl("facts", "--spec", e.spec)
	for _, f := range []string{"/opt/relay/pwned-start", "/opt/relay/pwned-stop"} {
		if _, err := h.Exec(context.Background(), "test", "-e", f); err == nil {
			t.Errorf("%s exists: a spec command ran before apply", f)
		}
	}
	md, _ := os.ReadFile(e.plan + ".md")
	if !strings.Contains(string(md), `["/usr/bin/touch" "/opt/relay/pwned-stop"]`) {
		t.Errorf("the review does not show the stop command as a list of words:\n%s", md)
	}
}

// A symlink planted where relayctl stages or writes a file, or a folder
// others can write, refuses the host before anything is written; nothing is
// ever written through the symlink (agent_test.go shows the primitive
// itself replaces a symlink rather than follow it).
func TestLabSymlinkPlantsAndOpenFolders(t *testing.T) {
	e := startLab(t, []lab.HostOptions{{}}, nil)
	h := e.lab.Hosts[0]
	ctx := context.Background()
	sh := func(script string) {
		t.Helper()
		if out, err := h.Exec(ctx, "sh", "-c", script); err != nil {
			t.Fatalf("%s: %v %s", script, err, out)
		}
	}
	sh("echo precious > /opt/relay/victim && ln -s /opt/relay/victim /etc/relay/relayd.env.relayctl-new")
	if code, out, errs := e.relayctl("plan", e.spec, "--out", e.plan, "--detailed-exitcode"); code != 2 {
		t.Fatalf("plan: exit %d\n%s\n%s", code, out, errs)
	}
	code, out, errs := e.relayctl("apply", e.plan)
	if code != 1 || !strings.Contains(out, "refused (as it was): stage: check target folders: /etc/relay/relayd.env.relayctl-new is a symlink") {
		t.Errorf("planted symlink: exit %d, want refused naming it\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	if b, _ := h.Exec(ctx, "cat", "/opt/relay/victim"); string(b) != "precious\n" {
		t.Errorf("apply wrote through the planted symlink: the victim holds %q", b)
	}
	sh("rm /etc/relay/relayd.env.relayctl-new")
	if code, out, errs := e.relayctl("apply", e.plan); code != 0 {
		t.Fatalf("apply without the plant: exit %d\n%s\n%s", code, out, errs)
	}
	if _, rb, _ := e.socket(h); rb != 8388608 {
		t.Errorf("rb %d after apply, want 8388608", rb)
	}

	// The relay config itself a symlink: the config may hold secrets, so
	// observe does not read through it and the plan blocks the host.
	sh("cp /etc/relay/relayd.env /opt/relay/elsewhere.env && ln -sf /opt/relay/elsewhere.env /etc/relay/relayd.env")
	sh("sed -i 's/^RELAYD_SO_RCVBUF=.*/RELAYD_SO_RCVBUF=1048576/' /opt/relay/elsewhere.env")
	code, out, errs = e.relayctl("plan", e.spec, "--out", e.plan, "--detailed-exitcode")
	if code != 1 || !strings.Contains(out, "blocked: the relay config was not read: /etc/relay/relayd.env is a symlink") {
		t.Errorf("config symlink: exit %d, want the host blocked naming the symlink\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	sh("rm /etc/relay/relayd.env && cp /opt/relay/elsewhere.env /etc/relay/relayd.env")

	// The config's folder writable by others: blocked the same way.
	sh("chmod 0777 /etc/relay")
	code, out, errs = e.relayctl("plan", e.spec, "--out", e.plan, "--detailed-exitcode")
	if code != 1 || !strings.Contains(out, "/etc/relay (the folder of /etc/relay/relayd.env) is owned by uid 0 with mode 777: others can write it") {
		t.Errorf("open config folder: exit %d, want the host blocked naming the folder\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	sh("chmod 0755 /etc/relay")

	// A releases folder its group can write: refused with the reason.
	sh("chmod 0775 /opt/relay/releases")
	if code, out, errs := e.relayctl("plan", e.spec, "--out", e.plan, "--detailed-exitcode"); code != 2 {
		t.Fatalf("plan 3: exit %d\n%s\n%s", code, out, errs)
	}
	code, out, errs = e.relayctl("apply", e.plan)
	if code != 1 || !strings.Contains(out, "refused:") || !strings.Contains(out, "/opt/relay/releases is not owned by root or is writable by its group or others") {
		t.Errorf("open folder: exit %d, want refused naming the folder\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	sh("chmod 0755 /opt/relay/releases")
}

// A host whose release folder is full ends as it was, with the host's own
// words for why.
func TestLabFullDiskKeepsTheHostsError(t *testing.T) {
	e := startLab(t, []lab.HostOptions{{}}, nil)
	h := e.lab.Hosts[0]
	ctx := context.Background()
	// A 12 MiB file system for the releases: 1.7.0 fits, 1.8.0 does not.
	script := `set -e
cp -a /opt/relay/releases/1.7.0 /opt/relay/keep
mount -t tmpfs -o size=12m,mode=0755 relay-releases /opt/relay/releases
mv /opt/relay/keep /opt/relay/releases/1.7.0`
	if out, err := h.Exec(ctx, "sh", "-c", script); err != nil {
		t.Fatalf("mount: %v %s", err, out)
	}
	pid, rb, _ := e.socket(h)
	if code, out, errs := e.relayctl("plan", e.spec, "--out", e.plan, "--detailed-exitcode"); code != 2 {
		t.Fatalf("plan: exit %d\n%s\n%s", code, out, errs)
	}
	code, out, errs := e.relayctl("apply", e.plan)
	want := "failed (as it was): stage: place release: "
	if code != 1 || !strings.Contains(out, want) || !strings.Contains(out, "No space left on device") || !strings.Contains(out, "(nothing in force changed)") {
		t.Errorf("apply on a full disk: exit %d, want %q with the host's own error\nstdout:\n%s\nstderr:\n%s", code, want, out, errs)
	}
	if p2, rb2, _ := e.socket(h); p2 != pid || rb2 != rb {
		t.Errorf("the relay changed: pid %d → %d, rb %d → %d", pid, p2, rb, rb2)
	}
}

// Every program relayctl runs as root is vetted, the handoff program as
// much as start and stop: one that another user owns refuses the
// host before anything is written or run.
func TestLabHandoffProgramMustBeRootsAlone(t *testing.T) {
	const prog = "/opt/relay/bin/their-handoff"
	e := startLab(t, []lab.HostOptions{{}}, func(s string) string {
		s = strings.Replace(s, "  port: 7788\n", "  port: 7788\n  handoff_socket: /opt/relay/run/handoff.sock\n", 1)
		return strings.Replace(s, "    stop: ["+lab.ServiceScript+", stop]\n", "    stop: ["+lab.ServiceScript+", stop]\n    handoff: ["+prog+"]\n", 1)
	})
	h := e.lab.Hosts[0]
	ctx := context.Background()
	script := "printf '#!/bin/sh\\nid -u > /opt/relay/handoff-ran-as\\n' > " + prog + " && chmod 0755 " + prog + " && chown nobody " + prog
	if out, err := h.Exec(ctx, "sh", "-c", script); err != nil {
		t.Fatalf("%s: %v %s", script, err, out)
	}
	if code, out, errs := e.relayctl("plan", e.spec, "--out", e.plan, "--detailed-exitcode"); code != 2 {
		t.Fatalf("plan: exit %d\n%s\n%s", code, out, errs)
	}
	pid, rb, _ := e.socket(h)
	code, out, errs := e.relayctl("apply", e.plan)
	if code != 1 || !strings.Contains(out, "refused (as it was): stage: check target folders: "+prog+" is not owned by root") {
		t.Errorf("apply with a handoff program owned by nobody: exit %d, want refused naming it\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	if _, err := h.Exec(ctx, "test", "-e", "/opt/relay/handoff-ran-as"); err == nil {
		t.Errorf("the handoff program ran")
	}
	if p2, rb2, _ := e.socket(h); p2 != pid || rb2 != rb {
		t.Errorf("the relay changed: pid %d → %d, rb %d → %d", pid, p2, rb, rb2)
	}
}

// A release folder that is not root's alone is not trusted, even when its
// relayd has the planned sha256: whoever owns it could swap the
// binary after the check, and it would run as root. The same holds for a
// release that stage left, and for the store the releases are copied from.
func TestLabReleaseFolderMustBeRootsAlone(t *testing.T) {
	e := startLab(t, []lab.HostOptions{{}}, nil)
	h := e.lab.Hosts[0]
	ctx := context.Background()
	sh := func(script string) {
		t.Helper()
		if out, err := h.Exec(ctx, "sh", "-c", script); err != nil {
			t.Fatalf("%s: %v %s", script, err, out)
		}
	}
	if code, out, errs := e.relayctl("plan", e.spec, "--out", e.plan, "--detailed-exitcode"); code != 2 {
		t.Fatalf("plan: exit %d\n%s\n%s", code, out, errs)
	}
	if code, out, errs := e.relayctl("stage", e.plan); code != 0 {
		t.Fatalf("stage: exit %d\n%s\n%s", code, out, errs)
	}
	pid, rb, _ := e.socket(h)
	for _, c := range []struct{ name, plant, undo, want string }{
		{"release folder owned by nobody", "chown nobody /opt/relay/releases/1.8.0", "chown root /opt/relay/releases/1.8.0",
			"/opt/relay/releases/1.8.0 is not owned by root"},
		{"relayd owned by nobody", "chown nobody /opt/relay/releases/1.8.0/relayd", "chown root /opt/relay/releases/1.8.0/relayd",
			"/opt/relay/releases/1.8.0/relayd is not owned by root"},
		{"relayd writable by its group", "chmod 0775 /opt/relay/releases/1.8.0/relayd", "chmod 0755 /opt/relay/releases/1.8.0/relayd",
			"/opt/relay/releases/1.8.0/relayd is not owned by root or is writable by its group or others"},
		{"a symlink in the release", "ln -s /tmp /opt/relay/releases/1.8.0/lib", "rm /opt/relay/releases/1.8.0/lib",
			"/opt/relay/releases/1.8.0/lib is a symlink"},
	} {
		sh(c.plant)
		if code, out, errs := e.relayctl("plan", e.spec, "--out", e.plan, "--detailed-exitcode"); code != 2 {
			t.Fatalf("%s: plan: exit %d\n%s\n%s", c.name, code, out, errs)
		}
		code, out, errs := e.relayctl("apply", e.plan)
		if code != 1 || !strings.Contains(out, "refused (as it was): stage: check release: ") || !strings.Contains(out, c.want) {
			t.Errorf("%s: exit %d, want refused at check release naming %q\nstdout:\n%s\nstderr:\n%s", c.name, code, c.want, out, errs)
		}
		if p2, rb2, _ := e.socket(h); p2 != pid || rb2 != rb {
			t.Errorf("%s: the relay changed: pid %d → %d, rb %d → %d", c.name, pid, p2, rb, rb2)
		}
		sh(c.undo)
	}

	// The store a release is copied from: a folder in it owned by nobody is
	// never taken as holding the bytes (they are sent again, or the host is
	// refused), and the copy made from it is checked again.
	sh("rm -rf /opt/relay/releases/1.8.0 && chown -R nobody /opt/relay/releases/.sha256")
	if code, out, errs := e.relayctl("plan", e.spec, "--out", e.plan, "--detailed-exitcode"); code != 2 {
		t.Fatalf("store: plan: exit %d\n%s\n%s", code, out, errs)
	}
	code, out, errs := e.relayctl("apply", e.plan)
	if code != 1 || !strings.Contains(out, "refused (as it was)") || !strings.Contains(out, "check target folders: /opt/relay/releases/.sha256 is not owned by root") {
		t.Errorf("store owned by nobody: exit %d, want refused naming the store folder\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	sh("chown -R root /opt/relay/releases/.sha256")
	if code, out, errs := e.relayctl("apply", e.plan); code != 0 {
		t.Fatalf("apply with every folder root's: exit %d\n%s\n%s", code, out, errs)
	}
	if _, rb, _ := e.socket(h); rb != 8388608 {
		t.Errorf("rb %d after apply, want 8388608", rb)
	}
}
