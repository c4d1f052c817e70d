package tune

import (
	"math"
	"strings"
	"testing"
	"time"
)

// incident is the promise the incident's operator set: 200 players (twice the free tier's 100)
// in lobbies of 8 at 60 Hz, 200-byte datagrams, a 50 ms stall.
var incident = Promise{Players: 200, LobbySize: 8, Hz: 60, PacketSize: 200, Stall: 50 * time.Millisecond}

func TestPromiseValidate(t *testing.T) {
	tests := []struct {
		name string
		edit func(*Promise)
		want string // "" for valid
	}{
		{"the incident", func(*Promise) {}, ""},
		{"no stall", func(p *Promise) { p.Stall = 0 }, ""},
		{"largest", func(p *Promise) {
			*p = Promise{MaxPromisePlayers, 256, MaxPromiseHz, MaxPacketSize, MaxPromiseStall}
		}, ""},
		{"no players", func(p *Promise) { p.Players = 0 }, "players 0: want 1 to 10000000"},
		{"too many players", func(p *Promise) { p.Players = MaxPromisePlayers + 1 }, "players 10000001: want 1 to 10000000"},
		{"lobby of one", func(p *Promise) { p.LobbySize = 1 }, "lobby size 1: want 2 to 256 (a lobby of one forwards nothing)"},
		{"lobby too large", func(p *Promise) { p.LobbySize = 257 }, "lobby size 257: want 2 to 256 (a lobby of one forwards nothing)"},
		{"zero hz", func(p *Promise) { p.Hz = 0 }, "hz 0: want 1 to 10000"},
		{"hz too high", func(p *Promise) { p.Hz = 10001 }, "hz 10001: want 1 to 10000"},
		{"empty packet", func(p *Promise) { p.PacketSize = 0 }, "packet size 0: want 1 to 65507 bytes (the UDP payload)"},
		{"packet over UDP's limit", func(p *Promise) { p.PacketSize = 65508 }, "packet size 65508: want 1 to 65507 bytes (the UDP payload)"},
		{"negative stall", func(p *Promise) { p.Stall = -time.Millisecond }, "stall -1ms: want 0 to 1h0m0s"},
		{"stall over an hour", func(p *Promise) { p.Stall = time.Hour + 1 }, "stall 1h0m0.000000001s: want 0 to 1h0m0s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := incident
			tt.edit(&p)
			err := p.Validate()
			got := ""
			if err != nil {
				got = err.Error()
			}
			if got != tt.want {
				t.Errorf("Validate(%+v): got %q, want %q", p, got, tt.want)
			}
		})
	}
}

func TestStallTicks(t *testing.T) {
	tests := []struct {
		stall time.Duration
		hz    int
		want  int
	}{
		{0, 60, 1},
		{16 * time.Millisecond, 60, 1},
		{17 * time.Millisecond, 60, 2},
		{50 * time.Millisecond, 60, 4}, // 3 whole ticks and the one in flight
		{20*time.Millisecond - 1, 50, 1},
		{20 * time.Millisecond, 50, 2}, // exactly one tick
		{time.Second, 60, 61},
		{time.Hour, 10000, 36_000_001},
	}
	for _, tt := range tests {
		p := Promise{Players: 1, LobbySize: 2, Hz: tt.hz, PacketSize: 200, Stall: tt.stall}
		if got := p.StallTicks(); got != tt.want {
			t.Errorf("StallTicks(%v at %d Hz): got %d, want %d", tt.stall, tt.hz, got, tt.want)
		}
	}
}

