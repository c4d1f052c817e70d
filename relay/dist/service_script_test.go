package dist_test

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/relayctl/relayctl/relay/dist"
)

// scriptFunc is one function of relay-service.sh, as written there.
func scriptFunc(t *testing.T, name string) string {
	t.Helper()
	s := string(dist.ServiceScript)
	start := strings.Index(s, "\n"+name+"() {")
	if start < 0 {
		t.Fatalf("relay-service.sh defines no %s", name)
	}
	body := s[start+1:]
	return body[:strings.Index(body, "\n}\n")+3]
}

// listening finds a process's UDP socket with one readlink for all its
// descriptors, and with one each where readlink takes one path (busybox).
func TestListeningFindsTheSocketWithEitherReadlink(t *testing.T) {
	conn, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	port := conn.LocalAddr().(*net.UDPAddr).Port
	self := strconv.Itoa(os.Getpid())
	real, err := exec.LookPath("readlink")
	if err != nil {
		t.Fatal(err)
	}
	oneAtATime := t.TempDir()
	os.WriteFile(filepath.Join(oneAtATime, "readlink"), []byte(`#!/bin/sh
[ "$1" = -- ] && shift
[ $# = 1 ] || { echo "readlink: too many arguments" >&2; exit 1; }
exec `+real+` "$1"
`), 0o755)
	for _, path := range []string{os.Getenv("PATH"), oneAtATime + ":" + os.Getenv("PATH")} {
		run := func(port int) error {
			return exec.Command("sh", "-c", scriptFunc(t, "listening")+`listening "$1" "$2"`, "sh", self, strconv.Itoa(port)).Run()
		}
		t.Setenv("PATH", path)
		if err := run(port); err != nil {
			t.Errorf("PATH=%s: the socket on port %d is not found: %v", path, port, err)
		}
		if err := run(port + 1); err == nil {
			t.Errorf("PATH=%s: found a socket on port %d, which this process does not have", path, port+1)
		}
	}
}

// folders_private asks one stat of every folder and holds each to the
// rule: the caller's or root's, writable by no one else, unless sticky or
// a symlink; a folder missing fails it.
func TestFoldersPrivateHoldsEveryFolderToTheRule(t *testing.T) {
	dir := t.TempDir()
	mk := func(name string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		os.Mkdir(p, 0o700)
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	own, sticky, open, groupw := mk("own", 0o755), mk("sticky", os.ModeSticky|0o777), mk("open", 0o777), mk("groupw", 0o775)
	link := filepath.Join(dir, "link")
	os.Symlink(open, link)
	me := strconv.Itoa(os.Getuid())
	for _, tt := range []struct {
		folders []string
		want    bool
	}{
		{[]string{"/", own}, true},
		{[]string{own, sticky}, true},
		{[]string{own, link}, true}, // the link itself: what it points to is checked as resolved
		{[]string{own, open}, false},
		{[]string{groupw, own}, false},
		{[]string{own, filepath.Join(dir, "missing")}, false},
		{[]string{"/proc/1/root"}, os.Getuid() == 0},
	} {
		script := "me=" + me + "\n" + scriptFunc(t, "folders_private") + `folders_private "$1"`
		err := exec.Command("sh", "-c", script, "sh", strings.Join(tt.folders, "\n")).Run()
		if got := err == nil; got != tt.want {
			t.Errorf("%v: private %v, want %v (%v)", tt.folders, got, tt.want, err)
		}
	}
}
