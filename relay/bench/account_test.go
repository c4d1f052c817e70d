package bench

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestLobbies(t *testing.T) {
	tests := []struct {
		n, size int
		want    []int
	}{
		{8, 8, []int{8}},
		{20, 8, []int{8, 8, 4}},
		{12, 4, []int{4, 4, 4}},
		{3, 8, []int{3}},
	}
	for _, tt := range tests {
		got := lobbies(tt.n, tt.size)
		if len(got) != len(tt.want) {
			t.Errorf("lobbies(%d, %d): got %v, want %v", tt.n, tt.size, got, tt.want)
			continue
		}
		for i := range got {
			if got[i] != tt.want[i] {
				t.Errorf("lobbies(%d, %d): got %v, want %v", tt.n, tt.size, got, tt.want)
			}
		}
	}
}

// perfect builds a step where everything planned arrived.
func perfect(players, size int, sch *Schedule) StepInput {
	lob := lobbies(players, size)
	var out uint64
	for _, m := range lob {
		out += uint64(m * (m - 1))
	}
	out *= uint64(sch.Ticks)
	return StepInput{
		Players: players, Lobbies: lob, Schedule: sch,
		Sends:    Sends{Planned: sch.Planned(), Sent: sch.Planned()},
		Relay:    Counters{RxPackets: sch.Planned(), TxPackets: out, Forwarded: sch.Planned()},
		Received: out,
	}
}

func TestAccountFanOut(t *testing.T) {
	tests := []struct {
		name           string
		players, size  int
		wantFanOut     float64
		wantDeliveries uint64 // per second at 60 Hz
	}{
		{"lobby of 8 forwards 7 copies", 8, 8, 7, 8 * 7 * 60},
		{"lobby of 4 forwards 3 copies", 8, 4, 3, 8 * 3 * 60},
		{"a partial lobby forwards fewer", 10, 8, (8*7 + 2*1) / 10.0, (8*7 + 2*1) * 60},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sch := NewSchedule(tt.players, 60, time.Second, 0, 1)
			s := Account(perfect(tt.players, tt.size, sch))
			if s.FanOut != tt.wantFanOut {
				t.Errorf("got fan-out %v, want %v", s.FanOut, tt.wantFanOut)
			}
			if s.PlannedDeliveries != tt.wantDeliveries {
				t.Errorf("got %d planned deliveries, want %d", s.PlannedDeliveries, tt.wantDeliveries)
			}
			if s.Loss != 0 || s.LossIn != 0 || s.LossOut != 0 || !s.Valid {
				t.Errorf("got loss %d in %d out %d valid %v, want a clean valid step", s.Loss, s.LossIn, s.LossOut, s.Valid)
			}
			if s.PlannedInPPS != float64(tt.players*60) {
				t.Errorf("got planned in %v/s, want %d/s", s.PlannedInPPS, tt.players*60)
			}
		})
	}
}

func TestAccountLossDirections(t *testing.T) {
	sch := NewSchedule(16, 60, time.Second, 0, 1)
	in := perfect(16, 8, sch)
	// The relay's socket dropped 100 of what was sent; it forwarded the rest.
	in.Relay.RxPackets -= 100
	in.Relay.RxDrops = 100
	in.Relay.TxPackets -= 700
	// The players' own sockets then dropped 5 copies, and 3 more vanished.
	in.Received = in.Relay.TxPackets - 8
	in.BenchDrop = 5
	s := Account(in)
	tests := []struct {
		name      string
		got, want uint64
	}{
		{"loss in", s.LossIn, 100},
		{"loss in at relay socket", s.LossInAtRelay, 100},
		{"loss out", s.LossOut, 8},
		{"loss out at bench", s.LossOutAtBench, 5},
		{"total loss", s.Loss, 708},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s: got %d, want %d", tt.name, tt.got, tt.want)
		}
	}
	if s.Valid {
		t.Errorf("got valid with bench socket drops, want invalid")
	}
	w := Where(s)
	for _, want := range []string{"player→relay 100", "relay's socket buffer", "relay→players 8", "5 of them dropped on the bench's own sockets"} {
		if !strings.Contains(w, want) {
			t.Errorf("where: got %q, want it to contain %q", w, want)
		}
	}
}