func TestSize(t *testing.T) {
	tests := []struct {
		name     string
		p        Promise
		headroom float64
		want     Sizing
	}{
		{
			name: "the incident's promise", p: incident, headroom: 2,
			want: Sizing{
				InPPS: 12000, InBytesPS: 2_400_000, OutPPS: 84000, OutBytesPS: 16_800_000,
				Truesize: 1280, Burst: 200, StallTicks: 4, Queue: 800,
				NeedRcvbuf: 1_024_000, NeedRequest: 512_000, Possible: true,
				Headroom: 2, Rcvbuf: 2_048_000, Request: 1_024_000, RmemMax: 1_024_000, DefaultHeld: 166,
			},
		},
		{
			name: "headroom 0 means the default", p: incident, headroom: 0,
			want: Sizing{
				InPPS: 12000, InBytesPS: 2_400_000, OutPPS: 84000, OutBytesPS: 16_800_000,
				Truesize: 1280, Burst: 200, StallTicks: 4, Queue: 800,
				NeedRcvbuf: 1_024_000, NeedRequest: 512_000, Possible: true,
				Headroom: DefaultHeadroom, Rcvbuf: 2_048_000, Request: 1_024_000, RmemMax: 1_024_000, DefaultHeld: 166,
			},
		},
		{
			name: "headroom below 1 counts as 1",
			p:    Promise{Players: 100, LobbySize: 8, Hz: 60, PacketSize: 200}, headroom: 0.5,
			want: Sizing{
				InPPS: 6000, InBytesPS: 1_200_000, OutPPS: 42000, OutBytesPS: 8_400_000,
				Truesize: 1280, Burst: 100, StallTicks: 1, Queue: 100,
				NeedRcvbuf: 128_000, NeedRequest: 64_000, Possible: true,
				Headroom: 1, Rcvbuf: 128_000, Request: 64_000, RmemMax: 64_000, DefaultHeld: 166,
			},
		},
		{
			name: "fractional headroom rounds up",
			p:    Promise{Players: 3, LobbySize: 2, Hz: 1, PacketSize: 200}, headroom: 1.5,
			want: Sizing{
				InPPS: 3, InBytesPS: 600, OutPPS: 3, OutBytesPS: 600,
				Truesize: 1280, Burst: 3, StallTicks: 1, Queue: 3,
				NeedRcvbuf: 3840, NeedRequest: 1920, Possible: true,
				Headroom: 1.5, Rcvbuf: 5760, Request: 2880, RmemMax: 2880, DefaultHeld: 166,
			},
		},
		{
			name: "odd rb: the request rounds up so the doubled value covers it",
			p:    Promise{Players: 1, LobbySize: 2, Hz: 1, PacketSize: 16005}, headroom: 1,
			want: Sizing{
				InPPS: 1, InBytesPS: 16005, OutPPS: 1, OutBytesPS: 16005,
				Truesize: 16837, Burst: 1, StallTicks: 1, Queue: 1,
				NeedRcvbuf: 16837, NeedRequest: 8419, Possible: true,
				Headroom: 1, Rcvbuf: 16837, Request: 8419, RmemMax: 8419, DefaultHeld: 12,
			},
		},
		{
			name: "tiny promise floors at SOCK_MIN_RCVBUF",
			p:    Promise{Players: 1, LobbySize: 2, Hz: 1, PacketSize: 1}, headroom: 1,
			want: Sizing{
				InPPS: 1, InBytesPS: 1, OutPPS: 1, OutBytesPS: 1,
				Truesize: 832, Burst: 1, StallTicks: 1, Queue: 1,
				NeedRcvbuf: SockMinRcvbuf, NeedRequest: SockMinRcvbuf / 2, Possible: true,
				Headroom: 1, Rcvbuf: SockMinRcvbuf, Request: SockMinRcvbuf / 2, RmemMax: SockMinRcvbuf / 2, DefaultHeld: 256,
			},
		},
		{
			name: "largest promise saturates at the kernel's largest buffer",
			p:    Promise{MaxPromisePlayers, 256, MaxPromiseHz, MaxPacketSize, MaxPromiseStall}, headroom: 2,
			want: Sizing{
				InPPS: 100_000_000_000, InBytesPS: 6_550_700_000_000_000, OutPPS: 25_500_000_000_000, OutBytesPS: 1_670_428_500_000_000_000,
				Truesize: 66339, Burst: MaxPromisePlayers, StallTicks: 36_000_001, Queue: 360_000_010_000_000,
				NeedRcvbuf: math.MaxInt, NeedRequest: MaxRcvbuf / 2, Possible: false,
				Headroom: 2, Rcvbuf: MaxRcvbuf, Request: MaxRcvbuf / 2, RmemMax: MaxRcvbuf / 2, DefaultHeld: 3,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.want.Promise = tt.p
			got := Size(tt.p, tt.headroom)
			if got != tt.want {
				t.Errorf("Size(%+v, %v):\n got %+v\nwant %+v", tt.p, tt.headroom, got, tt.want)
			}
		})
	}
}

