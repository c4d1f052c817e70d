package plans

import (
	"bytes"
	"strconv"
	"strings"
	"testing"
)

// Two plans of one spec against a host that did not change, whose
// counters, clock and players moved meanwhile, are the same bytes, and so
// are their reviews; the readings beside them are what moved.
func TestPlansOfAnUnchangedHostAreTheSameBytes(t *testing.T) {
	s := incidentSpec(t, func(src string) string {
		return src + "drain: {max_players: 0, deadline: 30s}\n"
	})
	at := func(drops uint64, clock int64, players int) *Facts {
		f := incidentFacts()
		f.Socket.Inode = 88211
		f.Socket.Drops, f.Socket.ProcUDPDrops, f.Socket.RcvbufErrors, f.Socket.InErrors, f.Socket.InDatagrams = drops, drops, drops, drops, 10*drops
		f.ClockNanos = clock
		f.RelayStatus = &RelayStatusFact{Read: true, Version: "1.7.0", PID: 4242, RxDrops: drops, RxPackets: 10 * drops, Players: players, Lobbies: players / 8, SocketInode: 88211}
		return f
	}
	f1, f2 := at(26498, 1_796_400_000_000_000_000, 64), at(31337, 1_796_400_060_000_000_000, 40)
	p1, p2 := makePlan(t, s, f1), makePlan(t, s, f2)
	b1, err := p1.JSON()
	if err != nil {
		t.Fatal(err)
	}
	b2, _ := p2.JSON()
	if !bytes.Equal(b1, b2) {
		t.Errorf("two plans of an unchanged host differ:\n%s", firstDifference(b1, b2))
	}
	if m1, m2 := p1.Markdown("x.plan"), p2.Markdown("x.plan"); !bytes.Equal(m1, m2) {
		t.Errorf("their reviews differ:\n%s", firstDifference(m1, m2))
	}
	for _, volatile := range []string{"26498", "31337", "1796400"} {
		if bytes.Contains(b1, []byte(volatile)) {
			t.Errorf("the plan holds the reading %s", volatile)
		}
	}
	r := ReadingsOf(p1, []*Facts{f1})
	h := r.Host("relay-ash-1")
	if r.Checksum != p1.Checksum || h == nil || h.Drops == nil || h.Drops.SSDrops != 26498 || h.Drops.ClockNanos != f1.ClockNanos || h.Players == nil || h.Players.Players != 64 {
		t.Fatalf("readings: %+v, host %+v", r, h)
	}
	data, _ := r.JSON()
	back, err := LoadReadings("x.plan.readings.json", data, p1)
	if err != nil || back.Host("relay-ash-1").Drops.SSDrops != 26498 {
		t.Errorf("readings read back: %+v, %v", back, err)
	}
	// Readings are of one plan: another's (its checksum) are refused.
	other := *p1
	other.Checksum = "sha256:0000"
	if _, err := LoadReadings("x.plan.readings.json", data, &other); err == nil || !strings.Contains(err.Error(), "not of this plan") {
		t.Errorf("readings of another plan: %v", err)
	}
}

// The current link counts by the folder it names: spelt relative or
// absolute it is one place, and no drift; another folder is.
func TestCurrentLinkIsComparedByTheFolderItNames(t *testing.T) {
	keys := []string{"net.core.rmem_max"}
	value := func(raw string) string {
		f := incidentFacts()
		f.Release.CurrentRaw = raw
		for _, e := range Fingerprinted(f, keys, "/opt/relay/current") {
			if e.Name == "release current" {
				return e.Value
			}
		}
		t.Fatal("no release current fact")
		return ""
	}
	if a, b := value("releases/1.7.0"), value("/opt/relay/releases/1.7.0"); a != b || a != "/opt/relay/releases/1.7.0" {
		t.Errorf("releases/1.7.0 gives %q, /opt/relay/releases/1.7.0 gives %q: one place", a, b)
	}
	if a, b := value("releases/1.7.0"), value("/srv/relay/releases/1.7.0"); a == b {
		t.Errorf("two folders give the same fact %q", a)
	}
	if v := value(""); v != "(none)" {
		t.Errorf("no link: %q", v)
	}
}

// firstDifference is the line where a and b first differ, for a message.
func firstDifference(a, b []byte) string {
	la, lb := strings.Split(string(a), "\n"), strings.Split(string(b), "\n")
	for i := range min(len(la), len(lb)) {
		if la[i] != lb[i] {
			return "line " + strconv.Itoa(i+1) + ":\n- " + la[i] + "\n+ " + lb[i]
		}
	}
	return "one is longer"
}
