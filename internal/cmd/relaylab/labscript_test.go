package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/relayctl/relayctl/internal/kerneltest"
	"github.com/relayctl/relayctl/internal/lab"
	"github.com/relayctl/relayctl/internal/repotest"
)

// labScript runs make lab, make lab-down and scripts/lab.sh in a copy of
// the repository, as a user on a fresh clone does.
type labScript struct {
	t    *testing.T
	repo string
	dir  string // the copy's lab/
	held bool   // the test holds the kernel lock: the scripts are told so
	// owner is the test's own record of the lab up on the machine
	// (LAB_OWNER), so that no test's lab stands in another's way.
	owner string
}

func newLabScript(t *testing.T, held bool) *labScript {
	repo := repotest.Copy(t)
	s := &labScript{t: t, repo: repo, dir: filepath.Join(repo, "lab"), held: held, owner: filepath.Join(t.TempDir(), "lab.owner")}
	t.Cleanup(func() {
		if s.exists("lab.json") || s.exists("sysctls.saved") {
			if out, code := s.run(nil, "scripts/lab.sh", "down"); code != 0 {
				t.Errorf("scripts/lab.sh down after the test: exit %d\n%s", code, out)
			}
		}
	})
	return s
}

func (s *labScript) command(env []string, argv ...string) *exec.Cmd {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = s.repo
	cmd.Env = append(os.Environ(), "LAB_OWNER="+s.owner)
	cmd.Env = append(cmd.Env, env...)
	if s.held {
		cmd.Env = append(cmd.Env, "RELAYCTL_KERNEL_LOCK_HELD=1")
	}
	// A process group of its own, as a terminal gives a command: a Ctrl-C
	// is a SIGINT to all of it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return cmd
}

// run runs argv to its end and returns its output and exit status.
func (s *labScript) run(env []string, argv ...string) (string, int) {
	s.t.Helper()
	out, err := s.command(env, argv...).CombinedOutput()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		return string(out), ee.ExitCode()
	case err != nil:
		s.t.Fatalf("%s: %v", strings.Join(argv, " "), err)
	}
	return string(out), 0
}

// must runs argv, which must exit 0 and say want.
func (s *labScript) must(want string, argv ...string) {
	s.t.Helper()
	out, code := s.run(nil, argv...)
	if code != 0 || !strings.Contains(out, want) {
		s.t.Fatalf("%s: exit %d, want 0 and %q:\n%s", strings.Join(argv, " "), code, want, out)
	}
}

// interrupt starts argv, waits until ready says the point to interrupt
// at has come, sends SIGINT to its process group, and returns its output
// and exit status.
func (s *labScript) interrupt(env []string, ready func() bool, argv ...string) (string, int) {
	s.t.Helper()
	cmd := s.command(env, argv...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	for !ready() {
		select {
		case err := <-done:
			s.t.Fatalf("%s ended (%v) before the point to interrupt it at:\n%s", strings.Join(argv, " "), err, out.String())
		case <-time.After(5 * time.Millisecond):
		}
	}
	syscall.Kill(-cmd.Process.Pid, syscall.SIGINT)
	err := <-done
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		s.t.Fatal(err)
	}
	return out.String(), cmd.ProcessState.ExitCode()
}

// newer reports whether the lab's file name has been written since t
// (by this up, not one before).
func (s *labScript) newer(name string, t time.Time) bool {
	fi, err := os.Stat(filepath.Join(s.dir, name))
	return err == nil && fi.ModTime().After(t)
}

func (s *labScript) exists(name string) bool {
	_, err := os.Lstat(filepath.Join(s.dir, name))
	return err == nil
}

// globals reads the machine's global values.
func globals(t *testing.T) map[string]string {
	m := map[string]string{}
	for _, k := range kerneltest.Keys {
		m[k] = kerneltest.Read(t, k)
	}
	return m
}

