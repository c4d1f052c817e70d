package plans

import (
	"crypto/sha256"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Reviews of big fleets (10,000 hosts once made a review of 27 MB and
// 610,000 lines). Beyond maxReviewSections hosts, hosts whose sections
// would read the same (the same kernel, sysctls from and to, release,
// files and diffs, read-back, capacity, switch and steps) share one
// section, headed by how many they are and who; a host unlike any other
// keeps its own. The plan file has every host.
const maxReviewSections = 50

// hostGroup is hosts with the same section.
type hostGroup struct {
	idx  []int  // the hosts, by their place in the plan
	body string // the first host's
}

// hostGroups writes a section per group of hosts with the same plan, in
// the order each group's first host comes.
func (r *review) hostGroups() {
	var groups []*hostGroup
	by := map[[32]byte]*hostGroup{}
	for i, h := range r.p.Hosts {
		body := r.body(h)
		k := sha256.Sum256([]byte(h.Kernel + "\x00" + h.Action + "\x00" + body))
		g := by[k]
		if g == nil {
			g = &hostGroup{body: body}
			by[k] = g
			groups = append(groups, g)
		}
		g.idx = append(g.idx, i)
	}
	r.w("%d hosts in %d section(s): hosts whose sections would read the same share one; the plan file has every host (`relayctl show PLAN --json`).\n\n", len(r.p.Hosts), len(groups))
	for _, g := range groups {
		h := r.p.Hosts[g.idx[0]]
		if len(g.idx) == 1 {
			r.host(h)
			continue
		}
		r.w("## %d hosts: %s\n\n", len(g.idx), actionText(h.Action))
		r.w("Kernel %s · %s\n\n", MDCode(h.Kernel), MDText(groupHosts(r.p.Hosts, g.idx)))
		r.b.WriteString(g.body)
	}
}

// groupHosts names a group's hosts: the first and last of each run in
// plan order (up to 20 runs), and how many carry each label value.
func groupHosts(all []*HostPlan, idx []int) string {
	var runs []string
	for i := 0; i < len(idx); {
		j := i
		for j+1 < len(idx) && idx[j+1] == idx[j]+1 {
			j++
		}
		if len(runs) == 20 {
			runs = append(runs, fmt.Sprintf("and %d more", len(idx)-i))
			break
		}
		if i == j {
			runs = append(runs, all[idx[i]].Host)
		} else {
			runs = append(runs, fmt.Sprintf("%s … %s (%d)", all[idx[i]].Host, all[idx[j]].Host, j-i+1))
		}
		i = j + 1
	}
	s := "hosts " + strings.Join(runs, ", ")
	if len(all[idx[0]].Labels) > 0 {
		counts := map[string]int{}
		for _, i := range idx {
			counts[LabelsText(all[i].Labels)]++
		}
		keys := slices.Sorted(maps.Keys(counts))
		var parts []string
		for i, k := range keys {
			if i == 20 {
				parts = append(parts, fmt.Sprintf("and %d more", len(keys)-20))
				break
			}
			parts = append(parts, fmt.Sprintf("%s: %d", k, counts[k]))
		}
		s += "; by label: " + strings.Join(parts, ", ")
	}
	return s
}

// groupedNotes are the blockers, then the warnings, each message once
// with the hosts that have it.
func (r *review) groupedNotes() []string {
	var out []string
	for _, kind := range []string{"**BLOCKED**", "**warning**"} {
		var order []string
		by := map[string][]int{}
		for i, h := range r.p.Hosts {
			msgs := h.Warnings
			if kind == "**BLOCKED**" {
				msgs = h.Blockers
			}
			for _, m := range msgs {
				if by[m] == nil {
					order = append(order, m)
				}
				by[m] = append(by[m], i)
			}
		}
		for _, m := range order {
			idx := by[m]
			who := MDText(r.p.Hosts[idx[0]].Host)
			if len(idx) > 1 {
				who = fmt.Sprintf("%d hosts (%s)", len(idx), MDText(groupHosts(r.p.Hosts, idx)))
			}
			out = append(out, fmt.Sprintf("- %s %s: %s", kind, who, MDText(m)))
		}
	}
	return out
}
