package plans

import (
	"strings"
	"testing"

	"github.com/relayctl/relayctl/relay/capability"
)

// unboundSpec is a packaged DNS resolver tuned through its own config
// syntax: no release, no env file, a conf.d drop-in from a template.
const unboundSpec = `name: resolvers
hosts: [dns-1]
sysctl:
  net.core.rmem_max: 8388608
relay:
  port: 53
  so_rcvbuf: 4194304
  release:
    kind: none
    program: /usr/sbin/unbound
  config:
    env_file: false
    templates:
      - source: unbound-rcvbuf.conf.tmpl
        path: /etc/unbound/unbound.conf.d/90-relayctl.conf
    vars:
      threads: "2"
  service:
    manager: systemd
    name: unbound
    reload_keeps_socket: false
`

const unboundTemplate = "server:\n  so-rcvbuf: {{.SORcvbuf}}\n  num-threads: {{.Vars.threads}}\n  port: {{.Port}}\n"

func unboundFacts() *Facts {
	f := incidentFacts()
	f.Host = "dns-1"
	f.Release = RelayRelease{RunningExe: "/usr/sbin/unbound"}
	f.Config = FileFact{}
	f.Socket = SocketFact{Found: true, Port: 53, Rcvbuf: 212992, Inode: 11,
		All: []SocketEntry{{Local: "127.0.0.1", Rcvbuf: 212992, Inode: 11, PID: 4242}, {Local: "::1", Rcvbuf: 212992, Inode: 12, PID: 4242}}}
	f.Files = map[string]FileFact{"/etc/unbound/unbound.conf.d/90-relayctl.conf": {}}
	return f
}

