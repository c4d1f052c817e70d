package bench

import (
	"sync/atomic"
)

// census counts, for every datagram a step's players send, how many
// members of its lobby received it. It is the bench's own accounting per
// direction, independent of the relay's counters: a datagram no member got
// was lost on the way in (or inside the relay), a copy missing of one that
// others got was lost on the way out. It also shows a datagram the relay
// forwarded twice.
type census struct {
	ticks int
	base  []uint32        // each player's sequence number at the step's start
	got   []atomic.Uint32 // per player and send: copies received; sendFailed if the send failed
}

// sendFailed marks a send the player's kernel refused: no copy can arrive.
const sendFailed = 1 << 31

// maxCensus bounds the census's memory (4 bytes a datagram); a larger step
// goes without it.
const maxCensus = 32 << 20

func newCensus(seq []uint32, players, ticks int) *census {
	if players*ticks > maxCensus {
		return nil
	}
	return &census{ticks: ticks, base: append([]uint32(nil), seq[:players]...), got: make([]atomic.Uint32, players*ticks)}
}

// slot is the counter of player p's datagram with sequence number seq, or
// nil for one outside the step (the join, the flush, another run).
func (c *census) slot(p int, seq uint32) *atomic.Uint32 {
	if c == nil || p < 0 || p >= len(c.base) {
		return nil
	}
	k := seq - c.base[p]
	if k >= uint32(c.ticks) {
		return nil
	}
	return &c.got[p*c.ticks+int(k)]
}

func (c *census) received(p int, seq uint32) {
	if s := c.slot(p, seq); s != nil {
		s.Add(1)
	}
}

func (c *census) failed(p int, seq uint32) {
	if s := c.slot(p, seq); s != nil {
		s.Store(sendFailed)
	}
}

// tally counts the step's losses by direction. sent[p] is how many sends
// player p attempted in the step; fanOut(p) how many members should
// receive each.
func (c *census) tally(sent []uint32, fanOut func(p int) int, m *Impact) {
	if c == nil {
		return
	}
	m.Census = true
	for p := range c.base {
		want := uint64(fanOut(p))
		for k := range min(int(sent[p]), c.ticks) {
			got := c.got[p*c.ticks+k].Load()
			switch {
			case got == sendFailed:
			case got == 0 && want > 0:
				m.LostIn++
			case uint64(got) < want:
				m.LostOut += want - uint64(got)
			case uint64(got) > want:
				m.Duplicates += uint64(got) - want
			}
		}
	}
}
