package agent

import (
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
)

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// newNetns is a process (sleep) in a network namespace of its own, its
// loopback up: a relay in a container, as the agent meets one.
func newNetns(t *testing.T) string {
	t.Helper()
	c := exec.Command("sleep", "120")
	c.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET}
	must(t, c.Start())
	t.Cleanup(func() { c.Process.Kill(); c.Wait() })
	pid := strconv.Itoa(c.Process.Pid)
	if out, err := exec.Command("nsenter", "-t", pid, "-n", "ip", "link", "set", "lo", "up").CombinedOutput(); err != nil {
		t.Fatalf("lo up: %v: %s", err, out)
	}
	return pid
}

// listenIn is a TCP listener on loopback in pid's network namespace.
func listenIn(t *testing.T, pid, addr string) net.Listener {
	t.Helper()
	var ln net.Listener
	must(t, inNetns(pid, func() (err error) { ln, err = net.Listen("tcp4", addr); return err }))
	t.Cleanup(func() { ln.Close() })
	return ln
}

// serveHTTP serves h on ln.
func serveHTTP(t *testing.T, ln net.Listener, h http.HandlerFunc) {
	srv := &http.Server{Handler: h}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
}

// serveRaw answers each connection on ln with answer(conn).
func serveRaw(ln net.Listener, answer func(c net.Conn)) {
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); answer(c) }()
		}
	}()
}

// However often the agent enters another namespace, the process stays in
// its own: /proc/self (the main thread's) and every other thread.
func TestEnteringANamespaceLeavesTheAgentInItsOwn(t *testing.T) {
	pid := newNetns(t)
	own, err := os.Readlink("/proc/self/ns/net")
	must(t, err)
	for range 50 {
		must(t, inNetns(pid, func() error { return nil }))
	}
	var other string
	inNetns(pid, func() error { other, _ = os.Readlink("/proc/thread-self/ns/net"); return nil })
	if other == own {
		t.Fatal("the namespace was not entered")
	}
	for range 20 {
		done := make(chan string)
		go func() { l, _ := os.Readlink("/proc/thread-self/ns/net"); done <- l }()
		if got := <-done; got != own {
			t.Fatalf("a thread of the agent is in %s, want %s", got, own)
		}
	}
	if got, _ := os.Readlink("/proc/self/ns/net"); got != own {
		t.Errorf("/proc/self/ns/net is %s, want %s", got, own)
	}
}
