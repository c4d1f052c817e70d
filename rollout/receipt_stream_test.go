package rollout_test

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"

	"github.com/relayctl/relayctl/rollout"
)

// The receipt written one host at a time is, byte for byte, the whole
// FleetReceipt encoded at once (what apply wrote before it streamed).
func TestReceiptStreamsTheSameBytes(t *testing.T) {
	for _, n := range []int{0, 1, 3} {
		d, p, sims := fleet(t, 3, "rollout: {waves: [1, 100%], max_failures: 100%}\n")
		sims[1].IgnoreRB = true
		rep := applyWith(t, context.Background(), d, p, rollout.ApplyOptions{Parallel: 2})
		rep.Hosts = rep.Hosts[:n]
		got, err := rollout.ReceiptJSON(p, rep)
		if err != nil {
			t.Fatal(err)
		}
		fr := rollout.FleetReceipt{FormatVersion: rollout.ReceiptFormatVersion, Plan: rep.Plan, Checksum: rep.Checksum, Release: rep.Release, RunInfo: rep.RunInfo, Started: rep.Started, Ended: rep.Ended, Millis: rep.Millis,
			Run: rep.Run, Waves: rep.Waves, Stopped: rep.Stopped, Approval: rep.Approval, Hosts: []rollout.HostReceipt{}}
		for _, h := range rep.Hosts {
			fr.Hosts = append(fr.Hosts, rollout.Receipt(p, h))
		}
		var want bytes.Buffer
		enc := json.NewEncoder(&want)
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false)
		enc.Encode(fr)
		if !bytes.Equal(got, want.Bytes()) {
			t.Errorf("%d hosts: streamed\n%s\nwhole\n%s", n, got, want.Bytes())
		}
	}
}