// TestAccountStoppedRelay is mistake 2 in numbers: when the relay stops
// answering, what was planned does not change, so no per-player figure and
// no planned rate can rise; what arrived falls, and the loss shows.
func TestAccountStoppedRelay(t *testing.T) {
	sch := NewSchedule(64, 60, time.Second, 0, 1)
	clean := Account(perfect(64, 8, sch))
	in := perfect(64, 8, sch)
	in.Relay = Counters{RxPackets: in.Relay.RxPackets / 3, TxPackets: in.Relay.TxPackets / 3, RxDrops: 200}
	in.Received = in.Relay.TxPackets
	stopped := Account(in)
	figures := []struct {
		name         string
		clean, after float64
	}{
		{"planned in per second", clean.PlannedInPPS, stopped.PlannedInPPS},
		{"planned out per second", clean.PlannedOutPPS, stopped.PlannedOutPPS},
		{"per player delivered", clean.PerPlayerDelivered, stopped.PerPlayerDelivered},
		{"relay packets per second", clean.RelayPPS, stopped.RelayPPS},
	}
	for _, f := range figures {
		if f.after > f.clean {
			t.Errorf("%s: got %v with the relay stopped, want at most %v as in the clean step", f.name, f.after, f.clean)
		}
	}
	if stopped.LossPct <= 0 {
		t.Errorf("got loss %v%%, want the stopped relay's loss to show", stopped.LossPct)
	}
	k := FindKnee([]Step{clean, stopped}, 0)
	if !k.Found || k.Players != 64 || k.Step != 1 || k.LastClean != 64 {
		t.Errorf("got knee %+v, want found at the second step", k)
	}
}

func TestAccountRelayUnknown(t *testing.T) {
	sch := NewSchedule(8, 60, time.Second, 0, 1)
	in := perfect(8, 8, sch)
	in.RelayErr = errors.New("read relay status: timeout")
	in.Received /= 2
	s := Account(in)
	if s.RelayKnown || s.LossIn != 0 || s.LossOut != 0 {
		t.Errorf("got relay known %v, loss in %d out %d, want unknown with no direction", s.RelayKnown, s.LossIn, s.LossOut)
	}
	if s.Loss == 0 {
		t.Errorf("got no loss, want half the planned deliveries lost")
	}
	if w := Where(s); !strings.Contains(w, "not readable") {
		t.Errorf("where: got %q, want it to say the counters were not readable", w)
	}
}

func TestAccountUnsentCountsAsLoss(t *testing.T) {
	sch := NewSchedule(8, 60, time.Second, 0, 1)
	in := perfect(8, 8, sch)
	in.Sends.Sent -= 10
	in.Sends.Unsent = 10
	in.Received -= 70
	in.Relay.RxPackets -= 10
	in.Relay.TxPackets -= 70
	s := Account(in)
	if s.Loss != 70 {
		t.Errorf("got loss %d, want 70: unsent datagrams are loss, never a smaller plan", s.Loss)
	}
	if s.Valid {
		t.Errorf("got valid with 10 of %d unsent, want invalid (limit %g%%)", s.Planned, 100*MaxUnsentFraction)
	}
}

func TestFindKnee(t *testing.T) {
	clean := func(n int) Step { return Step{Players: n, Valid: true} }
	lossy := func(n int, pct float64) Step {
		return Step{Players: n, Valid: true, LossPct: pct, Loss: 1, RelayKnown: true}
	}
	invalid := func(n int) Step { return Step{Players: n, Invalid: []string{"senders fell behind"}} }
	tests := []struct {
		name      string
		steps     []Step
		threshold float64
		wantFound bool
		wantBench bool
		wantAt    int
		wantClean int
	}{
		{"no loss", []Step{clean(8), clean(16)}, 0, false, false, 0, 16},
		{"first lossy step", []Step{clean(8), clean(16), lossy(24, 0.5), lossy(32, 4)}, 0, true, false, 24, 16},
		{"below threshold is clean", []Step{clean(8), lossy(16, 0.05), lossy(24, 2)}, 0.001, true, false, 24, 16},
		{"invalid before loss is the bench", []Step{clean(8), invalid(16), lossy(24, 3)}, 0, false, true, 16, 8},
		{"loss at the bench ceiling", []Step{clean(8), {Players: 16, Valid: true, LossPct: 1, NearBenchCeiling: true, RelayKnown: true}}, 0, true, true, 16, 8},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k := FindKnee(tt.steps, tt.threshold)
			if k.Found != tt.wantFound || k.BenchLimit != tt.wantBench || k.LastClean != tt.wantClean {
				t.Errorf("got found %v bench %v last clean %d, want %v %v %d (%s)", k.Found, k.BenchLimit, k.LastClean, tt.wantFound, tt.wantBench, tt.wantClean, k.Summary)
			}
			if (k.Found || k.BenchLimit) && k.Players != tt.wantAt {
				t.Errorf("got knee at %d players, want %d", k.Players, tt.wantAt)
			}
		})
	}
}

