package plans

import (
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/relayctl/relayctl/tune"
)

// Unsafe is the spec's unsafe section: what a spec may do only when it says
// so in so many words, where a reviewer reads it.
type Unsafe struct {
	// RootProgramSysctls are the sysctls the spec may set although they make
	// the kernel run a program as root (tune.RunsProgram): a core_pattern
	// pipe, modprobe, the hotplug helper, binfmt_misc.
	RootProgramSysctls []UnsafeKey
}

// UnsafeKey is one key of the unsafe section, with its line.
type UnsafeKey struct {
	Key  string
	Line int
}

const rootProgramsField = "unsafe.sysctls_that_run_programs"

func (p *specParser) unsafe(n *yaml.Node) Unsafe {
	var u Unsafe
	f, ok := p.fields(n, "unsafe", "sysctls_that_run_programs")
	if !ok {
		return u
	}
	list := f["sysctls_that_run_programs"]
	if list == nil {
		return u
	}
	if list.Kind != yaml.SequenceNode {
		p.fail(list, rootProgramsField, "want a list of sysctl keys, e.g. [kernel.core_pattern]")
		return u
	}
	seen := map[string]bool{}
	for _, k := range list.Content {
		key, ok := p.str(k, rootProgramsField)
		if !ok {
			continue
		}
		if err := tune.ValidKey(key); err != nil {
			p.fail(k, rootProgramsField, "%v", err)
			continue
		}
		if seen[strings.ToLower(key)] {
			p.fail(k, rootProgramsField, "%s is listed twice", key)
			continue
		}
		seen[strings.ToLower(key)] = true
		u.RootProgramSysctls = append(u.RootProgramSysctls, UnsafeKey{Key: key, Line: k.Line})
	}
	return u
}

// checkRootPrograms refuses a sysctl that makes the kernel run a program as
// root unless the unsafe section lists it, and a key listed there that the
// spec does not set to such a value: the list says exactly what the review
// must show.
func (p *specParser) checkRootPrograms(s *Spec) {
	allowed := map[string]bool{}
	for _, k := range s.Unsafe.RootProgramSysctls {
		allowed[strings.ToLower(k.Key)] = true
	}
	unsafe := map[string]bool{}
	for _, c := range s.Sysctl {
		why, ok := tune.RunsProgram(c.Key, c.Value)
		if !ok {
			continue
		}
		unsafe[strings.ToLower(c.Key)] = true
		if !allowed[strings.ToLower(c.Key)] {
			p.errs = append(p.errs, &SpecError{File: p.file, Line: c.Line, Field: "sysctl." + c.Key,
				Msg: "makes the kernel run a program as root: " + why + "; relayctl refuses it unless the spec says so: add it to " + rootProgramsField + " (unsafe: {sysctls_that_run_programs: [" + c.Key + "]}), where the review shows it"})
		}
	}
	for _, k := range s.Unsafe.RootProgramSysctls {
		if !unsafe[strings.ToLower(k.Key)] {
			p.errs = append(p.errs, &SpecError{File: p.file, Line: k.Line, Field: rootProgramsField,
				Msg: k.Key + " is not set by this spec to a value that runs a program (those are " + strings.Join(tune.RootProgramKeys, ", ") + "); remove it from the list"})
		}
	}
}

// RootPrograms are the spec's sysctls that make the kernel run a program as
// root and that its unsafe section allows, with why, in the spec's order.
// (A spec that sets one it does not allow does not parse.)
func (s *Spec) RootPrograms() []RootProgram {
	allowed := map[string]bool{}
	for _, k := range s.Unsafe.RootProgramSysctls {
		allowed[strings.ToLower(k.Key)] = true
	}
	var out []RootProgram
	for _, c := range s.Sysctl {
		if why, ok := tune.RunsProgram(c.Key, c.Value); ok && allowed[strings.ToLower(c.Key)] {
			out = append(out, RootProgram{Key: c.Key, Value: c.Value, Why: why, Line: c.Line})
		}
	}
	return out
}

// RootProgram is one sysctl that makes the kernel run a program as root.
type RootProgram struct {
	Key, Value, Why string
	Line            int
}
