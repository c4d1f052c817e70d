package plans

import (
	"errors"
	"os"
	"strings"
	"testing"
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
    name: relay
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
	src := strings.Replace(goodSpec, "    manager: systemd\n    name: relay\n",
		"    manager: command\n    start: [/opt/relay/bin/relay-service, start]\n    stop: [/opt/relay/bin/relay-service, stop]\n    pid: [/opt/relay/bin/relay-service, pid]\n", 1)
	s, err := ParseSpec("cmd.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(s.Relay.Service.PID, " "); got != "/opt/relay/bin/relay-service pid" {
		t.Errorf("pid command: got %q", got)
	}
	bad := strings.Replace(src, "pid: [/opt/relay/bin/relay-service, pid]", "pid: relay-service pid", 1)
	if _, err := ParseSpec("cmd.yaml", []byte(bad)); err == nil || !strings.Contains(err.Error(), "relay.service.pid: want a command as a list of words") {
		t.Errorf("string command: got %v", err)
	}
}

func FuzzParseSpec(f *testing.F) {
	f.Add([]byte(goodSpec))
	f.Add([]byte("name: x\nhosts: [a]\nrelay: {release: {version: 1, artifact: a}, service: {manager: command, start: [/a], stop: [/b], pid: [/c]}}\n"))
	f.Add([]byte("- a\n- b\n"))
	f.Add([]byte("name: &a x\nhosts: *a\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := ParseSpec("fuzz.yaml", data)
		if err != nil {
			return
		}
		for _, k := range s.Sysctl {
			if strings.ContainsAny(k.Key, "/ ;'\"$`\\") {
				t.Fatalf("accepted unsafe key %q", k.Key)
			}
		}
	})
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
