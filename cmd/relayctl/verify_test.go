package main

import (
	"strings"
	"testing"
	"time"

	"github.com/relayctl/relayctl/plans"
)

// verify's drop rate: since the last apply when the host's receipt read
// the same socket, else since the plan's observation of it, else none;
// over the promise is a host that differs.
func TestDropsSinceTheLastApply(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	reading := func(inode uint64, drops uint64, at time.Duration) plans.DropCounters {
		return plans.DropCounters{SSDrops: drops, ProcUDPDrops: drops, RcvbufErrors: drops, InErrors: drops, SocketInode: inode, Sockets: 1, ClockNanos: now.Add(at).UnixNano()}
	}
	facts := func(la *plans.LastApply) *plans.Facts {
		return &plans.Facts{ClockNanos: now.UnixNano(), Service: plans.ServiceFact{Running: true, PID: 7},
			Socket: plans.SocketFact{Found: true, Inode: 9, Drops: 1000, ProcUDPDrops: 1000, RcvbufErrors: 1000, InErrors: 1000, Sockets: 1}, LastApply: la}
	}
	p := &plans.Plan{}
	var h *plans.HostReading
	// 600 drops over the 60 s since the apply: 10 drops/s, over 1.
	d := dropsOf(p, facts(&plans.LastApply{Receipt: "r.json", Drops: reading(9, 400, -60*time.Second)}), h)
	if d.Since != "last apply" || d.Receipt != "r.json" || d.Span == nil || d.Span.SSDrops != 600 || d.Span.DropRate != 10 || d.OK {
		t.Errorf("since the last apply: %+v", d)
	}
	// The plan's soak sets the promise.
	p.Rollout = &plans.Rollout{Soak: &plans.Soak{Duration: time.Minute, Interval: time.Second, Hosts: plans.SoakCanary, MaxDropRate: 20, MaxDropFactor: 2, OnRegression: plans.SoakRollback, NoTraffic: plans.SoakStop}}
	if d := dropsOf(p, facts(&plans.LastApply{Receipt: "r.json", Drops: reading(9, 400, -60*time.Second)}), h); !d.OK || d.Allowed != 20 {
		t.Errorf("a promise of 20 drops/s: %+v", d)
	}
	p.Rollout = nil
	// The relay restarted since the apply: its socket is another; the plan
	// saw this one.
	at := reading(9, 1000, -10*time.Second)
	h = &plans.HostReading{Drops: &at}
	d = dropsOf(p, facts(&plans.LastApply{Receipt: "r.json", Drops: reading(8, 400, -60*time.Second)}), h)
	if d.Since != "plan" || d.Span == nil || d.Span.SSDrops != 0 || !d.OK {
		t.Errorf("since the plan: %+v", d)
	}
	// No baseline at all: no rate, and no verdict against the host.
	d = dropsOf(p, facts(nil), &plans.HostReading{})
	if d.Span != nil || !d.OK || !strings.Contains(d.NoSpan, "no receipt on the host read the relay back after a window") {
		t.Errorf("no baseline: %+v", d)
	}
	// A plan made now from a spec observed nothing earlier: no readings.
	if d := dropsOf(p, facts(nil), nil); d.Span != nil {
		t.Errorf("verify SPEC used the plan made now as a baseline: %+v", d)
	}
}
