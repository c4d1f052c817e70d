package inventory

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
)

//go:generate python3 testdata/ansible/record.py

// ansibleAnswer is what testdata/ansible/record.py recorded from Ansible.
type ansibleAnswer struct {
	Ansible    string                     `json:"ansible"`
	Error      string                     `json:"error"`
	HostVars   map[string]map[string]any  `json:"hostvars"`
	GroupNames map[string][]string        `json:"group_names"`
	Patterns   map[string]json.RawMessage `json:"patterns"`
	// JSON is how Ansible reads back, as an inventory script's output, what
	// ansible-inventory --list printed for the inventory (NAME.list.json),
	// and --list --export (NAME.export.json).
	JSON map[string]ansibleAnswer `json:"json"`
}

// recorded are the files record.py writes beside a source, which are not
// sources themselves.
var recorded = []string{".ansible.json", ".list.json", ".export.json"}

// scriptOutputs are the testdata/ansible/*.json that are an inventory
// script's output: Ansible reads each through its script plugin.
func scriptOutputs() []string {
	all, _ := filepath.Glob("testdata/ansible/*.json")
	var out []string
	for _, f := range all {
		if !slices.ContainsFunc(recorded, func(ext string) bool { return strings.HasSuffix(f, ext) }) {
			out = append(out, f)
		}
	}
	return out
}

func readAnswer(t *testing.T, file string) ansibleAnswer {
	t.Helper()
	var want ansibleAnswer
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("%v (record it with go generate ./plans/inventory)", err)
	}
	if err := json.Unmarshal(data, &want); err != nil {
		t.Fatal(err)
	}
	return want
}

// TestAgreesWithAnsible reads every inventory under testdata/ansible and
// compares the result with what Ansible itself answered for it: each
// host's variables after precedence, its group_names, and the hosts of
// each pattern. An inventory Ansible refuses must be refused; one named
// stricter-* is one Ansible accepts (with a warning) and relayctl refuses.
// DIR/hosts.ini is read with the group_vars/ and host_vars/ beside it.
func TestAgreesWithAnsible(t *testing.T) {
	files, _ := filepath.Glob("testdata/ansible/*.ini")
	yamls, _ := filepath.Glob("testdata/ansible/*.yaml")
	withVars, _ := filepath.Glob("testdata/ansible/*/hosts.ini")
	scripts := scriptOutputs()
	files = append(append(append(files, yamls...), withVars...), scripts...)
	if len(files) < 10 || len(withVars) == 0 || len(scripts) < 5 {
		t.Fatalf("found %d inventories under testdata/ansible", len(files))
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			base := strings.TrimSuffix(file, filepath.Ext(file))
			want := readAnswer(t, base+".ansible.json")
			src, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			var inv *Inventory
			if slices.Contains(scripts, file) {
				inv, err = ParseJSON(file, src) // a script's output, whatever it holds
			} else {
				inv, err = Parse(file, src)
			}
			if err == nil && filepath.Base(file) == "hosts.ini" {
				err = inv.ReadVarsDirs(os.DirFS(filepath.Dir(file)))
			}
			stricter := strings.HasPrefix(filepath.Base(file), "stricter-")
			switch {
			case want.Error != "" || stricter:
				if err == nil {
					t.Fatalf("parsed; Ansible %s says %q (stricter: %v), want an error", want.Ansible, want.Error, stricter)
				}
				if !strings.Contains(err.Error(), file) {
					t.Errorf("error %q does not name the file", err)
				}
				return
			case err != nil:
				t.Fatalf("got %v; Ansible %s reads it", err, want.Ansible)
			}
			checkHosts(t, inv, want)
			checkPatterns(t, inv, base, want)
		})
	}
}

