package main

// Inventories and regions against the lab: an Ansible INI and
// a YAML inventory, with groups, children, group_vars and patterns, drive
// plan and apply, each host reached at the address, port and user the
// inventory gives it (no ssh_config alias); waves by region in order,
// each with its canary, on the hosts' one clock; a region over its budget
// stops before the next; --resume after a stop mid-region goes on with
// that region's hosts left, then the next region, each with a canary.

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/relayctl/relayctl/internal/lab"
)

// regionHosts names the lab's hosts by region, in order: the first n
// are ash-1 … ash-n, the next fra-1 …, as inventory names (not the lab's
// ssh_config aliases).
func regionHosts(hs []*lab.Host, regions ...string) map[string]*lab.Host {
	out := map[string]*lab.Host{}
	per := len(hs) / len(regions)
	for i, h := range hs {
		out[fmt.Sprintf("%s-%d", regions[i/per], i%per+1)] = h
	}
	return out
}

// target is the inventory's way to reach h: its address, port and user.
func target(h *lab.Host) string {
	return fmt.Sprintf("ansible_host=%s ansible_port=%d ansible_user=root", h.HostName, h.Port)
}

// inventorySpec writes a spec whose hosts are inventory's selected by
// pattern, labelled by region, with the lab spec's relay and extra.
func (e *labEnv) inventorySpec(name, inventory, pattern, extra string) (string, string) {
	e.t.Helper()
	src, err := os.ReadFile(e.spec)
	if err != nil {
		e.t.Fatal(err)
	}
	hosts := fmt.Sprintf("hosts:\n  inventory: %s\n  pattern: %q\n  labels: [region]\n", inventory, pattern)
	spec := regexp.MustCompile(`(?s)hosts:\n(  - [^\n]+\n)+`).ReplaceAllLiteralString(string(src), hosts)
	spec = strings.Replace(spec, "name: lab-rcvbuf", "name: "+name, 1) + extra
	file := filepath.Join(e.dir, name+".yaml")
	e.write(name+".yaml", spec)
	return file, filepath.Join(e.dir, name+".plan")
}

func (e *labEnv) write(name, body string) {
	e.t.Helper()
	path := filepath.Join(e.dir, name)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		e.t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		e.t.Fatal(err)
	}
}

// direct runs relayctl with the lab's key and known_hosts but an empty
// ssh_config: a host is reached only where its inventory says.
func (e *labEnv) direct(args ...string) (int, string, string) {
	e.t.Helper()
	empty := filepath.Join(e.dir, "empty_ssh_config")
	if _, err := os.Stat(empty); err != nil {
		e.write("empty_ssh_config", "")
	}
	var out, errb strings.Builder
	full := append([]string{"relayctl"}, args...)
	full = append(full, "--ssh-config", empty, "--known-hosts", e.lab.KnownHosts, "--identity", e.lab.Identity)
	code := run(full, strings.NewReader(""), &out, &errb)
	return code, out.String(), errb.String()
}