// TestSizeKernelRule checks Size's request against the kernel's rule
// rb = max(2 × min(request, rmem_max), 2304): asked with rmem_max at the
// figure Size gives, the socket gets at least the rb it aimed for; one byte
// less of rmem_max and the silent cap cuts it below.
func TestSizeKernelRule(t *testing.T) {
	for _, p := range []Promise{
		incident,
		{Players: 100, LobbySize: 8, Hz: 60, PacketSize: 200},
		{Players: 1, LobbySize: 2, Hz: 1, PacketSize: 16005},
		{Players: 7, LobbySize: 2, Hz: 30, PacketSize: 1200, Stall: 333 * time.Millisecond},
		{Players: 5000, LobbySize: 8, Hz: 128, PacketSize: 1472, Stall: 2 * time.Second},
		{MaxPromisePlayers, 256, MaxPromiseHz, MaxPacketSize, MaxPromiseStall},
	} {
		for _, h := range []float64{1, 1.5, 2, 3} {
			s := Size(p, h)
			e := ExpectRcvbuf(s.Request, false, s.RmemMax, LinuxDefaultRcvbuf)
			if e.Capped || e.Effective < s.Rcvbuf {
				t.Errorf("%+v headroom %v: so_rcvbuf %d under rmem_max %d gives rb %d (capped %v), want at least %d",
					p, h, s.Request, s.RmemMax, e.Effective, e.Capped, s.Rcvbuf)
			}
			if e.Effective > s.Rcvbuf+1 {
				t.Errorf("%+v headroom %v: rb %d is more than the %d aimed for: the request is not the smallest", p, h, e.Effective, s.Rcvbuf)
			}
			if s.Rcvbuf > SockMinRcvbuf && s.Rcvbuf < MaxRcvbuf {
				if low := ExpectRcvbuf(s.Request, false, s.RmemMax-1, LinuxDefaultRcvbuf); !low.Capped || low.Effective >= s.Rcvbuf {
					t.Errorf("%+v headroom %v: rmem_max %d should cap so_rcvbuf %d below rb %d, got rb %d",
						p, h, s.RmemMax-1, s.Request, s.Rcvbuf, low.Effective)
				}
			}
			if c := CheckCapacity(p, e.Effective); c.Meets != s.Possible {
				t.Errorf("%+v headroom %v: the sized rb %d meets the promise: %v, want %v (possible): %s", p, h, e.Effective, c.Meets, s.Possible, c.Summary())
			}
		}
	}
}

