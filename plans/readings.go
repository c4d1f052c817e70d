package plans

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// ReadingsFormatVersion is the layout version of PLAN.readings.json,
// documented in docs/json.md. A field added keeps it; one renamed, removed
// or changed in meaning bumps it.
const ReadingsFormatVersion = 1

// Readings are what plan read on each host that moves without anything
// drifting: the relay socket's drop counters with the host's clock, and
// the players its /status reported. They are not part of the plan, so that
// two plans of one spec against unchanged hosts are the same bytes; plan
// writes them beside it (PLAN.readings.json), tied to it by its checksum.
// verify measures the drop rate since them for a plan not yet applied,
// and the review says the players at plan time.
type Readings struct {
	FormatVersion int           `json:"format_version"`
	Plan          string        `json:"plan"`
	Checksum      string        `json:"plan_checksum"`
	Hosts         []HostReading `json:"hosts"`
}

// HostReading is one host's readings at plan time.
type HostReading struct {
	Host string `json:"host"`
	// Drops is the relay's drop counters (with the socket read and the
	// host's clock), present when its relay and socket were found.
	Drops *DropCounters `json:"drops,omitempty"`
	// Players is what the relay's /status reported, when it was read.
	Players *Players `json:"players,omitempty"`
}

// ReadingsOf takes the readings of facts for p's hosts, in the plan's
// order. p's checksum must be known (p.JSON or p.WriteJSON first).
func ReadingsOf(p *Plan, facts []*Facts) *Readings {
	by := map[string]*Facts{}
	for _, f := range facts {
		by[f.Host] = f
	}
	r := &Readings{FormatVersion: ReadingsFormatVersion, Plan: p.Name, Checksum: p.Checksum, Hosts: []HostReading{}}
	for _, h := range p.Hosts {
		hr := HostReading{Host: h.Host}
		if f := by[h.Host]; f != nil {
			if c := DropCountersOf(f); f.Service.Running && c.SocketInode != 0 && c.ClockNanos > 0 {
				hr.Drops = &c // a baseline only with its socket and the host's clock
			}
			if st := f.RelayStatus; st != nil && st.Read {
				hr.Players = &Players{Players: st.Players, Lobbies: st.Lobbies}
			}
		}
		r.Hosts = append(r.Hosts, hr)
	}
	return r
}

// Host is the reading of the named host, nil when there is none.
func (r *Readings) Host(name string) *HostReading {
	if r == nil {
		return nil
	}
	for i := range r.Hosts {
		if r.Hosts[i].Host == name {
			return &r.Hosts[i]
		}
	}
	return nil
}

// JSON is the readings file's bytes.
func (r *Readings) JSON() ([]byte, error) {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// MaxReadingsSize bounds a readings file: a few hundred bytes a host.
const MaxReadingsSize = 64 << 20

// LoadReadings reads a readings file written for p. Readings of another
// plan (its checksum), of another layout, or that do not decode are an
// error naming the file: readings are a baseline, never trusted beyond
// the plan they were taken with.
func LoadReadings(file string, data []byte, p *Plan) (*Readings, error) {
	var r Readings
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return nil, fmt.Errorf("%s: read readings: %w", file, err)
	}
	if r.FormatVersion != ReadingsFormatVersion {
		return nil, fmt.Errorf("%s: readings format_version %d, this relayctl reads %d", file, r.FormatVersion, ReadingsFormatVersion)
	}
	if r.Checksum != p.Checksum {
		return nil, fmt.Errorf("%s: readings of the plan %s, not of this plan (%s)", file, Visible(r.Checksum), p.Checksum)
	}
	return &r, nil
}
