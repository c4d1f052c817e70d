package lab

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestValidServices(t *testing.T) {
	tests := []struct {
		name    string
		svcs    []Service
		systemd bool
		want    string // "" = valid
	}{
		{"none on a plain host", nil, false, ""},
		{"unbound", []Service{{Unit: "unbound.service", Files: map[string]string{"/etc/unbound/unbound.conf.d/x.conf": ""}}}, true, ""},
		{"a template instance", []Service{{Unit: "memcached@lab-1.service"}}, true, ""},
		{"on a plain host", []Service{{Unit: "unbound.service"}}, false, "services need a systemd host"},
		{"no suffix", []Service{{Unit: "unbound"}}, true, `service unit "unbound": want NAME.service`},
		{"a socket unit", []Service{{Unit: "unbound.socket"}}, true, "want NAME.service"},
		{"a path", []Service{{Unit: "../../etc/passwd.service"}}, true, "only letters, digits and :_.@- may make a unit name"},
		{"a space", []Service{{Unit: "a b.service"}}, true, "only letters"},
		{"the lab's relayd", []Service{{Unit: "relayd.service"}}, true, "the lab runs it itself"},
		{"the lab's sshd", []Service{{Unit: "ssh.service"}}, true, "the lab runs it itself"},
		{"twice", []Service{{Unit: "unbound.service"}, {Unit: "unbound.service"}}, true, "listed twice"},
		{"a relative file", []Service{{Unit: "unbound.service", Files: map[string]string{"etc/x": ""}}}, true, "want a clean absolute path"},
		{"a file with ..", []Service{{Unit: "unbound.service", Files: map[string]string{"/etc/../x": ""}}}, true, "want a clean absolute path"},
		{"the root", []Service{{Unit: "unbound.service", Files: map[string]string{"/": ""}}}, true, "want a clean absolute path"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := validServices(tt.svcs, tt.systemd)
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("got %v, want valid", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("got %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

// seedFile never writes through a symlink: the seed's links point at the
// machine's files.
func TestSeedFileRefusesSymlinks(t *testing.T) {
	seed, machine := t.TempDir(), t.TempDir()
	target := filepath.Join(machine, "unit.service")
	if err := os.WriteFile(target, []byte("the machine's\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(seed, "etc/wants"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, filepath.Join(seed, "etc/wants/unit.service")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(machine, filepath.Join(seed, "etc/dir")); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/etc/wants/unit.service", "/etc/dir/unit.service", "/etc/dir/new.conf"} {
		if err := seedFile(seed, p, "the lab's\n"); err == nil {
			t.Errorf("seedFile %s through a symlink: no error", p)
		}
	}
	if b, _ := os.ReadFile(target); string(b) != "the machine's\n" {
		t.Errorf("the machine's file now holds %q", b)
	}
	if _, err := os.Stat(filepath.Join(machine, "new.conf")); err == nil {
		t.Errorf("seedFile created a file in the machine's directory")
	}
	if err := seedFile(seed, "/etc/unbound/unbound.conf.d/relaylab.conf", "server:\n"); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(seed, "etc/unbound/unbound.conf.d/relaylab.conf")); string(b) != "server:\n" {
		t.Errorf("seeded %q", b)
	}
}
