package plans

import (
	"fmt"
	"path"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/relayctl/relayctl/internal/lazyre"
)

// ServiceConfig is how the service is told its buffer, port and the rest:
// relayd's env-file adapter (KEY=VALUE lines relayctl edits in
// host.relay_config, keeping every line it does not manage), and files
// rendered from templates shipped beside the spec: a config drop-in in the
// service's own include folder, a drop-in of its systemd unit. Each is a
// planned file (files.go), backed up, installed and rolled back as one.
type ServiceConfig struct {
	EnvFile   bool    // the env-file adapter is on (the default)
	Keys      EnvKeys // the names it writes the managed values under
	Templates []Template
	// Vars are the spec's own values for the templates ({{.Vars.name}}),
	// sorted by name.
	Vars []Var
}

// EnvKeys name the env-file keys relayctl manages; a key left "" is not
// written. The defaults are relayd's.
type EnvKeys struct {
	Listen        string `json:"listen,omitempty"`          // 0.0.0.0:PORT
	Control       string `json:"control,omitempty"`         // the control plane's address
	SORcvbuf      string `json:"so_rcvbuf,omitempty"`       // bytes asked for
	SORcvbufForce string `json:"so_rcvbuf_force,omitempty"` // true or false
	HandoffSocket string `json:"handoff_socket,omitempty"`  // where the relay listens for its successor
}

// RelaydKeys are relayd's own names for the env-file keys.
var RelaydKeys = EnvKeys{
	Listen: "RELAYD_LISTEN", Control: "RELAYD_CONTROL", SORcvbuf: "RELAYD_SO_RCVBUF",
	SORcvbufForce: "RELAYD_SO_RCVBUF_FORCE", HandoffSocket: "RELAYD_HANDOFF_SOCKET",
}

// Template is one file rendered from a template beside the spec: a config
// drop-in at Path, or (systemd) a drop-in of the service's unit named
// UnitDropIn, in /etc/systemd/system/UNIT.d/.
type Template struct {
	Source     string // as written, relative to the spec's folder
	Path       string
	UnitDropIn string
	Line       int
}

// Target is where the template's file goes on a host of service svc.
func (t Template) Target(svc Service) string {
	if t.UnitDropIn != "" {
		return UnitDropInDir(svc.Name) + "/" + t.UnitDropIn
	}
	return t.Path
}

// Var is one of the spec's template variables.
type Var struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// MaxTemplates bounds a spec's templates; MaxTemplateSize one template.
const (
	MaxTemplates    = 16
	MaxTemplateSize = 64 << 10
)

