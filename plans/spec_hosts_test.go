package plans

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/fstest"
)

const invSpec = `name: fleet
hosts:
  inventory: hosts.ini
  pattern: "relays:!maintenance"
  labels: [region]
relay:
  release: {version: 1.8.0, artifact: relayd}
  service: {manager: systemd, name: relayd}
%s`

const invINI = `[ash]
relay-1.ash ansible_host=10.0.0.1
relay-2.ash ansible_host=10.0.0.2 ansible_port=2222 ansible_user=ops
[fra]
relay-1.fra
[ash:vars]
region=ash
[maintenance]
relay-2.ash
[relays:children]
ash
fra
`

func invFiles(ini string) InventoryInput {
	return InventoryInput{Path: "inv/hosts.ini", Data: []byte(ini), Dir: fstest.MapFS{"group_vars/fra.yml": {Data: []byte("region: fra\n")}}}
}

// selected parses an inventory spec and selects its hosts.
func selected(t *testing.T, extra, ini string) *Spec {
	t.Helper()
	s, err := ParseSpec("fleet.yaml", []byte(strings.Replace(invSpec, "%s", extra, 1)))
	if err != nil {
		t.Fatal(err)
	}
	if _, errs := s.SelectHosts(invFiles(ini)); len(errs) > 0 {
		t.Fatal(errs)
	}
	return s
}

// An inventory spec's hosts are the pattern's selection in inventory
// order, each dialled at the target its ansible_ variables give and
// labelled from its group's vars or a group_vars file.
func TestSelectHosts(t *testing.T) {
	s := selected(t, "", invINI)
	if got, want := strings.Join(s.Hosts, " "), "relay-1.ash relay-1.fra"; got != want {
		t.Errorf("hosts: got %s, want %s", got, want)
	}
	if got := s.Targets["relay-1.ash"]; got != "10.0.0.1" {
		t.Errorf("target: got %q", got)
	}
	if _, ok := s.Targets["relay-1.fra"]; ok {
		t.Errorf("a host dialled by its name has no target: %v", s.Targets)
	}
	if got := s.Labels["relay-1.fra"]["region"]; got != "fra" {
		t.Errorf("label from group_vars/fra.yml: got %q", got)
	}
	rec := s.InventoryRecord
	if rec.File != "hosts.ini" || !strings.HasPrefix(rec.SHA256, "sha256:") || len(rec.VarsFiles) != 1 || rec.VarsFiles[0].Path != "group_vars/fra.yml" {
		t.Errorf("record: %+v", rec)
	}
}

func TestInventorySpecErrors(t *testing.T) {
	tests := []struct {
		name, spec, ini, want string
	}{
		{"pattern form", strings.Replace(invSpec, `"relays:!maintenance"`, `"relays:&"`, 1), invINI, "fleet.yaml:4: hosts.pattern: "},
		{"no pattern", strings.Replace(invSpec, "  pattern: \"relays:!maintenance\"\n", "", 1), invINI, "fleet.yaml:3: hosts.pattern: missing"},
		{"unknown key", strings.Replace(invSpec, "  labels:", "  label:", 1), invINI, "fleet.yaml:5: hosts.label: unknown key"},
		{"secret label", strings.Replace(invSpec, "[region]", "[api_token]", 1), invINI, "fleet.yaml:5: hosts.labels[0]: label \"api_token\": its name says secret"},
		{"inventory line", invSpec, invINI + "[fra:hostz]\n", "inv/hosts.ini:13: [fra:hostz]: unknown section type hostz"},
		{"term matches nothing", strings.Replace(invSpec, "!maintenance", "!maintenence", 1), invINI, "fleet.yaml:4: hosts.pattern: host pattern \"relays:!maintenence\": !maintenence matches no group"},
		{"label missing", invSpec, strings.Replace(invINI, "[ash:vars]\nregion=ash\n", "", 1), "inv/hosts.ini:2: relay-1.ash has no region"},
		{"target reaching ssh as an option", invSpec, strings.Replace(invINI, "ansible_host=10.0.0.1", "ansible_host=-oProxyCommand=x", 1), "inv/hosts.ini:2: relay-1.ash: ansible_host \"-oProxyCommand=x\" is neither"},
		{"by a label the hosts lack", invSpec, invINI, ""},
	}
	// A host named by an IPv6 address cannot be dialled by that name.
	s, _ := ParseSpec("fleet.yaml", []byte(strings.Replace(strings.Replace(invSpec, "hosts.ini", "hosts.yaml", 1), "%s", "", 1)))
	_, errs := s.SelectHosts(InventoryInput{Path: "inv/hosts.yaml", Data: []byte("relays:\n  hosts:\n    \"2001:db8::1\": {region: ash}\nmaintenance:\n  hosts: {}\n")})
	if got := errs.Error(); !strings.Contains(got, "inv/hosts.yaml:3: host 2001:db8::1: relayctl names a host by a name it can also dial") {
		t.Errorf("an IPv6 name: %s", got)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := strings.Replace(tt.spec, "%s", "", 1)
			s, errs := ParseSpecAll("fleet.yaml", []byte(src))
			if len(errs) == 0 {
				_, errs = s.SelectHosts(invFiles(tt.ini))
			}
			got := ""
			if len(errs) > 0 {
				got = errs.Error()
			}
			if tt.want == "" && got != "" || !strings.HasPrefix(got, tt.want) {
				t.Errorf("got\n%s\nwant it to start %q", got, tt.want)
			}
		})
	}
}

