package plans

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/relayctl/relayctl/plans/inventory"
	"github.com/relayctl/relayctl/tune"
)

// LabelCapacity is a promise per value of a label (capacity.by): each
// region promises its own players; lobby size, hz, packet size and stall
// are the game's and the same everywhere. Each host's planned rb is
// checked against its own value's promise, and the review states each
// value's margin.
//
//	capacity:
//	  by: region
//	  players: {ash: 400, fra: 200}
//	  hz: 60
//	  packet_size: 200
//	  stall: 50ms
type LabelCapacity struct {
	By      string         `json:"by"`
	Players map[string]int `json:"players"`
	// Promise is the rest of every value's promise (its Players is 0).
	Promise tune.Promise `json:"promise"`

	line int
}

// For is the promise of label value v.
func (c *LabelCapacity) For(v string) (tune.Promise, bool) {
	n, ok := c.Players[v]
	pr := c.Promise
	pr.Players = n
	return pr, ok
}

// Values are the label values with a promise, sorted.
func (c *LabelCapacity) Values() []string { return slices.Sorted(maps.Keys(c.Players)) }

// promiseFor is the promise a host's rb is checked against: the spec's
// one promise, or its label value's; nil for none.
func (p *Plan) promiseFor(h *HostPlan) *tune.Promise {
	if p.Capacity != nil {
		return p.Capacity
	}
	if c := p.CapacityBy; c != nil {
		if pr, ok := c.For(h.Labels[c.By]); ok {
			return &pr
		}
	}
	return nil
}

// capacityBy builds capacity.by once its other fields are read.
func (p *specParser) capacityBy(n *yaml.Node, base tune.Promise, players map[string]int, good bool) *LabelCapacity {
	by, ok := p.str(n, "capacity.by")
	if !ok {
		return nil
	}
	if err := inventory.ValidLabelKey(by); err != nil {
		p.fail(n, "capacity.by", "%v", err)
		return nil
	}
	if !good {
		return nil
	}
	return &LabelCapacity{By: by, Players: players, Promise: base, line: n.Line}
}

// labelPlayers reads capacity.players as a mapping of label values to
// players (with capacity.by).
func (p *specParser) labelPlayers(n *yaml.Node) map[string]int {
	if n == nil {
		return nil
	}
	if n.Kind != yaml.MappingNode || len(n.Content) == 0 {
		p.fail(n, "capacity.players", "with capacity.by, want the players each value promises, e.g. {ash: 400, fra: 200}")
		return nil
	}
	out := map[string]int{}
	good := true
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		field := "capacity.players." + k.Value
		if !labelValueRe.MatchString(k.Value) {
			p.fail(k, field, "want a label value (letters, digits and ._-, at most 63), got %q", k.Value)
			good = false
			continue
		}
		if _, dup := out[k.Value]; dup {
			p.fail(k, field, "given twice")
			good = false
			continue
		}
		x, ok := p.integer(v, field, 1, tune.MaxPromisePlayers, "400")
		good = good && ok
		out[k.Value] = x
	}
	if !good {
		return nil
	}
	return out
}

// checkCapacityBy checks that capacity.by is one of hosts.labels.
func (p *specParser) checkCapacityBy(s *Spec) {
	c := s.CapacityBy
	switch {
	case c == nil:
	case s.Inventory == nil:
		p.failLine(c.line, "capacity.by", "the hosts are a list, which carries no labels; labels come from an inventory (hosts: {inventory: FILE, pattern: P, labels: [%s]})", c.By)
	case !slices.Contains(s.Inventory.Labels, c.By):
		p.failLine(c.line, "capacity.by", "%s is not one of hosts.labels (%s); add it there", c.By, strings.Join(s.Inventory.Labels, ", "))
	}
}

// capacityByText is the review's line for a promise per label value.
func capacityByText(c *LabelCapacity) string {
	var vs []string
	for _, v := range c.Values() {
		vs = append(vs, fmt.Sprintf("%s %d", MDText(v), c.Players[v]))
	}
	pr := c.Promise
	return fmt.Sprintf("players per %s: %s; lobbies of %d at %d Hz, %d-byte datagrams, %s", MDText(c.By), strings.Join(vs, ", "), pr.LobbySize, pr.Hz, pr.PacketSize, MDText(tune.StallPhrase(pr.Stall)))
}

// capacityByMarkdown is the review's table of each label value's promise
// and margin: the lowest margin among its hosts (which host), how many of
// them fall short, and the bench gate that holds one of its relays to the
// promise ("a region must carry twice what is promised").
func capacityByMarkdown(p *Plan) string {
	c := p.CapacityBy
	type row struct {
		hosts, short int
		low          float64
		lowHost      string
	}
	rows := map[string]*row{}
	for _, h := range p.Hosts {
		v := h.Labels[c.By]
		x := rows[v]
		if x == nil {
			x = &row{low: -1}
			rows[v] = x
		}
		x.hosts++
		if h.Capacity == nil {
			continue
		}
		if !h.Capacity.Meets {
			x.short++
		}
		if x.low < 0 || h.Capacity.Margin < x.low {
			x.low, x.lowHost = h.Capacity.Margin, h.Host
		}
	}
	var b strings.Builder
	pr := c.Promise
	fmt.Fprintf(&b, "## Capacity by %s\n\n", MDText(c.By))
	fmt.Fprintf(&b, "Each host's planned rb against its %s's promise (lobbies of %d at %d Hz, %d-byte datagrams, %s); the gate is the bench run that holds one of the %s's relays to twice its promise.\n\n",
		MDText(c.By), pr.LobbySize, pr.Hz, pr.PacketSize, MDText(tune.StallPhrase(pr.Stall)), MDText(c.By))
	fmt.Fprintf(&b, "| %s | hosts | promise | lowest margin | short of the promise | bench gate |\n|---|---|---|---|---|---|\n", MDCell(MDText(c.By)))
	for _, v := range c.Values() {
		x := rows[v]
		if x == nil {
			continue
		}
		low := "-"
		if x.low >= 0 {
			low = fmt.Sprintf("%.2f× (%s)", x.low, MDText(x.lowHost))
		}
		short := "none"
		if x.short > 0 {
			short = fmt.Sprintf("**%d**", x.short)
		}
		gate := fmt.Sprintf("relayctl bench --relay RELAY:%d --control CONTROL --promise %d --factor 2 --lobby-size %d --hz %d --packet-size %d", p.Relay.Port, c.Players[v], pr.LobbySize, pr.Hz, pr.PacketSize)
		fmt.Fprintf(&b, "| %s | %d | %d players | %s | %s | %s |\n", MDCell(MDText(v)), x.hosts, c.Players[v], MDCell(low), short, MDCell(MDCode(gate)))
	}
	b.WriteString("\n")
	return b.String()
}

// identityText is what the review says of a host besides its address:
// its labels and where it is dialled, when the inventory gave them.
func identityText(h *HostPlan) string {
	var s string
	if len(h.Labels) > 0 {
		s += " · labels " + MDText(LabelsText(h.Labels))
	}
	if h.Target != "" {
		s += " · dialled as " + MDCode(h.Target)
	}
	return s
}
