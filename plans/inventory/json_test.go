package inventory

import (
	"math"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// TestListJSONAgreesWithSource reads, for every reference inventory that
// Ansible reads, the JSON ansible-inventory printed for it (--list, and
// --list --export) and compares it with reading the source itself: the
// same hosts, each in the same groups with the same variables, and the same
// hosts for each pattern; and with how Ansible reads that JSON back as an
// inventory script's output.
func TestListJSONAgreesWithSource(t *testing.T) {
	lists, _ := filepath.Glob("testdata/ansible/*.list.json")
	nested, _ := filepath.Glob("testdata/ansible/*/*.list.json")
	lists = append(lists, nested...)
	if len(lists) < 5 || len(nested) == 0 {
		t.Fatalf("found %d recorded ansible-inventory --list outputs", len(lists))
	}
	for _, list := range lists {
		base := strings.TrimSuffix(list, ".list.json")
		want := readAnswer(t, base+".ansible.json")
		var source *Inventory // nil for one that relayctl is stricter about than Ansible
		if !strings.HasPrefix(filepath.Base(base), "stricter-") {
			source = sourceOf(t, base)
		}
		for _, form := range []string{"list", "export"} {
			t.Run(filepath.Base(base)+"."+form, func(t *testing.T) {
				file := base + "." + form + ".json"
				data, err := os.ReadFile(file)
				if err != nil {
					t.Fatal(err)
				}
				inv, err := Parse(file, data)
				if err != nil {
					t.Fatalf("%v; Ansible printed it", err)
				}
				if inv.Format != JSON {
					t.Fatalf("read as %s, want json", inv.Format)
				}
				ansible, ok := want.JSON[form]
				if !ok {
					t.Fatalf("no answer recorded for the %s output; go generate ./plans/inventory", form)
				}
				ansible.Ansible = want.Ansible
				checkHosts(t, inv, ansible)
				checkPatterns(t, inv, base, ansible)
				if source != nil {
					sameAsSource(t, inv, source, form == "list")
				}
			})
		}
	}
}

// sourceOf reads the INI or YAML inventory a recorded output came from,
// with its vars folders.
func sourceOf(t *testing.T, base string) *Inventory {
	t.Helper()
	for _, ext := range []string{".ini", ".yaml"} {
		data, err := os.ReadFile(base + ext)
		if err != nil {
			continue
		}
		inv, err := Parse(base+ext, data)
		if err == nil && filepath.Base(base) == "hosts" {
			err = inv.ReadVarsDirs(os.DirFS(filepath.Dir(base)))
		}
		if err != nil {
			t.Fatalf("%s%s: %v", base, ext, err)
		}
		return inv
	}
	t.Fatalf("no source for %s", base)
	return nil
}

// sameAsSource compares two readings of one inventory: hosts, groups, and
// (with vars) each host's variables, where the JSON can say as much as the
// source (a YAML date or a list is printed as JSON text or a list).
func sameAsSource(t *testing.T, got, src *Inventory, vars bool) {
	t.Helper()
	g, s := got.HostNames(), src.HostNames()
	sort.Strings(g)
	sort.Strings(s)
	if !reflect.DeepEqual(g, s) {
		t.Fatalf("hosts: got %v, the source has %v", g, s)
	}
	for _, h := range s {
		if a, b := got.HostGroups(h), src.HostGroups(h); !reflect.DeepEqual(a, b) {
			t.Errorf("%s: groups %v, the source's %v", h, a, b)
		}
		if !vars {
			continue
		}
		gv, _ := got.Vars(h)
		sv, _ := src.Vars(h)
		if len(gv) != len(sv) {
			t.Errorf("%s: %d variables, the source has %d", h, len(gv), len(sv))
		}
		for k, want := range sv {
			if v := gv[k]; want.Kind != Complex && !sameReading(v, want) {
				t.Errorf("%s: %s is %s %q, the source's %s %q", h, k, v.Kind, v.Text, want.Kind, want.Text)
			}
		}
	}
}

func sameReading(a, b Value) bool {
	if a.Kind == Float && b.Kind == Float {
		x, _ := strconv.ParseFloat(a.Text, 64)
		y, _ := strconv.ParseFloat(b.Text, 64)
		return x == y || math.IsNaN(x) && math.IsNaN(y)
	}
	return a.Kind == b.Kind && a.Text == b.Text
}

func TestParseJSON(t *testing.T) {
	inv, err := ParseJSON("inv.json", []byte(`{
 "_meta": {"hostvars": {"relay-1": {"ansible_host": "10.0.0.1", "n": 7, "u": {"__ansible_unsafe": "x"}, "l": [1]}}},
 "all": {"children": ["ungrouped", "relays"]},
 "relays": {"children": ["ash"], "vars": {"region": "ash"}},
 "ash": {"hosts": ["relay-1", "relay-[2:3]"]},
 "ungrouped": ["solo"]
}`))
	if err != nil {
		t.Fatal(err)
	}
	if got := inv.HostNames(); !reflect.DeepEqual(got, []string{"relay-1", "relay-[2:3]", "solo"}) {
		t.Errorf("hosts %v: want them in the order first listed, names as they are", got)
	}
	vars, _ := inv.Vars("relay-1")
	for k, want := range map[string]Value{
		"ansible_host": {Kind: String, Text: "10.0.0.1", Line: 2, Path: `_meta.hostvars["relay-1"].ansible_host`},
		"n":            {Kind: Int, Text: "7", Line: 2, Path: `_meta.hostvars["relay-1"].n`},
		"u":            {Kind: String, Text: "x", Line: 2, Path: `_meta.hostvars["relay-1"].u`},
		"l":            {Kind: Complex, Line: 2, Path: `_meta.hostvars["relay-1"].l`},
		"region":       {Kind: String, Text: "ash", Line: 4, Path: "relays.vars.region"},
	} {
		if vars[k] != want {
			t.Errorf("%s: got %+v, want %+v", k, vars[k], want)
		}
	}
	if g := inv.HostGroups("solo"); !reflect.DeepEqual(g, []string{"ungrouped"}) {
		t.Errorf("solo's groups: %v", g)
	}
}

// Every problem names the file, its line and the JSON path of the field,
// and says how to fix it.
func TestParseJSONErrors(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"empty", " \n", "inv.json: empty; ansible-inventory --list prints"},
		{"bom", "\xef\xbb\xbf{}", "inv.json:1: starts with a UTF-8 byte order mark"},
		{"not utf-8", "{\n\"a\": \"\xff\"}", "inv.json:2: not UTF-8"},
		{"not an object", `["a"]`, "inv.json:1: a JSON inventory is an object of groups and _meta"},
		{"no meta", `{"ash": ["a"]}`, "inv.json: no _meta.hostvars: Ansible would run an inventory script once more for each host"},
		{"meta without hostvars", `{"_meta": {}}`, "no _meta.hostvars"},
		{"meta's other key", `{"_meta": {"hostvars": {}, "hostvar": 1}}`, `inv.json:1: _meta.hostvar: unknown key; _meta holds hostvars`},
		{"hostvars not an object", `{"_meta": {"hostvars": []}}`, `_meta.hostvars: want an object of each host's variables`},
		{"host's vars not an object", "{\"_meta\": {\"hostvars\": {\n\"a-1\": null}}, \"g\": [\"a-1\"]}", `inv.json:2: _meta.hostvars["a-1"]: want an object of variables (name: value); this is null`},
		{"orphan hostvars", `{"_meta": {"hostvars": {"a": {}}}}`, `_meta.hostvars.a: a is in no group's hosts`},
		{"trailing comma", "{\"_meta\": {\"hostvars\": {}},\n\"g\": [\"a\",]}", "inv.json:2: not valid JSON: column 11: a comma before ]"},
		{"unclosed", `{"_meta": {"hostvars": {}}`, "not valid JSON: column 27: want , or } after an object's member, got the end of the text"},
		{"single quotes", `{'_meta': 1}`, `not valid JSON: column 2: want a key in double quotes, got '\''`},
		{"two documents", `{"_meta": {"hostvars": {}}} {}`, "more text after the JSON document"},
		{"control character", "{\"_meta\": {\"hostvars\": {}}, \"g\": [\"a\tb\"]}", "a control character (0x09) inside a string"},
		{"lone surrogate", `{"_meta": {"hostvars": {}}, "g": ["\ud800"]}`, `\ud800 is half of a UTF-16 surrogate pair`},
		{"bad escape", `{"_meta": {"hostvars": {}}, "g": ["\x41"]}`, `\x is not an escape`},
		{"too deep", `{"_meta": {"hostvars": {"a": {"v": ` + strings.Repeat("[", 600) + strings.Repeat("]", 600) + `}}}}`, "nested more than 512 deep"},
		{"group scalar", `{"_meta": {"hostvars": {}}, "g": "a"}`, `inv.json:1: g: want an object of hosts, children and vars`},
		{"hosts not a list", `{"_meta": {"hostvars": {}}, "g": {"hosts": {"a": null}}}`, `g.hosts: want a list of host names`},
		{"host not a string", `{"_meta": {"hostvars": {}}, "g": {"hosts": ["a", 7]}}`, `g.hosts[1]: a host name is a string; this is a number`},
		{"empty host name", `{"_meta": {"hostvars": {}}, "g": [""]}`, `g[0]: a host with an empty name`},
		{"child not a string", `{"_meta": {"hostvars": {}}, "g": {"children": [null]}}`, `g.children[0]: a group name is a string; this is null`},
		{"children not a list", `{"_meta": {"hostvars": {}}, "g": {"children": "ash"}}`, `g.children: want a list of group names`},
		{"vars not an object", `{"_meta": {"hostvars": {}}, "relay-ash": {"vars": ["a=1"]}}`, `["relay-ash"].vars: want an object of variables`},
		{"unknown group key", `{"_meta": {"hostvars": {}}, "g": {"hosts": ["a"], "var": {}}}`, `g.var: unknown key; a group holds hosts, children and vars`},
		{"simplified syntax", `{"_meta": {"hostvars": {}}, "web": {"ansible_host": "x"}}`, `web: an object with none of hosts, children and vars, which Ansible reads as one host named web`},
		{"empty group object", `{"_meta": {"hostvars": {}}, "web": {}}`, `web: an object with none of hosts, children and vars`},
		{"duplicate key", "{\"_meta\": {\"hostvars\": {}},\n\"g\": [\"a\"],\n\"g\": [\"b\"]}", `inv.json:3: g: given twice (first on line 2)`},
		{"tagged vars", `{"_meta": {"hostvars": {"a": {"__ansible_unsafe": "x"}}}, "g": ["a"]}`, `_meta.hostvars.a.__ansible_unsafe: Ansible's JSON loader reads an object holding __ansible_unsafe as one value`},
		{"loop", `{"_meta": {"hostvars": {}}, "a": {"children": ["a"]}}`, "group a cannot be a child of itself"},
		{"all as a child", `{"_meta": {"hostvars": {}}, "a": {"children": ["all"]}}`, "all cannot be a child of a"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseJSON("inv.json", []byte(tt.in))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want an error with %q", err, tt.want)
			}
		})
	}
}