// An INI inventory (groups, children, [group:vars], group_vars/, a
// pattern with an exclusion) and then a YAML one (nested children, an
// intersection) select the hosts plan and apply work on; each is reached
// at the address, port and user the inventory gives it.
func TestLabInventoryINIAndYAML(t *testing.T) {
	e := startLab(t, make([]lab.HostOptions, 4), nil)
	r := regionHosts(e.lab.Hosts, "ash", "fra")
	e.write("inventory/hosts.ini", fmt.Sprintf(`[ash]
relay-ash-1 %s
relay-ash-2 %s
[fra]
relay-fra-1 %s
relay-fra-2 %s
[maintenance]
relay-fra-2
[relays:children]
ash
fra
[ash:vars]
region=ash
`, target(r["ash-1"]), target(r["ash-2"]), target(r["fra-1"]), target(r["fra-2"])))
	e.write("inventory/group_vars/fra.yml", "region: fra\n")
	spec, plan := e.inventorySpec("ini", "inventory/hosts.ini", "relays:!maintenance", "")
	var vout, verr strings.Builder
	if code := run([]string{"relayctl", "validate", spec}, nil, &vout, &verr); code != 0 || !strings.Contains(vout.String(), "valid: 3 hosts selected from inventory/hosts.ini by relays:!maintenance") {
		t.Fatalf("validate: exit %d\n%s\n%s", code, vout.String(), verr.String())
	}
	if code, out, errs := e.direct("plan", spec, "--out", plan, "--detailed-exitcode"); code != 2 {
		t.Fatalf("plan: exit %d\n%s\n%s", code, out, errs)
	}
	md, _ := os.ReadFile(plan + ".md")
	if want := fmt.Sprintf("labels region=fra · dialled as `root@%s:%d`", r["fra-1"].HostName, r["fra-1"].Port); !strings.Contains(string(md), want) {
		t.Errorf("review lacks %q", want)
	}
	if code, out, errs := e.direct("apply", plan); code != 0 {
		t.Fatalf("apply: exit %d\n%s\n%s", code, out, errs)
	}
	if got := receiptOutcomes(readReceipt(t, plan+".receipt.json")); got != "relay-ash-1=applied relay-ash-2=applied relay-fra-1=applied" {
		t.Errorf("outcomes: %s", got)
	}
	if _, rb, _ := e.socket(r["fra-2"]); rb != 212992 {
		t.Errorf("relay-fra-2 is in maintenance, but its rb is %d", rb)
	}
	// A host's own receipts by its inventory name alone (no PLAN, no SPEC,
	// no ssh_config entry): it is reached where the plan in --dir dialled
	// it, never by a DNS lookup of the name; a name no plan there has is
	// refused before anything is dialled.
	var hist historyReport
	if code, out, errs := e.direct("history", "--host", "relay-ash-2", "--hosts", "--dir", e.dir, "--json"); code != 0 || json.Unmarshal([]byte(out), &hist) != nil ||
		len(hist.Runs) != 1 || hist.Runs[0].Hosts[0].Outcome != "applied" {
		t.Errorf("history --host relay-ash-2 --hosts: exit %d, want its one receipt\n%s\n%s", code, out, errs)
	}
	if code, out, errs := e.direct("history", "--host", "relay-sin-9", "--hosts", "--dir", e.dir); code != 1 || !strings.Contains(errs, "no plan in "+e.dir+" names relay-sin-9") || strings.Contains(errs, "lookup") {
		t.Errorf("history --host relay-sin-9 --hosts: exit %d, want 1 naming no plan, no lookup\n%s\n%s", code, out, errs)
	}

	e.write("inventory/hosts.yaml", fmt.Sprintf(`all:
  children:
    relays:
      children:
        ash:
          hosts:
            relay-ash-1: {ansible_host: %s, ansible_port: %d, ansible_user: root}
          vars: {region: ash}
        fra:
          hosts:
            relay-fra-1: {ansible_host: %s, ansible_port: %d, ansible_user: root}
            relay-fra-2: {ansible_host: %s, ansible_port: %d, ansible_user: root}
          vars: {region: fra}
`, r["ash-1"].HostName, r["ash-1"].Port, r["fra-1"].HostName, r["fra-1"].Port, r["fra-2"].HostName, r["fra-2"].Port))
	spec, plan = e.inventorySpec("yaml", "inventory/hosts.yaml", "relays:&fra", "")
	if code, out, errs := e.direct("plan", spec, "--out", plan, "--detailed-exitcode"); code != 2 {
		t.Fatalf("plan: exit %d\n%s\n%s", code, out, errs)
	}
	if code, out, errs := e.direct("apply", plan); code != 0 {
		t.Fatalf("apply: exit %d\n%s\n%s", code, out, errs)
	}
	// relay-fra-1 is applied again only for its drop-in, which names the plan.
	if got := receiptOutcomes(readReceipt(t, plan+".receipt.json")); got != "relay-fra-1=applied relay-fra-2=applied" {
		t.Errorf("outcomes: %s", got)
	}
	if _, rb, _ := e.socket(r["fra-2"]); rb != 8388608 {
		t.Errorf("relay-fra-2: rb %d", rb)
	}
}

