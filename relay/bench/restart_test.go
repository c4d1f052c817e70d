package bench

import (
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

func reading(pid int, started time.Time, rx uint64, lobbies, players int) Reading {
	return Reading{Counters: Counters{RxPackets: rx, TxPackets: 7 * rx},
		Identity: Identity{PID: pid, StartedAt: started, Lobbies: lobbies, Players: players}}
}

func TestRestartWatch(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	start := t0.Add(time.Second)
	t.Run("plain restart", func(t *testing.T) {
		before := reading(100, t0, 1000, 8, 64)
		w := newRestartWatch(before, start)
		w.observe(reading(100, t0, 1500, 8, 64), start.Add(time.Second))
		// The new process counts from zero and the players have rejoined.
		after := reading(200, t0.Add(5*time.Second), 300, 8, 64)
		w.observe(after, start.Add(2*time.Second))
		rs := w.seen()
		want := Restart{FromPID: 100, ToPID: 200, After: 1, Before: 2, LobbiesCut: 8, PlayersCut: 64}
		if len(rs) != 1 || rs[0] != want {
			t.Fatalf("got %+v, want [%+v]", rs, want)
		}
		if _, err := w.relayDelta(before, after); err == nil || !strings.Contains(err.Error(), "pid 100 → 200") {
			t.Errorf("relay delta across a restart: got %v, want it refused", err)
		}
	})
	t.Run("handoff", func(t *testing.T) {
		before := reading(100, t0, 1000, 8, 64)
		w := newRestartWatch(before, start)
		after := reading(200, t0.Add(5*time.Second), 2000, 8, 64)
		after.HandoffFromPID, after.HandoffLobbies, after.HandoffPlayers = 100, 8, 63
		w.observe(after, start.Add(3*time.Second))
		rs := w.seen()
		if len(rs) != 1 || !rs[0].Handoff || rs[0].LobbiesCut != 0 || rs[0].PlayersCut != 1 {
			t.Fatalf("got %+v, want a handoff with 1 player cut", rs)
		}
		// A late answer of the old process, accepted on the shared control
		// listener just before it closed, is not another restart.
		w.observe(reading(100, t0, 1010, 8, 64), start.Add(3*time.Second))
		if rs := w.seen(); len(rs) != 1 {
			t.Errorf("a late answer of the old process: got %+v, want still one handoff", rs)
		}
		d, err := w.relayDelta(before, after)
		if err != nil || d.RxPackets != 1000 {
			t.Errorf("relay delta across a handoff: got %+v, %v; want rx 1000 (counters carried on)", d, err)
		}
	})
	t.Run("a handoff whose counters went backwards is a restart", func(t *testing.T) {
		before := reading(100, t0, 1000, 1, 8)
		w := newRestartWatch(before, start)
		after := reading(200, t0.Add(time.Second), 10, 1, 8)
		after.HandoffFromPID = 100
		w.observe(after, start.Add(time.Second))
		if rs := w.seen(); len(rs) != 1 || rs[0].Handoff || rs[0].PlayersCut != 8 {
			t.Errorf("got %+v", rs)
		}
	})
	t.Run("relay without identity", func(t *testing.T) {
		before := Reading{Counters: Counters{RxPackets: 100}}
		w := newRestartWatch(before, start)
		w.observe(Reading{Counters: Counters{RxPackets: 10}}, start.Add(time.Second))
		if rs := w.seen(); len(rs) != 0 {
			t.Errorf("got restarts %+v from a relay that does not say its pid", rs)
		}
		if _, err := w.relayDelta(before, Reading{Counters: Counters{RxPackets: 10}}); err == nil || !strings.Contains(err.Error(), "went backwards") {
			t.Errorf("got %v, want the counters going backwards noticed", err)
		}
	})
}

func TestCensusTally(t *testing.T) {
	seq := []uint32{10, 20, 30}
	c := newCensus(seq, 3, 4)
	// Lobby of 3: each datagram should reach 2 members.
	c.received(0, 10)
	c.received(0, 10) // all
	c.received(0, 11) // one of two
	// player 0 seq 12: nobody; seq 13: twice to each (duplicates)
	for range 4 {
		c.received(0, 13)
	}
	c.failed(1, 20)
	c.received(1, 21)
	c.received(1, 21)
	c.received(2, 99) // not of this step
	c.received(7, 1)  // not a player
	var m Impact
	c.tally([]uint32{4, 2, 0}, func(int) int { return 2 }, &m)
	want := Impact{Census: true, LostIn: 1, LostOut: 1, Duplicates: 2}
	if m.LostIn != want.LostIn || m.LostOut != want.LostOut || m.Duplicates != want.Duplicates || !m.Census {
		t.Errorf("got %+v, want %+v", m, want)
	}
}

func TestAccountRestartStep(t *testing.T) {
	in := perfect(16, 8, NewSchedule(16, 60, time.Second, 0, 1))
	in.Received -= 7 * 12
	in.RelayErr = errors.New("the relay restarted")
	in.Impact = Impact{Restarts: []Restart{{FromPID: 1, ToPID: 2, After: 0.25, Before: 0.5, LobbiesCut: 2, PlayersCut: 16}},
		Census: true, LostIn: 12, ICMPErrors: 16, ICMPPlayers: 16, SendRefused: 3}
	in.Sends.Sent -= 3
	in.Sends.Errors = 3
	s := Account(in)
	if !s.Valid {
		t.Errorf("a step whose sends the relay's ICMP errors refused is still valid: %q", s.Invalid)
	}
	notes := strings.Join(s.Notes, "\n")
	for _, want := range []string{"the relay restarted between 0.25s and 0.50s into the step (pid 1 → 2): 2 lobbies and 16 players cut",
		"12 datagrams reached no member", "16 ICMP errors on 16 player sockets"} {
		if !strings.Contains(notes, want) {
			t.Errorf("notes lack %q:\n%s", want, notes)
		}
	}
	if w := Where(s); !strings.Contains(w, "by the bench's own count player→relay 12 datagrams") {
		t.Errorf("where: %q", w)
	}
	clean := Account(perfect(8, 8, NewSchedule(8, 60, time.Second, 0, 1)))
	k := FindKnee([]Step{clean, s}, 0)
	if k.Found || !strings.Contains(k.Summary, "no loss up to 8 players; the step of 16 players is left out, its loss is the restart's: the relay restarted") {
		t.Errorf("knee: %+v", k)
	}
}

// liveRelay is the relayd a test restarts: whichever process is current.
type liveRelay struct {
	mu sync.Mutex
	r  *relayd
}

func (l *liveRelay) get() *relayd      { l.mu.Lock(); defer l.mu.Unlock(); return l.r }
func (l *liveRelay) set(r *relayd)     { l.mu.Lock(); l.r = r; l.mu.Unlock() }
func (l *liveRelay) stopOld(r *relayd) { r.cmd.Process.Signal(syscall.SIGTERM); r.cmd.Wait() }

// switchMidStep returns Options that call swap once, a second into the
// step.
func switchMidStep(t *testing.T, swap func()) func() Options {
	return func() Options {
		var once sync.Once
		return Options{Progress: func(p Progress) {
			if p.Elapsed >= time.Second {
				once.Do(func() { go swap() })
			}
		}}
	}
}

// TestRestartInStep restarts relayd (SIGTERM, 200 ms with no socket, a new
// process on the same ports) in the middle of a step, as relayctl's plain
// restart window does. The bench says so, leaves the step out of the knee,
// counts the loss by direction itself, and counts the ICMP errors.
func TestRestartInStep(t *testing.T) {
	first := startRelayd(t, "--so-rcvbuf", "1048576")
	live := &liveRelay{r: first}
	cfg := first.config(Ramp{From: 8, To: 8, Step: 1})
	cfg.StepDuration = 3 * time.Second
	rep := measure(t, cfg, switchMidStep(t, func() {
		old := live.get()
		live.stopOld(old)
		time.Sleep(200 * time.Millisecond)
		live.set(startRelayd(t, "--listen", old.udp, "--control", old.control, "--so-rcvbuf", "1048576"))
	}))
	s := rep.Steps[0]
	if len(s.Restarts) != 1 || s.Restarts[0].Handoff || s.Restarts[0].PlayersCut != 8 || s.Restarts[0].LobbiesCut != 1 {
		t.Fatalf("restarts: got %+v, want one plain restart cutting 1 lobby of 8", s.Restarts)
	}
	if s.RelayKnown {
		t.Error("relay counters across a restart: got known, want them refused (the old process's last reads are lost)")
	}
	if !s.Census || s.LostIn == 0 || s.Duplicates != 0 || s.Loss < 7*s.LostIn {
		t.Errorf("bench's own count: census %v lost in %d out %d dup %d, loss %d", s.Census, s.LostIn, s.LostOut, s.Duplicates, s.Loss)
	}
	if s.ICMPErrors == 0 || s.ICMPPlayers == 0 {
		t.Errorf("got %d ICMP errors on %d players, want the closed port seen", s.ICMPErrors, s.ICMPPlayers)
	}
	if rep.Knee.Found || !strings.Contains(rep.Knee.Summary, "no knee; the step of 8 players is left out, its loss is the restart's: the relay restarted") {
		t.Errorf("knee: got %+v, want the restart step left out", rep.Knee)
	}
}

// TestHandoffInStep hands relayd over to a new process in the middle of a
// step: no datagram lost or read twice, no lobby cut, no ICMP error, and
// the relay's counters stay exact across it.
func TestHandoffInStep(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "handoff.sock")
	first := startRelayd(t, "--so-rcvbuf", "1048576", "--handoff-socket", sock)
	live := &liveRelay{r: first}
	cfg := first.config(Ramp{From: 16, To: 16, Step: 1})
	cfg.StepDuration = 3 * time.Second
	rep := measure(t, cfg, switchMidStep(t, func() {
		old := live.get()
		nw := startRelayd(t, "--listen", old.udp, "--control", old.control, "--so-rcvbuf", "2097152", "--handoff-socket", sock)
		old.cmd.Wait()
		live.set(nw)
	}))
	s := rep.Steps[0]
	if len(s.Restarts) != 1 || !s.Restarts[0].Handoff || s.Restarts[0].PlayersCut != 0 || s.Restarts[0].LobbiesCut != 0 {
		t.Fatalf("restarts: got %+v, want one handoff cutting nothing", s.Restarts)
	}
	checks := []struct {
		name      string
		got, want uint64
	}{
		{"loss", s.Loss, 0},
		{"bench lost in", s.LostIn, 0},
		{"bench lost out", s.LostOut, 0},
		{"duplicates", s.Duplicates, 0},
		{"icmp errors", s.ICMPErrors, 0},
		{"relay rx = sent", s.RelayRx, s.Sent},
		{"relay tx = 7 × rx", s.RelayTx, 7 * s.RelayRx},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s: got %d, want %d", c.name, c.got, c.want)
		}
	}
	if !s.RelayKnown {
		t.Error("relay counters across a handoff: got unknown, want them carried on")
	}
	if rep.Knee.Summary != "no loss up to 16 players" {
		t.Errorf("knee: got %q, want the lossless handoff step counted as clean", rep.Knee.Summary)
	}
}
