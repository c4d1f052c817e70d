package plans

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// reload re-encodes an edited plan with its checksum recomputed, as anyone
// who can write the plan file can, and loads it again.
func reload(t *testing.T, p *Plan) *Plan {
	t.Helper()
	body, err := p.JSON()
	if err != nil {
		t.Fatal(err)
	}
	q, err := Load("edited.plan", body)
	if err != nil {
		t.Fatalf("a re-checksummed plan must load (the checksum proves nothing): %v", err)
	}
	return q
}

// Every edit a hostile plan editor could make, checksum recomputed, is refused by
// Validate before anything connects.
func TestValidateRefusesRechecksummedEdits(t *testing.T) {
	tests := []struct {
		name string
		edit func(p *Plan)
		want string
	}{
		{"release version ..", func(p *Plan) { p.Relay.Version = ".." }, `relay.version is ".."`},
		{"sysctl file /etc/passwd", func(p *Plan) { p.Paths.SysctlFile = "/etc/passwd" }, `paths.sysctl_file is "/etc/passwd"`},
		{"relay config authorized_keys", func(p *Plan) { p.Paths.RelayConfig = "/root/.ssh/authorized_keys" }, "paths.relay_config"},
		{"extra sysctl", func(p *Plan) {
			p.Sysctl = append(p.Sysctl, PlannedSysctl{Key: "kernel.core_pattern", Value: "|/tmp/x"})
		}, "sysctl is"},
		{"extra host sysctl", func(p *Plan) {
			p.Hosts[0].Sysctls = append(p.Hosts[0].Sysctls, SysctlChange{Key: "kernel.core_pattern", Planned: "|/tmp/x", Change: true})
		}, "2 sysctls, the spec has 1"},
		{"host sysctl swapped", func(p *Plan) {
			p.Hosts[0].Sysctls[0] = SysctlChange{Key: "kernel.core_pattern", Planned: "|/tmp/x", Change: true}
		}, `kernel.core_pattern = "|/tmp/x" is not in the spec`},
		{"pid argv", func(p *Plan) { p.Relay.Service.Start = []string{"/bin/sh", "-c", "reboot"} }, "relay.service.start"},
		{"window garbage", func(p *Plan) { p.Window.NotBefore = "garbage" }, `window.not_before is "garbage"`},
		{"no window", func(p *Plan) { p.Window = nil }, "window"},
		{"unit option", func(p *Plan) { p.Relay.Service = PlanService{Manager: "systemd", Name: "-Hroot@evil.example"} }, "relay.service"},
		{"state dir", func(p *Plan) { p.Paths.StateDir = "/tmp/x" }, "paths.state_dir"},
		{"spec edited", func(p *Plan) { p.Spec = strings.Replace(p.Spec, "8388608", "9999999", 1) }, "spec_sha256"},
		{"spec and hash edited", func(p *Plan) {
			p.Spec = strings.Replace(p.Spec, "version: 1.8.0", "version: ..", 1)
			p.SpecSHA256 = "sha256:" + sha256Text(p.Spec)
		}, `relay.release.version: ".." is not a version`},
		{"expected rb", func(p *Plan) { p.Hosts[0].Readback.Expected = 1 }, "expected rb 1"},
		{"another release on a host", func(p *Plan) { p.Hosts[0].Release.Planned = "9.9.9" }, "release"},
		{"host renamed", func(p *Plan) { p.Hosts[0].Host = "evil" }, "not relay-ash-1"},
		{"escape in a note", func(p *Plan) { p.Hosts[0].Kernel = "6.18\x1b[2J" }, "control character"},
		{"diff op", func(p *Plan) { p.Hosts[0].File(RoleRelayConfig).Diff[0].Op = "\x1b[2J" }, "diff op"},
		{"key change kind", func(p *Plan) { p.Hosts[0].File(RoleRelayConfig).Changes[0].Change = "rewritten" }, `key change "rewritten"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := makePlan(t, incidentSpec(t, nil), incidentFacts())
			if err := Validate(reload(t, p)); err != nil {
				t.Fatalf("the plan as made: %v", err)
			}
			tt.edit(p)
			err := Validate(reload(t, p))
			if !errors.Is(err, ErrPlanEdited) {
				t.Fatalf("got %v, want ErrPlanEdited", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %q, want it to name %q", err, tt.want)
			}
		})
	}
}

func TestValidateFacts(t *testing.T) {
	tests := []struct {
		name string
		edit func(f *Facts)
		want string
	}{
		{"negative rmem_default", func(f *Facts) { f.Sysctls["net.core.rmem_default"] = SysctlFact{Exists: true, Value: "-1"} }, "not a whole number"},
		{"huge sysctl.d file", func(f *Facts) {
			f.SysctlFiles = append(f.SysctlFiles, ConfFile{Path: "/etc/sysctl.d/big.conf", Content: strings.Repeat("#", MaxHostFile+1)})
		}, "bytes (at most"},
		{"kernel with escapes", func(f *Facts) { f.Kernel = "6.18\n| net.core.rmem_max | x |" }, "control character"},
		{"release not a version", func(f *Facts) { f.Release.Current = "../x" }, "not a version"},
		{"running without pid", func(f *Facts) { f.Service.PID = 0 }, "relay pid 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := incidentFacts()
			tt.edit(f)
			err := ValidateFacts(f)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want an error containing %q", err, tt.want)
			}
			if _, err := Make(Input{Spec: incidentSpec(t, nil), Facts: []*Facts{f}, Artifact: testArtifact, Steps: testSteps}); err == nil {
				t.Error("Make accepted the facts")
			}
		})
	}
}

// specField is a spec value that also lands in the plan: set writes v into
// the spec's YAML, get reads it back from a plan.
type specField struct {
	name string
	set  func(src, v string) string
	get  func(p *Plan) string
	put  func(p *Plan, v string)
}

func yamlScalar(v string) string {
	b, _ := yaml.Marshal(v)
	return strings.TrimSuffix(string(b), "\n")
}

var specFields = []specField{
	{"version",
		func(src, v string) string {
			return strings.Replace(src, "version: 1.8.0", "version: "+yamlScalar(v), 1)
		},
		func(p *Plan) string { return p.Relay.Version },
		func(p *Plan, v string) { p.Relay.Version = v }},
	{"relay_config",
		func(src, v string) string {
			return strings.Replace(src, "host:\n", "host:\n  relay_config: "+yamlScalar(v)+"\n", 1)
		},
		func(p *Plan) string { return p.Paths.RelayConfig },
		func(p *Plan, v string) { p.Paths.RelayConfig = v }},
	{"releases_dir",
		func(src, v string) string {
			return strings.Replace(src, "host:\n", "host:\n  releases_dir: "+yamlScalar(v)+"\n", 1)
		},
		func(p *Plan) string { return p.Paths.Releases },
		func(p *Plan, v string) { p.Paths.Releases = v }},
	{"sysctl_file",
		func(src, v string) string {
			return strings.Replace(src, "sysctl_file: /etc/sysctl.d/90-relayctl.conf", "sysctl_file: "+yamlScalar(v), 1)
		},
		func(p *Plan) string { return p.Paths.SysctlFile },
		func(p *Plan, v string) { p.Paths.SysctlFile = v }},
	{"pid_file",
		func(src, v string) string {
			return strings.Replace(src, "pid_file: /opt/relay/run/relayd.pid", "pid_file: "+yamlScalar(v), 1)
		},
		func(p *Plan) string { return p.Relay.Service.PIDFile },
		func(p *Plan, v string) { p.Relay.Service.PIDFile = v }},
	{"start program",
		func(src, v string) string {
			return strings.Replace(src, "start: [/opt/relay/bin/relay-service, start]", "start: ["+yamlScalar(v)+", start]", 1)
		},
		func(p *Plan) string { return p.Relay.Service.Start[0] },
		func(p *Plan, v string) { p.Relay.Service.Start = append([]string{v}, p.Relay.Service.Start[1:]...) }},
	{"control",
		func(src, v string) string {
			return strings.Replace(src, "  port: 7788\n", "  port: 7788\n  control: "+yamlScalar(v)+"\n", 1)
		},
		func(p *Plan) string { return p.Relay.Control },
		func(p *Plan, v string) { p.Relay.Control = v }},
	{"rmem_max",
		func(src, v string) string {
			return strings.Replace(src, "net.core.rmem_max: 8388608", "net.core.rmem_max: "+yamlScalar(v), 1)
		},
		func(p *Plan) string { return p.Sysctl[0].Value },
		func(p *Plan, v string) { p.Sysctl[0].Value = v }},
	{"window start",
		func(src, v string) string {
			return strings.Replace(src, "not_before: 2026-12-02T04:00:00Z", "not_before: "+yamlScalar(v), 1)
		},
		func(p *Plan) string { return p.Window.NotBefore },
		func(p *Plan, v string) { p.Window.NotBefore = v }},
}

// The spec parser and the plan validator keep the same rules: a value the
// validator accepts in a plan is one the spec parser accepts in the spec
// that plan records, and gives the same. A plan can therefore hold nothing a
// spec could not.
func FuzzPlanValidatorMatchesSpecParser(f *testing.F) {
	for i := range specFields {
		for _, v := range []string{"..", "/etc/passwd", "1.8.1", "/opt/relay/run/r.pid", "-Hroot@x", "127.0.0.1:7790", "garbage", "8388609", "2026-12-02T03:00:00Z", "/srv/relay/x.env"} {
			f.Add(uint8(i), v)
		}
	}
	f.Fuzz(func(t *testing.T, which uint8, v string) {
		fld := specFields[int(which)%len(specFields)]
		base := incidentSpec(t, nil)
		p, err := Make(Input{Spec: base, Facts: []*Facts{incidentFacts()}, Artifact: testArtifact, Steps: testSteps})
		if err != nil {
			t.Fatal(err)
		}
		// The value put in the plan only: never valid unless it is the
		// spec's own value.
		orig := fld.get(p)
		fld.put(p, v)
		body, err := p.JSON()
		if err != nil {
			return
		}
		q, err := Load("f.plan", body)
		if err != nil {
			return
		}
		if Validate(q) == nil && v != orig {
			t.Fatalf("%s: a plan edited to %q validates against a spec that says %q", fld.name, v, orig)
		}
		// The value put in the spec: the plan made from it validates iff
		// the spec parses, and carries the value the spec gave.
		src := fld.set(string(base.Source), v)
		s, err := ParseSpec(base.File, []byte(src))
		if err != nil {
			return
		}
		p2, err := Make(Input{Spec: s, Facts: []*Facts{incidentFacts()}, Artifact: testArtifact, Steps: testSteps})
		if err != nil {
			return
		}
		body, _ = p2.JSON()
		q2, err := Load("f.plan", body)
		if err != nil {
			t.Fatalf("%s: a plan made from a valid spec does not load: %v", fld.name, err)
		}
		if err := Validate(q2); err != nil {
			t.Fatalf("%s = %q: the spec parses but its plan does not validate: %v", fld.name, v, err)
		}
	})
}

func TestFlattenNamesFields(t *testing.T) {
	m := flatten(&PlanService{Manager: "command", Start: []string{"/a"}})
	b, _ := json.Marshal(m)
	if m["manager"] != `"command"` || m["start"] != `["/a"]` {
		t.Errorf("got %s", b)
	}
}
