package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"

	"github.com/urfave/cli/v2"

	"github.com/relayctl/relayctl/internal/invprogram"
	"github.com/relayctl/relayctl/plans"
)

func validateCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:      "validate",
		Usage:     "check specs offline and report every problem at once",
		ArgsUsage: "SPEC...",
		Description: `Checks each spec without reaching any host (no SSH, no DNS): the parser
plan uses, and the release artifact (found, relative to the spec, and its
sha256 when the spec gives one). Every error is reported in one run, each
as file:line: field: message, sorted by line. A sysctl key that is not a
sysctl of the kernel relayctl's list comes from (tune/known_sysctls.txt)
is a warning with the nearest known key; plan asks each host's /proc/sys.
A spec whose hosts an inventory program prints (hosts.inventory.program)
has it run here, with your rights, only with --allow-inventory-program or
where /etc/relayctl/inventory-programs lists it (docs/inventory.md).

Errors and warnings go to stderr, one line per spec to stdout. With --json,
one document on stdout instead (format_version 1): valid, and per spec its
file, valid and diagnostics (severity, line, field, message).

Exit status: 0 every spec is valid (warnings allowed), 1 otherwise.

Examples:
   relayctl validate plans/examples/ashburn-rcvbuf.yaml
   relayctl validate plans/examples/*.yaml --json
   relayctl validate fleet.yaml --allow-inventory-program`,
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "json", Usage: "print the result as JSON on stdout"},
			allowProgramFlag(),
		},
		Action: func(c *cli.Context) error { return runValidate(c, e) },
	}
}

// ValidateFormatVersion is the layout version of validate --json.
const ValidateFormatVersion = 1

// validateReport is validate --json.
type validateReport struct {
	FormatVersion int             `json:"format_version"`
	Valid         bool            `json:"valid"`
	Specs         []specDiagnosis `json:"specs"`
}

type specDiagnosis struct {
	File        string       `json:"file"`
	Valid       bool         `json:"valid"`
	Diagnostics []diagnostic `json:"diagnostics"`
}

// diagnostic is one problem of a spec; line 0 is the file as a whole.
type diagnostic struct {
	Severity string `json:"severity"`       // error or warning
	File     string `json:"file,omitempty"` // another file than the spec's: its inventory, a vars file
	Line     int    `json:"line"`
	Field    string `json:"field,omitempty"`
	Message  string `json:"message"`
	text     string // file:line: field: message
}

func runValidate(c *cli.Context, e *env) error {
	if c.NArg() == 0 {
		return withHint(errors.New("validate needs at least one SPEC"), "relayctl validate plans/examples/ashburn-rcvbuf.yaml")
	}
	rep := validateReport{FormatVersion: ValidateFormatVersion, Valid: true, Specs: []specDiagnosis{}}
	for _, file := range c.Args().Slice() {
		sc := examineSpec(file, inventoryAllow(c))
		d := specDiagnosis{File: file, Valid: len(sc.errs) == 0 && sc.readErr == nil, Diagnostics: sc.diagnostics()}
		rep.Valid = rep.Valid && d.Valid
		rep.Specs = append(rep.Specs, d)
		if c.Bool("json") {
			continue
		}
		for _, x := range d.Diagnostics {
			fmt.Fprintf(e.stderr, "relayctl: %s: %s\n", x.Severity, plans.Visible(x.text))
		}
		var h *hintError
		if errors.As(sc.readErr, &h) {
			fmt.Fprintf(e.stderr, "relayctl: hint: %s\n", plans.Visible(h.hint))
		}
		fmt.Fprintf(e.stdout, "%s: %s\n", plans.Visible(file), sc.summary())
	}
	if c.Bool("json") {
		if err := writeJSON(e.stdout, rep); err != nil {
			return err
		}
	}
	if !rep.Valid {
		return &exitCode{code: 1}
	}
	return nil
}

// specFindings is a spec read and checked offline, as validate reports it and
// plan needs it: every error found, the warnings, and the release artifact.
type specFindings struct {
	spec      *plans.Spec // nil when it could not be read at all
	artifact  plans.Artifact
	release   []byte            // the artifact's bytes, when relayctl uploads them
	templates map[string]string // the templates' texts, by source
	readErr   error             // the file could not be read
	errs      plans.SpecErrors
	warnings  []*plans.SpecError
}

