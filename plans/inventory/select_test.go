package inventory

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"testing/fstest"
)

func selectAll(t *testing.T, file, src, pattern string, labels ...string) (*Selection, error) {
	t.Helper()
	inv, err := Parse(file, []byte(src))
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	p, err := ParsePattern(pattern)
	if err != nil {
		t.Fatal(err)
	}
	return inv.Select(p, Options{Labels: labels})
}

func TestSelectHosts(t *testing.T) {
	src := `
[ash]
relay-1.ash ansible_host=10.1.0.1 ansible_port=2222 ansible_user=relay
relay-2.ash:2200
relay-3.ash ansible_ssh_host=10.1.0.3 ansible_host=10.9.9.9
[ash:vars]
region=ash
ansible_ssh_user=deploy
[v6]
[2001:db8::5]:2022 region=six
2001:db8::6 region=six ansible_user=relay
`
	sel, err := selectAll(t, "s.ini", src, "all", "region")
	if err != nil {
		t.Fatal(err)
	}
	want := []Host{
		{Name: "relay-1.ash", Address: "10.1.0.1", Port: 2222, User: "deploy", Labels: map[string]string{"region": "ash"}, Groups: []string{"ash"}, Line: 3},
		{Name: "relay-2.ash", Address: "relay-2.ash", Port: 2200, User: "deploy", Labels: map[string]string{"region": "ash"}, Groups: []string{"ash"}, Line: 4},
		{Name: "relay-3.ash", Address: "10.1.0.3", User: "deploy", Labels: map[string]string{"region": "ash"}, Groups: []string{"ash"}, Line: 5},
		{Name: "2001:db8::5", Address: "2001:db8::5", Port: 2022, Labels: map[string]string{"region": "six"}, Groups: []string{"v6"}, Line: 10},
		{Name: "2001:db8::6", Address: "2001:db8::6", User: "relay", Labels: map[string]string{"region": "six"}, Groups: []string{"v6"}, Line: 11},
	}
	if !reflect.DeepEqual(sel.Hosts, want) {
		t.Errorf("got\n%+v\nwant\n%+v", sel.Hosts, want)
	}
	targets := []string{"deploy@10.1.0.1:2222", "deploy@relay-2.ash:2200", "deploy@10.1.0.3", "[2001:db8::5]:2022", "relay@[2001:db8::6]"}
	for i, h := range sel.Hosts {
		if h.SSHTarget() != targets[i] {
			t.Errorf("%s: SSHTarget %q, want %q", h.Name, h.SSHTarget(), targets[i])
		}
	}
}