// rollout.by and capacity.by name a label of hosts.labels, and every
// value the spec names must be one some selected host has.
func TestLabelValuesChecked(t *testing.T) {
	tests := []struct {
		name, extra, want string
	}{
		{"good", "rollout:\n  by: region\n  order: [fra]\n  budgets: {ash: {max_failures: 1}}\ncapacity:\n  by: region\n  players: {ash: 400, fra: 200}\n  hz: 60\n  packet_size: 200\n", ""},
		{"typo in order", "rollout:\n  by: region\n  order: [frankfurt]\n", "fleet.yaml:11: rollout.order: no selected host has region=frankfurt; the values: ash, fra"},
		{"typo in budgets", "rollout:\n  by: region\n  budgets: {fr: {max_failures: 1}}\n", "fleet.yaml:11: rollout.budgets.fr: no selected host has region=fr; the values: ash, fra"},
		{"a region without a promise", "capacity:\n  by: region\n  players: {ash: 400}\n  hz: 60\n  packet_size: 200\n", "fleet.yaml:10: capacity.players: no promise for region=fra (1 host); add fra: PLAYERS"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := selected(t, tt.extra, invINI)
			got := ""
			if errs := s.CheckLabelValues(); len(errs) > 0 {
				got = errs.Error()
			}
			if got != tt.want {
				t.Errorf("got\n%s\nwant\n%s", got, tt.want)
			}
		})
	}
	for _, tt := range []struct{ extra, want string }{
		{"rollout:\n  by: pool\n", "fleet.yaml:10: rollout.by: pool is not one of hosts.labels (region); add it there"},
		{"rollout:\n  order: [ash]\n", "fleet.yaml:10: rollout.by: missing"},
		{"capacity:\n  by: pool\n  players: {a: 1}\n  hz: 60\n  packet_size: 200\n", "fleet.yaml:10: capacity.by: pool is not one of hosts.labels"},
		{"capacity:\n  by: region\n  players: 400\n  hz: 60\n  packet_size: 200\n", "fleet.yaml:11: capacity.players: with capacity.by, want the players each value promises"},
	} {
		_, errs := ParseSpecAll("fleet.yaml", []byte(strings.Replace(invSpec, "%s", tt.extra, 1)))
		if got := errs.Error(); !strings.HasPrefix(got, tt.want) {
			t.Errorf("%q: got\n%s\nwant it to start %q", tt.extra, got, tt.want)
		}
	}
	_, errs := ParseSpecAll("list.yaml", []byte(strings.Replace(goodSpec, "host:\n", "rollout:\n  by: region\nhost:\n", 1)))
	if got := errs.Error(); !strings.Contains(got, "rollout.by: the hosts are a list, which carries no labels") {
		t.Errorf("by a label of a listed spec: %s", got)
	}
}