func checkHosts(t *testing.T, inv *Inventory, want ansibleAnswer) {
	t.Helper()
	got := inv.HostNames()
	var names []string
	for h := range want.GroupNames { // every host; hostvars lists only those with variables
		names = append(names, h)
	}
	sort.Strings(names)
	sorted := append([]string(nil), got...)
	sort.Strings(sorted)
	if !reflect.DeepEqual(sorted, names) {
		t.Fatalf("hosts: got %v, Ansible has %v", sorted, names)
	}
	for _, h := range names {
		vars, _ := inv.Vars(h)
		// Select resolves one variable at a time; it must agree with Vars.
		for k, v := range vars {
			if got, _ := inv.lookup(inv.hostIndex[h], inv.precedence(inv.hostIndex[h]), k); got != v {
				t.Errorf("%s: %s: lookup gives %+v, Vars %+v", h, k, got, v)
			}
		}
		for k, av := range want.HostVars[h] {
			v, ok := vars[k]
			if !ok {
				t.Errorf("%s: %s missing; Ansible has %v", h, k, av)
				continue
			}
			if msg := sameValue(v, av); msg != "" {
				t.Errorf("%s: %s: %s", h, k, msg)
			}
		}
		for k := range vars {
			if _, ok := want.HostVars[h][k]; !ok {
				t.Errorf("%s: %s = %+v; Ansible has no such variable", h, k, vars[k])
			}
		}
		if g, w := inv.HostGroups(h), want.GroupNames[h]; !reflect.DeepEqual(g, w) {
			t.Errorf("%s: group_names: got %v, Ansible %v", h, g, w)
		}
	}
}

// sameValue compares our reading of a variable with Ansible's JSON.
func sameValue(v Value, av any) string {
	switch a := av.(type) {
	case string:
		if v.Kind == String && v.Text == a {
			return ""
		}
		if v.Kind == Complex && yaml11Time.MatchString(a) {
			return "" // a YAML date, which Ansible's JSON prints as text
		}
	case float64:
		switch v.Kind {
		case Int:
			if strconv.FormatFloat(a, 'f', -1, 64) == v.Text {
				return ""
			}
			// an integer beyond float64's 53 bits, which the answer's
			// decoding rounded
			if f, err := strconv.ParseFloat(v.Text, 64); err == nil && math.Abs(f) > 1<<53 && f == a {
				return ""
			}
		case Float:
			f, _ := strconv.ParseFloat(v.Text, 64)
			if f == a || math.IsNaN(f) && math.IsNaN(a) {
				return ""
			}
		}
	case bool:
		if v.Kind == Bool && v.Text == strconv.FormatBool(a) {
			return ""
		}
	case nil:
		if v.Kind == Null {
			return ""
		}
	case []any:
		if v.Kind == Complex {
			return ""
		}
	case map[string]any:
		if s, ok := a["__ansible_unsafe"].(string); ok && v.Kind == String && v.Text == s {
			return ""
		}
		if s, ok := a["__float"].(string); ok && v.Kind == Float { // NaN or an infinity (record.py's strict)
			f, _ := strconv.ParseFloat(v.Text, 64)
			if w, _ := strconv.ParseFloat(s, 64); f == w || math.IsNaN(f) && math.IsNaN(w) {
				return ""
			}
		}
		if v.Kind == Complex {
			return ""
		}
	}
	return fmt.Sprintf("got %s %q, Ansible %#v", v.Kind, v.Text, av)
}

func checkPatterns(t *testing.T, inv *Inventory, base string, want ansibleAnswer) {
	t.Helper()
	data, err := os.ReadFile(base + ".patterns")
	if os.IsNotExist(err) {
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		pattern, refused := strings.CutPrefix(line, "refused: ")
		raw, ok := want.Patterns[pattern]
		if !ok {
			t.Errorf("%s: no answer recorded from Ansible; go generate ./plans/inventory", pattern)
			continue
		}
		var ansible []string
		ansibleErr := json.Unmarshal(raw, &ansible) != nil
		p, err := ParsePattern(pattern)
		var got []string
		if err == nil {
			got, err = inv.Match(p)
		}
		switch {
		case refused:
			if err == nil {
				t.Errorf("%s: got %v, want refused (Ansible: %s)", pattern, got, raw)
			}
		case ansibleErr || len(ansible) == 0:
			if err == nil {
				t.Errorf("%s: got %v; Ansible selects nothing (%s)", pattern, got, raw)
			}
		case err != nil:
			t.Errorf("%s: %v; Ansible selects %v", pattern, err, ansible)
		default:
			if !sameSet(got, ansible) {
				t.Errorf("%s: got %v, Ansible %v", pattern, got, ansible)
			}
			if !inInventoryOrder(inv, got) {
				t.Errorf("%s: %v is not in inventory order", pattern, got)
			}
		}
	}
}

func sameSet(a, b []string) bool {
	x := append([]string(nil), a...)
	y := append([]string(nil), b...)
	sort.Strings(x)
	sort.Strings(y)
	return reflect.DeepEqual(x, y)
}

func inInventoryOrder(inv *Inventory, names []string) bool {
	last := -1
	for _, n := range names {
		h := inv.hostIndex[n]
		if h == nil || h.order <= last {
			return false
		}
		last = h.order
	}
	return true
}
