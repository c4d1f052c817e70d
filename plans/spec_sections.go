package plans

import (
	"fmt"
	"time"

	"github.com/relayctl/relayctl/tune"
	"go.yaml.in/yaml/v3"
)

func (p *specParser) window(n *yaml.Node) *Window {
	f, ok := p.fields(n, "window", "not_before", "not_after")
	if !ok {
		return nil
	}
	if f["not_before"] == nil || f["not_after"] == nil {
		p.fail(n, "window", "needs both not_before and not_after (RFC 3339, e.g. 2026-12-02T04:00:00Z)")
		return nil
	}
	var w Window
	good := true
	for _, k := range []string{"not_before", "not_after"} {
		v, ok := p.str(f[k], "window."+k)
		if !ok {
			good = false
			continue
		}
		t, err := ParseWindowTime(v)
		if err != nil {
			p.fail(f[k], "window."+k, "%v", err)
			good = false
			continue
		}
		if k == "not_before" {
			w.NotBefore = t
		} else {
			w.NotAfter = t
		}
	}
	if !good {
		return nil
	}
	if !w.NotAfter.After(w.NotBefore) {
		p.fail(f["not_after"], "window.not_after", "the window ends (%s) before it starts (%s)", w.NotAfter.Format(time.RFC3339), w.NotBefore.Format(time.RFC3339))
		return nil
	}
	return &w
}

// ParseWindowTime reads one end of a window: RFC 3339, kept in UTC.
func ParseWindowTime(v string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339, v)
	if err != nil || t.Year() < 2000 || t.Year() > 9999 {
		return time.Time{}, fmt.Errorf("want an RFC 3339 time such as 2026-12-02T04:00:00Z, got %q", v)
	}
	return t.UTC(), nil
}

// capacity reads the promise a region makes (docs/spec.md): players,
// hz and packet_size are required; lobby_size defaults to 8 and stall to 0.
func (p *specParser) capacity(n *yaml.Node) *tune.Promise {
	f, ok := p.fields(n, "capacity", "players", "lobby_size", "hz", "packet_size", "stall", "by")
	if !ok {
		return nil
	}
	by := f["by"] != nil // a promise per label value: capacity_labels.go
	c := tune.Promise{LobbySize: 8}
	good := true
	num := func(k string, dst *int, min, max int64, example string) {
		v := f[k]
		if v == nil {
			return
		}
		n, ok := p.integer(v, "capacity."+k, min, max, example)
		good = good && ok
		*dst = n
	}
	for _, k := range []string{"players", "hz", "packet_size"} {
		if f[k] == nil {
			p.fail(n, "capacity."+k, "missing; a promise needs players, hz and packet_size, e.g. {players: 200, hz: 60, packet_size: 200, stall: 50ms}")
			good = false
		}
	}
	var players map[string]int
	if by {
		players = p.labelPlayers(f["players"])
		good = good && players != nil
	} else {
		num("players", &c.Players, 1, tune.MaxPromisePlayers, "200")
	}
	num("lobby_size", &c.LobbySize, 2, 256, "8")
	num("hz", &c.Hz, 1, tune.MaxPromiseHz, "60")
	num("packet_size", &c.PacketSize, 1, tune.MaxPacketSize, "200")
	if v := f["stall"]; v != nil {
		if s, ok := p.str(v, "capacity.stall"); ok {
			d, err := time.ParseDuration(s)
			if err != nil || d < 0 || d > tune.MaxPromiseStall {
				p.fail(v, "capacity.stall", "want a duration from 0 to %v, got %q; e.g. 50ms", tune.MaxPromiseStall, s)
				good = false
			} else {
				c.Stall = d
			}
		} else {
			good = false
		}
	}
	if by {
		p.capBy = p.capacityBy(f["by"], c, players, good)
		return nil
	}
	if !good {
		return nil
	}
	return &c
}

// drain reads the drain gate (docs/spec.md): deadline is required;
// max_players defaults to 0, poll to 5s, on_deadline to abort.
func (p *specParser) drain(n *yaml.Node) *Drain {
	f, ok := p.fields(n, "drain", "max_players", "deadline", "poll", "on_deadline", "no_new_lobbies")
	if !ok {
		return nil
	}
	d := Drain{Poll: 5 * time.Second, OnDeadline: DrainAbort}
	good := true
	dur := func(k string, dst *time.Duration, min, max time.Duration) {
		v := f[k]
		if v == nil {
			return
		}
		s, ok := p.str(v, "drain."+k)
		if !ok {
			good = false
			return
		}
		x, err := time.ParseDuration(s)
		if err != nil || x < min || x > max {
			p.fail(v, "drain."+k, "want a duration from %v to %v, got %q; e.g. %s", min, max, s, map[string]string{"deadline": "10m", "poll": "5s"}[k])
			good = false
			return
		}
		*dst = x
	}
	if f["deadline"] == nil {
		p.fail(n, "drain.deadline", "missing; how long a host may wait for its players to leave, e.g. deadline: 10m")
		good = false
	}
	dur("deadline", &d.Deadline, time.Second, 24*time.Hour)
	dur("poll", &d.Poll, 100*time.Millisecond, time.Hour)
	if v := f["max_players"]; v != nil {
		var ok bool
		d.MaxPlayers, ok = p.integer(v, "drain.max_players", 0, 10_000_000, "0")
		good = good && ok
	}
	if v := f["on_deadline"]; v != nil {
		if s, ok := p.str(v, "drain.on_deadline"); ok && (s == DrainAbort || s == DrainSkip || s == DrainForce) {
			d.OnDeadline = s
		} else {
			p.fail(v, "drain.on_deadline", "want abort, skip or force, got %q", v.Value)
			good = false
		}
	}
	if v := f["no_new_lobbies"]; v != nil {
		var ok bool
		d.NoNewLobbies, ok = p.boolean(v, "drain.no_new_lobbies")
		good = good && ok
	}
	if !good {
		return nil
	}
	return &d
}
