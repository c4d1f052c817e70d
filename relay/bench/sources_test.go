package bench

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
)

// TestPlayerSources: the players send from --source in turn; by default
// from two loopback addresses for a relay on loopback (a lobby is never
// one address's), and from the kernel's choice elsewhere.
func TestPlayerSources(t *testing.T) {
	two := []netip.Addr{netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2")}
	for _, tt := range []struct {
		relay   string
		sources []netip.Addr
		want    []netip.Addr
	}{
		{"127.0.0.1:7788", nil, LoopbackSources},
		{"127.3.4.5:7788", nil, LoopbackSources},
		{"localhost:7788", nil, LoopbackSources},
		{"10.0.0.5:7788", nil, nil},
		{"relay-ash-1:7788", nil, nil},
		{"127.0.0.1:7788", two, two},
		{"10.0.0.5:7788", two, two},
	} {
		if got := (Config{Relay: tt.relay, Sources: tt.sources}).playerSources(); !slices.Equal(got, tt.want) {
			t.Errorf("relay %s, sources %v: got %v, want %v", tt.relay, tt.sources, got, tt.want)
		}
	}
}

func TestParseSources(t *testing.T) {
	got, err := ParseSources("127.0.0.1, 127.0.0.2,10.1.2.3")
	if err != nil || len(got) != 3 || got[2] != netip.MustParseAddr("10.1.2.3") {
		t.Errorf("got %v, %v", got, err)
	}
	for _, bad := range []string{"", "127.0.0.1,", "::1", "0.0.0.0", "224.0.0.1", "127.0.0.1/32", "relay-ash-1"} {
		if _, err := ParseSources(bad); err == nil || !strings.Contains(err.Error(), "want IPv4 addresses of this machine") {
			t.Errorf("ParseSources(%q): got %v, want a refusal", bad, err)
		}
	}
}