// A label comes from the host or its nearest group, as any variable.
func TestSelectLabels(t *testing.T) {
	src := `all:
  vars: {pool: edge}
  children:
    relays:
      vars: {region: unknown}
      children:
        ash:
          vars: {region: ash}
          hosts:
            relay-1.ash:
            relay-2.ash: {pool: canary}
        fra:
          vars: {region: fra, pool: 7}
          hosts:
            relay-1.fra:
`
	sel, err := selectAll(t, "l.yaml", src, "relays", "region", "pool")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]map[string]string{}
	for _, h := range sel.Hosts {
		got[h.Name] = h.Labels
	}
	want := map[string]map[string]string{
		"relay-1.ash": {"region": "ash", "pool": "edge"},
		"relay-2.ash": {"region": "ash", "pool": "canary"},
		"relay-1.fra": {"region": "fra", "pool": "7"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

// Whatever an inventory says, what reaches ssh is a plain name, address,
// port and user; everything else is refused at the line that set it.
func TestSelectRefuses(t *testing.T) {
	tests := []struct {
		name, src string
		labels    []string
		want      string
	}{
		{"option as address", "h ansible_host=-oProxyCommand=touch\\ /tmp/x\n", nil, `x.ini:1: h: ansible_host "-oProxyCommand=touch /tmp/x" is neither a host name`},
		{"option as user", "h ansible_user=-oProxyCommand=x\n", nil, `x.ini:1: h: ansible_user "-oProxyCommand=x" is not a user name`},
		{"space in address", "h ansible_host=\"a b\"\n", nil, `ansible_host "a b" is neither`},
		{"user with @", "h ansible_user=root@evil\n", nil, `ansible_user "root@evil" is not a user name`},
		{"zone", "h ansible_host=fe80::1%eth0\n", nil, `ansible_host "fe80::1%eth0" is neither`},
		{"template", "h ansible_host=\"{{ lookup('pipe', 'id') }}\"\n", nil, "x.ini:1: h: ansible_host is a Jinja template; relayctl does not evaluate templates"},
		{"port range", "h ansible_port=70000\n", nil, "h: ansible_port is 70000; want a TCP port, 1 to 65535"},
		{"port text", "h ansible_port=ssh\n", nil, `h: ansible_port is "ssh"; want a TCP port`},
		{"port list", "h\n[all:vars]\nansible_port=[22]\n", nil, "x.ini:3: h: ansible_port is a list, mapping or other value"},
		{"connection", "h ansible_connection=local\n", nil, `h: ansible_connection is "local"; relayctl reaches hosts over SSH only`},
		{"bad name", "h$1\n", nil, `x.ini:1: host "h$1": relayctl names hosts`},
		{"label missing", "[ash]\nh\n", []string{"region"}, "x.ini:2: h has no region; the spec's labels need it on every selected host: set region=… on the host line, or in the vars of one of its groups (ash), or in group_vars/"},
		{"label bool", "[ash]\nh region=True\n", []string{"region"}, "h: label region is the boolean true"},
		{"label text", "[ash]\nh region=\"us east\"\n", []string{"region"}, `h: label region is "us east"; want letters, digits and ._-`},
		{"label secret", "h\n", []string{"api_token"}, `label "api_token": its name says secret`},
		{"label ansible", "h\n", []string{"ansible_host"}, `label "ansible_host": ansible_ variables are Ansible's settings`},
		{"label twice", "h\n", []string{"region", "region"}, `label "region" is named twice`},
		{"label name", "h\n", []string{"re-gion"}, `label "re-gion": want a variable name`},
	}
	for _, tt := range tests {
		_, err := selectAll(t, "x.ini", tt.src, "all", tt.labels...)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: got %v, want an error with %q", tt.name, err, tt.want)
		}
	}
}

func TestSelectYAMLLabelBoolean(t *testing.T) {
	_, err := selectAll(t, "n.yaml", "all:\n  hosts:\n    h:\n      region: no\n", "all", "region")
	if err == nil || !strings.Contains(err.Error(), "n.yaml:4: h: label region is the boolean false; want a word such as ash (in YAML quote it") {
		t.Errorf("got %v", err)
	}
	sel, err := selectAll(t, "n.yaml", "all:\n  hosts:\n    h:\n      region: \"no\"\n", "all", "region")
	if err != nil || sel.Hosts[0].Labels["region"] != "no" {
		t.Errorf("quoted: got %v, %v", sel, err)
	}
}

// Every problem of every selected host is reported at once, by line.
func TestSelectReportsAll(t *testing.T) {
	_, err := selectAll(t, "x.ini", "a ansible_port=0\nb ansible_user=-x\n[g]\nc\n", "all", "region")
	var errs Errors
	if !errors.As(err, &errs) || len(errs) != 5 {
		t.Fatalf("got %v, want 5 problems", err)
	}
	for i, line := range []int{1, 1, 2, 2, 4} {
		if errs[i].Line != line {
			t.Errorf("problem %d at line %d, want %d: %v", i, errs[i].Line, line, errs[i])
		}
	}
}

func TestSelectWarnsUnreadSettings(t *testing.T) {
	src := "[ash]\nh1\nh2\n[ash:vars]\nansible_ssh_private_key_file=/secret/key\nansible_become=true\n"
	sel, err := selectAll(t, "w.ini", src, "ash")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"w.ini:5: ansible_ssh_private_key_file is set for h1 and 1 more of the selected hosts; relayctl does not read it",
		"w.ini:6: ansible_become is set for h1 and 1 more of the selected hosts",
	}
	if len(sel.Warnings) != len(want) {
		t.Fatalf("got %v", sel.Warnings)
	}
	for i, w := range sel.Warnings {
		if !strings.HasPrefix(w.Error(), want[i]) || strings.Contains(w.Error(), "/secret/key") {
			t.Errorf("warning %d: got %q, want %q… without the value", i, w, want[i])
		}
	}
}