// regionInventory is an INI inventory of the lab's hosts in regions, each
// a group with its region in its vars, all children of relays.
func (e *labEnv) regionInventory(r map[string]*lab.Host, regions ...string) {
	e.t.Helper()
	var b strings.Builder
	per := len(r) / len(regions)
	for _, reg := range regions {
		fmt.Fprintf(&b, "[%s]\n", reg)
		for i := 1; i <= per; i++ {
			fmt.Fprintf(&b, "relay-%s-%d %s\n", reg, i, target(r[fmt.Sprintf("%s-%d", reg, i)]))
		}
		fmt.Fprintf(&b, "[%s:vars]\nregion=%s\n", reg, reg)
	}
	b.WriteString("[relays:children]\n" + strings.Join(regions, "\n") + "\n")
	e.write("inventory/regions.ini", b.String())
}

// hostsOf is the lab host of each inventory name.
func hostsOf(r map[string]*lab.Host) map[string]*lab.Host {
	out := map[string]*lab.Host{}
	for k, h := range r {
		reg, n, _ := strings.Cut(k, "-")
		out["relay-"+reg+"-"+n] = h
	}
	return out
}

// Region after region (rollout.order first), each starting with a canary:
// on the hosts' one clock every host of a wave began after every host of
// the wave before had ended.
func TestLabWavesByRegionInOrder(t *testing.T) {
	e := startLab(t, make([]lab.HostOptions, 6), nil)
	r := regionHosts(e.lab.Hosts, "ash", "fra", "sin")
	e.regionInventory(r, "ash", "fra", "sin")
	spec, plan := e.inventorySpec("regions", "inventory/regions.ini", "relays", "rollout:\n  by: region\n  order: [sin]\n  waves: [1, 100%]\n")
	if code, out, errs := e.direct("plan", spec, "--out", plan, "--detailed-exitcode"); code != 2 {
		t.Fatalf("plan: exit %d\n%s\n%s", code, out, errs)
	}
	code, out, errs := e.direct("apply", plan, "--parallel", "3")
	if code != 0 {
		t.Fatalf("apply: exit %d\n%s\n%s", code, out, errs)
	}
	rc := readReceipt(t, plan+".receipt.json")
	var waves []string
	for _, w := range rc.Waves {
		waves = append(waves, w.Group+":"+strings.Join(w.Hosts, ","))
	}
	want := "region=sin:relay-sin-1 region=sin:relay-sin-2 region=ash:relay-ash-1 region=ash:relay-ash-2 region=fra:relay-fra-1 region=fra:relay-fra-2"
	if got := strings.Join(waves, " "); got != want {
		t.Errorf("waves:\n got %s\nwant %s", got, want)
	}
	byName := hostsOf(r)
	begin, end := map[string]time.Time{}, map[string]time.Time{}
	for name, h := range byName {
		begin[name], end[name] = hostJournal(t, h, "regions")
	}
	for i := 1; i < len(rc.Waves); i++ {
		for _, a := range rc.Waves[i-1].Hosts {
			for _, b := range rc.Waves[i].Hosts {
				if !begin[b].After(end[a]) {
					t.Errorf("%s (wave %d) began %s, before %s (wave %d) ended %s", b, i+1, begin[b].Format(time.RFC3339Nano), a, i, end[a].Format(time.RFC3339Nano))
				}
			}
		}
	}
	for name, h := range byName {
		if _, rb, _ := e.socket(h); rb != 8388608 {
			t.Errorf("%s: rb %d", name, rb)
		}
	}
}

