package rollout_test

import (
	"context"
	"strings"
	"testing"

	"github.com/relayctl/relayctl/rollout"
)

// The Markdown receipt leads with the hosts that did not end as planned;
// beyond 50 hosts the others are a row per wave, not a section each.
func TestReceiptMarkdownLeadsWithFailures(t *testing.T) {
	for _, n := range []int{4, 60} {
		d, p, sims := fleet(t, n, "rollout: {waves: [1, 100%], max_failures: 100%}\n")
		sims[2].IgnoreRB = true
		rep := applyWith(t, context.Background(), d, p, rollout.ApplyOptions{Parallel: 8})
		md := string(rollout.ReceiptMarkdown(p, rep))
		failed := strings.Index(md, "## h3 (")
		lead := strings.Index(md, "**1 of ")
		first := strings.Index(md, "## h1 (")
		if lead < 0 || failed < lead {
			t.Errorf("%d hosts: the failure does not lead:\n%s", n, md)
		}
		switch n {
		case 4:
			if first < failed {
				t.Errorf("%d hosts: h1's section comes before h3's", n)
			}
		case 60:
			if first >= 0 || !strings.Contains(md, "## The 59 hosts that ended as planned") || !strings.Contains(md, "| 2 | 58: h2 … h60 | 58 | 0 |") {
				t.Errorf("%d hosts: not summarised:\n%s", n, md)
			}
			if lines := strings.Count(md, "\n"); lines > 150 {
				t.Errorf("%d hosts: %d lines", n, lines)
			}
		}
	}
}
