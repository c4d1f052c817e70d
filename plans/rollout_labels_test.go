package plans

import (
	"fmt"
	"strings"
	"testing"
)

// hostsLabelled makes host plans named after their region: "ash1 fra1 ash2".
func hostsLabelled(names string) []*HostPlan {
	var out []*HostPlan
	for _, n := range strings.Fields(names) {
		out = append(out, &HostPlan{Host: n, Labels: map[string]string{"region": strings.TrimRight(n, "0123456789")}})
	}
	return out
}

func layoutText(hosts []*HostPlan, ws []Wave) string {
	var parts []string
	for _, w := range ws {
		var names []string
		for _, i := range w.Hosts {
			names = append(names, hosts[i].Host)
		}
		parts = append(parts, fmt.Sprintf("%s[%s %s/%s]", w.Group, strings.Join(names, ","), w.MaxFailures, w.MaxUnreachable))
	}
	return strings.Join(parts, " ")
}

// By label, each value's hosts are cut into waves of their own (a canary
// each), the values in rollout.order and then as they first appear in
// the plan, with each value's budgets.
func TestLayoutByLabel(t *testing.T) {
	hosts := hostsLabelled("ash1 fra1 ash2 sin1 ash3 fra2 sin2")
	all := []int{0, 1, 2, 3, 4, 5, 6}
	one := Amount{N: 1}
	tests := []struct {
		name string
		r    Resolved
		idx  []int
		want string
	}{
		{"plain", Resolved{Waves: DefaultWaves}, all, "[ash1 0/0] [fra1,ash2,sin1,ash3,fra2,sin2 0/0]"},
		{"by region", Resolved{Waves: DefaultWaves, By: "region"}, all,
			"region=ash[ash1 0/0] region=ash[ash2,ash3 0/0] region=fra[fra1 0/0] region=fra[fra2 0/0] region=sin[sin1 0/0] region=sin[sin2 0/0]"},
		{"order first", Resolved{Waves: DefaultWaves, By: "region", Order: []string{"sin"}}, all,
			"region=sin[sin1 0/0] region=sin[sin2 0/0] region=ash[ash1 0/0] region=ash[ash2,ash3 0/0] region=fra[fra1 0/0] region=fra[fra2 0/0]"},
		{"a budget of its own", Resolved{Waves: []Amount{{N: 100, Percent: true}}, By: "region", MaxUnreachable: one,
			Budgets: map[string]ResolvedBudget{"fra": {MaxFailures: &Amount{N: 50, Percent: true}}}}, all,
			"region=ash[ash1,ash2,ash3 0/1] region=fra[fra1,fra2 50%/1] region=sin[sin1,sin2 0/1]"},
		// A resumed run: the hosts left, grouped in the plan's order of
		// values, each value again with a canary.
		{"what is left", Resolved{Waves: DefaultWaves, By: "region"}, []int{4, 5, 6},
			"region=ash[ash3 0/0] region=fra[fra2 0/0] region=sin[sin2 0/0]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := layoutText(hosts, tt.r.Layout(hosts, tt.idx)); got != tt.want {
				t.Errorf("got\n%s\nwant\n%s", got, tt.want)
			}
		})
	}
}

func TestSelector(t *testing.T) {
	p := &Plan{Hosts: hostsLabelled("ash1 fra1 sin1")}
	tests := []struct {
		items []string
		match string
		err   string
	}{
		{items: []string{"region=ash"}, match: "ash1"},
		{items: []string{"region=ash,sin"}, match: "ash1 sin1"},
		{items: []string{"region=ash", "region=fra"}, match: "ash1 fra1"},
		{items: []string{"all"}, match: "ash1 fra1 sin1"},
		{items: []string{"region=ahs"}, err: "region=ahs: no host of the plan has region=ahs; the plan's values of region: ash, fra, sin"},
		{items: []string{"pool=a"}, err: "pool=a: pool is not a label of the plan's hosts (they carry region)"},
		{items: []string{"region"}, err: `"region": want KEY=VALUE`},
		{items: []string{"region=$(x)"}, err: `"region=$(x)": "$(x)" is not a label value`},
		{items: []string{"-x=a"}, err: `"-x=a": -x is not a label name`},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.items, " "), func(t *testing.T) {
			s, err := ParseSelector(tt.items)
			if err == nil {
				err = s.Check(p)
			}
			if tt.err != "" {
				if err == nil || !strings.HasPrefix(err.Error(), tt.err) {
					t.Errorf("got %v, want %s", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, h := range p.Hosts {
				if s.Matches(h.Labels) {
					got = append(got, h.Host)
				}
			}
			if strings.Join(got, " ") != tt.match {
				t.Errorf("matches %v, want %s", got, tt.match)
			}
			if back, _ := ParseSelector(s.Items()); s != nil && back.String() != s.String() {
				t.Errorf("items %v do not read back: %s", s.Items(), back)
			}
		})
	}
	if _, err := ParseSelector(nil); err == nil {
		t.Error("no item is not a selector")
	}
	listed := &Plan{Hosts: []*HostPlan{{Host: "h1"}}}
	s, _ := ParseSelector([]string{"region=ash"})
	if err := s.Check(listed); err == nil || !strings.Contains(err.Error(), "carry no labels") {
		t.Errorf("a listed plan: %v", err)
	}
}

// A wave's first host is its canary: it goes ahead of the rest of its
// wave and, with a soak, is the one watched. A host the plan leaves
// unchanged proves nothing there, so the hosts that change go first, in
// plan order, then the others: each region's canary is a host that
// changes, where one does. (The layout once took the plan's order: an
// unchanged host was a region's canary, and the one host of that region
// that changed went in the next wave with no canary ahead of it.)
func TestLayoutCanariesAmongHostsThatChange(t *testing.T) {
	hosts := hostsLabelled("ash1 fra1 ash2 fra2 ash3 sin1 sin2")
	for _, changes := range []string{"ash2", "fra1", "fra2", "ash3"} {
		for _, h := range hosts {
			if h.Host == changes {
				h.Action = ActionChange
			}
		}
	}
	for _, h := range hosts {
		if h.Action == "" {
			h.Action = ActionNone
		}
	}
	all := []int{0, 1, 2, 3, 4, 5, 6}
	tests := []struct {
		name string
		r    Resolved
		idx  []int
		want string
	}{
		{"plain", Resolved{Waves: DefaultWaves}, all, "[fra1 0/0] [ash2,fra2,ash3,ash1,sin1,sin2 0/0]"},
		{"by region", Resolved{Waves: DefaultWaves, By: "region"}, all,
			"region=ash[ash2 0/0] region=ash[ash3,ash1 0/0] region=fra[fra1 0/0] region=fra[fra2 0/0] region=sin[sin1 0/0] region=sin[sin2 0/0]"},
		{"waves of two", Resolved{Waves: []Amount{{N: 2}}}, all, "[fra1,ash2 0/0] [fra2,ash3 0/0] [ash1,sin1 0/0] [sin2 0/0]"},
		{"what is left", Resolved{Waves: DefaultWaves, By: "region"}, []int{0, 4, 6},
			"region=ash[ash3 0/0] region=ash[ash1 0/0] region=sin[sin2 0/0]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := layoutText(hosts, tt.r.Layout(hosts, tt.idx)); got != tt.want {
				t.Errorf("got\n%s\nwant\n%s", got, tt.want)
			}
		})
	}
}
