package plans

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/relayctl/relayctl/tune"
)

const goodSpec = `name: ashburn-rcvbuf
hosts:
  - relay-ash-1
  - root@10.0.0.5:2222
sysctl:
  net.core.rmem_max: 8388608
  net.ipv4.udp_mem: "  764688	1019584 1529376 "
relay:
  port: 7788
  so_rcvbuf: 4194304
  release:
    version: 1.8.0
    artifact: ../bin/relayd
  service:
    manager: systemd
    name: relayd
window:
  not_before: 2026-12-02T04:00:00Z
  not_after: 2026-12-02T05:00:00Z
host:
  sysctl_file: /etc/sysctl.d/90-relayctl.conf
`

func TestParseSpecGood(t *testing.T) {
	s, err := ParseSpec("ok.yaml", []byte(goodSpec))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(s.Hosts, ","), "relay-ash-1,root@10.0.0.5:2222"; got != want {
		t.Errorf("hosts: got %s, want %s", got, want)
	}
	if got, want := s.Sysctl[1].Value, "764688 1019584 1529376"; got != want {
		t.Errorf("udp_mem normalised: got %q, want %q", got, want)
	}
	if s.Relay.Port != 7788 || s.Relay.SORcvbuf != 4194304 || s.Relay.Control != DefaultControl {
		t.Errorf("relay: got %+v", s.Relay)
	}
	if s.Relay.Release.Line != 13 {
		t.Errorf("artifact line: got %d, want 13", s.Relay.Release.Line)
	}
	if s.Paths.Releases != DefaultPaths.Releases {
		t.Errorf("default releases dir: got %s", s.Paths.Releases)
	}
}

func TestParseSpecErrors(t *testing.T) {
	tests := []struct {
		name    string
		replace [2]string // applied to goodSpec
		want    string    // substring of the error, which starts with file:line: field
	}{
		{"unknown top key", [2]string{"name: ashburn-rcvbuf", "name: ashburn-rcvbuf\nnmae: x"}, "bad.yaml:2: nmae: unknown key; valid keys here: name, hosts"},
		{"unknown relay key", [2]string{"  port: 7788", "  prot: 7788"}, "bad.yaml:9: relay.prot: unknown key"},
		{"sysctl path traversal", [2]string{"net.core.rmem_max: 8388608", "../../etc/passwd: 1"}, "bad.yaml:6: sysctl.../../etc/passwd:"},
		{"sysctl slash", [2]string{"net.core.rmem_max: 8388608", "net/core/rmem_max: 1"}, "bad.yaml:6: sysctl.net/core/rmem_max:"},
		{"sysctl shell", [2]string{"net.core.rmem_max: 8388608", "'net.core.rmem_max;reboot': 1"}, "bad.yaml:6:"},
		{"sysctl space", [2]string{"net.core.rmem_max: 8388608", "'net.core rmem_max': 1"}, "bad.yaml:6:"},
		{"non-numeric value", [2]string{"net.core.rmem_max: 8388608", "net.core.rmem_max: 8M"}, "bad.yaml:6: sysctl.net.core.rmem_max:"},
		{"udp_mem two fields", [2]string{`"  764688	1019584 1529376 "`, `"1 2"`}, "bad.yaml:7: sysctl.net.ipv4.udp_mem:"},
		{"bad version", [2]string{"version: 1.8.0", "version: one-point-eight"}, `bad.yaml:12: relay.release.version: "one-point-eight" is not a version`},
		{"window backwards", [2]string{"not_after: 2026-12-02T05:00:00Z", "not_after: 2026-12-02T03:00:00Z"}, "bad.yaml:19: window.not_after: the window ends (2026-12-02T03:00:00Z) before it starts"},
		{"window not a time", [2]string{"not_before: 2026-12-02T04:00:00Z", "not_before: tomorrow"}, "bad.yaml:18: window.not_before: want an RFC 3339 time"},
		{"port out of range", [2]string{"port: 7788", "port: 70000"}, "bad.yaml:9: relay.port: want a whole number from 1 to 65535"},
		{"so_rcvbuf words", [2]string{"so_rcvbuf: 4194304", "so_rcvbuf: 4MiB"}, "bad.yaml:10: relay.so_rcvbuf:"},
		{"manager", [2]string{"manager: systemd", "manager: upstart"}, `bad.yaml:15: relay.service.manager: want systemd or command, got "upstart"`},
		{"unit option", [2]string{"name: relayd", "name: -Hroot@evil.example"}, `bad.yaml:16: relay.service.name: want a unit name`},
		{"host path", [2]string{"sysctl_file: /etc/sysctl.d/90-relayctl.conf", "sysctl_file: /etc/sysctl.d/../x.conf"}, "bad.yaml:21: host.sysctl_file: want a clean absolute path"},
		{"sysctl file elsewhere", [2]string{"sysctl_file: /etc/sysctl.d/90-relayctl.conf", "sysctl_file: /tmp/x.conf"}, "bad.yaml:21: host.sysctl_file: want a .conf file directly in /etc/sysctl.d"},
		{"duplicate host", [2]string{"  - root@10.0.0.5:2222", "  - relay-ash-1"}, "bad.yaml:4: hosts[1]: relay-ash-1 is listed twice"},
		{"host with shell", [2]string{"  - relay-ash-1", "  - 'relay;id'"}, "bad.yaml:3: hosts[0]: want an ssh_config alias"},
		{"bad yaml", [2]string{"hosts:\n", "hosts:\n  - [\n"}, "bad.yaml:"},
		{"sha256 bad", [2]string{"artifact: ../bin/relayd", "artifact: ../bin/relayd\n    sha256: abc"}, "bad.yaml:14: relay.release.sha256: want 64 lower-case hex digits"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := strings.Replace(goodSpec, tt.replace[0], tt.replace[1], 1)
			if src == goodSpec {
				t.Fatalf("replacement %q not found", tt.replace[0])
			}
			_, err := ParseSpec("bad.yaml", []byte(src))
			if err == nil {
				t.Fatalf("got no error, want %q", tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %q, want it to contain %q", err, tt.want)
			}
			var se *SpecError
			if !errors.As(err, &se) {
				t.Errorf("got %T, want *SpecError", err)
			}
		})
	}
}