func TestCheckCapacity(t *testing.T) {
	p100 := Promise{Players: 100, LobbySize: 8, Hz: 50, PacketSize: 200, Stall: 20 * time.Millisecond}
	tests := []struct {
		name string
		p    Promise
		rb   int
		want Capacity
	}{
		{
			name: "the fixed relay: 8 MiB", p: incident, rb: 8388608,
			want: Capacity{Truesize: 1280, Held: 6553, TicksHeld: 32, Absorbs: 533333333, StallTicks: 4, NeedRcvbuf: 1_024_000, Margin: 8388608.0 / 1_024_000, Meets: true},
		},
		{
			name: "the incident's default at 200 players: not one tick", p: incident, rb: 212992,
			want: Capacity{Truesize: 1280, Held: 166, TicksHeld: 0, Absorbs: 0, StallTicks: 4, NeedRcvbuf: 1_024_000, Margin: 212992.0 / 1_024_000, Meets: false},
		},
		{
			name: "the default at the free tier's 100 players, no stall",
			p:    Promise{Players: 100, LobbySize: 8, Hz: 60, PacketSize: 200}, rb: 212992,
			want: Capacity{Truesize: 1280, Held: 166, TicksHeld: 1, Absorbs: 16666666, StallTicks: 1, NeedRcvbuf: 128_000, Margin: 212992.0 / 128_000, Meets: true},
		},
		{
			name: "exactly the need", p: p100, rb: 256_000,
			want: Capacity{Truesize: 1280, Held: 200, TicksHeld: 2, Absorbs: 40 * time.Millisecond, StallTicks: 2, NeedRcvbuf: 256_000, Margin: 1, Meets: true},
		},
		{
			name: "one byte short", p: p100, rb: 255_999,
			want: Capacity{Truesize: 1280, Held: 199, TicksHeld: 1, Absorbs: 20 * time.Millisecond, StallTicks: 2, NeedRcvbuf: 256_000, Margin: 255_999.0 / 256_000, Meets: false},
		},
		{
			name: "a stall just under one tick needs only the tick in flight",
			p:    Promise{Players: 100, LobbySize: 8, Hz: 50, PacketSize: 200, Stall: 20*time.Millisecond - 1}, rb: 128_000,
			want: Capacity{Truesize: 1280, Held: 100, TicksHeld: 1, Absorbs: 20 * time.Millisecond, StallTicks: 1, NeedRcvbuf: 128_000, Margin: 1, Meets: true},
		},
		{
			name: "SOCK_MIN_RCVBUF holds one datagram whatever its size",
			p:    Promise{Players: 1, LobbySize: 2, Hz: 60, PacketSize: 2000}, rb: SockMinRcvbuf,
			want: Capacity{Truesize: 4352, Held: 1, TicksHeld: 1, Absorbs: 16666666, StallTicks: 1, NeedRcvbuf: 4352, Margin: float64(SockMinRcvbuf) / 4352, Meets: true},
		},
		{
			name: "no buffer", p: incident, rb: 0,
			want: Capacity{Truesize: 1280, StallTicks: 4, NeedRcvbuf: 1_024_000, Meets: false},
		},
		{
			name: "the kernel's largest buffer against the largest promise",
			p:    Promise{MaxPromisePlayers, 256, MaxPromiseHz, MaxPacketSize, MaxPromiseStall}, rb: MaxRcvbuf,
			want: Capacity{Truesize: 66339, Held: MaxRcvbuf / 66339, StallTicks: 36_000_001, NeedRcvbuf: math.MaxInt, Margin: float64(MaxRcvbuf) / math.MaxInt, Meets: false},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.want.Promise, tt.want.Rcvbuf = tt.p, tt.rb
			got := CheckCapacity(tt.p, tt.rb)
			if got != tt.want {
				t.Errorf("CheckCapacity(%+v, %d):\n got %+v\nwant %+v", tt.p, tt.rb, got, tt.want)
			}
			if (got.Warning() == "") != got.Meets {
				t.Errorf("Warning() = %q with Meets %v: want a warning exactly when the promise is not met", got.Warning(), got.Meets)
			}
		})
	}
}