// A region over its budget stops the rollout before the next region; the
// ledger names every host; --resume goes on with the rest of that region
// (a canary first) and then the next, and never touches the hosts done.
func TestLabRegionBudgetAndResumeMidRegion(t *testing.T) {
	e := startLab(t, make([]lab.HostOptions, 6), nil)
	r := regionHosts(e.lab.Hosts, "ash", "fra")
	e.regionInventory(r, "ash", "fra")
	spec, plan := e.inventorySpec("budget", "inventory/regions.ini", "relays", "rollout:\n  by: region\n  waves: [1, 100%]\n")
	if code, out, errs := e.direct("plan", spec, "--out", plan, "--detailed-exitcode"); code != 2 {
		t.Fatalf("plan: exit %d\n%s\n%s", code, out, errs)
	}
	plant(t, r["ash-3"])
	code, out, errs := e.direct("apply", plan, "--parallel", "2")
	if code != 1 || !strings.Contains(out, "stopped: wave 2 (region=ash): 1 of its 2 hosts failed, rolled back or were refused, over its budget of 0") {
		t.Fatalf("apply: exit %d, want 1 and the region's stop\n%s\n%s", code, out, errs)
	}
	if got := ledgerLine(readLedger(t, plan)); got != "relay-ash-1=applied relay-ash-2=applied relay-ash-3=refused relay-fra-1=not started relay-fra-2=not started relay-fra-3=not started" {
		t.Fatalf("ledger: %s", got)
	}
	for _, k := range []string{"fra-1", "fra-2", "fra-3"} {
		if _, rb, _ := e.socket(r[k]); rb != 212992 {
			t.Errorf("relay-%s is in the next region, but its rb is %d", k, rb)
		}
	}
	pid, _, _ := e.socket(r["ash-1"])
	unplant(t, r["ash-3"])
	code, out, errs = e.direct("apply", plan, "--resume", "--parallel", "2")
	if code != 0 {
		t.Fatalf("resume: exit %d\n%s\n%s", code, out, errs)
	}
	rc := readReceipt(t, plan+".receipt.json")
	var waves []string
	for _, w := range rc.Waves {
		waves = append(waves, w.Group+":"+strings.Join(w.Hosts, ","))
	}
	if got, want := strings.Join(waves, " "), "region=ash:relay-ash-3 region=fra:relay-fra-1 region=fra:relay-fra-2,relay-fra-3"; got != want {
		t.Errorf("resumed waves:\n got %s\nwant %s", got, want)
	}
	if p2, _, _ := e.socket(r["ash-1"]); p2 != pid {
		t.Errorf("relay-ash-1 was restarted again: pid %d → %d", pid, p2)
	}
	for k, h := range r {
		if _, rb, _ := e.socket(h); rb != 8388608 {
			t.Errorf("relay-%s: rb %d after resume", k, rb)
		}
	}
}

// scriptInventory is the JSON ansible-inventory --list prints for the lab
// hosts of r in regions ash and fra, as an inventory script would print
// it: each host's address, port and user in _meta.hostvars, ash's region
// in its group's vars (--export's form), fra's on each host (--list's).
func scriptInventory(r map[string]*lab.Host, names ...string) string {
	hostvars := make([]string, len(names))
	var ash, fra []string
	for i, n := range names {
		h := r[n]
		reg, _, _ := strings.Cut(n, "-")
		vars := fmt.Sprintf(`"ansible_host": %q, "ansible_port": %d, "ansible_user": "root"`, h.HostName, h.Port)
		if reg == "fra" {
			vars += `, "region": "fra"`
			fra = append(fra, fmt.Sprintf("%q", "relay-"+n))
		} else {
			ash = append(ash, fmt.Sprintf("%q", "relay-"+n))
		}
		hostvars[i] = fmt.Sprintf(`%q: {%s}`, "relay-"+n, vars)
	}
	return fmt.Sprintf(`{
  "_meta": {"hostvars": {%s}},
  "all": {"children": ["ungrouped", "relays"]},
  "ash": {"hosts": [%s], "vars": {"region": "ash"}},
  "fra": {"hosts": [%s]},
  "relays": {"children": ["ash", "fra"]}
}
`, strings.Join(hostvars, ", "), strings.Join(ash, ", "), strings.Join(fra, ", "))
}

