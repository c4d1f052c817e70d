package bench

import (
	"context"
	"testing"
	"time"
)

// fakeClock advances only when the schedule sleeps or a send costs time,
// so "the sender fell behind" is decided by arithmetic, not by the load of
// the machine running the test.
type fakeClock struct{ now time.Time }

func (c *fakeClock) Now() time.Time { return c.now }
func (c *fakeClock) Sleep(_ context.Context, d time.Duration) error {
	c.now = c.now.Add(d)
	return nil
}

func TestScheduleTimes(t *testing.T) {
	tests := []struct {
		name          string
		players, hz   int
		dur, jitter   time.Duration
		wantTicks     int
		wantPlanned   uint64
		wantMaxOffset time.Duration
	}{
		{"aligned ticks", 8, 60, time.Second, 0, 60, 480, 0},
		{"jitter stays within bound", 50, 60, 2 * time.Second, 5 * time.Millisecond, 120, 6000, 5 * time.Millisecond},
		{"partial second", 3, 10, 1500 * time.Millisecond, 0, 15, 45, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := NewSchedule(tt.players, tt.hz, tt.dur, tt.jitter, 7)
			if s.Ticks != tt.wantTicks {
				t.Errorf("got %d ticks, want %d", s.Ticks, tt.wantTicks)
			}
			if s.Planned() != tt.wantPlanned {
				t.Errorf("got %d planned, want %d", s.Planned(), tt.wantPlanned)
			}
			for p := range tt.players {
				off := s.At(0, p)
				if off < 0 || (tt.jitter == 0 && off != 0) || (tt.jitter > 0 && off >= tt.wantMaxOffset) {
					t.Errorf("player %d: got offset %v, want in [0, %v)", p, off, tt.jitter)
				}
				// Ticks stay aligned: each tick moves every player by the same period.
				if got, want := s.At(tt.wantTicks-1, p)-off, time.Duration(int64(tt.wantTicks-1)*int64(time.Second)/int64(tt.hz)); got != want {
					t.Errorf("player %d: last tick at %v from its first, want %v", p, got, want)
				}
			}
		})
	}
}

func TestScheduleOffsetsStableAcrossSteps(t *testing.T) {
	small := NewSchedule(8, 60, time.Second, 10*time.Millisecond, 3)
	big := NewSchedule(64, 60, time.Second, 10*time.Millisecond, 3)
	for p := range 8 {
		if small.At(0, p) != big.At(0, p) {
			t.Errorf("player %d: got offset %v in the big step, want %v as in the small one", p, big.At(0, p), small.At(0, p))
		}
	}
}

func TestScheduleRun(t *testing.T) {
	tests := []struct {
		name        string
		players     int
		sendCost    time.Duration
		wantValid   bool
		wantAllSent bool
	}{
		// 64 sends of 10µs fit easily in a 16.7ms tick.
		{"sender keeps up", 64, 10 * time.Microsecond, true, true},
		// 64 sends of 1ms take 64ms per 16.7ms tick: the sender falls behind,
		// the lag grows past half a tick and the end of the step cuts it off.
		{"sender falls behind", 64, time.Millisecond, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := &fakeClock{now: time.Unix(1000, 0)}
			s := NewSchedule(tt.players, 60, time.Second, 0, 1)
			perPlayer := make([]int, tt.players)
			got := s.Run(context.Background(), clk, clk.now, s.Period(), func(p int) error {
				perPlayer[p]++
				clk.now = clk.now.Add(tt.sendCost)
				return nil
			})
			if got.Planned != s.Planned() {
				t.Errorf("got %d planned, want %d", got.Planned, s.Planned())
			}
			if got.Sent+got.Unsent+got.Errors != got.Planned {
				t.Errorf("got sent %d + unsent %d + errors %d, want planned %d", got.Sent, got.Unsent, got.Errors, got.Planned)
			}
			if (got.Sent == got.Planned) != tt.wantAllSent {
				t.Errorf("got %d of %d sent, want all sent %v", got.Sent, got.Planned, tt.wantAllSent)
			}
			why := invalidReasons(s, got, 0, 0)
			if (len(why) == 0) != tt.wantValid {
				t.Errorf("got invalid reasons %q, want valid %v", why, tt.wantValid)
			}
			// Open-loop: no player ever sends more than the schedule plans.
			for p, n := range perPlayer {
				if n > s.Ticks {
					t.Errorf("player %d: got %d sends, want at most %d", p, n, s.Ticks)
				}
			}
		})
	}
}

func TestScheduleRunCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	clk := &fakeClock{now: time.Unix(0, 0)}
	s := NewSchedule(4, 60, time.Second, 0, 1)
	n := 0
	got := s.Run(ctx, cancelClock{clk, cancel, &n}, clk.now, s.Period(), func(int) error { return nil })
	if got.Sent == 0 || got.Sent+got.Unsent != got.Planned {
		t.Errorf("got sent %d unsent %d, want some sent and the rest unsent of %d", got.Sent, got.Unsent, got.Planned)
	}
}

// cancelClock cancels the run at its fifth sleep.
type cancelClock struct {
	*fakeClock
	cancel func()
	n      *int
}

func (c cancelClock) Sleep(ctx context.Context, d time.Duration) error {
	*c.n++
	if *c.n == 5 {
		c.cancel()
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return c.fakeClock.Sleep(ctx, d)
}

func TestHistQuantiles(t *testing.T) {
	var h Hist
	for i := 1; i <= 1000; i++ {
		h.Add(time.Duration(i) * time.Microsecond)
	}
	tests := []struct {
		q    float64
		want time.Duration
	}{{0.5, 500 * time.Microsecond}, {0.95, 950 * time.Microsecond}, {0.99, 990 * time.Microsecond}}
	for _, tt := range tests {
		got := h.Quantile(tt.q)
		if d := float64(got-tt.want) / float64(tt.want); d > 0.035 || d < -0.035 {
			t.Errorf("p%v: got %v, want %v within 3.5%%", tt.q*100, got, tt.want)
		}
	}
	if h.Max() != time.Millisecond {
		t.Errorf("got max %v, want 1ms", h.Max())
	}
	var empty Hist
	if empty.Quantile(0.99) != 0 {
		t.Errorf("got %v for an empty histogram, want 0", empty.Quantile(0.99))
	}
}

func TestBucketsMonotonic(t *testing.T) {
	prev := -1
	for v := int64(0); v < 1<<42; v = v*9/8 + 1 {
		b := bucketOf(v)
		if b < prev || b >= nBuckets {
			t.Fatalf("value %d: got bucket %d after %d, want monotonic below %d", v, b, prev, nBuckets)
		}
		if b < nBuckets-1 {
			if mid := bucketMid(b); float64(mid) < float64(v)*0.96 || float64(mid) > float64(v)*1.04+1 {
				t.Fatalf("value %d: got bucket midpoint %d, want within 4%%", v, mid)
			}
		}
		prev = b
	}
}