// The plan records the inventory it was made from; apply's check selects
// the hosts again and refuses a plan whose inventory changed, and one
// whose hosts were edited to go elsewhere.
func TestCheckInventory(t *testing.T) {
	p := inventoryPlan(t, invINI)
	if err := Validate(p); err != nil {
		t.Fatal(err)
	}
	vars := func(ini, fra string) InventoryInput {
		in := invFiles(ini)
		in.Dir = fstest.MapFS{"group_vars/fra.yml": {Data: []byte(fra)}}
		return in
	}
	// What the inventory resolves to is compared, not its bytes: a change
	// that selects the same hosts, targets and labels leaves the plan
	// standing, and the note says what changed.
	for _, tt := range []struct {
		name      string
		in        InventoryInput
		note, err string
		is        error
	}{
		{name: "unchanged", in: invFiles(invINI)},
		{name: "a comment", in: invFiles("# the fleet, as of today\n" + invINI), note: "hosts.ini has sha256 "},
		{name: "a variable relayctl does not read", in: vars(invINI, "region: fra\nx: 1\n"), note: "vars file group_vars/fra.yml has sha256 "},
		{name: "a host outside the pattern", in: invFiles(invINI + "[spare]\nrelay-3.ash\n"), note: "hosts.ini has sha256 "},
		{name: "a host added", in: invFiles(strings.Replace(invINI, "relay-1.fra\n", "relay-1.fra\nrelay-2.fra\n", 1)), is: ErrFleetChanged, err: "1 host(s) added (relay-2.fra)"},
		{name: "a label changed", in: vars(invINI, "region: fra2\n"), is: ErrFleetChanged, err: "vars file group_vars/fra.yml has sha256 "},
		{name: "a target changed", in: invFiles(strings.Replace(invINI, "10.0.0.1", "10.0.0.9", 1)), is: ErrFleetChanged, err: "1 host(s) with another target or labels (relay-1.ash)"},
		{name: "the order changed", in: invFiles(strings.Replace(invINI, "[ash]\nrelay-1.ash ansible_host=10.0.0.1\n", "[ash]\n", 1) + "[ash]\nrelay-1.ash ansible_host=10.0.0.1\n"), is: ErrFleetChanged, err: "it selects the same hosts in another order"},
	} {
		note, err := CheckInventory(p, tt.in)
		switch {
		case tt.is == nil && err != nil:
			t.Errorf("%s: %v, want the plan to stand", tt.name, err)
		case tt.is != nil && (!errors.Is(err, tt.is) || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("%s: got %v, want %v with %q", tt.name, err, tt.is, tt.err)
		case tt.note == "" && note != "":
			t.Errorf("%s: note %q, want none", tt.name, note)
		case tt.note != "" && (!strings.HasPrefix(note, tt.note) || !strings.HasSuffix(note, "it selects the same hosts, with the same targets and labels: the plan stands")):
			t.Errorf("%s: note %q, want it to start %q and say the plan stands", tt.name, note, tt.note)
		}
	}
	edited := inventoryPlan(t, invINI)
	edited.Hosts[0].Target = "10.9.9.9"
	if err := Validate(edited); err != nil {
		t.Fatalf("a target in the right form passes Validate (the inventory decides): %v", err)
	}
	if _, err := CheckInventory(edited, invFiles(invINI)); !errors.Is(err, ErrPlanEdited) || !strings.Contains(err.Error(), "target 10.9.9.9") {
		t.Errorf("a target edited: %v", err)
	}
	for name, edit := range map[string]func(p *Plan){
		"no record":     func(p *Plan) { p.Inventory = nil },
		"other file":    func(p *Plan) { p.Inventory.File = "other.ini" },
		"bad sha256":    func(p *Plan) { p.Inventory.SHA256 = "sha256:x" },
		"vars outside":  func(p *Plan) { p.Inventory.VarsFiles[0].Path = "../../etc/passwd" },
		"label missing": func(p *Plan) { p.Hosts[0].Labels = nil },
		"target option": func(p *Plan) { p.Hosts[0].Target = "-oProxyCommand=x" },
		"named twice":   func(p *Plan) { p.Hosts[1].Host = p.Hosts[0].Host },
		"label shell":   func(p *Plan) { p.Hosts[0].Labels = map[string]string{"region": "$(x)"} },
		"listed targets": func(p *Plan) {
			p.Spec = strings.Replace(p.Spec, "hosts:\n  inventory: hosts.ini\n", "hosts: [relay-1.ash, relay-1.fra]\n", 1)
		},
	} {
		q := inventoryPlan(t, invINI)
		edit(q)
		if err := Validate(q); !errors.Is(err, ErrPlanEdited) {
			t.Errorf("%s: Validate: %v, want ErrPlanEdited", name, err)
		}
	}
}

func inventoryPlan(t *testing.T, ini string) *Plan {
	t.Helper()
	s := selected(t, "", ini)
	var facts []*Facts
	for _, h := range s.Hosts {
		f := incidentFacts()
		f.Host = h
		facts = append(facts, f)
	}
	p, err := Make(Input{Spec: s, Facts: facts, Artifact: testArtifact, Steps: testSteps})
	if err != nil {
		t.Fatal(err)
	}
	body, err := p.JSON()
	if err != nil {
		t.Fatal(err)
	}
	q, err := Load("x.plan", body)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// Whatever an inventory holds, a selected host's name and target are ones
// a spec's list could hold (nothing reaches ssh as an option), and its
// labels are words.
func FuzzSelectHosts(f *testing.F) {
	f.Add("relays:!maintenance", invINI)
	f.Add("all", "[a]\nh1 ansible_host=-x\nh2 ansible_port=0\n[a:vars]\nregion=ash\n")
	f.Add("a:&b", "[a]\n[b]\n::1\n10.0.0.1:2222 ansible_user=u\n[a:vars]\nregion=\"x y\"\n")
	f.Add("~r.*", "all:\n  hosts:\n    r1: {ansible_host: 'h', region: ash}\n")
	f.Fuzz(func(t *testing.T, pattern, ini string) {
		spec := strings.Replace(strings.Replace(invSpec, `"relays:!maintenance"`, fmt.Sprintf("%q", pattern), 1), "%s", "", 1)
		s, err := ParseSpec("fleet.yaml", []byte(spec))
		if err != nil {
			return
		}
		if _, errs := s.SelectHosts(InventoryInput{Path: "hosts", Data: []byte(ini)}); len(errs) > 0 {
			return
		}
		for _, h := range s.Hosts {
			if ValidHost(h) != nil || strings.HasPrefix(h, "-") {
				t.Fatalf("selected host %q", h)
			}
			if tg, ok := s.Targets[h]; ok && (ValidHost(tg) != nil || strings.Contains(tg, " ")) {
				t.Fatalf("target %q", tg)
			}
			if v := s.Labels[h]["region"]; !labelValueRe.MatchString(v) {
				t.Fatalf("label %q", v)
			}
		}
	})
}

const progSpec = `name: fleet
hosts:
  inventory:
    program: [inventory/ec2.py, --list]
    timeout: 30s
  pattern: "relays:!maintenance"
  labels: [region]
relay:
  release: {version: 1.8.0, artifact: relayd}
  service: {manager: systemd, name: relayd}
`

// What ansible-inventory --list prints for invINI.
const progOutput = `{"_meta": {"hostvars": {
  "relay-1.ash": {"ansible_host": "10.0.0.1", "region": "ash"},
  "relay-2.ash": {"ansible_host": "10.0.0.2", "ansible_port": 2222, "ansible_user": "ops", "region": "ash"},
  "relay-1.fra": {"region": "fra"}}},
 "all": {"children": ["ungrouped", "relays", "maintenance"]},
 "ash": {"hosts": ["relay-1.ash", "relay-2.ash"]},
 "fra": {"hosts": ["relay-1.fra"]},
 "maintenance": {"hosts": ["relay-2.ash"]},
 "relays": {"children": ["ash", "fra"]}}
`

// A spec whose inventory is a program's output selects the same hosts as
// the inventory it printed, and its record is the program and the
// output's sha256, with no vars files; a changed output is a changed
// fleet.
func TestSelectHostsFromProgram(t *testing.T) {
	s, err := ParseSpec("fleet.yaml", []byte(progSpec))
	if err != nil {
		t.Fatal(err)
	}
	if r := s.Inventory; strings.Join(r.Program, " ") != "inventory/ec2.py --list" || r.Timeout.String() != "30s" || r.File != "" {
		t.Fatalf("ref %+v", r)
	}
	// The vars folder beside no file: a program's output is all there is.
	warns, errs := s.SelectHosts(InventoryInput{Data: []byte(progOutput), Stderr: "[WARNING]: cache expired\n", Dir: fstest.MapFS{"group_vars/fra.yml": {Data: []byte("region: x\n")}}})
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if len(warns) != 1 || warns[0].Error() != "fleet.yaml:4: hosts.inventory.program: inventory/ec2.py --list printed on stderr: [WARNING]: cache expired" {
		t.Errorf("warnings %v", warns)
	}
	want := selected(t, "", invINI)
	if strings.Join(s.Hosts, " ") != strings.Join(want.Hosts, " ") || fmt.Sprint(s.Targets) != fmt.Sprint(want.Targets) || fmt.Sprint(s.Labels) != fmt.Sprint(want.Labels) {
		t.Errorf("got %v %v %v, the INI gives %v %v %v", s.Hosts, s.Targets, s.Labels, want.Hosts, want.Targets, want.Labels)
	}
	rec := s.InventoryRecord
	if rec.File != "" || strings.Join(rec.Program, " ") != "inventory/ec2.py --list" || rec.SHA256 != "sha256:"+sha256Text(progOutput) || len(rec.VarsFiles) != 0 {
		t.Errorf("record %+v", rec)
	}
	p, err := Make(Input{Spec: s, Facts: []*Facts{hostFacts("relay-1.ash"), hostFacts("relay-1.fra")}, Artifact: testArtifact, Steps: testSteps})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := CheckInventory(p, InventoryInput{Data: []byte(progOutput)}); err != nil {
		t.Fatalf("the same output: %v", err)
	}
	grown := strings.Replace(progOutput, `"fra": {"hosts": ["relay-1.fra"]}`, `"fra": {"hosts": ["relay-1.fra", "relay-2.fra"]}`, 1)
	grown = strings.Replace(grown, `"relay-1.fra": {"region": "fra"}`, `"relay-1.fra": {"region": "fra"}, "relay-2.fra": {"region": "fra"}`, 1)
	_, err = CheckInventory(p, InventoryInput{Data: []byte(grown)})
	if !errors.Is(err, ErrFleetChanged) || !strings.Contains(err.Error(), "the output of inventory/ec2.py --list has sha256") || !strings.Contains(err.Error(), "1 host(s) added (relay-2.fra)") {
		t.Errorf("a host added: %v", err)
	}
	for name, edit := range map[string]func(p *Plan){
		"other program": func(p *Plan) { p.Inventory.Program = []string{"/bin/sh", "-c", "x"} },
		"a file":        func(p *Plan) { p.Inventory.Program, p.Inventory.File = nil, "hosts.ini" },
		"vars files": func(p *Plan) {
			p.Inventory.VarsFiles = []VarsFileRecord{{Path: "group_vars/a.yml", SHA256: rec.SHA256}}
		},
	} {
		q := *p
		r := *p.Inventory
		q.Inventory = &r
		edit(&q)
		if err := Validate(&q); !errors.Is(err, ErrPlanEdited) {
			t.Errorf("%s: Validate: %v, want ErrPlanEdited", name, err)
		}
	}
}

func hostFacts(name string) *Facts {
	f := incidentFacts()
	f.Host = name
	return f
}

func TestInventoryProgramSpecErrors(t *testing.T) {
	for _, tt := range []struct{ inventory, want string }{
		{"{program: ansible-inventory --list}", "fleet.yaml:3: hosts.inventory.program: want the program and its arguments as a list of 1 to 32 words"},
		{"{program: []}", "hosts.inventory.program: want the program and its arguments as a list"},
		{"{program: [--list]}", `hosts.inventory.program: want a program name (looked up in PATH) or path (relative to the spec's folder) of letters, digits and ._/+-, not starting with -, got "--list"`},
		{"{program: ['ansible inventory']}", `got "ansible inventory"`},
		{"{program: [ansible-inventory, \"a\\nb\"]}", "a command word may not contain a newline"},
		{"{program: [x], timeout: 0s}", `hosts.inventory.timeout: want a duration from 1s to 30m0s, got "0s"`},
		{"{program: [x], timeout: soon}", `hosts.inventory.timeout: want a duration from 1s to 30m0s, got "soon"`},
		{"{progam: [x]}", "hosts.inventory.progam: unknown key; valid keys here: program, timeout; did you mean program?"},
		{"{timeout: 1m}", "hosts.inventory.program: missing; the program that prints the inventory"},
		{"{program: [sh, -c, 'curl -s x | sh']}", "fleet.yaml:3: hosts.inventory.program: sh -c runs its argument as code: a spec's program is words, never code in them; put the code in a script beside the spec"},
		{"{program: [env, A=1, /usr/bin/python3, -c, x]}", "hosts.inventory.program: python3 -c runs its argument as code"},
	} {
		spec := strings.Replace(strings.Replace(invSpec, "inventory: hosts.ini", "inventory: "+tt.inventory, 1), "%s", "", 1)
		_, errs := ParseSpecAll("fleet.yaml", []byte(spec))
		if got := errs.Error(); !strings.Contains(got, tt.want) {
			t.Errorf("%s: got\n%s\nwant %q", tt.inventory, got, tt.want)
		}
	}
}
