package rollouttest

import (
	"context"
	"testing"
	"time"
)

// The uplink's rate goes to the transfers in flight in equal parts, and a
// transfer that can take less than its part (its window or its host's
// link allow less) leaves the rest to the others.
func TestUplinkSharesItsRate(t *testing.T) {
	for _, c := range []struct {
		rate       int64
		max, wants []float64
	}{
		{100, []float64{10, 1000, 1000}, []float64{10, 45, 45}},
		{100, []float64{1000, 1000, 1000, 1000}, []float64{25, 25, 25, 25}},
		{100, []float64{20, 30, 1000}, []float64{20, 30, 50}},
		{0, []float64{20, 30}, []float64{20, 30}}, // no limit: each its own
	} {
		u := &Uplink{Rate: c.rate, flows: map[*flow]bool{}}
		var fs []*flow
		for _, m := range c.max {
			f := &flow{max: m}
			fs = append(fs, f)
			u.flows[f] = true
		}
		u.share()
		for i, f := range fs {
			if f.rate != c.wants[i] {
				t.Errorf("rate %d, maxes %v: flow %d gets %v, want %v", c.rate, c.max, i, f.rate, c.wants[i])
			}
		}
	}
}

// Every byte sent is counted, a request's few as an upload's.
func TestUplinkCountsEveryByte(t *testing.T) {
	u := &Uplink{Rate: 1 << 30, Window: DefaultWindow}
	n := &Net{Uplink: u, Latency: time.Millisecond}
	n.carry(context.Background(), time.Now(), 300, time.Millisecond)
	n.carry(context.Background(), time.Now(), 1<<20, time.Millisecond)
	if got := u.Bytes(); got != 300+1<<20 {
		t.Errorf("uplink carried %d bytes, want %d", got, 300+1<<20)
	}
}
