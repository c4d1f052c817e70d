package inventory

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
)

// A fleet as an operator would keep it: 50 regions of 200 relays, one host
// per line with its own ansible_host, a canary per region, 1% in
// maintenance, groups of regions under relays.
const benchRegions, benchPerRegion = 50, 200

func fleetINI() string {
	var b strings.Builder
	b.WriteString("[all:vars]\nansible_user=relay\npool=edge\n")
	for r := 0; r < benchRegions; r++ {
		fmt.Fprintf(&b, "[r%02d]\n", r)
		for i := 0; i < benchPerRegion; i++ {
			fmt.Fprintf(&b, "relay-%03d.r%02d ansible_host=10.%d.%d.%d\n", i, r, r, i/250, i%250+1)
		}
		fmt.Fprintf(&b, "[r%02d:vars]\nregion=r%02d\nansible_port=22\n", r, r)
	}
	b.WriteString("[canary]\n")
	for r := 0; r < benchRegions; r++ {
		fmt.Fprintf(&b, "relay-000.r%02d pool=canary\n", r)
	}
	b.WriteString("[maintenance]\n")
	for r := 0; r < benchRegions; r++ {
		fmt.Fprintf(&b, "relay-%03d.r%02d\nrelay-%03d.r%02d\n", 7, r, 77, r)
	}
	b.WriteString("[relays:children]\n")
	for r := 0; r < benchRegions; r++ {
		fmt.Fprintf(&b, "r%02d\n", r)
	}
	return b.String()
}

func fleetYAML() string {
	var b strings.Builder
	b.WriteString("all:\n  vars: {ansible_user: relay, pool: edge}\n  children:\n    relays:\n      children:\n")
	for r := 0; r < benchRegions; r++ {
		fmt.Fprintf(&b, "        r%02d:\n          vars: {region: r%02d, ansible_port: 22}\n          hosts:\n", r, r)
		for i := 0; i < benchPerRegion; i++ {
			fmt.Fprintf(&b, "            relay-%03d.r%02d: {ansible_host: 10.%d.%d.%d}\n", i, r, r, i/250, i%250+1)
		}
	}
	b.WriteString("    canary:\n      vars: {pool: canary}\n      hosts:\n")
	for r := 0; r < benchRegions; r++ {
		fmt.Fprintf(&b, "        relay-000.r%02d:\n", r)
	}
	b.WriteString("    maintenance:\n      hosts:\n")
	for r := 0; r < benchRegions; r++ {
		fmt.Fprintf(&b, "        relay-007.r%02d:\n        relay-077.r%02d:\n", r, r)
	}
	return b.String()
}

// fleetListJSON is what ansible-inventory --list prints for fleetINI:
// every host's variables merged into _meta.hostvars, each group's hosts
// and children, keys sorted.
func fleetListJSON() string {
	inv, err := ParseINI("fleet.ini", []byte(fleetINI()))
	if err != nil {
		panic(err)
	}
	out := map[string]any{}
	hostvars := map[string]map[string]any{}
	for _, h := range inv.hosts {
		vars, _ := inv.Vars(h.name)
		m := map[string]any{}
		for k, v := range vars {
			if v.Kind == Int {
				m[k], _ = strconv.Atoi(v.Text)
			} else {
				m[k] = v.Text
			}
		}
		hostvars[h.name] = m
	}
	out["_meta"] = map[string]any{"hostvars": hostvars}
	for _, g := range inv.groups {
		entry := map[string]any{}
		if g != inv.all && len(g.hosts) > 0 {
			var names []string
			for _, h := range g.hosts {
				names = append(names, h.name)
			}
			entry["hosts"] = names
		}
		if len(g.children) > 0 {
			var names []string
			for _, c := range g.children {
				names = append(names, c.name)
			}
			entry["children"] = names
		}
		if len(entry) > 0 {
			out[g.name] = entry
		}
	}
	b, err := json.MarshalIndent(out, "", "    ")
	if err != nil {
		panic(err)
	}
	return string(b)
}

const benchHosts = benchRegions * benchPerRegion

func perHost(b *testing.B, hosts int) {
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(hosts), "ns/host")
}

func BenchmarkParseINI(b *testing.B) {
	src := []byte(fleetINI())
	b.SetBytes(int64(len(src)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseINI("fleet.ini", src); err != nil {
			b.Fatal(err)
		}
	}
	perHost(b, benchHosts)
}

func BenchmarkParseYAML(b *testing.B) {
	src := []byte(fleetYAML())
	b.SetBytes(int64(len(src)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseYAML("fleet.yaml", src); err != nil {
			b.Fatal(err)
		}
	}
	perHost(b, benchHosts)
}

// BenchmarkParseJSON reads what ansible-inventory --list prints for the
// fleet (ParseJSON, as a program's output is read), and the same through
// Parse, which first tells it from YAML by its _meta key (a .json file).
func BenchmarkParseJSON(b *testing.B) {
	src := []byte(fleetListJSON())
	for _, bc := range []struct {
		name  string
		parse func(string, []byte) (*Inventory, error)
	}{{"output", ParseJSON}, {"file", Parse}} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(int64(len(src)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := bc.parse("fleet.json", src); err != nil {
					b.Fatal(err)
				}
			}
			perHost(b, benchHosts)
		})
	}
}

// BenchmarkSelect is what plan does once per run after parsing: select and
// resolve address, port, user and two labels for every selected host. Each
// round forgets the memos of the one before (outside the timer), so none
// helps.
func BenchmarkSelect(b *testing.B) {
	inv, err := ParseINI("fleet.ini", []byte(fleetINI()))
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct{ name, pattern string }{
		{"fleet", "relays:!maintenance"},  // 9,900 hosts
		{"region", "relays:&r07:!canary"}, // 199 hosts
		{"glob", "relay-0*.r1*:!maintenance"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			p, err := ParsePattern(bc.pattern)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			selected := 0
			for b.Loop() {
				b.StopTimer()
				inv.varsCache = map[string][]*group{}
				for _, g := range inv.groups {
					g.members = nil
				}
				b.StartTimer()
				sel, err := inv.Select(p, Options{Labels: []string{"region", "pool"}})
				if err != nil {
					b.Fatal(err)
				}
				selected = len(sel.Hosts)
			}
			b.ReportMetric(float64(selected), "hosts")
			perHost(b, selected)
		})
	}
}

func TestBenchFleetIsValid(t *testing.T) {
	for _, inv := range []*Inventory{mustParse(t, "fleet.ini", fleetINI()), mustParse(t, "fleet.yaml", fleetYAML()), mustParse(t, "fleet.json", fleetListJSON())} {
		if inv.HostCount() != benchHosts {
			t.Fatalf("%s: %d hosts, want %d", inv.File, inv.HostCount(), benchHosts)
		}
		p, _ := ParsePattern("relays:!maintenance")
		sel, err := inv.Select(p, Options{Labels: []string{"region", "pool"}})
		if err != nil || len(sel.Hosts) != benchHosts-2*benchRegions {
			t.Fatalf("%s: got %d hosts, %v", inv.File, len(sel.Hosts), err)
		}
		if h := sel.Hosts[0]; h.Address != "10.0.0.1" || h.Port != 22 || h.User != "relay" || h.Labels["pool"] != "canary" || h.Labels["region"] != "r00" {
			t.Errorf("%s: first host %+v", inv.File, h)
		}
	}
}