func TestSelectVarsDirs(t *testing.T) {
	inv := mustParse(t, "inv/hosts.ini", "[ash]\nrelay-1 ansible_host=10.0.0.1\nrelay-2\n[ash:vars]\nregion=ash\n")
	fsys := fstest.MapFS{
		"group_vars/all.yml":         {Data: []byte("pool: edge\n")},
		"group_vars/ash/10-a.yml":    {Data: []byte("ansible_user: relay\nansible_port: 2200\n")},
		"group_vars/ash/20-b.yaml":   {Data: []byte("ansible_port: 2300\n")},
		"group_vars/ash/vault.yml":   {Data: []byte("$ANSIBLE_VAULT;1.1;AES256\n6162\n")},
		"host_vars/relay-1":          {Data: []byte(`{"ansible_host": "10.0.0.9", "region": "ash-west"}`)},
		"host_vars/relay-2.yml":      {Data: []byte("ansible_host: -oProxyCommand=x\n")},
		"host_vars/unknown-host.yml": {Data: []byte("not: [read\n")}, // no such host: never read
	}
	if err := inv.ReadVarsDirs(fsys); err != nil {
		t.Fatal(err)
	}
	if len(inv.Warnings) != 1 || !strings.HasPrefix(inv.Warnings[0].Error(), "inv/group_vars/ash/vault.yml: vault-encrypted: relayctl does not read it") {
		t.Errorf("warnings: %v", inv.Warnings)
	}
	var read []string
	for _, f := range inv.VarsFiles() {
		read = append(read, f.Path)
	}
	if want := []string{"group_vars/all.yml", "group_vars/ash/10-a.yml", "group_vars/ash/20-b.yaml", "group_vars/ash/vault.yml", "host_vars/relay-1", "host_vars/relay-2.yml"}; !reflect.DeepEqual(read, want) {
		t.Errorf("files read: got %v, want %v", read, want)
	}
	p, _ := ParsePattern("ash")
	_, err := inv.Select(p, Options{Labels: []string{"region", "pool"}})
	if err == nil || err.Error() != `inv/host_vars/relay-2.yml:1: relay-2: ansible_host "-oProxyCommand=x" is neither a host name (letters, digits, ._-) nor an IP address` {
		t.Fatalf("got %v, want the bad ansible_host at its file and line", err)
	}
	p, _ = ParsePattern("relay-1")
	sel, err := inv.Select(p, Options{Labels: []string{"region", "pool"}})
	if err != nil {
		t.Fatal(err)
	}
	want := Host{Name: "relay-1", Address: "10.0.0.9", Port: 2300, User: "relay", Labels: map[string]string{"region": "ash-west", "pool": "edge"}, Groups: []string{"ash"}, Line: 2}
	if !reflect.DeepEqual(sel.Hosts[0], want) {
		t.Errorf("got %+v, want %+v", sel.Hosts[0], want)
	}
}

// Above every group variable of the inventory file, as in Ansible.
func TestVarsDirsOverInventoryGroupVars(t *testing.T) {
	inv := mustParse(t, "hosts.ini", "[ash]\nrelay-1\n[ash:vars]\nregion=ash\n")
	if err := inv.ReadVarsDirs(fstest.MapFS{"group_vars/all.yml": {Data: []byte("region: everywhere\n")}}); err != nil {
		t.Fatal(err)
	}
	sel, err := inv.Select(mustPattern(t, "all"), Options{Labels: []string{"region"}})
	if err != nil || sel.Hosts[0].Labels["region"] != "everywhere" {
		t.Errorf("got %v, %v; want region everywhere (group_vars/all over [ash:vars])", sel, err)
	}
}

