package inventory

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

func mustParse(t testing.TB, file, src string) *Inventory {
	t.Helper()
	inv, err := Parse(file, []byte(src))
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return inv
}

func TestExpandRange(t *testing.T) {
	tests := []struct {
		in   string
		want []string
		err  string
	}{
		{in: "relay-1", want: []string{"relay-1"}},
		{in: "relay-[01:03].ash", want: []string{"relay-01.ash", "relay-02.ash", "relay-03.ash"}},
		{in: "r[1:10:3]", want: []string{"r1", "r4", "r7", "r10"}},
		{in: "r[08:10:2]", want: []string{"r08", "r10"}},
		{in: "r[:2]", want: []string{"r0", "r1", "r2"}},
		{in: "r[a:c]", want: []string{"ra", "rb", "rc"}},
		{in: "r[y:B]", want: []string{"ry", "rz", "rA", "rB"}},
		{in: "r[1:2]-[a:b]", want: []string{"r1-a", "r1-b", "r2-a", "r2-b"}},
		{in: "r[01:3]", err: "differ in width"},
		{in: "r[c:a]", err: "comes after"},
		{in: "r[5:1]", err: "makes no host"},
		{in: "r[1:5:-1]", err: "makes no host"},
		{in: "r[1:5:0]", err: "step 0"},
		{in: "r[1:]", err: "no end"},
		{in: "r[1]", err: "want [begin:end]"},
		{in: "r[1:2:3:4]", err: "want [begin:end]"},
		{in: "r]x[1:2]", err: "want name[begin:end]"},
		{in: "r[0:999999999999]", err: "relayctl reads at most"},
		{in: "r[0:999][0:999]", err: "relayctl reads at most"},
	}
	for _, tt := range tests {
		got, err := expandRange(tt.in, MaxHosts)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%s: got %v, %v; want an error with %q", tt.in, got, err, tt.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s: got %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
}

func TestSplitHostPort(t *testing.T) {
	tests := []struct{ in, name, port string }{
		{"relay-1", "relay-1", ""},
		{"relay-1:2222", "relay-1", "2222"},
		{"relay-[01:09]:2222", "relay-[01:09]", "2222"},
		{"10.0.0.5:22", "10.0.0.5", "22"},
		{"2001:db8::1", "2001:db8::1", ""},
		{"[2001:db8::1]:2222", "2001:db8::1", "2222"},
		{"bad$name:22", "bad$name:22", ""}, // not a form Ansible knows: all of it is the name
		{"-relay:22", "-relay:22", ""},
	}
	for _, tt := range tests {
		name, port, _ := splitHostPort(tt.in)
		if name != tt.name || port != tt.port {
			t.Errorf("%s: got %q %q, want %q %q", tt.in, name, port, tt.name, tt.port)
		}
	}
}

// Every problem is reported at once, each at its line, with how to fix it.
func TestParseErrors(t *testing.T) {
	tests := []struct {
		file, src string
		want      []string
	}{
		{"a.ini", "[ash]\nrelay-1 region\n[fra:hostz]\nx\n[ash]\nrelay-2 x=\"open\n", []string{
			`a.ini:2: want key=value after the host name, got "region"`,
			"a.ini:3: [fra:hostz]: unknown section type hostz; write [fra], [fra:vars] or [fra:children]",
			"a.ini:6: cannot split the host line: no closing quotation",
		}},
		{"b.ini", "[relays:children]\nash\n[fra:vars]\nregion=fra\n", []string{
			"b.ini:2: [relays:children] names ash, which is not declared; add a [ash] section",
			"b.ini:3: [fra:vars] for a group that is not declared",
		}},
		{"c.ini", "[a:children]\nb\n[b:children]\nc\n[c:children]\na\n", []string{
			"c.ini:6: making a a child of c creates a loop: c is already under a (a → b → c)",
		}},
		{"d.ini", "[ash]\nrelay-1:99999\n[ash vars]\n[all:children]\nall\n", []string{
			"d.ini:2: relay-1:99999: port 99999 is not a TCP port",
			"d.ini:3: [ash vars] is not a section",
			"d.ini:5: all cannot be a child of all",
		}},
		{"e.ini", "[ash]\nrelay-1\n[ash:vars]\nansible_group_priority=high\n", []string{
			`e.ini:4: ansible_group_priority of ash: want an integer, got "high"`,
		}},
		{"f.ini", "relay-1\n\xff\xfe\n", []string{"f.ini:2: not UTF-8"}},
		{"g.ini", "relay-1 x=\x01\n", []string{"g.ini:1: a control character"}},
		{"a.yaml", "all:\n  hosts:\n    relay-1:\n  host:\n    relay-2:\n  children:\n    ash: [relay-3]\n    fra:\n      hosts: [relay-4, relay-5]\n", []string{
			`a.yaml:4: group all: unknown key "host"; a group holds hosts, children and vars`,
			"a.yaml:7: group ash: want a mapping of hosts, children and vars, got a list",
			"a.yaml:9: group fra: hosts is a mapping, not a list; end each entry with a colon, e.g. hosts: {relay-4: , relay-5: }",
		}},
		{"b.yaml", "all:\n  hosts:\n    relay-1:\n    relay-1:\n    1.5:\n    yes:\n", []string{
			`b.yaml:4: host "relay-1" is given twice (first on line 3)`,
			`b.yaml:5: host name 1.5 is read as a float, not a string; quote it: "1.5"`,
			`b.yaml:6: host name yes is read as a boolean, not a string; quote it: "yes"`,
		}},
		{"c.yaml", "all:\n  hosts:\n    relay-1: [a]\n  vars: 5\n", []string{
			"c.yaml:3: host relay-1: its variables are a mapping (key: value), not a list",
			"c.yaml:4: group all: vars is a mapping, not a scalar",
		}},
		{"d.yaml", "all: {hosts: {a: }}\n---\nall: {}\n", []string{"d.yaml:2: not valid YAML: a second YAML document"}},
		{"e.yaml", "all: [\n", []string{"e.yaml:1: not valid YAML: did not find expected node content"}},
		{"f.yaml", "", []string{"f.yaml: empty; a YAML inventory is a mapping of groups"}},
		{"g.yaml", "plugin: aws_ec2\n", []string{"g.yaml:1: plugin: makes this an inventory plugin's configuration"}},
	}
	for _, tt := range tests {
		_, err := Parse(tt.file, []byte(tt.src))
		var errs Errors
		if !errors.As(err, &errs) {
			t.Errorf("%s: got %v, want Errors", tt.file, err)
			continue
		}
		if len(errs) != len(tt.want) {
			t.Errorf("%s: got %d problems:\n%v\nwant %d", tt.file, len(errs), err, len(tt.want))
			continue
		}
		for i, e := range errs {
			if !strings.HasPrefix(e.Error(), tt.want[i]) {
				t.Errorf("%s: problem %d:\n got %s\nwant %s…", tt.file, i, e, tt.want[i])
			}
		}
	}
}

func TestParseLimits(t *testing.T) {
	// A few lines of aliases would otherwise make billions of nodes.
	bomb := "a: &a {hosts: {h: }}\nb: &b {children: {x1: *a, x2: *a, x3: *a, x4: *a, x5: *a, x6: *a, x7: *a, x8: *a, x9: *a}}\n"
	prev := "b"
	for i := 0; i < 12; i++ {
		name := fmt.Sprintf("c%d", i)
		bomb += fmt.Sprintf("%s: &%s {children: {", name, name)
		for j := 0; j < 9; j++ {
			bomb += fmt.Sprintf("%s_%d: *%s, ", name, j, prev)
		}
		bomb += "}}\n"
		prev = name
	}
	if _, err := ParseYAML("bomb.yaml", []byte(bomb)); err == nil || !strings.Contains(err.Error(), "aliases expand to more than") {
		t.Errorf("alias bomb: got %v", err)
	}
	deep := ""
	for i := 0; i < MaxDepth+2; i++ {
		deep += fmt.Sprintf("{children: {g%d: ", i)
	}
	deep += "{}" + strings.Repeat("}}", MaxDepth+2)
	if _, err := ParseYAML("deep.yaml", []byte("all: "+deep)); err == nil || !strings.Contains(err.Error(), "nested more than") {
		t.Errorf("deep nesting: got %v", err)
	}
	if _, err := ParseINI("big.ini", make([]byte, MaxSize+1)); err == nil || !strings.Contains(err.Error(), "relayctl reads inventories of at most") {
		t.Errorf("big file: got %v", err)
	}
	if _, err := ParseINI("many.ini", []byte("a[0:60000]\nb[0:60000]\n")); err == nil || !strings.Contains(err.Error(), "at most 100000") {
		t.Errorf("too many hosts: got %v", err)
	}
}

func TestParseFormat(t *testing.T) {
	yamlSrc := "all:\n  hosts:\n    relay-1:\n"
	iniSrc := "[ash]\nrelay-1\n"
	for _, tt := range []struct {
		file, src string
		want      Format
	}{
		{"hosts.yaml", yamlSrc, YAML}, {"hosts.yml", yamlSrc, YAML}, {"hosts.json", `{"all": {"hosts": {"relay-1": null}}}`, YAML},
		{"hosts", yamlSrc, YAML}, {"hosts", iniSrc, INI}, {"hosts", "relay-1\nrelay-2\n", INI},
		{"hosts.ini", iniSrc, INI}, {"hosts.cfg", iniSrc, INI},
	} {
		inv, err := Parse(tt.file, []byte(tt.src))
		if err != nil || inv.Format != tt.want || inv.HostCount() == 0 {
			t.Errorf("%s %q: got %v, %v; want %v", tt.file, tt.src, inv, err, tt.want)
		}
	}
}

// A host listed before any section is in ungrouped until it is listed in a
// group; hosts are in the order they first appear.
func TestUngroupedAndOrder(t *testing.T) {
	inv := mustParse(t, "o.ini", "h3\nh1\n[b]\nh2\nh1\n[a]\nh4\n[all]\nh5\n")
	if got, want := inv.HostNames(), []string{"h3", "h1", "h2", "h4", "h5"}; !reflect.DeepEqual(got, want) {
		t.Errorf("order: got %v, want %v", got, want)
	}
	for h, want := range map[string][]string{"h3": {"ungrouped"}, "h1": {"b"}, "h5": {"ungrouped"}} {
		if got := inv.HostGroups(h); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: got %v, want %v", h, got, want)
		}
	}
	if got, want := inv.GroupNames(), []string{"all", "ungrouped", "b", "a"}; !reflect.DeepEqual(got, want) {
		t.Errorf("groups: got %v, want %v", got, want)
	}
}

// Ansible takes a host's port from where the host is first defined.
func TestPortFromFirstDefinition(t *testing.T) {
	inv := mustParse(t, "p.ini", "[a]\nh1:2200\n[b]\nh1:2300\n")
	vars, _ := inv.Vars("h1")
	if v := vars["ansible_port"]; v.Text != "2200" || v.Line != 2 {
		t.Errorf("ansible_port: got %+v, want 2200 from line 2", v)
	}
	if len(inv.Warnings) != 1 || !strings.Contains(inv.Warnings[0].Error(), "p.ini:4: h1:2300: the port is ignored") {
		t.Errorf("warnings: got %v", inv.Warnings)
	}
}
