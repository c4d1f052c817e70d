package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/relayctl/relayctl/internal/lab"
)

// A release build of relayctl (static, CGO_ENABLED=0, as make build makes
// it) run by a uid that /etc/passwd does not list, an LDAP or SSSD user's,
// with USER=alice: its receipt records uid 4242, and says the name is
// $USER's claim, in the operator and in the --skip-approval user. (Go's
// os/user in such a build answered "alice" and nothing more.) The plan's
// one host is unreachable, so apply writes its receipt without a host.
func TestLabStaticBuildRecordsTheUID(t *testing.T) {
	lab.Require(t)
	const uid = 4242
	if out, err := exec.Command("getent", "passwd", "4242").Output(); err == nil {
		t.Fatalf("this test needs a uid the machine does not know, and 4242 is %q", out)
	}
	dir, err := os.MkdirTemp("", "relayctl-static-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755) // uid 4242 runs the binary in it
	bin := filepath.Join(dir, "relayctl")
	build := exec.Command("go", "build", "-trimpath", "-buildvcs=false", "-o", bin, "./cmd/relayctl")
	build.Dir, build.Env = filepath.Join("..", ".."), append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build relayctl as a release: %v\n%s", err, out)
	}
	work := filepath.Join(dir, "work")
	os.Mkdir(work, 0o700)
	write := func(name, body string) {
		if err := os.WriteFile(filepath.Join(work, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("relayd", "#!/bin/sh\n\x00relayd-version:1.8.0\x00\n")
	write("spec.yaml", "name: ldap\nhosts: [root@127.0.0.1:1]\nsysctl:\n  net.core.rmem_max: 8388608\nrelay:\n  release: {version: 1.8.0, artifact: relayd}\n  service: {manager: systemd, name: relayd}\n")
	write("allowed_signers", "")
	filepath.Walk(work, func(p string, _ os.FileInfo, _ error) error { return os.Chown(p, uid, uid) })
	relayctl := func(args ...string) {
		t.Helper()
		cmd := exec.Command(bin, args...)
		cmd.Dir = work
		cmd.Env = []string{"USER=alice", "HOME=" + work, "PATH=/usr/bin:/bin", "XDG_CACHE_HOME=" + filepath.Join(work, ".cache"),
			"RELAYCTL_REQUIRE_APPROVAL=" + filepath.Join(work, "allowed_signers")}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("relayctl %s as uid %d: %v\n%s", strings.Join(args, " "), uid, err, out)
		}
	}
	relayctl("plan", "spec.yaml", "--out", "p.plan", "--max-unreachable", "1", "--known-hosts", "known_hosts")
	relayctl("apply", "p.plan", "--skip-approval", "directory server down", "--known-hosts", "known_hosts")

	var receipt struct {
		Operator map[string]any `json:"operator"`
		Approval map[string]any `json:"approval"`
	}
	data, err := os.ReadFile(filepath.Join(work, "p.plan.receipt.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &receipt); err != nil {
		t.Fatal(err)
	}
	op := receipt.Operator
	if op["user"] != "alice" || op["uid"] != float64(uid) || op["user_from"] != "environment" {
		t.Errorf("operator %v; want user alice, uid 4242, user_from environment", op)
	}
	const who = "alice (uid 4242; the name is $USER's claim)"
	if got := receipt.Approval["user"]; got != who {
		t.Errorf("the --skip-approval user is %q, want %q", got, who)
	}
	md, _ := os.ReadFile(filepath.Join(work, "p.plan.receipt.md"))
	if !strings.Contains(string(md), "by "+who+" on ") {
		t.Errorf("the receipt's review does not say %q:\n%s", who, md)
	}
}