// expectUp checks the lab is up, with the incident's values on the
// machine and the ones found before saved, and returns its sshd's pid.
func (s *labScript) expectUp(before map[string]string) int {
	s.t.Helper()
	want := map[string]string{}
	for k, v := range before {
		want[k] = v
	}
	want["net.core.rmem_max"], want["net.core.rmem_default"] = "212992", "212992"
	s.expectGlobals(want)
	b, err := os.ReadFile(filepath.Join(s.dir, "sysctls.saved"))
	if w := "net.core.rmem_max=" + before["net.core.rmem_max"] + "\nnet.core.rmem_default=" + before["net.core.rmem_default"] + "\n"; err != nil || string(b) != w {
		s.t.Errorf("sysctls.saved: %q, %v; want %q", b, err, w)
	}
	l, err := lab.Load(s.dir)
	if err != nil {
		s.t.Fatalf("the lab is not up: %v", err)
	}
	if stopped := l.Stopped(); len(stopped) > 0 {
		s.t.Fatalf("the lab is up, but %v stopped", stopped)
	}
	return l.Hosts[0].SSHDPID
}

// expectDown checks that nothing of the lab is left and the machine's
// values are the ones found before.
func (s *labScript) expectDown(before map[string]string) {
	s.t.Helper()
	s.expectGlobals(before)
	for _, f := range []string{"lab.json", "sysctls.saved"} {
		if s.exists(f) {
			s.t.Errorf("lab/%s left behind", f)
		}
	}
	if ps := processesOf(s.dir); len(ps) > 0 {
		s.t.Errorf("processes of the lab left running: %v", ps)
	}
	// The relay's namespace, named where relay-service reads it.
	if b, err := os.ReadFile(filepath.Join(s.dir, "lab-1/root", lab.ServiceEnv)); err == nil {
		if ns, ok := strings.CutPrefix(strings.TrimSpace(string(b)), "RELAY_NETNS="); ok && ns != "" {
			if _, err := os.Stat(filepath.Join("/run/netns", ns)); err == nil {
				s.t.Errorf("network namespace %s left behind", ns)
			}
		}
	}
}

func (s *labScript) expectGlobals(want map[string]string) {
	s.t.Helper()
	for k, v := range globals(s.t) {
		if v != want[k] {
			s.t.Errorf("%s = %s, want %s", k, v, want[k])
		}
	}
}

// processesOf lists the live processes whose command line names dir: a
// lab host's sshd (its sshd_config) and what it was started by.
func processesOf(dir string) []string {
	ents, _ := os.ReadDir("/proc")
	var ps []string
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !bytes.Contains(b, []byte(dir+"/")) {
			continue
		}
		if st, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat")); err == nil && !bytes.Contains(st, []byte(") Z ")) {
			ps = append(ps, e.Name()+" "+strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
	return ps
}

