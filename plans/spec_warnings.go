package plans

import "github.com/relayctl/relayctl/tune"

// Warnings are what is odd but not wrong in a spec, by line: a sysctl key
// that is not a sysctl of the kernel relayctl's list comes from (likely a
// typo, with the nearest key; a host's own /proc/sys decides at plan time),
// and a sysctl that makes the kernel run a program as root, which the
// spec's unsafe section allowed.
func (s *Spec) Warnings() []*SpecError {
	var out []*SpecError
	for _, k := range s.Sysctl {
		if !tune.IsKnownSysctl(k.Key) {
			out = append(out, &SpecError{File: s.File, Line: k.Line, Field: "sysctl." + k.Key, Msg: tune.UnknownSysctlHint(k.Key)})
		}
	}
	for _, r := range s.RootPrograms() {
		out = append(out, &SpecError{File: s.File, Line: r.Line, Field: "sysctl." + r.Key,
			Msg: "runs a program as root, allowed by " + rootProgramsField + ": " + r.Why})
	}
	SortSpecErrors(out)
	return out
}
