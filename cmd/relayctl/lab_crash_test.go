package main

// A release whose relay starts, reads back as planned and dies a few
// seconds later, on lab hosts with apply's default flags: the canary's
// read-back holds it for --stable-for (10s by default), sees its relay
// die, and rolls it back; the rollout stops before the next host; the
// receipt quotes the relay's last words from its log. On the code before,
// one read-back counted (--stable-for 0 by default): the release reached
// both hosts, apply exited 0, and no receipt had a word of the relay.

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/relayctl/relayctl/internal/lab"
	"github.com/relayctl/relayctl/rollout"
)

// dyingRelay packs a release 1.9.0 whose relay dies 4 s after it starts,
// saying why in its log as a release with a fatal bug would: relayd
// itself (bin/relayd, which reads back as planned) started by a program
// that kills it 4 s later.
func dyingRelay(t *testing.T) string {
	t.Helper()
	bin, err := os.ReadFile(lab.BuildRelayd(t, "1.9.0"))
	if err != nil {
		t.Fatal(err)
	}
	start := "#!/bin/sh\n# relayd 1.9.0 with a fatal bug: it serves, then dies 4 s after it starts.\n" +
		"( sleep 4; echo 'relayd: fatal error: lobby table corrupt (a bug of 1.9.0)' >&2; kill -9 $$ ) &\n" +
		"exec \"$(dirname \"$0\")/bin/relayd\" \"$@\"\n"
	var buf bytes.Buffer
	z := gzip.NewWriter(&buf)
	w := tar.NewWriter(z)
	w.WriteHeader(&tar.Header{Name: "relayd", Mode: 0o755, Size: int64(len(start)), Typeflag: tar.TypeReg})
	w.Write([]byte(start))
	w.WriteHeader(&tar.Header{Name: "bin/", Mode: 0o755, Typeflag: tar.TypeDir})
	w.WriteHeader(&tar.Header{Name: "bin/relayd", Mode: 0o755, Size: int64(len(bin)), Typeflag: tar.TypeReg})
	w.Write(bin)
	w.Close()
	z.Close()
	path := filepath.Join(t.TempDir(), "relay-1.9.0.tar.gz")
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestLabACanaryWhoseRelayDiesAfterItStarts(t *testing.T) {
	e := startLab(t, []lab.HostOptions{{}, {}}, func(s string) string {
		s = strings.Replace(s, "    version: 1.8.0\n    artifact: "+lab.BuildRelayd(t, "1.8.0")+"\n",
			"    kind: tarball\n    version: 1.9.0\n    artifact: "+dyingRelay(t)+"\n    program: relayd\n", 1)
		return strings.Replace(s, "    pid_file: "+lab.RelayPIDFile+"\n", "    pid_file: "+lab.RelayPIDFile+"\n    log: "+lab.RelayLog+"\n", 1)
	})
	stableForDefault = rollout.DefaultStableFor // the default is this test's subject
	h1, h2 := e.lab.Hosts[0], e.lab.Hosts[1]
	e.mustPlan(e.spec, e.plan)
	pid1, _, _ := e.socket(h1)
	pid2, _, _ := e.socket(h2)
	starts2 := e.starts(h2)

	began := time.Now()
	code, out, errs := e.relayctl("apply", e.plan)
	took := time.Since(began)
	if code != 1 || !strings.Contains(out, "rolled back:   1  lab-1") || !strings.Contains(out, "not started:   1  lab-2") {
		t.Fatalf("apply with the default flags: exit %d, want lab-1 rolled back and lab-2 not started\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	if strings.Contains(errs, "warning: --stable-for") {
		t.Errorf("apply with the default flags warned of no --stable-for:\n%s", errs)
	}
	const words = "relayd: fatal error: lobby table corrupt (a bug of 1.9.0)"
	if !strings.Contains(out, "lab-1: rolled back (as it was): read-back: the relay read back as planned (pid ") || !strings.Contains(out, "; its log ends: ") || !strings.Contains(out, words) {
		t.Errorf("lab-1's reason does not say its relay died, with its last words:\n%s", out)
	}
	var rc struct {
		Hosts []struct {
			Outcome  string `json:"outcome"`
			RelayLog string `json:"relay_log"`
		} `json:"hosts"`
	}
	body, err := os.ReadFile(e.plan + ".receipt.json")
	if err != nil || json.Unmarshal(body, &rc) != nil || len(rc.Hosts) != 2 {
		t.Fatalf("receipt: %v\n%s", err, body)
	}
	if !strings.HasSuffix(strings.TrimSpace(rc.Hosts[0].RelayLog), words) || !strings.Contains(rc.Hosts[0].RelayLog, `msg="relayd started"`) {
		t.Errorf("the receipt's last words of lab-1's relay: %q", rc.Hosts[0].RelayLog)
	}
	if md := mustRead(t, e.plan+".receipt.md"); !strings.Contains(md, "The relay's last words, the end of its log `"+lab.RelayLog+"`") || !strings.Contains(md, words) {
		t.Errorf("the receipt for people lacks the relay's last words:\n%s", md)
	}
	// lab-1 is back on 1.7.0, its old relay running; lab-2 never touched.
	pid, rb := awaitRelay(t, h1, 5*time.Second)
	if exe := relayExe(t, h1, pid); pid == pid1 || !strings.HasPrefix(exe, "/opt/relay/releases/1.7.0/") || rb != 212992 {
		t.Errorf("lab-1 after the rollback: pid %d (was %d) running %s with rb %d, want a restarted 1.7.0 with rb 212992", pid, pid1, exe, rb)
	}
	if p, _, _ := e.socket(h2); p != pid2 || e.starts(h2) != starts2 {
		t.Errorf("lab-2's relay restarted (pid %d, was %d): the release went past its canary", p, pid2)
	}
	if link, _ := h2.Exec(context.Background(), "readlink", "/opt/relay/current"); !bytes.Contains(link, []byte("1.7.0")) {
		t.Errorf("lab-2's current link: %q, want 1.7.0", link)
	}
	t.Logf("apply of a release whose relay dies 4 s after it starts: exit %d after %v", code, took.Round(100*time.Millisecond))
}
