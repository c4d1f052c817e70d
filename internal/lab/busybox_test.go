package lab_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/relayctl/relayctl/internal/lab"
)

// debianOnBusybox are the programs of Debian's a busybox host has on its
// PATH, at their own paths: the four tools and the sshd.
var debianOnBusybox = map[string]string{"ss": "/usr/bin/ss", "ip": "/usr/bin/ip", "flock": "/usr/bin/flock", "zstd": "/usr/bin/zstd", "sshd": "/usr/sbin/sshd"}

// TestBusyboxHost: what an SSH session on a busybox host finds is busybox,
// as the tester's host had it: its shell is busybox sh, there is no bash,
// no nohup, no curl, no openssl, date prints %N as it is, sha256sum is
// busybox's; ss and ip on PATH are Debian's (though busybox-static's sh
// runs its own ip applet for a bare "ip"). Every folder on its PATH holds
// only busybox's applets and those programs, and the machine keeps its own.
func TestBusyboxHost(t *testing.T) {
	t.Parallel()
	l := lab.StartT(t, lab.Options{Hosts: []lab.HostOptions{{Busybox: true}}})
	h := l.Hosts[0]
	if h.Kind != lab.KindBusybox {
		t.Fatalf("kind %q, want %q", h.Kind, lab.KindBusybox)
	}
	const probe = `echo "path=$PATH"
echo "shell=$(readlink /proc/$$/exe)"
echo "passwd=$(grep '^root:' /etc/passwd)"
for p in bash nohup curl openssl sha256sum date sh ip ss flock zstd; do
	echo "which $p=$(command -v "$p")"
done
for p in sha256sum date; do
	echo "help $p=$($p --help 2>&1 | head -n 1)"
done
echo "date=$(date +%s%N)"
echo "ss=$(ss -V)"
echo "ip=$(/usr/bin/ip -V)"
echo "flock=$(flock --version)"
echo "zstd=$(zstd -V)"
`
	out := sshOK(t, l, h.Name, probe)
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		k, v, _ := strings.Cut(line, "=")
		got[k] = v
	}
	for _, tt := range []struct{ key, want string }{
		{"shell", "/usr/bin/busybox"},
		{"passwd", "root:x:0:0:root:/root:/bin/sh"},
		{"which bash", ""}, {"which nohup", ""}, {"which curl", ""}, {"which openssl", ""},
		// busybox-static's sh names its own applets, found before PATH.
		{"which sha256sum", "sha256sum"}, {"which date", "date"}, {"which sh", "sh"}, {"which ip", "ip"},
		{"which ss", "/usr/bin/ss"}, {"which flock", "/usr/bin/flock"}, {"which zstd", "/usr/bin/zstd"},
		{"help sha256sum", "BusyBox v1.35"}, {"help date", "BusyBox v1.35"},
		{"ss", "ss utility, iproute2"}, {"ip", "ip utility, iproute2"}, {"flock", "flock from util-linux"}, {"zstd", "*** Zstandard CLI"},
	} {
		if v, ok := got[tt.key]; !ok || tt.want == "" && v != "" || !strings.HasPrefix(v, tt.want) {
			t.Errorf("%s: got %q, want %q", tt.key, v, tt.want)
		}
	}
	if !regexp.MustCompile(`^[0-9]+%N$`).MatchString(got["date"]) {
		t.Errorf("date +%%s%%N printed %q, want seconds and a literal %%N (busybox's date)", got["date"])
	}

	// Every folder on the session's PATH, read through the sshd's root (in
	// its mount namespace), holds busybox, symlinks to it, and the Debian
	// programs, byte for byte the machine's.
	root := fmt.Sprintf("/proc/%d/root", h.SSHDPID)
	machine := map[string][]byte{}
	read := func(p string) []byte {
		t.Helper()
		if b, ok := machine[p]; ok {
			return b
		}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		machine[p] = b
		return b
	}
	applets := 0
	for _, dir := range strings.Split(got["path"], ":") {
		ents, err := os.ReadDir(filepath.Join(root, dir))
		if err != nil {
			t.Fatalf("PATH folder %s: %v", dir, err)
		}
		for _, e := range ents {
			p := filepath.Join(root, dir, e.Name())
			if target, err := os.Readlink(p); err == nil {
				if target != "/usr/bin/busybox" {
					t.Errorf("%s/%s -> %s, want a busybox applet", dir, e.Name(), target)
				}
				applets++
				continue
			}
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			want, ok := debianOnBusybox[e.Name()]
			switch {
			case e.Name() == "busybox":
				want, ok = "/bin/busybox", true
			case !ok:
				t.Errorf("%s/%s: neither busybox nor one of %v", dir, e.Name(), debianOnBusybox)
				continue
			}
			if !bytes.Equal(b, read(want)) {
				t.Errorf("%s/%s differs from the machine's %s", dir, e.Name(), want)
			}
		}
	}
	if applets < 200 {
		t.Errorf("%d applets on PATH, want busybox's (over 200)", applets)
	}

	// A process the lab starts there sees the same; the machine keeps bash.
	if out, err := h.Exec(t.Context(), "sh", "-c", `readlink /proc/$$/exe; command -v bash || echo none`); err != nil || string(out) != "/usr/bin/busybox\nnone\n" {
		t.Errorf("Host.Exec sh: %q, %v; want busybox and no bash", out, err)
	}
	if _, err := exec.LookPath("bash"); err != nil {
		t.Errorf("the machine lost bash: %v", err)
	}
	if b, err := os.ReadFile("/etc/passwd"); err != nil || !slices.Contains(strings.Split(string(b), "\n"), "root:x:0:0:root:/root:/bin/bash") {
		t.Errorf("the machine's /etc/passwd changed: %v\n%s", err, b)
	}
}