// examineSpec reads a spec and checks everything that needs no host: the
// spec itself, its inventory (running its program where allow lets it)
// and, when it names one, the artifact.
func examineSpec(file string, allow invprogram.Allow) *specFindings {
	sc := &specFindings{}
	data, err := readSpecFile(file)
	if err != nil {
		sc.readErr = err
		return sc
	}
	sc.spec, sc.errs = plans.ParseSpecAll(file, data)
	if sc.spec == nil {
		return sc
	}
	sc.warnings = sc.spec.Warnings()
	sc.selectHosts(allow)
	var terrs plans.SpecErrors
	sc.templates, terrs = readTemplates(sc.spec)
	sc.errs = append(sc.errs, terrs...)
	if len(terrs) == 0 && len(sc.errs) == 0 {
		sc.errs = append(sc.errs, plans.CheckTemplates(sc.spec, sc.templates)...)
	}
	// A release the hosts fetch from a url may have no local artifact:
	// readArtifact then gives the spec's sha256.
	if sc.spec.Relay.Release.Artifact != "" || sc.spec.Relay.Release.URL != "" {
		art, data, warns, err := readArtifact(sc.spec)
		sc.warnings = append(sc.warnings, warns...)
		var se *plans.SpecError
		switch {
		case errors.As(err, &se):
			sc.errs = append(sc.errs, se)
		case err != nil:
			sc.errs = append(sc.errs, &plans.SpecError{File: file, Line: sc.spec.Relay.Release.Line, Field: "relay.release.artifact", Msg: err.Error()})
		case sc.spec.Relay.Release.SHA256 != "" && sc.spec.Relay.Release.SHA256 != art.SHA256:
			sc.errs = append(sc.errs, &plans.SpecError{File: file, Line: sc.spec.Relay.Release.Line, Field: "relay.release.artifact",
				Msg: fmt.Sprintf("%s has sha256 %s, but relay.release.sha256 says %s; rebuild it or fix the spec", sc.spec.Relay.Release.Artifact, art.SHA256, sc.spec.Relay.Release.SHA256)})
		}
		sc.artifact, sc.release = art, data
	}
	plans.SortSpecErrors(sc.errs)
	return sc
}

// err is every error of the spec as one error (nil when it is valid).
func (sc *specFindings) err() error {
	if sc.readErr != nil {
		return sc.readErr
	}
	if len(sc.errs) > 0 {
		return sc.errs
	}
	return nil
}

// diagnostics are the errors and warnings, sorted by line.
func (sc *specFindings) diagnostics() []diagnostic {
	out := []diagnostic{}
	if sc.readErr != nil {
		return append(out, diagnostic{Severity: "error", Message: sc.readErr.Error(), text: sc.readErr.Error()})
	}
	add := func(sev string, es []*plans.SpecError) {
		for _, x := range es {
			d := diagnostic{Severity: sev, Line: x.Line, Field: x.Field, Message: x.Msg, text: x.Error()}
			if sc.spec != nil && x.File != sc.spec.File {
				d.File = x.File
			}
			out = append(out, d)
		}
	}
	add("error", sc.errs)
	add("warning", sc.warnings)
	// The spec's own first, by line; then each other file's, by line.
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].File != out[j].File {
			return out[i].File < out[j].File
		}
		return out[i].Line < out[j].Line
	})
	return out
}

// summary is validate's line on stdout for one spec.
func (sc *specFindings) summary() string {
	switch {
	case sc.readErr != nil:
		return "cannot be read"
	case len(sc.errs) > 0:
		return fmt.Sprintf("%s, %s", count(len(sc.errs), "error"), count(len(sc.warnings), "warning"))
	}
	s := sc.spec
	msg := fmt.Sprintf("valid: %s, %s, %s", count(len(s.Hosts), "host"), count(len(s.Sysctl), "sysctl"), releaseWords(s))
	if s.Inventory != nil {
		msg = fmt.Sprintf("valid: %s selected from %s by %s, %s, %s", count(len(s.Hosts), "host"), plans.Visible(s.Inventory.Source()), plans.Visible(s.Inventory.Pattern), count(len(s.Sysctl), "sysctl"), releaseWords(s))
	}
	if len(sc.warnings) > 0 {
		msg += ", " + count(len(sc.warnings), "warning")
	}
	return msg
}

// releaseWords is the spec's release in validate's summary: "release
// 1.8.0", or for a release of kind none the installed program it keeps.
func releaseWords(s *plans.Spec) string {
	if s.Relay.Release.Kind == plans.ReleaseKindNone {
		return "no release (kind none: the installed " + plans.Visible(s.Relay.Release.Program) + " is kept)"
	}
	return "release " + s.Relay.Release.Version
}

func count(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// loadSpec is examineSpec for a command about to use the spec: warnings go
// to stderr, and any error is the command's error, every problem at once.
func loadSpec(e *env, file string, allow invprogram.Allow) (*specFindings, error) {
	sc := examineSpec(file, allow)
	for _, w := range sc.warnings {
		fmt.Fprintf(e.stderr, "relayctl: warning: %s\n", plans.Visible(w.Error()))
	}
	if err := sc.err(); err != nil {
		return nil, err
	}
	return sc, nil
}

// writeJSON writes one JSON document as relayctl prints them: two-space
// indent, no HTML escaping, a final newline.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("encode json: %w", err)
	}
	return nil
}