func TestVarsDirsErrors(t *testing.T) {
	inv := mustParse(t, "d/hosts.ini", "[ash]\nrelay-1\n")
	err := inv.ReadVarsDirs(fstest.MapFS{
		"group_vars/ash.yml":     {Data: []byte("- a\n")},
		"host_vars/relay-1.yaml": {Data: []byte("a: 1\na: 2\n")},
		"group_vars/all.json":    {Data: []byte("{\"a\": [\n")},
	})
	want := []string{
		"d/group_vars/all.json:1: not valid YAML",
		"d/group_vars/ash.yml:1: a vars file is a mapping of variables (name: value), not a list",
		`d/host_vars/relay-1.yaml:2: variable "a" is given twice (first on line 1)`,
	}
	var errs Errors
	if !errors.As(err, &errs) || len(errs) != len(want) {
		t.Fatalf("got %v", err)
	}
	for i, e := range errs {
		if !strings.HasPrefix(e.Error(), want[i]) {
			t.Errorf("got %q, want %q…", e, want[i])
		}
	}
}

func mustPattern(t *testing.T, s string) *Pattern {
	t.Helper()
	p, err := ParsePattern(s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Two names dialled at the same address and port are one machine: the
// second is refused at its line, naming the first, whatever region each
// is in. Another port, or an address only one of them names, is another
// host; an unset port is not taken for 22 (ssh_config may set one).
func TestSelectOneMachineUnderTwoNames(t *testing.T) {
	for _, tt := range []struct {
		name, src, want string
	}{
		{"same address and port, two regions", "[ash]\nrelay-1.ash ansible_host=10.1.0.1 ansible_port=2222 region=ash\n[fra]\nrelay-9.fra ansible_host=10.1.0.1 ansible_port=2222 region=fra\n",
			"d.ini:4: relay-9.fra is dialled at 10.1.0.1 (port 2222), as relay-1.ash (line 2) is: one machine under two names"},
		{"both ports unset", "[ash]\nrelay-1.ash ansible_host=10.1.0.1 region=ash\nrelay-2.ash ansible_host=10.1.0.1 region=ash\n",
			"d.ini:3: relay-2.ash is dialled at 10.1.0.1 (port unset: ssh_config's, else 22), as relay-1.ash (line 2) is"},
		{"a name and another's ansible_host", "[ash]\nRelay-1.ash region=ash\nrelay-2.ash ansible_host=relay-1.ASH region=ash\n",
			"d.ini:3: relay-2.ash is dialled at relay-1.ASH (port unset: ssh_config's, else 22), as Relay-1.ash (line 2) is"},
		{"an IPv4-mapped address", "[ash]\nrelay-1.ash ansible_host=10.1.0.1 region=ash\nrelay-2.ash ansible_host=::ffff:10.1.0.1 region=ash\n",
			"d.ini:3: relay-2.ash is dialled at ::ffff:10.1.0.1"},
		{"another port", "[ash]\nrelay-1.ash ansible_host=10.1.0.1 ansible_port=2222 region=ash\nrelay-2.ash ansible_host=10.1.0.1 ansible_port=2223 region=ash\n", ""},
		{"unset and 22", "[ash]\nrelay-1.ash ansible_host=10.1.0.1 region=ash\nrelay-2.ash ansible_host=10.1.0.1 ansible_port=22 region=ash\n", ""},
	} {
		_, err := selectAll(t, "d.ini", tt.src, "all", "region")
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s: %v, want two hosts", tt.name, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%s: got %v, want %q", tt.name, err, tt.want)
		}
	}
	// Only the selected hosts count: a name outside the pattern may share
	// an address (a host being renamed).
	if _, err := selectAll(t, "d.ini", "[ash]\nrelay-1.ash ansible_host=10.1.0.1\n[old]\nrelay-old ansible_host=10.1.0.1\n", "ash"); err != nil {
		t.Errorf("a duplicate outside the pattern: %v", err)
	}
}