// A spec whose inventory is a program (an inventory script printing what
// ansible-inventory --list prints) drives plan and apply on the lab's
// hosts, each reached where the script says; apply runs the script again
// and, once its output changes, refuses the plan before any host is
// touched. The script runs only where the operator allows it: here with
// --allow-inventory-program.
func TestLabInventoryScript(t *testing.T) {
	e := startLab(t, make([]lab.HostOptions, 3), nil)
	r := regionHosts(e.lab.Hosts, "ash", "fra", "sin")
	// The script prints inventory/current.json, and notes each run.
	e.write("inventory/current.json", scriptInventory(r, "ash-1", "fra-1"))
	e.write("inventory/lab-inventory.sh", "#!/bin/sh\necho \"$*\" >> inventory/runs.log\nexec cat inventory/current.json\n")
	if err := os.Chmod(filepath.Join(e.dir, "inventory/lab-inventory.sh"), 0o755); err != nil {
		t.Fatal(err)
	}
	spec, plan := e.inventorySpec("script", "{program: [inventory/lab-inventory.sh, --list]}", "relays", "")
	var vout, verr strings.Builder
	if code := run([]string{"relayctl", "validate", spec}, nil, &vout, &verr); code != 1 || !strings.Contains(verr.String(), "is not allowed on this machine") {
		t.Fatalf("validate without --allow-inventory-program: exit %d, want 1 and the program not allowed\n%s", code, verr.String())
	}
	vout.Reset()
	verr.Reset()
	if code := run([]string{"relayctl", "validate", "--allow-inventory-program", spec}, nil, &vout, &verr); code != 0 || !strings.Contains(vout.String(), "valid: 2 hosts selected from the output of inventory/lab-inventory.sh --list by relays") {
		t.Fatalf("validate: exit %d\n%s\n%s", code, vout.String(), verr.String())
	}
	if code, out, errs := e.direct("plan", spec, "--out", plan, "--detailed-exitcode", "--allow-inventory-program"); code != 2 {
		t.Fatalf("plan: exit %d\n%s\n%s", code, out, errs)
	}
	md, _ := os.ReadFile(plan + ".md")
	for _, want := range []string{
		"- Inventory: the output of `inventory/lab-inventory.sh --list`",
		fmt.Sprintf("labels region=fra · dialled as `root@%s:%d`", r["fra-1"].HostName, r["fra-1"].Port),
	} {
		if !strings.Contains(string(md), want) {
			t.Errorf("review lacks %q", want)
		}
	}
	if code, out, errs := e.direct("apply", plan, "--allow-inventory-program"); code != 0 {
		t.Fatalf("apply: exit %d\n%s\n%s", code, out, errs)
	}
	if got := receiptOutcomes(readReceipt(t, plan+".receipt.json")); got != "relay-ash-1=applied relay-fra-1=applied" {
		t.Errorf("outcomes: %s", got)
	}
	for _, k := range []string{"ash-1", "fra-1"} {
		if _, rb, _ := e.socket(r[k]); rb != 8388608 {
			t.Errorf("relay-%s: rb %d, want 8388608", k, rb)
		}
	}
	if _, rb, _ := e.socket(r["sin-1"]); rb != 212992 {
		t.Errorf("relay-sin-1 is in no inventory, but its rb is %d", rb)
	}
	runs, _ := os.ReadFile(filepath.Join(e.dir, "inventory/runs.log"))
	if got := strings.Count(string(runs), "--list\n"); got != 3 { // validate, plan, apply
		t.Errorf("the script ran %d times (%q), want 3: validate, plan, apply", got, runs)
	}

	// The fleet grew: the script now also prints the third host. The plan
	// is refused, and that host is left as it was.
	r["ash-2"] = r["sin-1"]
	e.write("inventory/current.json", scriptInventory(r, "ash-1", "fra-1", "ash-2"))
	code, out, errs := e.direct("apply", plan, "--allow-inventory-program")
	if code != 1 || !strings.Contains(errs, "the inventory changed since the plan was made: the output of inventory/lab-inventory.sh --list has sha256") ||
		!strings.Contains(errs, "the selection now has 1 host(s) added (relay-ash-2)") {
		t.Fatalf("apply after the output changed: exit %d, want 1 and the drift\n%s\n%s", code, out, errs)
	}
	if pid, rb, _ := e.socket(r["sin-1"]); rb != 212992 || pid == 0 {
		t.Errorf("relay-sin-1 (now relay-ash-2): rb %d after a refused apply", rb)
	}
}
