package bench

import (
	"encoding/json"
	"testing"

	"github.com/relayctl/relayctl/relay/server"
)

// TestDecodeStatus keeps the bench's reading of /status in step with
// relayd's own type, and accepts a relay that serves the counters flat.
func TestDecodeStatus(t *testing.T) {
	st := server.Status{Version: "1.8.0", SORcvbufEffective: 212992, Counters: server.Counters{
		RxPackets: 1, RxBytes: 2, TxPackets: 3, TxBytes: 4, RxDrops: 5, Malformed: 6, Forwarded: 7, LobbyFull: 8,
	}}
	nested, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	want := Counters{RxPackets: 1, RxBytes: 2, TxPackets: 3, TxBytes: 4, RxDrops: 5, Malformed: 6, Forwarded: 7, LobbyFull: 8}
	flat, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		doc  []byte
	}{{"relayd's status", nested}, {"counters at the top level", flat}} {
		got, err := decodeStatus(tt.doc)
		if err != nil {
			t.Errorf("%s: got error %v", tt.name, err)
			continue
		}
		if got != want {
			t.Errorf("%s: got %+v, want %+v", tt.name, got, want)
		}
	}
	if rb, err := decodeRcvbuf(nested); err != nil || rb != 212992 {
		t.Errorf("relayd's so_rcvbuf_effective: got %d, %v, want 212992", rb, err)
	}
	if rb, err := decodeRcvbuf(flat); err != nil || rb != 0 {
		t.Errorf("a relay that does not report its buffer: got %d, %v, want 0", rb, err)
	}
	if _, err := decodeStatus([]byte("<html>")); err == nil {
		t.Errorf("got no error for a non-JSON page, want one")
	}
}