var (
	envKeyRe     = lazyre.New(`^[A-Za-z_][A-Za-z0-9_]{0,63}$`)
	varNameRe    = lazyre.New(`^[A-Za-z][A-Za-z0-9_]{0,63}$`)
	dropInNameRe = lazyre.New(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}\.conf$`)
)

func (p *specParser) serviceConfig(n *yaml.Node, svc Service) ServiceConfig {
	c := ServiceConfig{EnvFile: true, Keys: RelaydKeys}
	if n == nil {
		return c
	}
	f, ok := p.fields(n, "relay.config", "env_file", "keys", "templates", "vars")
	if !ok {
		return c
	}
	if v := f["env_file"]; v != nil {
		c.EnvFile, _ = p.boolean(v, "relay.config.env_file")
	}
	if v := f["keys"]; v != nil {
		if !c.EnvFile {
			p.fail(v, "relay.config.keys", "the keys of the env file, but env_file is false; remove one of them")
		}
		c.Keys = p.envKeys(v)
	}
	if v := f["templates"]; v != nil {
		c.Templates = p.templates(v, svc)
	}
	if v := f["vars"]; v != nil {
		c.Vars = p.vars(v)
	}
	return c
}

func (p *specParser) envKeys(n *yaml.Node) EnvKeys {
	k := RelaydKeys
	f, ok := p.fields(n, "relay.config.keys", "listen", "control", "so_rcvbuf", "so_rcvbuf_force", "handoff_socket")
	if !ok {
		return k
	}
	for _, x := range []struct {
		name string
		dst  *string
	}{{"listen", &k.Listen}, {"control", &k.Control}, {"so_rcvbuf", &k.SORcvbuf},
		{"so_rcvbuf_force", &k.SORcvbufForce}, {"handoff_socket", &k.HandoffSocket}} {
		name, dst := x.name, x.dst
		v := f[name]
		if v == nil {
			continue
		}
		field := "relay.config.keys." + name
		if v.Kind == yaml.ScalarNode && (v.Tag == "!!null" || v.Value == "") {
			*dst = "" // not written
			continue
		}
		s, ok := p.str(v, field)
		if !ok {
			continue
		}
		if !envKeyRe.MatchString(s) {
			p.fail(v, field, "want a key name of letters, digits and _ (not starting with a digit), or \"\" to leave it unwritten, got %q", s)
			continue
		}
		*dst = s
	}
	return k
}

func (p *specParser) templates(n *yaml.Node, svc Service) []Template {
	if n.Kind != yaml.SequenceNode || len(n.Content) == 0 {
		p.fail(n, "relay.config.templates", "want a list of templates, each {source: FILE, path: PATH} or {source: FILE, unit_drop_in: NAME.conf}")
		return nil
	}
	if len(n.Content) > MaxTemplates {
		p.fail(n, "relay.config.templates", "%d templates; at most %d", len(n.Content), MaxTemplates)
		return nil
	}
	var out []Template
	for i, tn := range n.Content {
		field := fmt.Sprintf("relay.config.templates[%d]", i)
		f, ok := p.fields(tn, field, "source", "path", "unit_drop_in")
		if !ok {
			continue
		}
		t := Template{Line: tn.Line}
		if v := f["source"]; v == nil {
			p.fail(tn, field+".source", "missing; the template file, relative to the spec's folder")
		} else if s, ok := p.str(v, field+".source"); ok {
			if strings.ContainsAny(s, "\x00\n\r") || len(s) > 4096 || s == "" {
				p.fail(v, field+".source", "want a file path, got %q", s)
			} else {
				t.Source, t.Line = s, v.Line
			}
		}
		switch {
		case (f["path"] == nil) == (f["unit_drop_in"] == nil):
			p.fail(tn, field, "give path (a config file on the host) or unit_drop_in (a drop-in of the systemd unit, e.g. 90-relayctl.conf), one of them")
		case f["path"] != nil:
			t.Path, _ = p.hostPath(f["path"], field+".path")
		default:
			v := f["unit_drop_in"]
			if svc.Manager != "systemd" {
				p.fail(v, field+".unit_drop_in", "a unit drop-in is for manager: systemd")
			} else if s, ok := p.str(v, field+".unit_drop_in"); ok {
				if !dropInNameRe.MatchString(s) || s == unitDropInForce {
					p.fail(v, field+".unit_drop_in", "want a drop-in file name ending in .conf, of letters, digits and ._- (not %s, relayctl's own), got %q", unitDropInForce, s)
				} else {
					t.UnitDropIn = s
				}
			}
		}
		out = append(out, t)
	}
	seen := map[string]bool{}
	for i, t := range out {
		target := t.Target(svc)
		if target != "" && seen[target] {
			p.fail(n.Content[i], fmt.Sprintf("relay.config.templates[%d]", i), "%s is written by an earlier template too; give each file one template", target)
		}
		seen[target] = true
	}
	return out
}

func (p *specParser) vars(n *yaml.Node) []Var {
	if n.Kind != yaml.MappingNode {
		p.fail(n, "relay.config.vars", "want a mapping of names to values, e.g. {threads: 2}")
		return nil
	}
	var out []Var
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		field := "relay.config.vars." + k.Value
		if !varNameRe.MatchString(k.Value) {
			p.fail(k, field, "want a name of letters, digits and _ starting with a letter (templates read it as {{.Vars.NAME}}), got %q", k.Value)
			continue
		}
		if seen[k.Value] {
			p.fail(k, field, "given twice")
			continue
		}
		seen[k.Value] = true
		s, ok := p.str(v, field)
		if !ok {
			continue
		}
		if len(s) > 1024 || strings.ContainsAny(s, "\x00\r") {
			p.fail(v, field, "want a value of at most 1024 bytes without NUL or CR")
			continue
		}
		out = append(out, Var{Name: k.Value, Value: s})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// unitDropInForce is the drop-in relayctl writes for SO_RCVBUFFORCE.
const unitDropInForce = "so-rcvbuf-force.conf"

// UnitDropInDir is the folder of a systemd unit's drop-ins.
func UnitDropInDir(unit string) string {
	if !strings.Contains(unit, ".") {
		unit += ".service"
	}
	return path.Join("/etc/systemd/system", unit+".d")
}
