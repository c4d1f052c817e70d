package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// runQuick runs relayctl in-process and fails the test if it takes more
// than a few seconds: a FIFO or a device must not hang it.
func runQuick(t *testing.T, dir string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	done := make(chan int, 1)
	wd, _ := os.Getwd()
	os.Chdir(dir)
	defer os.Chdir(wd)
	go func() { done <- run(append([]string{"relayctl"}, args...), strings.NewReader(""), &out, &errb) }()
	select {
	case code := <-done:
		return code, out.String(), errb.String()
	case <-time.After(20 * time.Second):
		t.Fatalf("relayctl %s hangs", strings.Join(args, " "))
	}
	return 0, "", ""
}

const localSpec = `name: x
hosts: [relay-ash-1]
relay:
  release: {version: 1.8.0, artifact: %s}
  service: {manager: systemd, name: relayd}
`

// An artifact, spec or plan that is a FIFO or a device is refused at once
// instead of hanging relayctl or reading forever.
func TestLocalFilesMustBeRegular(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, art := range []string{fifo, "/dev/zero"} {
		os.WriteFile(filepath.Join(dir, "s.yaml"), []byte(strings.Replace(localSpec, "%s", art, 1)), 0o644)
		code, _, errs := runQuick(t, dir, "plan", "s.yaml", "--facts", "none.json")
		if code != 1 || !strings.Contains(errs, "s.yaml:4: relay.release.artifact: "+art+" is not a regular file") {
			t.Errorf("artifact %s: exit %d, %s", art, code, errs)
		}
	}
	for _, args := range [][]string{{"plan", fifo}, {"apply", fifo}, {"verify", "/dev/zero"}, {"approve", fifo}} {
		code, _, errs := runQuick(t, dir, args...)
		if code != 1 || !strings.Contains(errs, "is not a regular file") {
			t.Errorf("%v: exit %d, %s", args, code, errs)
		}
	}
}

func TestFactsFlagsAreChecked(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"facts", "--pid-file", " ", "h"}, "--pid-file: want a clean absolute path"},
		{[]string{"facts", "--systemd-unit", "-Hroot@evil.example", "h"}, "--systemd-unit: want a unit name"},
		{[]string{"facts", "--key", "kernel.core_pattern;reboot", "h"}, "--key:"},
		{[]string{"facts", "--systemd-unit", "relayd", "--", "-oProxyCommand=x"}, "host: want an ssh_config alias"},
		{[]string{"facts", "--port", "0", "h"}, "--port 0: want 1 to 65535"}, // a host named h is a host, not the help command
	} {
		code, _, errs := runQuick(t, t.TempDir(), tt.args...)
		if code != 1 || !strings.Contains(errs, tt.want) {
			t.Errorf("%v: exit %d, %q; want %q", tt.args, code, errs, tt.want)
		}
	}
}