// A selected host's bad setting names the JSON path where it is set, and
// a missing label says where a JSON inventory sets one.
func TestSelectJSONErrors(t *testing.T) {
	inv, err := ParseJSON("inv.json", []byte(`{"_meta": {"hostvars": {
  "relay-1": {"ansible_host": "-oProxyCommand=x"},
  "relay-2": {"ansible_port": 70000}
 }},
 "ash": {"hosts": ["relay-1", "relay-2", "relay 3"]}
}`))
	if err != nil {
		t.Fatal(err)
	}
	_, err = inv.Select(mustPattern(t, "ash"), Options{Labels: []string{"region"}})
	for _, want := range []string{
		`inv.json:2: _meta.hostvars["relay-1"].ansible_host: relay-1: ansible_host "-oProxyCommand=x" is neither a host name`,
		`inv.json:3: _meta.hostvars["relay-2"].ansible_port: relay-2: ansible_port is 70000; want a TCP port`,
		`inv.json:5: ash.hosts[0]: relay-1 has no region; the spec's labels need it on every selected host: set region in _meta.hostvars["relay-1"] or in the vars of one of its groups (ash)`,
		`inv.json:5: ash.hosts[2]: host "relay 3": relayctl names hosts`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("got %v\nwant a line %q", err, want)
		}
	}
}

