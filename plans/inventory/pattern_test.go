package inventory

import (
	"reflect"
	"strings"
	"testing"
)

const patternINI = `
[ash]
relay-[01:04].ash
[fra]
relay-[01:02].fra
[canary]
relay-01.ash
relay-01.fra
[maintenance]
relay-03.ash
[relays:children]
ash
fra
[ash.dc]
relay-04.ash
`

func TestPatterns(t *testing.T) {
	inv := mustParse(t, "p.ini", patternINI)
	tests := []struct {
		pattern string
		want    []string
		err     string
	}{
		{pattern: "relays:&ash:!maintenance", want: []string{"relay-01.ash", "relay-02.ash", "relay-04.ash"}},
		{pattern: "!maintenance:relays:&ash", want: []string{"relay-01.ash", "relay-02.ash", "relay-04.ash"}}, // same terms, same hosts
		{pattern: " fra , canary ", want: []string{"relay-01.ash", "relay-01.fra", "relay-02.fra"}},
		{pattern: "&canary", want: []string{"relay-01.ash", "relay-01.fra"}},
		{pattern: "relay-0[12].*", want: []string{"relay-01.ash", "relay-02.ash", "relay-01.fra", "relay-02.fra"}},
		{pattern: "relay-0[!12].ash", want: []string{"relay-03.ash", "relay-04.ash"}},
		{pattern: "relay-0?.fra", want: []string{"relay-01.fra", "relay-02.fra"}},
		{pattern: `~relay-0[34]`, want: []string{"relay-03.ash", "relay-04.ash"}},
		{pattern: `~(ash|fra)$,!relays`, err: "selects no host"},
		{pattern: "ash.dc", want: []string{"relay-04.ash"}}, // a dot: group and host names both match
		{pattern: "ash[1:2]", want: []string{"relay-02.ash", "relay-03.ash"}},
		{pattern: "relays[-1]", want: []string{"relay-02.fra"}},
		{pattern: "ash:nosuch", err: `nosuch matches no group and no host in p.ini`},
		{pattern: "relays:!maintenence", err: "did you mean maintenance? (Ansible would ignore the term"},
		{pattern: "relays:&ahs", err: "did you mean ash?"},
		{pattern: "zzz*", err: "matches no group name and no host name"},
		{pattern: "ash[7]", err: "ash matches 4 hosts, so there is no host [7]"},
		{pattern: "ash[5:9]", err: "none of them in that range"},
		{pattern: "", err: "empty host pattern"},
		{pattern: "relays:&", err: "nothing after &"},
		{pattern: "relays ash", err: "a space inside a term"},
		{pattern: "relays:ash,fra", err: "mixes , and :"},
		{pattern: "ash[1-2]", err: "[1-2] was removed from Ansible; write [1:2]"},
		{pattern: `~(?=relay)`, err: "not a regular expression relayctl reads"},
		{pattern: "@hosts.txt", err: "@file is ansible --limit's"},
		{pattern: "!!ash", err: "one & or ! per term"},
	}
	for _, tt := range tests {
		p, err := ParsePattern(tt.pattern)
		var got []string
		if err == nil {
			got, err = inv.Match(p)
		}
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%q: got %v, %v; want an error with %q", tt.pattern, got, err, tt.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%q: got %v, %v; want %v", tt.pattern, got, err, tt.want)
		}
	}
}

// A position in a group is Ansible's order of its hosts, which is defined
// only while no two groups of one level below it both have children.
func TestSubscriptOrder(t *testing.T) {
	inv := mustParse(t, "n.ini", "[p:children]\na\nb\n[a:children]\na1\n[b:children]\nb1\n[a1]\nh1\n[b1]\nh2\n[a]\nh3\n")
	p, _ := ParsePattern("p[0]")
	if _, err := inv.Match(p); err == nil || !strings.Contains(err.Error(), "depends on how Python walks its nested groups") {
		t.Errorf("p[0]: got %v, want refused", err)
	}
	p, _ = ParsePattern("a[0:1]")
	if got, err := inv.Match(p); err != nil || !reflect.DeepEqual(got, []string{"h1", "h3"}) {
		t.Errorf("a[0:1]: got %v, %v", got, err)
	}
}

func TestGlobRegexp(t *testing.T) {
	tests := []struct {
		glob string
		yes  []string
		no   []string
	}{
		{"relay-*", []string{"relay-", "relay-1.ash", "relay-a/b"}, []string{"Relay-1", "xrelay-1"}},
		{"r?", []string{"r1", "r."}, []string{"r", "r12"}},
		{"r[a-c]", []string{"ra", "rc"}, []string{"rd", "r-"}},
		{"r[!a-c]", []string{"rd", "r-"}, []string{"ra"}},
		{"r[]]", []string{"r]"}, []string{"r"}},
		{"r[", []string{"r["}, []string{"r"}},
		{"r.(x)+", []string{"r.(x)+"}, []string{"r.xx"}},
		{`r\[x]`, []string{`r\x`}, []string{"r[x]"}},
	}
	for _, tt := range tests {
		re, err := globRegexp(tt.glob)
		if err != nil {
			t.Errorf("%s: %v", tt.glob, err)
			continue
		}
		for _, s := range tt.yes {
			if !re.MatchString(s) {
				t.Errorf("%s: %q should match", tt.glob, s)
			}
		}
		for _, s := range tt.no {
			if re.MatchString(s) {
				t.Errorf("%s: %q should not match", tt.glob, s)
			}
		}
	}
}

func FuzzPattern(f *testing.F) {
	for _, s := range []string{"relays:&ash:!maintenance", "ash,fra", "relay-0[12].*", "~relay-0[34]", "ash[1:2]", "relays[-1]", "!a", "2001:db8::1", "a[b:c]:d"} {
		f.Add(s)
	}
	inv := mustParse(f, "p.ini", patternINI)
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParsePattern(s)
		if err != nil {
			return
		}
		got, err := inv.Match(p)
		if err != nil {
			return
		}
		if len(got) == 0 || !inInventoryOrder(inv, got) {
			t.Fatalf("%q: got %v: want hosts, each once, in inventory order", s, got)
		}
	})
}
