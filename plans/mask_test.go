package plans

import (
	"strings"
	"testing"
)

// A relay config's secrets reach no plan, review or facts file: a secret
// key's value, a line relayctl cannot read as KEY=VALUE (DB_PASSWORD:
// hunter2), a comment that names a secret.
func TestNoSecretLeavesTheHost(t *testing.T) {
	f := incidentFacts()
	f.Config.Content = "RELAYD_LISTEN=0.0.0.0:7788\nAPI_TOKEN=tok-s3cret\nDB_PASSWORD: hunter2-colon\n# the password is hunter2-comment\nnot an assignment hunter2-plain\n# just a comment\nRELAYD_SO_RCVBUF=0\n"
	p := makePlan(t, incidentSpec(t, nil), f)
	body, _ := p.JSON()
	md := p.Markdown("x.plan")
	masked := MaskConfig(f.Config.Content)
	for _, secret := range []string{"tok-s3cret", "hunter2-colon", "hunter2-comment", "hunter2-plain"} {
		for name, out := range map[string]string{"the plan": string(body), "the review": string(md), "the masked config": masked} {
			if strings.Contains(out, secret) {
				t.Errorf("%s holds %q", name, secret)
			}
		}
	}
	if !strings.Contains(string(md), "# just a comment") || !strings.Contains(masked, "RELAYD_LISTEN=0.0.0.0:7788") {
		t.Errorf("masking hid what holds no secret:\n%s", masked)
	}
	if MaskConfig(masked) != masked {
		t.Errorf("masking masked content changed it:\n%s\n%s", masked, MaskConfig(masked))
	}

	// A plan made from the masked facts (facts --json, plan --facts) has the
	// fingerprint a plan made on the host has, and reviews the same file.
	mf := incidentFacts()
	mf.Config = FileFact{Exists: true, Content: masked, Masked: true}
	offline := makePlan(t, incidentSpec(t, nil), mf).Hosts[0]
	online := p.Hosts[0]
	if offline.Fingerprint != online.Fingerprint {
		t.Errorf("fingerprint from masked facts %s, from the host %s", offline.Fingerprint, online.Fingerprint)
	}
	oc, nc := offline.File(RoleRelayConfig), online.File(RoleRelayConfig)
	if a, b := oc.Reviewed(*nc); !oc.Masked || a != b {
		t.Errorf("the offline plan's config (masked %v) does not review as the one derived on the host: %s vs %s", oc.Masked, a, b)
	}
	if d := ActionDiff(offline, online); len(d) > 0 {
		t.Errorf("the offline plan acts otherwise: %v", d)
	}
}