func TestCapacityText(t *testing.T) {
	tests := []struct {
		name             string
		p                Promise
		rb               int
		summary, warning string
	}{
		{
			name: "meets", p: incident, rb: 8388608,
			summary: "rb 8388608 holds 6553 datagrams of 200 bytes (truesize 1280), 32 aligned ticks of 200 players: it absorbs a stall shorter than 533.3 ms at 60 Hz; it meets the promise, a 50 ms stall (rb 1024000 needed), margin 8.19×",
		},
		{
			name: "not one tick", p: incident, rb: 212992,
			summary: "rb 212992 holds 166 datagrams of 200 bytes (truesize 1280), fewer than one aligned tick of 200 players, so it drops without any stall; it does NOT meet the promise, a 50 ms stall (rb 1024000 needed), margin 0.21×",
			warning: "the relay socket's rb 212992 does not meet the promised capacity (200 players at 60 Hz, 200-byte datagrams, a 50 ms stall): it holds fewer datagrams than one aligned tick brings, so it drops even without a stall; it needs rb 1024000 (so_rcvbuf 512000 with net.core.rmem_max at least that), margin 0.21×",
		},
		{
			name: "no socket can", p: Promise{Players: 5000, LobbySize: 8, Hz: 128, PacketSize: 1472, Stall: 2 * time.Second}, rb: MaxRcvbuf,
			summary: "rb 2147483646 holds 932067 datagrams of 1472 bytes (truesize 2304), 186 aligned ticks of 5000 players: it absorbs a stall shorter than 1453.1 ms at 128 Hz; it does NOT meet the promise, a 2000 ms stall (rb 2960640000 needed), margin 0.73×",
			warning: "the relay socket's rb 2147483646 does not meet the promised capacity (5000 players at 128 Hz, 1472-byte datagrams, a 2000 ms stall): it absorbs only a stall shorter than 1453.1 ms; it needs rb 2960640000, more than any socket can have (2147483646): shorten the stall or spread the players over more sockets or relays, margin 0.73×",
		},
		{
			name: "a shorter stall", p: incident, rb: 512000,
			summary: "rb 512000 holds 400 datagrams of 200 bytes (truesize 1280), 2 aligned ticks of 200 players: it absorbs a stall shorter than 33.3 ms at 60 Hz; it does NOT meet the promise, a 50 ms stall (rb 1024000 needed), margin 0.50×",
			warning: "the relay socket's rb 512000 does not meet the promised capacity (200 players at 60 Hz, 200-byte datagrams, a 50 ms stall): it absorbs only a stall shorter than 33.3 ms; it needs rb 1024000 (so_rcvbuf 512000 with net.core.rmem_max at least that), margin 0.50×",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := CheckCapacity(tt.p, tt.rb)
			if got := c.Summary(); got != tt.summary {
				t.Errorf("Summary:\n got %s\nwant %s", got, tt.summary)
			}
			if got := c.Warning(); got != tt.warning {
				t.Errorf("Warning:\n got %s\nwant %s", got, tt.warning)
			}
		})
	}
}

func TestPhrases(t *testing.T) {
	if got := StallPhrase(0); got != "no stall beyond the tick in flight" {
		t.Errorf("StallPhrase(0): got %q", got)
	}
	if got := StallPhrase(50 * time.Millisecond); got != "a 50 ms stall" {
		t.Errorf("StallPhrase(50ms): got %q", got)
	}
	for n, want := range map[int]string{0: "0 ticks", 1: "1 tick", 2: "2 ticks"} {
		if got := Plural(n, "tick"); got != want {
			t.Errorf("Plural(%d): got %q, want %q", n, got, want)
		}
	}
}

func TestMillis(t *testing.T) {
	tests := []struct {
		d    time.Duration
		want string
	}{
		{0, "0 ms"}, {50 * time.Millisecond, "50 ms"}, {533333333, "533.3 ms"}, {16666666, "16.7 ms"},
		{1500 * time.Microsecond, "1.5 ms"}, {2 * time.Second, "2000 ms"},
	}
	for _, tt := range tests {
		if got := Millis(tt.d); got != tt.want {
			t.Errorf("Millis(%v): got %q, want %q", tt.d, got, tt.want)
		}
	}
}

// TestSizeMatchesDocs pins the figures docs/sizing.md quotes.
func TestSizeMatchesDocs(t *testing.T) {
	if got := DatagramsHeld(LinuxDefaultRcvbuf, 200); got != 166 {
		t.Errorf("the default rb holds %d 200-byte datagrams, want 166 (212992 / 1280)", got)
	}
	if !strings.Contains(CheckCapacity(Promise{Players: 160, LobbySize: 8, Hz: 60, PacketSize: 200}, LinuxDefaultRcvbuf).Summary(), "1 aligned tick of 160") {
		t.Errorf("160 players should fit one aligned tick in the default buffer")
	}
	if CheckCapacity(Promise{Players: 167, LobbySize: 8, Hz: 60, PacketSize: 200}, LinuxDefaultRcvbuf).TicksHeld != 0 {
		t.Errorf("167 players should not fit one aligned tick in the default buffer")
	}
}
