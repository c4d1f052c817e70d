package inventory

import (
	"os"
	"path/filepath"
	"testing"
	"testing/fstest"
)

// seeds adds every reference inventory of one extension as a seed.
func seeds(f *testing.F, ext string, extra ...string) {
	files, _ := filepath.Glob("testdata/ansible/*" + ext)
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	for _, s := range extra {
		f.Add([]byte(s))
	}
}

// checkInventory holds what any inventory that parses must satisfy: each
// host once, in all, and a selection of all either refused or every host
// in inventory order with an address relayctl can pass to ssh.
func checkInventory(t *testing.T, inv *Inventory) {
	seen := map[string]bool{}
	for i, h := range inv.hosts {
		if seen[h.name] || h.order != i || h.name == "" {
			t.Fatalf("host %q (order %d) is listed twice, out of place or unnamed", h.name, h.order)
		}
		seen[h.name] = true
		if len(h.direct) == 0 {
			t.Fatalf("host %q is in no group", h.name)
		}
	}
	all, _ := ParsePattern("all")
	if names, err := inv.Match(all); len(inv.hosts) > 0 && (err != nil || len(names) != len(inv.hosts)) {
		t.Fatalf("all: got %d hosts, %v; the inventory has %d", len(names), err, len(inv.hosts))
	}
	sel, err := inv.Select(all, Options{Labels: []string{"region"}})
	if err != nil {
		return
	}
	for _, h := range sel.Hosts {
		if !validName(h.Address) || h.Port < 0 || h.Port > 65535 || (h.User != "" && !validUser(h.User)) {
			t.Fatalf("selected %+v", h)
		}
		if !validLabelValue(h.Labels["region"]) {
			t.Fatalf("%s: label region %q", h.Name, h.Labels["region"])
		}
	}
}

func FuzzParseINI(f *testing.F) {
	seeds(f, ".ini", "h[1:3] region=ash\n[g:children]\nh\n", "[a]\nh x='\\x41' y=[1,(2,)]\n[a:vars]\nregion = 'ash' # c\n")
	f.Fuzz(func(t *testing.T, data []byte) {
		inv, err := ParseINI("fuzz.ini", data)
		if err != nil {
			return
		}
		checkInventory(t, inv)
	})
}

func FuzzParseYAML(f *testing.F) {
	seeds(f, ".yaml", "a: &x {hosts: {h: {region: ash}}}\nb: {children: {c: *x}}\n", "all: {vars: {<<: {region: ash}}, hosts: h[a:c]}\n")
	f.Fuzz(func(t *testing.T, data []byte) {
		inv, err := ParseYAML("fuzz.yaml", data)
		if err != nil {
			return
		}
		checkInventory(t, inv)
	})
}

func FuzzVarsFile(f *testing.F) {
	for _, s := range []string{"region: ash\nansible_port: 2200\n", `{"ansible_host": "10.0.0.1"}`, "<<: {a: 1}\nb: &x [1]\nc: *x\n", "$ANSIBLE_VAULT;1.1;AES256\n", "---\n", "- a\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		inv, err := ParseINI("hosts.ini", []byte("[ash]\nrelay-1\n"))
		if err != nil {
			t.Fatal(err)
		}
		if err := inv.ReadVarsDirs(fstest.MapFS{"group_vars/ash.yml": {Data: data}, "host_vars/relay-1": {Data: data}}); err != nil {
			return
		}
		vars, _ := inv.Vars("relay-1")
		for k, v := range vars {
			if v.File != "group_vars/ash.yml" && v.File != "host_vars/relay-1" {
				t.Fatalf("%s set in %q", k, v.File)
			}
		}
		checkInventory(t, inv)
	})
}
