package bench

import (
	"context"
	"math/rand/v2"
	"sort"
	"time"

	"golang.org/x/sys/unix"
)

// Schedule fixes, before a step starts, when every player sends. Ticks are
// aligned across players, as a game server's tick is; each player keeps a
// fixed offset within the tick drawn from [0, jitter). Nothing the relay
// does changes it: that is what makes the bench open-loop.
type Schedule struct {
	Players int
	Hz      int
	Ticks   int
	offsets []time.Duration // per player
	order   []int           // players in the order they send within a tick
}

// NewSchedule plans players sending at hz for duration. The offsets depend
// only on seed and the player's index, so a player keeps its offset from
// one step to the next.
func NewSchedule(players, hz int, duration, jitter time.Duration, seed int64) *Schedule {
	s := &Schedule{
		Players: players,
		Hz:      hz,
		Ticks:   int(int64(duration) * int64(hz) / int64(time.Second)),
		offsets: make([]time.Duration, players),
		order:   make([]int, players),
	}
	for p := range players {
		if jitter > 0 {
			r := rand.New(rand.NewPCG(uint64(seed), uint64(p)))
			s.offsets[p] = time.Duration(r.Int64N(int64(jitter)))
		}
		s.order[p] = p
	}
	sort.SliceStable(s.order, func(i, j int) bool { return s.offsets[s.order[i]] < s.offsets[s.order[j]] })
	return s
}

// Period is the length of one tick.
func (s *Schedule) Period() time.Duration { return time.Second / time.Duration(s.Hz) }

// Duration is the planned length of the step.
func (s *Schedule) Duration() time.Duration { return s.tickStart(s.Ticks) }

// Planned is the number of datagrams the schedule plans.
func (s *Schedule) Planned() uint64 { return uint64(s.Players) * uint64(s.Ticks) }

// tickStart computes tick k's start exactly, without accumulating the
// rounding of a 1/hz period.
func (s *Schedule) tickStart(k int) time.Duration {
	return time.Duration(int64(k) * int64(time.Second) / int64(s.Hz))
}

// At is the planned send time of player p at tick k, from the step's start.
func (s *Schedule) At(k, p int) time.Duration { return s.tickStart(k) + s.offsets[p] }

// Clock is the time source of a schedule run; tests replace it to make the
// sender fall behind without depending on the machine's load.
type Clock interface {
	Now() time.Time
	Sleep(ctx context.Context, d time.Duration) error
}

// RealClock is the wall clock.
type RealClock struct{}

func (RealClock) Now() time.Time { return time.Now() }

func (RealClock) Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Sends is what a schedule run did against what it planned.
type Sends struct {
	Planned  uint64
	Sent     uint64 // datagrams handed to the kernel without error
	Errors   uint64 // sends the kernel refused
	Unsent   uint64 // planned datagrams never attempted: the sender was too late
	FirstErr error
	Lag      Hist // how late each attempted send was against its planned time
}

// Run sends on the schedule starting at start. A send more than grace past
// the end of the step is not attempted: it is counted as unsent, so a bench
// that falls behind shows as such instead of stretching the step. send must
// not block on the relay (UDP sendto does not).
func (s *Schedule) Run(ctx context.Context, clk Clock, start time.Time, grace time.Duration, send func(player int) error) Sends {
	r := Sends{Planned: s.Planned()}
	deadline := start.Add(s.Duration() + grace)
	for k := 0; k < s.Ticks; k++ {
		for i, p := range s.order {
			planned := start.Add(s.At(k, p))
			now := clk.Now()
			if now.Before(planned) {
				if err := clk.Sleep(ctx, planned.Sub(now)); err != nil {
					r.Unsent = r.Planned - r.Sent - r.Errors
					return r
				}
				now = clk.Now()
			}
			if now.After(deadline) {
				attempted := uint64(k)*uint64(s.Players) + uint64(i)
				r.Unsent = r.Planned - attempted
				return r
			}
			r.Lag.Add(max(now.Sub(planned), 0))
			if err := send(p); err != nil {
				r.Errors++
				if r.FirstErr == nil {
					r.FirstErr = err
				}
				continue
			}
			r.Sent++
		}
	}
	return r
}

// threadClock sleeps with nanosleep(2) on the calling thread instead of a Go
// timer. The sender locks its goroutine to its thread, so the kernel wakes
// exactly that (prioritised) thread when the sleep ends; a Go timer is fired
// by whichever scheduler thread gets to it, which on a loaded machine can be
// a tick late. A sleep is at most a tick, so ctx is checked after it.
type threadClock struct{}

func (threadClock) Now() time.Time { return time.Now() }

func (threadClock) Sleep(ctx context.Context, d time.Duration) error {
	ts := unix.NsecToTimespec(int64(d))
	for {
		var rem unix.Timespec
		if err := unix.Nanosleep(&ts, &rem); err != unix.EINTR {
			break
		}
		ts = rem
	}
	return ctx.Err()
}
