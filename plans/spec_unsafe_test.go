package plans

import (
	"errors"
	"strings"
	"testing"
)

// withSysctl adds sysctl lines after rmem_max, and an unsafe section when
// unsafe is not "".
func withSysctl(lines, unsafe string) func(string) string {
	return func(src string) string {
		src = strings.Replace(src, "  net.core.rmem_max: 8388608\n", "  net.core.rmem_max: 8388608\n"+lines, 1)
		if unsafe != "" {
			src += "unsafe:\n" + unsafe
		}
		return src
	}
}

func parseEdited(edit func(string) string) (*Spec, error) {
	src := strings.Replace(goodSpec, "  - root@10.0.0.5:2222\n", "", 1)
	return ParseSpec("u.yaml", []byte(edit(src)))
}

// A sysctl that makes the kernel run a program as root is refused, at its
// line, unless the spec's unsafe section lists it.
func TestRootProgramSysctlsRefused(t *testing.T) {
	for _, tt := range []struct{ line, field string }{
		{`  kernel.core_pattern: "|/tmp/x %p"` + "\n", "sysctl.kernel.core_pattern"},
		{`  kernel.core_pattern: "  |/tmp/x"` + "\n", "sysctl.kernel.core_pattern"}, // written trimmed, so a pipe
		{`  kernel.core_pattern: "@/run/dump.sock"` + "\n", "sysctl.kernel.core_pattern"},
		{"  kernel.modprobe: /tmp/x\n", "sysctl.kernel.modprobe"},
		{"  kernel.hotplug: /tmp/x\n", "sysctl.kernel.hotplug"},
		{"  kernel.poweroff_cmd: /tmp/x\n", "sysctl.kernel.poweroff_cmd"},
		{`  kernel.usermodehelper.bset: "4294967295 511"` + "\n", "sysctl.kernel.usermodehelper.bset"},
		{`  fs.binfmt_misc.register: ":x:E::x::/tmp/x:C"` + "\n", "sysctl.fs.binfmt_misc.register"},
		{"  fs.binfmt_misc.status: 1\n", "sysctl.fs.binfmt_misc.status"},
	} {
		_, err := parseEdited(withSysctl(tt.line, ""))
		var se *SpecError
		if !errors.As(err, &se) || se.Field != tt.field || se.Line != 6 ||
			!strings.Contains(se.Msg, "makes the kernel run a program as root") || !strings.Contains(se.Msg, "unsafe.sysctls_that_run_programs") {
			t.Errorf("%s: got %v, want an error at u.yaml:6 %s", strings.TrimSpace(tt.line), err, tt.field)
		}
	}
	// A core_pattern that names a file runs nothing.
	if _, err := parseEdited(withSysctl("  kernel.core_pattern: /var/crash/core.%e.%p\n", "")); err != nil {
		t.Errorf("a file core_pattern: %v", err)
	}
}

func TestRootProgramSysctlsAllowed(t *testing.T) {
	s, err := parseEdited(withSysctl(`  kernel.core_pattern: "|/usr/lib/systemd/systemd-coredump %P"`+"\n", "  sysctls_that_run_programs: [kernel.core_pattern]\n"))
	if err != nil {
		t.Fatal(err)
	}
	r := s.RootPrograms()
	if len(r) != 1 || r[0].Key != "kernel.core_pattern" || !strings.Contains(r[0].Why, "runs /usr/lib/systemd/systemd-coredump as root") {
		t.Fatalf("RootPrograms: %+v", r)
	}
	w := s.Warnings()
	if len(w) != 1 || w[0].Line != 6 || !strings.Contains(w[0].Msg, "runs a program as root, allowed by unsafe.sysctls_that_run_programs") {
		t.Errorf("warnings: %v", w)
	}
}

func TestUnsafeSectionErrors(t *testing.T) {
	for _, tt := range []struct{ lines, unsafe, want string }{
		{"", "  sysctls_that_run_programs: [kernel.modprobe]\n", "kernel.modprobe is not set by this spec to a value that runs a program"},
		{"", "  sysctls_that_run_programs: [net.core.rmem_max]\n", "net.core.rmem_max is not set by this spec to a value that runs a program"},
		{"  kernel.core_pattern: core\n", "  sysctls_that_run_programs: [kernel.core_pattern]\n", "kernel.core_pattern is not set by this spec to a value that runs a program"},
		{"  kernel.modprobe: /x\n", "  sysctls_that_run_programs: [kernel.modprobe, kernel.modprobe]\n", "kernel.modprobe is listed twice"},
		{"", "  sysctls_that_run_programs: kernel.modprobe\n", "want a list of sysctl keys"},
		{"", "  sysctls_that_run_programs: [\"../x\"]\n", "sysctl key"},
		{"", "  allow_everything: true\n", "unsafe.allow_everything: unknown key"},
	} {
		_, err := parseEdited(withSysctl(tt.lines, tt.unsafe))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: got %v, want %q", tt.unsafe, err, tt.want)
		}
	}
}

// The plan and its review show such a sysctl as what it is, and apply
// (Validate) refuses a plan whose recorded spec lost its unsafe section.
func TestRootProgramSysctlsInPlanAndReview(t *testing.T) {
	spec := incidentSpec(t, withSysctl(`  kernel.core_pattern: "|/usr/lib/systemd/systemd-coredump %P"`+"\n", "  sysctls_that_run_programs: [kernel.core_pattern]\n"))
	f := incidentFacts()
	f.Sysctls["kernel.core_pattern"] = SysctlFact{Exists: true, Value: "core", Writable: true}
	p := makePlan(t, spec, f)
	var got string
	for _, c := range p.Sysctl {
		if c.Key == "kernel.core_pattern" {
			got = c.RunsProgram
		}
	}
	if !strings.Contains(got, "runs /usr/lib/systemd/systemd-coredump as root at every core dump") {
		t.Errorf("plan sysctl runs_program: %q", got)
	}
	md := string(p.Markdown("x.plan"))
	for _, want := range []string{
		"## Read first\n\n- **RUNS A PROGRAM AS ROOT** `kernel.core_pattern` = `|/usr/lib/systemd/systemd-coredump %P`: the kernel runs /usr/lib/systemd/systemd-coredump as root",
		"(allowed by the spec's unsafe.sysctls_that_run_programs)",
		"| `kernel.core_pattern` | `core` | `\\|/usr/lib/systemd/systemd-coredump %P` **runs a program as root** |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("review lacks %q:\n%s", want, md)
		}
	}
	if err := Validate(reload(t, p)); err != nil {
		t.Fatalf("the plan as made: %v", err)
	}
	p.Spec = strings.Replace(p.Spec, "unsafe:\n  sysctls_that_run_programs: [kernel.core_pattern]\n", "", 1)
	p.SpecSHA256 = "sha256:" + sha256Text(p.Spec)
	err := Validate(reload(t, p))
	if !errors.Is(err, ErrPlanEdited) || !strings.Contains(err.Error(), "sysctl.kernel.core_pattern: makes the kernel run a program as root") {
		t.Errorf("plan without the opt-in: got %v", err)
	}
}
