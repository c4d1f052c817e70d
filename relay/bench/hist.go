package bench

import (
	"math/bits"
	"sync/atomic"
	"time"
)

// A log-linear histogram of durations in nanoseconds: 32 buckets per power
// of two, so a quantile is within about 3 % of the true value, in fixed
// memory, and the receivers can add to it with atomics instead of a lock.
const (
	subBits  = 5
	subCount = 1 << subBits
	maxExp   = 40 // 2^40 ns is about 18 minutes: anything later is clamped
	nBuckets = (maxExp + 2) * subCount
)

func bucketOf(ns int64) int {
	if ns < 0 {
		ns = 0
	}
	v := uint64(ns)
	if v < 2*subCount {
		return int(v)
	}
	e := bits.Len64(v) - (subBits + 1)
	if e > maxExp {
		return nBuckets - 1
	}
	return (e+1)*subCount + int(v>>uint(e)) - subCount
}

// bucketMid is a representative value of bucket i (its midpoint).
func bucketMid(i int) int64 {
	if i < 2*subCount {
		return int64(i)
	}
	e := i/subCount - 1
	m := int64(i%subCount + subCount)
	lo := m << uint(e)
	return lo + (int64(1)<<uint(e))/2
}

// Hist is a histogram owned by one goroutine.
type Hist struct {
	counts [nBuckets]uint64
	n      uint64
	max    int64
}

// Add records one value.
func (h *Hist) Add(d time.Duration) {
	h.counts[bucketOf(int64(d))]++
	h.n++
	if int64(d) > h.max {
		h.max = int64(d)
	}
}

// Count is the number of values recorded.
func (h *Hist) Count() uint64 { return h.n }

// Max is the largest value recorded.
func (h *Hist) Max() time.Duration { return time.Duration(h.max) }

// Quantile returns the value below which a fraction q of the values fall,
// or 0 for an empty histogram.
func (h *Hist) Quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(q * float64(h.n))
	if rank >= h.n {
		rank = h.n - 1
	}
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen > rank {
			v := bucketMid(i)
			if v > h.max {
				v = h.max
			}
			return time.Duration(v)
		}
	}
	return time.Duration(h.max)
}

// Merge adds the values of o to h.
func (h *Hist) Merge(o *Hist) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
	if o.max > h.max {
		h.max = o.max
	}
}

// atomicHist is a histogram many receivers add to at once.
type atomicHist struct {
	counts [nBuckets]atomic.Uint64
	max    atomic.Int64
}

func (h *atomicHist) add(d time.Duration) {
	h.counts[bucketOf(int64(d))].Add(1)
	for {
		m := h.max.Load()
		if int64(d) <= m || h.max.CompareAndSwap(m, int64(d)) {
			return
		}
	}
}

// snapshot copies h into a plain Hist.
func (h *atomicHist) snapshot() Hist {
	var s Hist
	for i := range h.counts {
		c := h.counts[i].Load()
		s.counts[i] = c
		s.n += c
	}
	s.max = h.max.Load()
	return s
}