func TestParseSpecCommandService(t *testing.T) {
	src := strings.Replace(goodSpec, "    manager: systemd\n    name: relayd\n",
		"    manager: command\n    start: [/opt/relay/bin/relay-service, start]\n    stop: [/opt/relay/bin/relay-service, stop]\n    pid_file: /opt/relay/run/relayd.pid\n", 1)
	s, err := ParseSpec("cmd.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Relay.Service.PIDFile; got != "/opt/relay/run/relayd.pid" {
		t.Errorf("pid file: got %q", got)
	}
	bad := strings.Replace(src, "start: [/opt/relay/bin/relay-service, start]", "start: relay-service start", 1)
	if _, err := ParseSpec("cmd.yaml", []byte(bad)); err == nil || !strings.Contains(err.Error(), "relay.service.start: want a command as a list of words") {
		t.Errorf("string command: got %v", err)
	}
	// An empty word would vanish on the host (no shell): another command
	// than the reviewed one would run.
	empty := strings.Replace(src, "stop: [/opt/relay/bin/relay-service, stop]", `stop: [/opt/relay/bin/relay-service, "", stop]`, 1)
	if _, err := ParseSpec("cmd.yaml", []byte(empty)); err == nil || !strings.Contains(err.Error(), "relay.service.stop: a command word may not be empty") {
		t.Errorf("empty word: got %v", err)
	}
	// The old pid command is refused with what to write instead: plan would
	// run it as root on every host before anyone reviewed it.
	old := strings.Replace(src, "pid_file: /opt/relay/run/relayd.pid", "pid: [/bin/sh, -c, reboot]", 1)
	if _, err := ParseSpec("cmd.yaml", []byte(old)); err == nil || !strings.Contains(err.Error(), "cmd.yaml:18: relay.service.pid: no longer read") || !strings.Contains(err.Error(), "pid_file") {
		t.Errorf("pid argv: got %v", err)
	}
}

