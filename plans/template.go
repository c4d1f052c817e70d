package plans

import (
	"bytes"
	"errors"
	"fmt"
	"path"
	"strconv"
	"strings"
	"text/template"

	"github.com/relayctl/relayctl/internal/lazyre"
)

// A spec's templates (relay.config.templates) render the files that tell
// a service its buffer in its own syntax: a config drop-in in its include
// folder, a drop-in of its systemd unit. They are Go text/template files
// beside the spec; a plan records each one's text (apply renders what was
// reviewed, not what the file says by then), and renders them for each
// host over TemplateData. Only text/template's own functions exist: a
// template can read the planned values and nothing else.

// TemplateData is what a template sees.
type TemplateData struct {
	Host          string            // the host as the spec names it
	Port          int               // relay.port
	Control       string            // relay.control, "" for none
	SORcvbuf      int               // relay.so_rcvbuf
	SORcvbufForce bool              // relay.so_rcvbuf_force
	HandoffSocket string            // relay.handoff_socket
	Version       string            // the release's version, "" for kind none
	Release       string            // the release's folder on the host, "" for kind none
	Program       string            // the program's absolute path on the host (through the current link)
	Sysctl        map[string]string // the planned sysctls, by key
	Vars          map[string]string // relay.config.vars
}

// PlanTemplate is one template as a plan records it.
type PlanTemplate struct {
	Source     string `json:"source"`                 // as the spec names it
	Path       string `json:"path"`                   // the file it renders, on the host
	UnitDropIn bool   `json:"unit_drop_in,omitempty"` // Path is a drop-in of the systemd unit
	SHA256     string `json:"sha256"`                 // of Text
	Text       string `json:"text"`
}

// Roles of the files templates render.
const (
	RoleConfigDropIn  = "config drop-in"
	RoleServiceDropIn = "service unit drop-in"
)

// maxRendered bounds what one template may render.
const maxRendered = 256 << 10

// ParseTemplate parses a template's text, with the template file's name
// in errors (text/template says the line).
func ParseTemplate(name, text string) (*template.Template, error) {
	if len(text) > MaxTemplateSize {
		return nil, fmt.Errorf("%s is %d bytes; a template may have at most %d", name, len(text), MaxTemplateSize)
	}
	return template.New(name).Option("missingkey=error").Parse(text)
}

// RenderTemplate renders a template over d.
func RenderTemplate(name, text string, d TemplateData) (string, error) {
	t, err := ParseTemplate(name, text)
	if err != nil {
		return "", err
	}
	w := &boundedBuffer{max: maxRendered}
	if err := t.Execute(w, d); err != nil {
		return "", err
	}
	return w.String(), nil
}

type boundedBuffer struct {
	bytes.Buffer
	max int
}

var errTooLong = errors.New("the rendered file is longer than 256 KiB")

func (b *boundedBuffer) Write(p []byte) (int, error) {
	if b.Len()+len(p) > b.max {
		return 0, errTooLong
	}
	return b.Buffer.Write(p)
}

// templateLine finds the line text/template names in its errors
// ("template: NAME:LINE:…").
var templateLine = lazyre.New(`^template: [^:]*:([0-9]+):`)

// CheckTemplates parses and renders every template of a spec over a
// sample host, so relayctl validate reports a template's mistakes (a
// misspelt {{.SoRcvbuf}}, a missing variable) with its file and line
// before any host is planned. texts are the templates by source.
func CheckTemplates(s *Spec, texts map[string]string) SpecErrors {
	var errs SpecErrors
	sample := header(s, Artifact{}, texts, false)
	for _, t := range s.Relay.Config.Templates {
		text, ok := texts[t.Source]
		if !ok {
			continue // the caller reported it could not read the file
		}
		if _, err := RenderTemplate(t.Source, text, sample.templateData(sampleHost(s))); err != nil {
			line := 0
			if m := templateLine.FindStringSubmatch(err.Error()); m != nil {
				line, _ = strconv.Atoi(m[1])
			}
			errs = append(errs, &SpecError{File: path.Join(path.Dir(s.File), t.Source), Line: line,
				Msg: fmt.Sprintf("%v (relay.config.templates at %s:%d; a template sees .Host .Port .Control .SORcvbuf .SORcvbufForce .HandoffSocket .Version .Release .Program .Sysctl .Vars)", err, s.File, t.Line)})
		}
	}
	return errs
}

func sampleHost(s *Spec) string {
	if len(s.Hosts) > 0 {
		return s.Hosts[0]
	}
	return "host"
}

// templateData is what the plan's templates see on one host.
func (p *Plan) templateData(host string) TemplateData {
	r := p.Relay
	d := TemplateData{Host: host, Port: r.Port, Control: r.Control, SORcvbuf: r.SORcvbuf, SORcvbufForce: r.SORcvbufForce,
		HandoffSocket: r.HandoffSocket, Sysctl: map[string]string{}, Vars: map[string]string{}}
	for _, s := range p.Sysctl {
		d.Sysctl[s.Key] = s.Value
	}
	for _, v := range r.Config.Vars {
		d.Vars[v.Name] = v.Value
	}
	if r.Kind == ReleaseKindNone {
		d.Program = r.Program
	} else {
		d.Version = r.Version
		d.Release = p.Paths.Releases + "/" + r.Version
		d.Program = p.Paths.Current + "/" + r.Program
	}
	return d
}

// planTemplates are the files the plan's templates render on one host.
func planTemplates(h *HostPlan, p *Plan, f *Facts) []FileChange {
	var out []FileChange
	d := p.templateData(h.Host)
	for _, t := range p.Relay.Config.Templates {
		role := RoleConfigDropIn
		if t.UnitDropIn {
			role = RoleServiceDropIn
		}
		cur := f.File(t.Path)
		if cur.Unsafe != "" {
			h.Blockers = append(h.Blockers, fmt.Sprintf("%s (from %s) was not read: %s; relayctl writes a file only where root alone can change it, never through a symlink: fix it on the host, then plan again", t.Path, t.Source, cur.Unsafe))
			out = append(out, FileChange{Role: role, Path: t.Path})
			continue
		}
		content, err := RenderTemplate(t.Source, t.Text, d)
		if err != nil {
			h.Blockers = append(h.Blockers, fmt.Sprintf("template %s does not render for this host: %v", t.Source, err))
			out = append(out, FileChange{Role: role, Path: t.Path})
			continue
		}
		fc := fileChange(role, t.Path, cur, content, false)
		fc.Masked = cur.Masked
		for i, l := range fc.Diff {
			fc.Diff[i].Text = MaskGenericLine(l.Text)
		}
		out = append(out, fc)
	}
	return out
}

// MaskGenericLine masks a line of a file in the service's own syntax,
// which relayctl cannot read as KEY=VALUE: the whole line, when it holds
// a secret word (a control-key-file, a password: line).
func MaskGenericLine(l string) string {
	t := strings.TrimSpace(l)
	if t == "" || isMasked(t) || !hasSecretWord(t) {
		return l
	}
	return maskValue(t)
}

// MaskGeneric masks every line of such a file (MaskGenericLine).
func MaskGeneric(content string) string { return maskLines(content, MaskGenericLine) }