func planOf(t *testing.T, src string, texts map[string]string, f *Facts) *Plan {
	t.Helper()
	s, err := ParseSpec("dns.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if errs := CheckTemplates(s, texts); len(errs) > 0 {
		t.Fatal(errs)
	}
	p, err := Make(Input{Spec: s, Facts: []*Facts{f}, Templates: texts, Steps: testSteps})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestPlanOfAServiceWithNoRelease(t *testing.T) {
	p := planOf(t, unboundSpec, map[string]string{"unbound-rcvbuf.conf.tmpl": unboundTemplate}, unboundFacts())
	h := p.Hosts[0]
	if p.Relay.Kind != ReleaseKindNone || p.Relay.Control != "" || p.Relay.SHA256 != "" || h.Release.Action != ReleaseKeep {
		t.Errorf("relay %+v, release %+v: want kind none, no control plane, nothing shipped", p.Relay, h.Release)
	}
	if h.File(RoleRelayConfig) != nil {
		t.Error("env_file: false, yet the plan writes a relay config")
	}
	fc := h.File(RoleConfigDropIn)
	if fc == nil || !fc.Change || fc.Path != "/etc/unbound/unbound.conf.d/90-relayctl.conf" || !strings.Contains(fc.Content, "so-rcvbuf: 4194304\n  num-threads: 2\n  port: 53") {
		t.Fatalf("config drop-in: %+v", fc)
	}
	if h.Readback.Expected != 8388608 || len(h.Readback.Sockets) != 2 || !h.Restart || h.Switch != SwitchRestart {
		t.Errorf("readback %+v restart %v switch %s: want 2 sockets to end at 8388608 after a restart", h.Readback, h.Restart, h.Switch)
	}
	md := string(p.Markdown("dns.plan"))
	for _, want := range []string{"none: the service as each host has it (`/usr/sbin/unbound`)", "Control plane: none", "Template `unbound-rcvbuf.conf.tmpl`",
		"Writes on each host: `/etc/sysctl.d/90-relayctl.conf`, `/etc/unbound/unbound.conf.d/90-relayctl.conf`", "+    so-rcvbuf: 4194304", "rendered from `unbound-rcvbuf.conf.tmpl`; relayctl writes the whole file", "2 sockets now (127.0.0.1 rb 212992, ::1 rb 212992)"} {
		if !strings.Contains(md, want) {
			t.Errorf("review lacks %q", want)
		}
	}
	// Applied: the drop-in in place, both sockets at the new rb: nothing to do.
	f := unboundFacts()
	f.Files["/etc/unbound/unbound.conf.d/90-relayctl.conf"] = FileFact{Exists: true, Content: fc.Content}
	f.Sysctls["net.core.rmem_max"] = SysctlFact{Exists: true, Value: "8388608", Writable: true}
	f.SysctlFiles = append(f.SysctlFiles, ConfFile{Path: "/etc/sysctl.d/90-relayctl.conf", Content: h.File(RoleSysctlDropIn).Content})
	f.Socket.Rcvbuf = 8388608
	f.Socket.All[0].Rcvbuf, f.Socket.All[1].Rcvbuf = 8388608, 8388608
	if h2 := planOf(t, unboundSpec, map[string]string{"unbound-rcvbuf.conf.tmpl": unboundTemplate}, f).Hosts[0]; h2.Action != ActionNone {
		t.Errorf("applied host: action %s, restart %v", h2.Action, h2.Restart)
	}
	// One socket of two at the old rb is not done.
	f.Socket.All[1].Rcvbuf = 212992
	if h3 := planOf(t, unboundSpec, map[string]string{"unbound-rcvbuf.conf.tmpl": unboundTemplate}, f).Hosts[0]; !h3.Restart {
		t.Error("a socket still at the old rb: no restart planned")
	}
}

func TestTemplateMistakesNameTheirLine(t *testing.T) {
	s, err := ParseSpec("dns.yaml", []byte(unboundSpec))
	if err != nil {
		t.Fatal(err)
	}
	errs := CheckTemplates(s, map[string]string{"unbound-rcvbuf.conf.tmpl": "server:\n  so-rcvbuf: {{.SoRcvbuf}}\n"})
	if len(errs) != 1 || errs[0].File != "unbound-rcvbuf.conf.tmpl" || errs[0].Line != 2 || !strings.Contains(errs[0].Msg, "SoRcvbuf") {
		t.Errorf("got %v, want the misspelt field at unbound-rcvbuf.conf.tmpl:2", errs)
	}
	errs = CheckTemplates(s, map[string]string{"unbound-rcvbuf.conf.tmpl": "{{.Vars.nope}}"})
	if len(errs) != 1 || !strings.Contains(errs[0].Error(), "nope") {
		t.Errorf("missing variable: got %v", errs)
	}
}

// The planner reloads only where a reload gives the service its buffer,
// and says why it restarts otherwise.
func TestReloadOrRestart(t *testing.T) {
	reloading := strings.Replace(unboundSpec, "reload_keeps_socket: false", "reload_keeps_socket: true", 1)
	texts := map[string]string{"unbound-rcvbuf.conf.tmpl": unboundTemplate}
	h := planOf(t, reloading, texts, unboundFacts()).Hosts[0]
	if h.Switch != SwitchReload || !strings.Contains(h.SwitchWhy, "systemctl reload unbound") {
		t.Errorf("switch %s (%s), want a reload", h.Switch, h.SwitchWhy)
	}
	asksNot := strings.Replace(reloading, "so_rcvbuf: 4194304", "so_rcvbuf: 0", 1)
	h = planOf(t, asksNot, texts, unboundFacts()).Hosts[0]
	if h.Switch != SwitchRestart || !strings.Contains(h.SwitchWhy, "not a reload: the service never calls setsockopt(SO_RCVBUF)") {
		t.Errorf("never asks: switch %s (%s), want a restart saying rmem_default needs a new socket", h.Switch, h.SwitchWhy)
	}
	unit := strings.Replace(reloading, "path: /etc/unbound/unbound.conf.d/90-relayctl.conf", "unit_drop_in: 90-relayctl.conf", 1)
	f := unboundFacts()
	f.Files = map[string]FileFact{"/etc/systemd/system/unbound.service.d/90-relayctl.conf": {}}
	h = planOf(t, unit, texts, f).Hosts[0]
	if h.Switch != SwitchRestart || !strings.Contains(h.SwitchWhy, "which systemd reads only at a restart") {
		t.Errorf("unit drop-in: switch %s (%s), want a restart", h.Switch, h.SwitchWhy)
	}
}

func TestPruneKeepsCurrentAndRollbackTarget(t *testing.T) {
	s := incidentSpec(t, func(src string) string {
		return strings.Replace(src, "    version: 1.8.0\n", "    version: 1.8.0\n    keep: 3\n", 1)
	})
	f := incidentFacts()
	f.Release.Installed = []string{"1.10.0", "1.5.0", "1.6.0", "1.7.0", "1.9.0"}
	a, b, c := strings.Repeat("a", 64), strings.Repeat("b", 64), strings.Repeat("c", 64)
	f.Release.Stored = []string{c, b, a, strings.Repeat("ab", 32)}
	p, err := Make(Input{Spec: s, Facts: []*Facts{f}, Artifact: Artifact{SHA256: strings.Repeat("ab", 32), Size: 9, VersionFrom: capability.FromMarker}, Steps: testSteps})
	if err != nil {
		t.Fatal(err)
	}
	r := p.Hosts[0].Release
	// Kept: 1.8.0 (planned), 1.7.0 (current, the rollback target), 1.10.0 (newest).
	if strings.Join(r.Prune, " ") != "1.5.0 1.6.0 1.9.0" {
		t.Errorf("prune %v, want 1.5.0 1.6.0 1.9.0", r.Prune)
	}
	if strings.Join(r.PruneStore, " ") != a {
		t.Errorf("prune store %v, want the oldest entry but the planned one", r.PruneStore)
	}
	if md := string(p.Markdown("x.plan")); !strings.Contains(md, "After a window that succeeds, removes: `/opt/relay/releases/1.5.0`") {
		t.Errorf("review does not list what the window removes")
	}
}

func TestParseSpecOfAnyService(t *testing.T) {
	tests := []struct{ name, from, to, want string }{
		{"bad kind", "kind: none", "kind: rpm", "relay.release.kind: want one of binary, tarball, folder, none"},
		{"none with a version", "kind: none", "kind: none\n    version: 1.0.0", "a release of kind none ships nothing"},
		{"none without a program", "    program: /usr/sbin/unbound\n", "", "relay.release.program: missing"},
		{"tarball without a program", "kind: none\n    program: /usr/sbin/unbound", "kind: tarball\n    version: 1.0.0\n    artifact: r.tar.gz", "the program inside the tarball"},
		{"program out of the release", "kind: none\n    program: /usr/sbin/unbound", "kind: tarball\n    version: 1.0.0\n    artifact: r.tar.gz\n    program: ../x", "no leading /, no .."},
		{"path and unit drop-in", "        path: /etc/unbound/unbound.conf.d/90-relayctl.conf", "        path: /etc/unbound/x.conf\n        unit_drop_in: x.conf", "give path (a config file on the host) or unit_drop_in"},
		{"another program's file", "/etc/unbound/unbound.conf.d/90-relayctl.conf", "/etc/nginx/conf.d/x.conf", "want a path of the service's own, with unbound in a folder or file name below /etc"},
		{"a system file", "/etc/unbound/unbound.conf.d/90-relayctl.conf", "/etc/cron.d/unbound", "among the system's own files (/etc/cron)"},
		{"bad var", "      threads: \"2\"", "      2threads: x", "want a name of letters, digits and _ starting with a letter"},
		{"misspelt key", "    env_file: false", "    envfile: false", "relay.config.envfile: unknown key"},
		{"keys without env file", "    env_file: false", "    env_file: false\n    keys: {so_rcvbuf: X}", "but env_file is false"},
		{"reload under command without a command", "    manager: systemd\n    name: unbound\n    reload_keeps_socket: false", "    manager: command\n    start: [/usr/sbin/unbound]\n    stop: [/bin/true]\n    pid_file: /run/unbound.pid\n    reload_keeps_socket: true", "relay.service.reload: missing"},
		{"control none spelled out", "  port: 53\n", "  port: 53\n  control: nowhere\n", "or none for a service without a control plane"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := strings.Replace(unboundSpec, tt.from, tt.to, 1)
			if src == unboundSpec {
				t.Fatal("the edit did not apply")
			}
			_, err := ParseSpec("dns.yaml", []byte(src))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want an error containing %q", err, tt.want)
			}
		})
	}
	if _, err := ParseSpec("dns.yaml", []byte(unboundSpec)); err != nil {
		t.Errorf("the unbound spec: %v", err)
	}
}