// A spec with many mistakes reports every one in one run, sorted by line,
// each with its file, line and field.
func TestParseSpecReportsEveryError(t *testing.T) {
	src := `name: "bad name!"
hosts: [relay-ash-1, relay-ash-1, "-oProxyCommand=x"]
sysctl:
  net.core.rmem_max: 8M
  ../etc: 1
relay:
  port: 70000
  so_rcvbuf: -5
  release: {version: "..", artifact: relayd}
  service: {manager: systemd, name: -Hroot@evil.example}
window: {not_before: garbage, not_after: 2026-12-02T05:00:00Z}
host:
  relay_config: /root/.ssh/authorized_keys
  state_dir: /tmp/x
`
	_, err := ParseSpec("many.yaml", []byte(src))
	var se SpecErrors
	if !errors.As(err, &se) {
		t.Fatalf("got %v (%T), want SpecErrors", err, err)
	}
	want := []string{
		`many.yaml:1: name: want letters`,
		`many.yaml:2: hosts[1]: relay-ash-1 is listed twice`,
		`many.yaml:2: hosts[2]: want an ssh_config alias`,
		`many.yaml:4: sysctl.net.core.rmem_max:`,
		`many.yaml:5: sysctl.../etc:`,
		`many.yaml:7: relay.port: want a whole number from 1 to 65535`,
		`many.yaml:8: relay.so_rcvbuf: want a whole number from 0 to 1073741824, got "-5"`,
		`many.yaml:9: relay.release.version: ".." is not a version`,
		`many.yaml:10: relay.service.name: want a unit name`,
		`many.yaml:11: window.not_before: want an RFC 3339 time`,
		`many.yaml:13: host.relay_config: want a path below`,
		`many.yaml:14: host.state_dir: no longer configurable`,
	}
	if len(se) != len(want) {
		t.Errorf("got %d errors, want %d:\n%v", len(se), len(want), err)
	}
	for i, w := range want {
		if i < len(se) && !strings.HasPrefix(se[i].Error(), w) {
			t.Errorf("error %d: got %q, want it to start with %q", i, se[i].Error(), w)
		}
	}
}

