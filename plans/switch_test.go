package plans

import (
	"strings"
	"testing"
	"time"

	"github.com/relayctl/relayctl/relay/capability"
	"github.com/relayctl/relayctl/tune"
)

// The store switch is chosen only when the running relay keeps its socket
// in systemd's store, the release can take it and the unit has a store;
// each other case restarts, says why, and empties the store where a
// release that binds its own socket could not start.
func TestStoreSwitch(t *testing.T) {
	spec := func() *Spec {
		return incidentSpec(t, func(s string) string {
			return strings.Replace(s, labService, "    manager: systemd\n    name: relayd\n", 1)
		})
	}
	storeAware := []string{capability.Drain, capability.FDStore, capability.Handoff}
	facts := func(running string, max int) *Facts {
		f := incidentFacts()
		f.Service.FDStoreMax = max
		f.RelayStatus = &RelayStatusFact{Read: true, Version: "1.7.0", FDStore: running, Players: 64, Lobbies: 8}
		return f
	}
	tests := []struct {
		name      string
		caps      []string
		f         *Facts
		sw, clear string
		why       string
	}{
		{"kept", storeAware, facts("systemd/1", 4), SwitchFDStore, "", "same socket, lobbies kept"},
		{"first deploy", storeAware, facts("", 4), SwitchRestart, "rollback", "this window restarts; the next keeps the socket"},
		{"to a store-unaware release", []string{capability.Drain}, facts("systemd/1", 4), SwitchRestart, "window", "empties the store and starts 1.8.0 on a socket of its own; every player is cut"},
		{"no store in the unit", storeAware, facts("", 0), SwitchRestart, "", "has no file-descriptor store (FileDescriptorStoreMax=0)"},
		{"release without it", nil, facts("", 4), SwitchRestart, "", "does not keep its socket in systemd's store"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Make(Input{Spec: spec(), Facts: []*Facts{tt.f}, Artifact: Artifact{SHA256: strings.Repeat("ab", 32), Size: 9, Capabilities: tt.caps, VersionFrom: capability.FromMarker}, Steps: testSteps})
			if err != nil {
				t.Fatal(err)
			}
			h := p.Hosts[0]
			if h.Switch != tt.sw || h.ClearStore != tt.clear || !strings.Contains(h.SwitchWhy, tt.why) {
				t.Errorf("switch %s, clear %q: %s\nwant %s, %q, %q", h.Switch, h.ClearStore, h.SwitchWhy, tt.sw, tt.clear, tt.why)
			}
		})
	}
}

// Over a store restart's gap datagrams queue at the OLD rb: with a
// promise, the review says whether it holds them.
func TestStoreGapAgainstThePromise(t *testing.T) {
	s := incidentSpec(t, func(s string) string {
		return strings.Replace(s, labService, "    manager: systemd\n    name: relayd\n", 1) + "capacity:\n  players: 200\n  hz: 60\n  packet_size: 200\n"
	})
	f := incidentFacts()
	f.Service.FDStoreMax = 4
	f.RelayStatus = &RelayStatusFact{Read: true, Version: "1.7.0", FDStore: "systemd/1"}
	p, err := Make(Input{Spec: s, Facts: []*Facts{f}, Artifact: Artifact{SHA256: strings.Repeat("ab", 32), Size: 9, Capabilities: []string{capability.FDStore}, VersionFrom: capability.FromMarker}, Steps: testSteps})
	if err != nil {
		t.Fatal(err)
	}
	h := p.Hosts[0]
	if h.StoreGap == nil || h.StoreGap.Promise.Stall != StoreRestartGap || h.StoreGap.Rcvbuf != 212992 {
		t.Fatalf("store gap: %+v", h.StoreGap)
	}
	want := tune.CheckCapacity(tune.Promise{Players: 200, LobbySize: 8, Hz: 60, PacketSize: 200, Stall: 100 * time.Millisecond}, 212992)
	if h.StoreGap.Meets != want.Meets {
		t.Errorf("meets %v, the sizing model says %v", h.StoreGap.Meets, want.Meets)
	}
	warned := false
	for _, w := range h.Warnings {
		warned = warned || strings.Contains(w, "datagrams queueing in the socket at its old rb 212992")
	}
	if warned == want.Meets {
		t.Errorf("warning given %v, but the old rb meets the promise over the gap: %v (%s)", warned, want.Meets, want.Summary())
	}
	if md := string(p.Markdown("x.plan")); !strings.Contains(md, "Restart gap at the old rb: rb 212992 holds") || !strings.Contains(md, "restart, socket kept in systemd's store") {
		t.Errorf("review lacks the gap or the switch's label")
	}
}