func TestParseRamp(t *testing.T) {
	tests := []struct {
		in        string
		wantSteps []int
		wantErr   string
	}{
		{"8:40:8", []int{8, 16, 24, 32, 40}, ""},
		{"64", []int{64}, ""},
		{"8:20:8", []int{8, 16}, ""},
		{"40:8:8", nil, "only grows"},
		{"8:40", nil, "FROM:TO:STEP"},
		{"1", nil, "at least 2"},
		{"8:16:0", nil, "step 0"},
		{"x", nil, "FROM:TO:STEP"},
	}
	for _, tt := range tests {
		r, err := ParseRamp(tt.in)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("ParseRamp(%q): got error %v, want one containing %q", tt.in, err, tt.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseRamp(%q): got error %v", tt.in, err)
			continue
		}
		got := r.Steps()
		if len(got) != len(tt.wantSteps) {
			t.Errorf("ParseRamp(%q): got steps %v, want %v", tt.in, got, tt.wantSteps)
			continue
		}
		for i := range got {
			if got[i] != tt.wantSteps[i] {
				t.Errorf("ParseRamp(%q): got steps %v, want %v", tt.in, got, tt.wantSteps)
			}
		}
	}
}

func TestConfigValidate(t *testing.T) {
	base := Defaults()
	base.Relay, base.Control = "127.0.0.1:1", "127.0.0.1:2"
	if err := base.Validate(); err != nil {
		t.Fatalf("defaults: got %v, want valid", err)
	}
	tests := []struct {
		name   string
		change func(*Config)
		want   string
	}{
		{"lobby of one", func(c *Config) { c.LobbySize = 1 }, "at least 2 players"},
		{"packet below header", func(c *Config) { c.PacketSize = 20 }, "packet size 20"},
		{"jitter beyond a tick", func(c *Config) { c.Jitter = 20 * time.Millisecond }, "jitter"},
		{"no control plane", func(c *Config) { c.Control = "" }, "control"},
		{"step shorter than a tick", func(c *Config) { c.StepDuration = time.Millisecond }, "shorter than one tick"},
	}
	for _, tt := range tests {
		c := base
		tt.change(&c)
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: got %v, want an error containing %q", tt.name, err, tt.want)
		}
	}
}

// TestAccountHandshakeIsNotData: joins the relay read during a step (a
// player joining again after a restart) are the handshake, not data: not
// counted as read, so they hide no loss on the way in.
func TestAccountHandshakeIsNotData(t *testing.T) {
	sch := NewSchedule(8, 60, time.Second, 0, 1)
	in := perfect(8, 8, sch)
	in.Sends.Sent -= 16 // lost on the way in
	in.Relay.RxPackets = in.Sends.Sent + 16
	in.Relay.JoinsRx = 16 // 8 players, 2 joins each
	s := Account(in)
	if s.RelayRx != in.Sends.Sent || s.LossIn != 0 {
		t.Errorf("relay rx %d, loss in %d; want %d (the joins not counted) and 0", s.RelayRx, s.LossIn, in.Sends.Sent)
	}
	in.Relay.RxPackets = in.Sends.Sent - 16 + 16
	if s := Account(in); s.LossIn != 16 {
		t.Errorf("16 lost and 16 joins read: got loss in %d, want 16", s.LossIn)
	}
}
