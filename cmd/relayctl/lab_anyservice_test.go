package main

// Bringing your own service, on real lab hosts: a tarball
// release and a release of kind none through plan, stage, apply, verify and
// rollback; old releases pruned as configured and never the rollback
// target. The packaged servers from Debian (unbound, memcached) are in
// lab_packaged_test.go.

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/relayctl/relayctl/internal/lab"
)

// writeTarball packs a release: the program at its top (relay-service runs
// /opt/relay/current/relayd) and a file beside it.
func writeTarball(t *testing.T, path, program string) {
	t.Helper()
	bin, err := os.ReadFile(program)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	z := gzip.NewWriter(&buf)
	w := tar.NewWriter(z)
	w.WriteHeader(&tar.Header{Name: "share/", Mode: 0o755, Typeflag: tar.TypeDir})
	w.WriteHeader(&tar.Header{Name: "share/NOTICE", Mode: 0o644, Size: 6, Typeflag: tar.TypeReg})
	w.Write([]byte("relay\n"))
	w.WriteHeader(&tar.Header{Name: "relayd", Mode: 0o755, Size: int64(len(bin)), Typeflag: tar.TypeReg})
	w.Write(bin)
	w.Close()
	z.Close()
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestLabTarballReleaseAndPrune(t *testing.T) {
	var tarball string
	e := startLab(t, []lab.HostOptions{{}}, func(s string) string {
		tarball = filepath.Join(t.TempDir(), "relay-1.8.0.tar.gz")
		writeTarball(t, tarball, lab.BuildRelayd(t, "1.8.0"))
		s = strings.Replace(s, "    version: 1.8.0\n    artifact: "+lab.BuildRelayd(t, "1.8.0")+"\n",
			"    kind: tarball\n    version: 1.8.0\n    artifact: "+tarball+"\n    program: relayd\n    keep: 2\n", 1)
		return s
	})
	h := e.lab.Hosts[0]
	ctx := context.Background()
	// Two old releases, root's, that keep: 2 leaves out once 1.8.0 is in.
	if out, err := h.Exec(ctx, "sh", "-c", "for v in 1.5.0 1.6.0; do mkdir -p /opt/relay/releases/$v && cp /opt/relay/releases/1.7.0/relayd /opt/relay/releases/$v/; done"); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	if code, out, errs := e.relayctl("plan", e.spec, "--out", e.plan, "--detailed-exitcode"); code != 2 {
		t.Fatalf("plan: exit %d\n%s\n%s", code, out, errs)
	}
	md, _ := os.ReadFile(e.plan + ".md")
	for _, want := range []string{"a tarball from `" + tarball + "` unpacked into its folder, program `relayd`", "checked on the host after unpacking",
		"After a window that succeeds, removes: `/opt/relay/releases/1.5.0`, `/opt/relay/releases/1.6.0`"} {
		if !bytes.Contains(md, []byte(want)) {
			t.Errorf("review lacks %q", want)
		}
	}
	if code, out, errs := e.relayctl("stage", e.plan); code != 0 {
		t.Fatalf("stage: exit %d\n%s\n%s", code, out, errs)
	}
	if code, out, errs := e.relayctl("apply", e.plan); code != 0 {
		t.Fatalf("apply: exit %d\n%s\n%s", code, out, errs)
	}
	if _, rb, _ := e.socket(h); rb != 8388608 {
		t.Errorf("rb %d after apply, want 8388608", rb)
	}
	if b, err := h.Exec(ctx, "cat", "/opt/relay/releases/1.8.0/share/NOTICE"); err != nil || string(b) != "relay\n" {
		t.Errorf("the tarball's other file: %q %v", b, err)
	}
	if b, _ := h.Exec(ctx, "ls", "-1", "/opt/relay/releases"); string(b) != "1.7.0\n1.8.0\n" {
		t.Errorf("releases after apply with keep 2: %q, want 1.7.0 (the rollback target) and 1.8.0", b)
	}
	if code, out, errs := e.relayctl("verify", e.plan); code != 0 {
		t.Errorf("verify: exit %d\n%s\n%s", code, out, errs)
	}
	if code, out, _ := e.relayctl("plan", e.spec, "--out", e.plan, "--detailed-exitcode"); code != 0 {
		t.Errorf("plan again: exit %d, want 0 (nothing to change)\n%s", code, out)
	}

	// A file changed in the release after it was unpacked: the next plan of
	// it (already installed) checks the tree and refuses.
	if out, err := h.Exec(ctx, "sh", "-c", "echo tampered > /opt/relay/releases/1.8.0/share/NOTICE && rm -f /opt/relay/current && ln -s /opt/relay/releases/1.7.0 /opt/relay/current && /opt/relay/bin/relay-service stop && /opt/relay/bin/relay-service start"); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	e.relayctl("plan", e.spec, "--out", e.plan, "--detailed-exitcode")
	code, out, errs := e.relayctl("apply", e.plan)
	if code != 1 || !strings.Contains(out, "not the release reviewed") {
		t.Errorf("a tampered release: exit %d, want refused by its tree hash\n%s\n%s", code, out, errs)
	}

	// A tarball whose relayd fails to start is rolled back, and a failed
	// window removes nothing.
	broken := filepath.Join(t.TempDir(), "relay-1.9.0.tar.gz")
	writeTarball(t, broken, brokenRelay(t))
	spec, _ := os.ReadFile(e.spec)
	s := strings.Replace(string(spec), "version: 1.8.0", "version: 1.9.0", 1)
	s = strings.Replace(s, tarball, broken, 1)
	os.WriteFile(e.spec, []byte(s), 0o644)
	h.Exec(ctx, "sh", "-c", "mkdir -p /opt/relay/releases/1.4.0 && cp /opt/relay/releases/1.7.0/relayd /opt/relay/releases/1.4.0/")
	if code, out, errs := e.relayctl("plan", e.spec, "--out", e.plan, "--detailed-exitcode"); code != 2 {
		t.Fatalf("plan 1.9.0: exit %d\n%s\n%s", code, out, errs)
	}
	code, out, errs = e.relayctl("apply", e.plan)
	if code != 1 || !strings.Contains(out, "rolled back") {
		t.Errorf("broken tarball: exit %d, want rolled back\n%s\n%s", code, out, errs)
	}
	if _, err := h.Exec(ctx, "test", "-d", "/opt/relay/releases/1.4.0"); err != nil {
		t.Error("a failed window removed an old release")
	}
	if _, rb, _ := e.socket(h); rb != 8388608 {
		t.Errorf("rb %d after the rollback, want the 8388608 the host had before the window", rb)
	}
}

// brokenRelay is a program that fails as a release whose config it cannot
// read would: it exits at once with an error.
func brokenRelay(t *testing.T) string {
	p := filepath.Join(t.TempDir(), "relayd")
	os.WriteFile(p, []byte("#!/bin/sh\necho 'relayd: error: this release cannot start' >&2\nexit 2\n"), 0o755)
	return p
}

// A release of kind none: relayctl ships nothing, changes the sysctl and
// the service's config, restarts the service as the host has it, and reads
// it back only if it runs the program the spec names.
func TestLabReleaseOfKindNone(t *testing.T) {
	e := startLab(t, []lab.HostOptions{{}}, func(s string) string {
		return strings.Replace(s, "    version: 1.8.0\n    artifact: "+lab.BuildRelayd(t, "1.8.0")+"\n",
			"    kind: none\n    program: /opt/relay/current/relayd\n", 1)
	})
	h := e.lab.Hosts[0]
	if code, out, errs := e.relayctl("plan", e.spec, "--out", e.plan, "--detailed-exitcode"); code != 2 {
		t.Fatalf("plan: exit %d\n%s\n%s", code, out, errs)
	}
	md, _ := os.ReadFile(e.plan + ".md")
	if !bytes.Contains(md, []byte("none: the service as each host has it (`/opt/relay/current/relayd`)")) || bytes.Contains(md, []byte("switch release")) {
		t.Errorf("review of a none release:\n%s", md)
	}
	pid, _, _ := e.socket(h)
	if code, out, errs := e.relayctl("apply", e.plan); code != 0 {
		t.Fatalf("apply: exit %d\n%s\n%s", code, out, errs)
	}
	pid2, rb, _ := e.socket(h)
	if rb != 8388608 || pid2 == pid {
		t.Errorf("after apply: pid %d → %d, rb %d; want a restart to rb 8388608", pid, pid2, rb)
	}
	if b, _ := h.Exec(context.Background(), "readlink", "/opt/relay/current"); !strings.HasSuffix(strings.TrimSpace(string(b)), "1.7.0") {
		t.Errorf("a none release moved the current link: %s", b)
	}
	if code, out, errs := e.relayctl("verify", e.plan); code != 0 {
		t.Errorf("verify: exit %d\n%s\n%s", code, out, errs)
	}
	if code, out, _ := e.relayctl("plan", e.spec, "--out", e.plan, "--detailed-exitcode"); code != 0 {
		t.Errorf("plan again: exit %d, want 0\n%s", code, out)
	}
	// A program other than the one running: not read back, and said so.
	spec, _ := os.ReadFile(e.spec)
	os.WriteFile(e.spec, []byte(strings.Replace(string(spec), "program: /opt/relay/current/relayd", "program: /usr/local/bin/relayd-elsewhere", 1)), 0o644)
	code, out, errs := e.relayctl("facts", "--spec", e.spec)
	if !strings.Contains(out+errs, "which is not the service's program") {
		t.Errorf("facts with another program: exit %d\n%s\n%s", code, out, errs)
	}
}