// How Parse tells ansible-inventory --list's JSON from a YAML inventory
// written as JSON: by its _meta key, in a .json file or one without an
// extension.
func TestParseTellsJSONApart(t *testing.T) {
	list := `{"_meta": {"hostvars": {}}, "ash": {"hosts": ["relay-1"]}}`
	yamlJSON := `{"ash": {"hosts": {"relay-1": null}}}`
	for _, tt := range []struct {
		file, in string
		want     Format
	}{
		{"hosts.json", list, JSON},
		{"hosts", list, JSON},
		{"hosts.json", yamlJSON, YAML},
		{"hosts", yamlJSON, YAML},
		{"hosts.yaml", `{"ash": {"hosts": {"relay-1": null}}, "_meta": null}`, YAML},
	} {
		inv, err := Parse(tt.file, []byte(tt.in))
		if err != nil {
			t.Errorf("%s %s: %v", tt.file, tt.in, err)
			continue
		}
		if inv.Format != tt.want {
			t.Errorf("%s %s: read as %s, want %s", tt.file, tt.in, inv.Format, tt.want)
		}
	}
	// A .json file listing hosts the --list way without _meta is told how
	// relayctl tells that form.
	_, err := Parse("hosts.json", []byte(`{"ash": {"hosts": ["relay-1"]}}`))
	if err == nil || !strings.Contains(err.Error(), `add its "_meta": {"hostvars": {…}}`) {
		t.Errorf("got %v", err)
	}
}

func FuzzParseJSON(f *testing.F) {
	seeds(f, ".json", `{"_meta": {"hostvars": {"h": {"region": "ash", "n": -0.5e3}}}, "all": {"children": ["g"]}, "g": ["h"]}`,
		`{"_meta": {"hostvars": {}}, "g": {"hosts": ["a\u00e9\ud83d\ude80"], "vars": {"u": {"__ansible_unsafe": "x"}, "x": [NaN, -Infinity]}}}`)
	f.Fuzz(func(t *testing.T, data []byte) {
		inv, err := ParseJSON("fuzz.json", data)
		if err != nil {
			var list Errors
			if !asErrors(err, &list) || len(list) == 0 {
				t.Fatalf("error %v is not a list of inventory errors", err)
			}
			return
		}
		if inv.Format != JSON {
			t.Fatalf("format %s", inv.Format)
		}
		checkInventory(t, inv)
	})
}

func asErrors(err error, list *Errors) bool {
	e, ok := err.(Errors)
	*list = e
	return ok
}