func TestParseSpecHostilePaths(t *testing.T) {
	tests := []struct{ field, value, want string }{
		{"relay_config", "/root/.ssh/authorized_keys", "want a path below"},
		{"relay_config", "/etc/passwd", "among the system's own files (/etc/passwd)"},
		{"relay_config", "/etc/ssh/sshd_config", "among the system's own files (/etc/ssh/)"},
		{"relay_config", "/etc/relay/relayd.env", ""},
		{"relay_config", "/etc/default/relayd", ""},
		{"relay_config", "/etc/nginx/nginx.conf", "want a path of the service's own, with relayd in a folder or file name below /etc"},
		// A name holding relay is still no way into the system's files.
		{"relay_config", "/etc/sudoers.d/relay", "(/etc/sudoers)"},
		{"relay_config", "/etc/cron.d/relayd", "(/etc/cron)"},
		{"relay_config", "/etc/crontab", "(/etc/cron)"},
		{"relay_config", "/etc/systemd/system/relayd.service", "(/etc/systemd/)"},
		{"relay_config", "/etc/profile.d/relay.sh", "(/etc/profile)"},
		{"relay_config", "/etc/ld.so.conf.d/relay.conf", "(/etc/ld.so.)"},
		{"relay_config", "/etc/logrotate.d/relay", "(/etc/logrotate)"},
		{"relay_config", "/etc/relayctl/allowed_signers", "(/etc/relayctl/)"},
		{"relay_config", "/var/lib/relayctl/journal", "(/var/lib/relayctl)"},
		{"releases_dir", "/tmp/relay", "want a path below"},
		{"releases_dir", "/usr/local/bin", "among the system's own files (/usr/local/bin/)"},
		{"releases_dir", "/usr/local/sbin/relay", "(/usr/local/sbin/)"},
		{"releases_dir", "/usr/local/lib/librelay", "(/usr/local/lib/lib)"},
		{"releases_dir", "/srv/relayd/releases", ""},
		{"releases_dir", "/srv/games/releases", "want a path of the service's own"},
		{"current_link", "/opt/relay/releases/current", "inside releases_dir"},
		{"sysctl_file", "/etc/passwd", "want a .conf file directly in /etc/sysctl.d"},
	}
	for _, tt := range tests {
		t.Run(tt.field+" "+tt.value, func(t *testing.T) {
			src := strings.Replace(goodSpec, "host:\n", "host:\n  "+tt.field+": "+tt.value+"\n", 1)
			if tt.field == "sysctl_file" {
				src = strings.Replace(goodSpec, "sysctl_file: /etc/sysctl.d/90-relayctl.conf", "sysctl_file: "+tt.value, 1)
			}
			_, err := ParseSpec("p.yaml", []byte(src))
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("got %v, want it accepted", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("got %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

func TestParseSpecRefusesSecondDocument(t *testing.T) {
	_, err := ParseSpec("two.yaml", []byte(goodSpec+"---\nname: other\n"))
	if err == nil || !strings.Contains(err.Error(), "two.yaml:22: a second YAML document") {
		t.Errorf("got %v, want the second document refused with its line", err)
	}
}

func TestValidUnit(t *testing.T) {
	for _, u := range []string{"relayd", "relayd.service", "relay@7788.service", "relay-ash_1"} {
		if err := ValidUnit(u); err != nil {
			t.Errorf("%q: got %v, want valid", u, err)
		}
	}
	for _, u := range []string{"-Hroot@evil.example", "--host=evil", "", ".hidden", "relay.socket", "relay d", "relay;id"} {
		if err := ValidUnit(u); err == nil {
			t.Errorf("%q: got valid, want refused", u)
		}
	}
}

func FuzzParseSpec(f *testing.F) {
	f.Add([]byte(goodSpec))
	f.Add([]byte("name: x\nhosts: [a]\nrelay: {release: {version: 1, artifact: a}, service: {manager: command, start: [/a], stop: [/b], pid_file: /opt/relay/run/r.pid}}\n"))
	f.Add([]byte("- a\n- b\n"))
	f.Add([]byte("name: &a x\nhosts: *a\n"))
	f.Add([]byte(strings.Replace(goodSpec, "  net.core.rmem_max: 8388608\n", "  net.core.rmem_max: 8388608\n  kernel.core_pattern: \"|/x\"\n", 1) + "unsafe:\n  sysctls_that_run_programs: [kernel.core_pattern]\n"))
	f.Add([]byte(strings.Replace(goodSpec, "  net.core.rmem_max: 8388608\n", "  Kernel.Modprobe: /x\n", 1) + "unsafe: {sysctls_that_run_programs: [kernel.modprobe]}\n"))
	f.Add([]byte(goodSpec + "rollout:\n  soak: {duration: 30s, interval: 1s, max_drop_rate: 0.5, max_players_lost: 20%, no_traffic: continue}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := ParseSpec("fuzz.yaml", data)
		if err != nil {
			return
		}
		// A soak the parser accepts is one apply can run.
		if s.Rollout != nil && s.Rollout.Soak != nil {
			if err := s.Rollout.Soak.Check(); err != nil {
				t.Fatalf("accepted a soak its check refuses: %v", err)
			}
		}
		for _, k := range s.Sysctl {
			if strings.ContainsAny(k.Key, "/ ;'\"$`\\") {
				t.Fatalf("accepted unsafe key %q", k.Key)
			}
		}
		// A sysctl that runs a program as root is there only when allowed.
		if got, all := len(s.RootPrograms()), rootProgramCount(s); got != all {
			t.Fatalf("%d sysctls run a program as root, %d of them allowed", all, got)
		}
	})
}

func rootProgramCount(s *Spec) int {
	n := 0
	for _, c := range s.Sysctl {
		if _, ok := tune.RunsProgram(c.Key, c.Value); ok {
			n++
		}
	}
	return n
}

// The example the README points at must stay a valid spec.
func TestExampleSpecParses(t *testing.T) {
	const file = "examples/ashburn-rcvbuf.yaml"
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	s, err := ParseSpec(file, data)
	if err != nil {
		t.Fatalf("the README's example spec: %v", err)
	}
	if s.Relay.SORcvbuf != 4194304 || s.Sysctl[0].Key != "net.core.rmem_max" || s.Window == nil {
		t.Errorf("example spec: got %+v", s)
	}
}

func TestSpecWarnings(t *testing.T) {
	src := "name: x\nhosts: [a]\nsysctl:\n  net.core.rmem_maxx: 8388608\n  net.core.rmem_default: 262144\n  vendor.acme.turbo: 1\n"
	s, errs := ParseSpecAll("x.yaml", []byte(src))
	if s == nil || len(errs) != 1 || errs[0].Field != "relay" {
		t.Fatalf("ParseSpecAll: got %v, %v; want the spec read and one error (relay missing)", s, errs)
	}
	w := s.Warnings()
	if len(w) != 2 {
		t.Fatalf("got %d warnings (%v), want 2", len(w), w)
	}
	kernel := tune.KnownSysctlsKernel()
	want := []string{
		"x.yaml:4: sysctl.net.core.rmem_maxx: not a sysctl of Linux " + kernel + " (the list relayctl ships, tune/known_sysctls.txt); did you mean net.core.rmem_max?",
		"x.yaml:6: sysctl.vendor.acme.turbo: not a sysctl of Linux " + kernel + " (the list relayctl ships, tune/known_sysctls.txt)",
	}
	for i, e := range w {
		if e.Error() != want[i] {
			t.Errorf("warning %d: got %q, want %q", i, e.Error(), want[i])
		}
	}
}

func TestParseSpecAllNotYAML(t *testing.T) {
	s, errs := ParseSpecAll("x.yaml", []byte("name: [x\n"))
	if s != nil || len(errs) != 1 {
		t.Errorf("got %v, %v; want no spec and one error", s, errs)
	}
}

// relay.service.log names the file the service appends the relay's
// output to, which apply quotes when a read-back finds the relay not
// running: the service's own file, never the system's, and only under
// manager: command (systemd has the unit's journal).
func TestParseSpecServiceLog(t *testing.T) {
	src := strings.Replace(goodSpec, "    manager: systemd\n    name: relayd\n",
		"    manager: command\n    start: [/opt/relay/bin/relay-service, start]\n    stop: [/opt/relay/bin/relay-service, stop]\n    pid_file: /opt/relay/run/relayd.pid\n    log: LOG\n", 1)
	for _, tt := range []struct{ log, want string }{
		{"/opt/relay/log/relayd.log", ""},
		{"/var/log/relayd.log", ""},
		{"/var/log/relay/current", ""},
		{"/etc/shadow", "relay.service.log: /etc/shadow is among the system's own files"},
		{"/var/log/auth.log", "relay.service.log: want a path of the service's own, with relayd in a folder or file name below /var/log"},
		{"/tmp/relayd.log", "relay.service.log: want a path below /var/log/, /opt/, /srv/, /usr/local/, /var/lib/, /etc/"},
		{"/opt/relay/../../etc/shadow", "relay.service.log: want a clean absolute path"},
	} {
		_, err := ParseSpec("cmd.yaml", []byte(strings.Replace(src, "LOG", tt.log, 1)))
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("log %s: %v", tt.log, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("log %s: got %v, want %q", tt.log, err, tt.want)
		}
	}
	s, err := ParseSpec("cmd.yaml", []byte(strings.Replace(src, "LOG", "/opt/relay/log/relayd.log", 1)))
	if err != nil || s.Relay.Service.Log != "/opt/relay/log/relayd.log" {
		t.Errorf("log: %v, %+v", err, s)
	}
	under := strings.Replace(goodSpec, "    name: relayd\n", "    name: relayd\n    log: /opt/relay/log/relayd.log\n", 1)
	if _, err := ParseSpec("sd.yaml", []byte(under)); err == nil || !strings.Contains(err.Error(), "relay.service.log: only for manager: command; under systemd relayctl reads the unit's journal") {
		t.Errorf("log under systemd: got %v", err)
	}
}
