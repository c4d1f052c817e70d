package sshrun

import (
	"crypto/ed25519"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"
)

// writeFleetFiles writes an ssh_config with a Host block per host and a
// known_hosts with a line per host, as a lab (or an operator's fleet
// without an inventory) has them.
func writeFleetFiles(tb testing.TB, hosts int) (config, known string) {
	dir := tb.TempDir()
	pub, _, _ := ed25519.GenerateKey(nil)
	key, err := ssh.NewPublicKey(pub)
	if err != nil {
		tb.Fatal(err)
	}
	line := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(key)))
	var c, k strings.Builder
	for i := 1; i <= hosts; i++ {
		port := 20000 + i
		fmt.Fprintf(&c, "Host lab-%d\n  HostName 127.0.0.1\n  Port %d\n  User root\n\n", i, port)
		fmt.Fprintf(&k, "[127.0.0.1]:%d %s\n", port, line)
	}
	config, known = filepath.Join(dir, "ssh_config"), filepath.Join(dir, "known_hosts")
	if err := os.WriteFile(config, []byte(c.String()), 0o600); err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(known, []byte(k.String()), 0o600); err != nil {
		tb.Fatal(err)
	}
	return config, known
}

// BenchmarkDialFiles is what every dial reads before it connects: the
// ssh_config for the host's target and known_hosts for its keys. Per dial,
// with files of a line per host: it must not grow with the fleet.
func BenchmarkDialFiles(b *testing.B) {
	for _, hosts := range []int{100, 1000, 10000} {
		b.Run(fmt.Sprintf("hosts=%d", hosts), func(b *testing.B) {
			config, known := writeFleetFiles(b, hosts)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				i = i%hosts + 1
				cfg, err := loadSSHConfig(config)
				if err != nil {
					b.Fatal(err)
				}
				t, err := resolve(fmt.Sprintf("lab-%d", i), cfg)
				if err != nil {
					b.Fatal(err)
				}
				hk, err := newHostKeys(t, known, nil, false, nil)
				if err != nil {
					b.Fatal(err)
				}
				if len(hk.algorithms()) == 0 {
					b.Fatal("no algorithms")
				}
			}
		})
	}
}

// A parse is reused only while the files are as they were: a key added to
// known_hosts, or a host added to ssh_config, is seen by the next dial.
func TestParsedFilesSeeAChange(t *testing.T) {
	config, known := writeFleetFiles(t, 2)
	cfg, err := loadSSHConfig(config)
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := loadSSHConfig(config); again != cfg {
		t.Error("an unchanged ssh_config was parsed again")
	}
	if tg, _ := resolve("lab-3", cfg); tg.Port != 22 {
		t.Fatalf("lab-3 before it is in the config: port %d", tg.Port)
	}
	appendTo(t, config, "Host lab-3\n  HostName 127.0.0.1\n  Port 20003\n")
	cfg, err = loadSSHConfig(config)
	if err != nil {
		t.Fatal(err)
	}
	if tg, _ := resolve("lab-3", cfg); tg.Port != 20003 {
		t.Errorf("lab-3 added to the config: port %d, want 20003", tg.Port)
	}

	target := Target{HostName: "127.0.0.1", Port: 20003}
	pub, _, _ := ed25519.GenerateKey(nil)
	key, _ := ssh.NewPublicKey(pub)
	hk, err := newHostKeys(target, known, nil, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if hk.db(target.Addr(), &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 20003}, key) == nil {
		t.Fatal("a key not in known_hosts was accepted")
	}
	appendTo(t, known, "[127.0.0.1]:20003 "+string(ssh.MarshalAuthorizedKey(key)))
	if hk, err = newHostKeys(target, known, nil, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := hk.db(target.Addr(), &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 20003}, key); err != nil {
		t.Errorf("the key added to known_hosts: %v", err)
	}
}

func appendTo(t *testing.T, path, text string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(text); err != nil {
		t.Fatal(err)
	}
}