// make lab and make lab-down leave the machine as they found it whatever
// a user does: each twice, an up that fails (its relay cannot start), ups
// interrupted by a Ctrl-C (SIGINT to the process group) at several
// points, ups killed, a down interrupted; after each, the machine's global
// values are compared with the ones before, and the next make lab works.
func TestMakeLabAndLabDownLeaveNothingBehind(t *testing.T) {
	lab.Require(t)
	if _, err := exec.LookPath("make"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("make not installed")
		}
		t.Skip("make not installed")
	}
	kerneltest.Lock(t)
	// Values of the test's own, so that a restore cannot pass by chance
	// (212,992 is the kernel's default).
	kerneltest.Set(t, "net.core.rmem_max", "4194304")
	kerneltest.Set(t, "net.core.rmem_default", "262144")
	before := globals(t)
	s := newLabScript(t, true)

	// Up twice: the second says so and changes nothing.
	s.must("lab: lab-1 is up (relayd 1.7.0", "make", "-s", "lab")
	sshd := s.expectUp(before)
	s.must("lab: lab-1 is up already", "make", "-s", "lab")
	if again := s.expectUp(before); again != sshd {
		t.Errorf("the second make lab started another lab-1 (sshd %d, was %d)", again, sshd)
	}

	// Down twice: the second says so.
	s.must("lab: stopped; restored net.core.rmem_max=4194304 net.core.rmem_default=262144", "make", "-s", "lab-down")
	s.expectDown(before)
	s.must("lab: no lab is up in lab", "make", "-s", "lab-down")
	s.expectDown(before)

	// An up that fails for real once lab-1's sshd is up: its relay
	// exits at start.
	broken := filepath.Join(t.TempDir(), "relayd")
	os.WriteFile(broken, []byte("#!/bin/sh\necho 'relayd: a release that cannot start' >&2\nexit 1\n"), 0o755)
	out, code := s.run([]string{"LAB_RELAYD=" + broken}, "scripts/lab.sh", "up")
	if code == 0 || !strings.Contains(out, "relayd exited (status 1)") || !strings.Contains(out, "lab: make lab did not finish") {
		t.Errorf("an up whose relay cannot start: exit %d, want 1, saying so:\n%s", code, out)
	}
	s.expectDown(before)

	// Ups interrupted: at once (building), once the values are saved, as
	// lab-1's sshd starts (before the lab has a lab.json that down could
	// find it by), and while lab-1's relay starts (a relay that says it has
	// started, then never listens).
	started := filepath.Join(t.TempDir(), "relay-started")
	slow := filepath.Join(t.TempDir(), "relayd")
	os.WriteFile(slow, []byte("#!/bin/bash\n: >"+started+"\nexec -a 'relayd-slow "+s.dir+"/' sleep 600\n"), 0o755)
	for _, at := range []struct {
		name  string
		env   []string
		ready func(since time.Time) bool
	}{
		{"at once", nil, func(time.Time) bool { return true }},
		{"the values saved", nil, func(time.Time) bool { return s.exists("sysctls.saved") }},
		{"the sshd starting", nil, func(since time.Time) bool { return s.newer("lab-1/sshd_config", since) }},
		{"the relay starting", []string{"LAB_RELAYD=" + slow}, func(time.Time) bool { _, err := os.Stat(started); return err == nil }},
	} {
		os.Remove(started)
		since := time.Now()
		out, code := s.interrupt(at.env, func() bool { return at.ready(since) }, "scripts/lab.sh", "up")
		if code == 0 {
			t.Errorf("an up interrupted at %s exited 0:\n%s", at.name, out)
		}
		t.Logf("an up interrupted at %s: exit %d\n%s", at.name, code, out)
		s.expectDown(before)
	}

	// Ups killed (kill -9: nothing can clean up after it): once the values
	// are saved, which down then puts back; and while lab-1's relay
	// starts, whose sshd and relay the next up stops before it starts
	// afresh, putting back the values saved first.
	kill := func(env []string, ready func() bool) {
		t.Helper()
		cmd := s.command(env, "scripts/lab.sh", "up")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		for !ready() {
			if !alive(cmd.Process.Pid) {
				t.Fatal("up ended before the point to kill it at")
			}
			time.Sleep(5 * time.Millisecond)
		}
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		cmd.Wait()
	}
	kill(nil, func() bool { return s.exists("sysctls.saved") })
	s.must("lab: stopped; restored net.core.rmem_max=4194304 net.core.rmem_default=262144", "make", "-s", "lab-down")
	s.expectDown(before)
	os.Remove(started)
	kill([]string{"LAB_RELAYD=" + slow}, func() bool { _, err := os.Stat(started); return err == nil })
	s.must("lab: the lab in lab did not finish starting or has stopped since: stopping what is left of it first", "scripts/lab.sh", "up")
	s.expectUp(before)
	s.must("lab: stopped; restored", "scripts/lab.sh", "down")
	s.expectDown(before)

	// A down interrupted once it has begun stopping lab-1 finishes.
	s.must("lab: lab-1 is up (relayd 1.7.0", "scripts/lab.sh", "up")
	sshd = s.expectUp(before)
	out, code = s.interrupt(nil, func() bool { return !alive(sshd) }, "scripts/lab.sh", "down")
	if code != 0 || !strings.Contains(out, "lab: stopped; restored") {
		t.Errorf("a down interrupted: exit %d, want 0 and done:\n%s", code, out)
	}
	s.expectDown(before)

	// After all that, make lab works.
	s.must("lab: lab-1 is up (relayd 1.7.0", "make", "-s", "lab")
	s.expectUp(before)
	s.must("lab: stopped; restored", "make", "-s", "lab-down")
	s.expectDown(before)
}

// alive reports whether pid runs (a zombie does not).
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	return err == nil && !bytes.Contains(b, []byte(") Z "))
}

// An apply to lab-1 through lab/bin/relayctl (first in PATH in make lab's
// next steps) holds the machine-wide sysctl lock: while another process
// holds it, relayctl waits, naming it and changing nothing; once it runs,
// the lock's record names it until it exits.
func TestLabRelayctlHoldsTheMachineLock(t *testing.T) {
	lab.Require(t)
	if _, err := exec.LookPath("make"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("make not installed")
		}
		t.Skip("make not installed")
	}
	s := newLabScript(t, false) // make lab takes the lock itself
	s.must("lab: lab-1 is up (relayd 1.7.0", "make", "-s", "lab")
	relayctl := func(args ...string) (*exec.Cmd, *syncBuffer) {
		cmd := exec.Command(filepath.Join(s.dir, "bin/relayctl"), args...)
		cmd.Dir = s.dir
		cmd.Env = append(os.Environ(), "RELAYCTL_SSH_CONFIG="+filepath.Join(s.dir, "ssh_config"), "RELAYCTL_KNOWN_HOSTS="+filepath.Join(s.dir, "known_hosts"))
		var out syncBuffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd, &out
	}

	// Another holder: a script, as make demo is.
	other := exec.Command("bash", "-c", `set -eu; . scripts/demo-lib.sh; kernel_lock other "make demo (another)"; echo held; cat >/dev/null`)
	other.Dir = s.repo
	release, _ := other.StdinPipe()
	held, _ := other.StdoutPipe()
	other.Stderr = os.Stderr
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	// Before the lab's own clean-up, which takes the lock.
	t.Cleanup(func() { release.Close(); other.Wait() })
	if line, err := bufio.NewReader(held).ReadString('\n'); err != nil || line != "held\n" {
		t.Fatalf("the other holder said %q, %v", line, err)
	}
	// What reads no host's kernel runs at once, the lock held or not.
	for _, args := range [][]string{{"validate", "lab.yaml"}, {"history", "--host", "lab-1"}, {"show", "--help"}, {"--version"}} {
		cmd, out := relayctl(args...)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil || strings.Contains(out.String(), "waiting for the machine-wide sysctl lock") {
				t.Errorf("relayctl %s while another holds the lock: %v\n%s", strings.Join(args, " "), err, out.String())
			}
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			t.Errorf("relayctl %s waited for the lock, which it does not need:\n%s", strings.Join(args, " "), out.String())
		}
	}
	plan, out := relayctl("plan", "lab.yaml", "--out", "lab.plan")
	want := "lab: waiting for the machine-wide sysctl lock held by make demo (another) (pid " + strconv.Itoa(other.Process.Pid) + ", user "
	for !strings.Contains(out.String(), want) {
		if plan.ProcessState != nil || !alive(plan.Process.Pid) {
			t.Fatalf("relayctl plan ended without waiting for the other holder:\n%s", out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !sinceRE.MatchString(out.String()) {
		t.Errorf("the wait does not say since when: %q", out.String())
	}
	if comm, _ := os.ReadFile("/proc/" + strconv.Itoa(plan.Process.Pid) + "/comm"); string(comm) != "bash\n" || s.exists("lab.plan") {
		t.Errorf("relayctl ran while another held the lock (the process is %q)", comm)
	}
	release.Close()
	if err := plan.Wait(); err != nil || !s.exists("lab.plan") {
		t.Fatalf("relayctl plan once the lock was free: %v\n%s", err, out.String())
	}

	apply, out := relayctl("apply", "lab.plan")
	held1 := false
	for apply.ProcessState == nil && alive(apply.Process.Pid) {
		if h, ok := kerneltest.ReadHolder(kerneltest.LockPath); ok && h.PID == apply.Process.Pid && h.Command == "relayctl apply lab.plan" {
			held1 = true
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := apply.Wait(); err != nil {
		t.Fatalf("relayctl apply: %v\n%s", err, out.String())
	}
	if !held1 {
		t.Error("the lock's record never named relayctl apply while it ran")
	}
	if got := kerneltest.Read(t, "net.core.rmem_max"); got != "8388608" {
		t.Errorf("rmem_max after the apply: %s, want the plan's 8388608", got)
	}
	if h, ok := kerneltest.ReadHolder(kerneltest.LockPath); ok && h.PID == apply.Process.Pid {
		t.Errorf("the lock still names relayctl apply after it exited: %+v", h)
	}
	// Its line goes from the lock file once it has exited: the file does
	// not keep a departed holder's line (another holder's may follow).
	line := func() string {
		b, _ := os.ReadFile(kerneltest.LockPath)
		return string(b)
	}
	for deadline := time.Now().Add(10 * time.Second); strings.Contains(line(), "pid="+strconv.Itoa(apply.Process.Pid)+" "); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Errorf("the lock file keeps relayctl apply's line after it exited: %q", line())
			break
		}
	}
	s.must("lab: stopped; restored", "make", "-s", "lab-down")
}

var sinceRE = regexp.MustCompile(` since \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ`)

// syncBuffer is a command's output, read while it runs.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// make lab-down writes what lab/sysctls.saved says as root: it takes only
// the two values make lab saves, and only numbers, or writes nothing (a
// kernel.core_pattern there would make the kernel run a program as root).
func TestLabDownReadsTheSavedValuesAsData(t *testing.T) {
	lab.Require(t)
	kerneltest.Lock(t) // so that what it reads is no other test's change
	s := newLabScript(t, true)
	os.MkdirAll(s.dir, 0o755)
	for _, tt := range []struct{ saved, want string }{
		{"net.core.rmem_max=4194304\nnet.core.not_a_key=1\n", "lab/sysctls.saved: net.core.not_a_key is not a value up saves"},
		{"net.core.rmem_max=4194304 ; echo\n", "lab/sysctls.saved: net.core.rmem_max=4194304 ; echo is not a number"},
	} {
		os.WriteFile(filepath.Join(s.dir, "sysctls.saved"), []byte(tt.saved), 0o644)
		before := kerneltest.Read(t, "net.core.rmem_max")
		out, code := s.run(nil, "scripts/lab.sh", "down")
		if code != 1 || !strings.Contains(out, tt.want) {
			t.Errorf("down with sysctls.saved %q: exit %d, want 1 and %q:\n%s", tt.saved, code, tt.want, out)
		}
		if got := kerneltest.Read(t, "net.core.rmem_max"); got != before {
			t.Errorf("down with sysctls.saved %q wrote rmem_max %s (was %s)", tt.saved, got, before)
		}
		if !s.exists("sysctls.saved") {
			t.Error("down removed a sysctls.saved it did not put back")
		}
	}
	os.Remove(filepath.Join(s.dir, "sysctls.saved"))
}

// make lab HOSTS=4 is a fleet, through scripts/lab.sh and the machine
// lock as one host is: four hosts, lab.yaml and broken.yaml for all four,
// fleet.yaml over an inventory of two regions, allowed_signers and the
// wrapper. relaylab stop takes one host's sshd down: a plan through the
// wrapper holds it as unreachable and plans the others; relaylab start
// brings it back and the next plan plans it. A lab of another size in the
// same folder, or a lab in another folder, is refused while it is up,
// changing nothing; make lab-down leaves the machine as it was.
func TestMakeLabFleet(t *testing.T) {
	lab.Require(t)
	if _, err := exec.LookPath("make"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("make not installed")
		}
		t.Skip("make not installed")
	}
	kerneltest.Lock(t)
	kerneltest.Set(t, "net.core.rmem_max", "4194304")
	kerneltest.Set(t, "net.core.rmem_default", "262144")
	before := globals(t)
	s := newLabScript(t, true)
	mustEnv := func(env []string, want string, argv ...string) string {
		t.Helper()
		out, code := s.run(env, argv...)
		if code != 0 || !strings.Contains(out, want) {
			t.Fatalf("%s: exit %d, want 0 and %q:\n%s", strings.Join(argv, " "), code, want, out)
		}
		return out
	}
	mustEnv(nil, "lab: lab-1 … lab-4 (4 hosts) are up (relayd 1.7.0", "make", "-s", "lab", "HOSTS=4")
	s.expectUp(before)
	if b, err := os.ReadFile(s.owner); err != nil || string(b) != s.dir+"\n" {
		t.Errorf("the machine's lab owner: %q, %v; want %s", b, err, s.dir)
	}
	l, err := lab.Load(s.dir)
	if err != nil || len(l.Hosts) != 4 {
		t.Fatalf("the lab: %v, want 4 hosts", err)
	}
	for _, f := range []string{"lab.yaml", "broken.yaml", "fleet.yaml"} {
		b, _ := os.ReadFile(filepath.Join(s.dir, f))
		for _, h := range []string{"lab-1", "lab-4"} {
			if f != "fleet.yaml" && !strings.Contains(string(b), "  - "+h+"\n") {
				t.Errorf("%s does not list %s:\n%s", f, h, b)
			}
		}
	}
	if b, _ := os.ReadFile(filepath.Join(s.dir, "inventory.ini")); string(b) != "# lab-1 … lab-4 in two regions (make lab HOSTS=4, docs/lab.md).\n[ash]\nlab-1\nlab-2\n[fra]\nlab-3\nlab-4\n[ash:vars]\nregion=ash\n[fra:vars]\nregion=fra\n[relays:children]\nash\nfra\n" {
		t.Errorf("inventory.ini:\n%s", b)
	}
	for _, f := range []string{"allowed_signers", "bin/relayctl"} {
		if !s.exists(f) {
			t.Errorf("lab/%s missing", f)
		}
	}
	relayctl := func(args ...string) (string, int) {
		return s.run([]string{"RELAYCTL_SSH_CONFIG=" + filepath.Join(s.dir, "ssh_config"), "RELAYCTL_KNOWN_HOSTS=" + filepath.Join(s.dir, "known_hosts")},
			append([]string{filepath.Join(s.dir, "bin/relayctl")}, args...)...)
	}
	if out, code := relayctl("validate", filepath.Join(s.dir, "fleet.yaml")); code != 0 || !strings.Contains(out, "valid: 4 hosts selected from inventory.ini by relays") {
		t.Errorf("validate fleet.yaml: exit %d\n%s", code, out)
	}

	// Another size here, or another folder, while it is up: refused.
	if out, code := s.run(nil, "make", "-s", "lab", "HOSTS=2"); code == 0 || !strings.Contains(out, "a lab of 4 host(s) is up in lab, not 2: make lab-down first") {
		t.Errorf("make lab HOSTS=2 with 4 up: exit %d\n%s", code, out)
	}
	other := filepath.Join(s.repo, "other-lab")
	if out, code := s.run([]string{"LAB_DIR=" + other}, "scripts/lab.sh", "up"); code == 0 || !strings.Contains(out, "lab: error: a lab is up in "+s.dir+": its hosts share this machine's kernel") {
		t.Errorf("make lab in another folder while one is up: exit %d\n%s", code, out)
	}
	s.expectUp(before)

	// One host's sshd stopped: planned as unreachable, the others planned.
	mustEnv(nil, "lab-3: sshd stopped", "bin/relaylab", "stop", "--dir", s.dir, "lab-3")
	plan := filepath.Join(s.dir, "fleet.plan")
	if out, code := relayctl("plan", filepath.Join(s.dir, "lab.yaml"), "--out", plan, "--max-unreachable", "1", "--connect-timeout", "5s"); code != 0 || !strings.Contains(out, "lab-3") || !strings.Contains(out, "connection refused") {
		t.Errorf("plan with lab-3 stopped: exit %d, want 0 with lab-3 unreachable (connection refused)\n%s", code, out)
	}
	var p struct {
		Hosts []struct{ Host, Action string } `json:"hosts"`
	}
	b, _ := os.ReadFile(plan)
	if err := json.Unmarshal(b, &p); err != nil || len(p.Hosts) != 4 || p.Hosts[2].Action != "unreachable" || p.Hosts[0].Action == "unreachable" || p.Hosts[3].Action == "unreachable" {
		t.Errorf("the plan's hosts with lab-3 stopped: %+v, %v", p.Hosts, err)
	}
	// A make lab meanwhile finds the lab up, a host stopped on purpose.
	mustEnv(nil, "lab: lab-1 … lab-4 (4 hosts) are up already in lab", "make", "-s", "lab", "HOSTS=4")
	mustEnv(nil, "lab-3: sshd started", "bin/relaylab", "start", "--dir", s.dir, "lab-3")
	if out, code := relayctl("plan", filepath.Join(s.dir, "lab.yaml"), "--out", plan); code != 0 {
		t.Errorf("plan with lab-3 back: exit %d\n%s", code, out)
	}
	b, _ = os.ReadFile(plan)
	if err := json.Unmarshal(b, &p); err != nil || p.Hosts[2].Action == "unreachable" {
		t.Errorf("the plan's hosts with lab-3 back: %+v, %v", p.Hosts, err)
	}

	mustEnv(nil, "lab: stopped; restored net.core.rmem_max=4194304 net.core.rmem_default=262144", "make", "-s", "lab-down")
	s.expectDown(before)
	if _, err := os.Stat(s.owner); err == nil {
		t.Error("make lab-down left the machine's lab owner behind")
	}
	if out, code := s.run(nil, "make", "-s", "lab", "HOSTS=x"); code == 0 || !strings.Contains(out, "HOSTS=x: want a number of hosts from 1 to 32") {
		t.Errorf("make lab HOSTS=x: exit %d\n%s", code, out)
	}
	s.expectDown(before)
}
