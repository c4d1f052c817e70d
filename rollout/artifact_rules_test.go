package rollout_test

// Every sentence of a review and a receipt is true for its plan and its
// run: each kind of plan the fixtures make is planned, applied to a
// simulated host as it ends in real runs, and its review and receipt are
// held to the rules below. A new kind of plan is a row of artifactKinds;
// a new rule a row of reviewRules or receiptRules.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/relayctl/relayctl/plans"
	"github.com/relayctl/relayctl/relay/capability"
	"github.com/relayctl/relayctl/rollout"
	"github.com/relayctl/relayctl/rollout/rollouttest"
)

const commandService = `  service:
    manager: command
    start: [/opt/relay/bin/relay-service, start]
    stop: [/opt/relay/bin/relay-service, stop]
    pid_file: /opt/relay/run/relayd.pid
`

// artifactKind is one kind of plan and how its apply ends.
type artifactKind struct {
	name     string
	spec     string                   // the spec after its hosts
	artifact []byte                   // the release's bytes
	host     func(*rollouttest.Sim)   // the host as planned
	fault    func(*rollouttest.Sim)   // what happens between plan and apply
	dial     func(rollouttest.Dialer) // the fleet as apply finds it
	want     rollout.Outcome
}

var artifactKinds = []artifactKind{
	{name: "sysctl only", want: rollout.Applied, spec: `sysctl:
  net.core.rmem_max: 8388608
relay:
  release: {version: 1.7.0, artifact: relayd}
` + commandService},
	{name: "release only", want: rollout.Applied, spec: `relay:
  release: {version: 1.8.0, artifact: relayd}
` + commandService},
	{name: "restart", want: rollout.Applied, spec: fmt.Sprintf(strings.SplitN(fakeSpec, "\n", 3)[2], "")},
	{name: "handoff", want: rollout.Applied, artifact: []byte(capability.Prefix + capability.Handoff + "\n"),
		host: func(s *rollouttest.Sim) {
			s.Status, s.Handoff, s.HandoffSocket = true, "unix/1", "/run/relayd/handoff.sock"
		}, spec: `relay:
  so_rcvbuf: 4194304
  control: 127.0.0.1:7789
  handoff_socket: /run/relayd/handoff.sock
  release: {version: 1.8.0, artifact: relayd}
` + commandService + "    handoff: [/opt/relay/bin/relay-service, handoff]\n"},
	{name: "store", want: rollout.Applied, artifact: []byte(capability.Prefix + capability.FDStore + "\n"),
		host: func(s *rollouttest.Sim) { s.Status, s.FDStore, s.FDStoreMax = true, "systemd/1", 16 }, spec: `relay:
  so_rcvbuf: 4194304
  control: 127.0.0.1:7789
  release: {version: 1.8.0, artifact: relayd}
  service: {manager: systemd, name: relayd}
`},
	{name: "refused, stale", want: rollout.Refused, spec: fmt.Sprintf(strings.SplitN(fakeSpec, "\n", 3)[2], ""),
		fault: func(s *rollouttest.Sim) { s.Files["/etc/sysctl.d/95-tuning.conf"] = "net.core.rmem_max = 212992\n" }},
	{name: "current link respelt", want: rollout.Applied, spec: fmt.Sprintf(strings.SplitN(fakeSpec, "\n", 3)[2], ""),
		fault: func(s *rollouttest.Sim) { s.Link = "releases/1.7.0" }},
	{name: "unreachable", want: rollout.Unreachable, spec: fmt.Sprintf(strings.SplitN(fakeSpec, "\n", 3)[2], ""),
		dial: func(d rollouttest.Dialer) { delete(d, "h1") }},
	{name: "rolled back", want: rollout.RolledBack, spec: fmt.Sprintf(strings.SplitN(fakeSpec, "\n", 3)[2], ""),
		fault: func(s *rollouttest.Sim) { s.IgnoreRB = true }},
}

// artifacts are a kind's review and receipt, and what they are of.
type artifacts struct {
	plan    *plans.Plan
	host    *plans.HostPlan
	review  string
	rep     *rollout.Report
	receipt string // Markdown
	json    map[string]any
}

func makeArtifacts(t *testing.T, k artifactKind) artifacts {
	t.Helper()
	s := rollouttest.NewSim("h1")
	s.Key, s.HostKey = "ssh-ed25519 SHA256:user", "ssh-ed25519 SHA256:host"
	if k.host != nil {
		k.host(s)
	}
	art := k.artifact
	if art == nil {
		art = artifact
	}
	spec, err := plans.ParseSpec("fake.yaml", []byte("name: fake\nhosts: [h1]\n"+k.spec))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(art)
	caps, _ := capability.Capabilities(art)
	p, err := plans.Make(plans.Input{Spec: spec, Facts: []*plans.Facts{s.Facts()}, Artifact: plans.Artifact{SHA256: hex.EncodeToString(sum[:]), Size: int64(len(art)), Capabilities: caps, VersionFrom: capability.FromNone}, Steps: rollout.Steps})
	if err != nil {
		t.Fatal(err)
	}
	p = reload(t, p)
	if k.fault != nil {
		k.fault(s)
	}
	d := rollouttest.Dialer{"h1": s}
	if k.dial != nil {
		k.dial(d)
	}
	info := rollout.RunInfo{ID: rollout.NewRunID(time.Now()), Kind: rollout.RunApply, Operator: &rollout.Operator{User: "alice", Machine: "laptop"}, Relayctl: &rollout.Build{Version: "v9", Commit: "abc"}}
	rep, err := rollout.Apply(context.Background(), d, checked(t, p), rollout.ApplyOptions{Artifact: art, VerifyTimeout: 300 * time.Millisecond, StableFor: 10 * time.Millisecond, RunInfo: info})
	if err != nil {
		t.Fatal(err)
	}
	if got := rep.Hosts[0].Outcome; got != k.want {
		t.Fatalf("%s: outcome %s (%s), want %s", k.name, got, rep.Hosts[0].Reason, k.want)
	}
	b, err := rollout.ReceiptJSON(p, rep)
	if err != nil {
		t.Fatal(err)
	}
	a := artifacts{plan: p, host: p.Hosts[0], review: string(p.Markdown("x.plan")), rep: rep, receipt: string(rollout.ReceiptMarkdown(p, rep))}
	if err := json.Unmarshal(b, &a.json); err != nil {
		t.Fatal(err)
	}
	return a
}

// A rule checks one kind's artifacts, "" when they hold to it.
type rule struct {
	name  string
	check func(a artifacts) string
}

var reviewRules = []rule{
	{"the window's heading says what the window does", func(a artifacts) string {
		kinds := stepKinds(a.host)
		for _, c := range []struct{ heading, kind string }{
			{"In the window (one restart", rollout.KindRestart},
			{"In the window (one handoff", rollout.KindHandoff},
			{"In the window (one reload", rollout.KindReload},
			{"After the restart", rollout.KindRestart},
			{"After the handoff", rollout.KindHandoff},
		} {
			if strings.Contains(a.review, c.heading) != kinds[c.kind] {
				return fmt.Sprintf("%q with steps %v", c.heading, kinds)
			}
		}
		if len(a.host.Steps) > 0 && !kinds[rollout.KindRestart] && !kinds[rollout.KindHandoff] && !kinds[rollout.KindReload] && !strings.Contains(a.review, "(no restart") {
			return "a window with no switch does not say it does not restart"
		}
		return ""
	}},
	{"the review says what a rollback of the window does, in rollback's order", func(a artifacts) string {
		undo := plans.RollbackSteps(a.host.Steps)
		if len(undo) == 0 {
			return ""
		}
		i := strings.Index(a.review, "### If the window fails")
		if i < 0 {
			return "no rollback section"
		}
		rest := a.review[i:]
		for n, s := range undo {
			if s.Undo == "" {
				return fmt.Sprintf("step %q has no undo text", s.Title)
			}
			line := fmt.Sprintf("%d. %s\n", n+1, plans.MDText(s.Undo))
			if !strings.Contains(rest, line) {
				return fmt.Sprintf("no line %q", line)
			}
		}
		return ""
	}},
	{"the review says what the switch costs the players", func(a artifacts) string {
		if a.host.Action != plans.ActionChange {
			return ""
		}
		m := regexp.MustCompile(`(?m)^- Cost to players: (.*)$`).FindStringSubmatch(a.review)
		switch {
		case m == nil:
			return "no cost line"
		case !a.host.Restart && !strings.HasPrefix(m[1], "none:"):
			return "a window without a switch costs: " + m[1]
		case a.host.Switch == plans.SwitchRestart && !strings.Contains(m[1], "every lobby and player"):
			return "a plain restart does not say it cuts every player: " + m[1]
		case (a.host.Switch == plans.SwitchHandoff || a.host.Switch == plans.SwitchFDStore) && (!strings.HasPrefix(m[1], "none measured") || strings.Contains(m[1], "every lobby")):
			return "a switch that keeps the socket: " + m[1]
		}
		return ""
	}},
}

var receiptRules = []rule{
	{"a value not read is not read, never 0", func(a artifacts) string {
		for _, bad := range []string{" 0 after", "pid 0 ", "rb 0 "} {
			if strings.Contains(a.receipt, bad) {
				return fmt.Sprintf("%q in the receipt", bad)
			}
		}
		h := a.json["hosts"].([]any)[0].(map[string]any)
		_, before := h["drops_before"]
		_, after := h["drops_after"]
		if rb, ok := h["rb_after"]; ok && (!after || rb == 0.0) || !after && strings.Contains(a.receipt, "- Read-back:") && !strings.Contains(a.receipt, "not read after") {
			return fmt.Sprintf("rb_after %v with the host read after: %v", rb, after)
		}
		if _, ok := h["rb_before"]; ok && !before {
			return "rb_before of a host not read"
		}
		return ""
	}},
	{"a host left as it was reads back as it was", func(a artifacts) string {
		r := rollout.Receipt(a.plan, a.rep.Hosts[0])
		if r.State != rollout.StateAsWas || r.DropsAfter == nil {
			return ""
		}
		if r.RBAfter != r.RBBefore || r.ReleaseAfter != r.ReleaseBefore {
			return fmt.Sprintf("as it was, but rb %d → %d, release %q → %q", r.RBBefore, r.RBAfter, r.ReleaseBefore, r.ReleaseAfter)
		}
		return ""
	}},
	{"a drift line compares like with like", func(a artifacts) string {
		for _, m := range regexp.MustCompile("(?m)^- Drifted: (.*): planned `(.*)`, now `(.*)`$").FindAllStringSubmatch(a.receipt, -1) {
			if m[2] == m[3] || strings.HasPrefix(m[1], "release current") && (!strings.HasPrefix(m[2], "/") && m[2] != "(none)" || !strings.HasPrefix(m[3], "/") && m[3] != "(none)") {
				return "drift " + m[0]
			}
		}
		return ""
	}},
	{"the restarts counted are the switches made", func(a artifacts) string {
		r := a.rep.Hosts[0]
		want := 0
		if kinds := stepKinds(a.host); kinds[rollout.KindRestart] && rollout.Receipt(a.plan, r).DropsAfter != nil {
			want = 1
			if r.Outcome == rollout.RolledBack {
				want = 2
			}
		}
		if r.Outcome == rollout.Refused || r.Outcome == rollout.Unreachable {
			want = 0
		}
		if r.Restarts != want {
			return fmt.Sprintf("%d restarts, want %d", r.Restarts, want)
		}
		return ""
	}},
	{"the receipt names the run, who ran it, with what, and the key each host accepted", func(a artifacts) string {
		ri := a.rep.RunInfo
		for _, s := range []string{ri.ID, "by alice on laptop", "relayctl v9 (commit abc)"} {
			if !strings.Contains(a.receipt, s) {
				return "no " + s
			}
		}
		if a.json["run_id"] != ri.ID || a.json["kind"] != "apply" {
			return fmt.Sprintf("JSON run %v %v", a.json["run_id"], a.json["kind"])
		}
		reached := a.rep.Hosts[0].Outcome != rollout.Unreachable
		if strings.Contains(a.receipt, "with key `ssh-ed25519 SHA256:user`; host key `ssh-ed25519 SHA256:host`") != reached {
			return fmt.Sprintf("the key line, reached %v", reached)
		}
		return ""
	}},
}

func stepKinds(h *plans.HostPlan) map[string]bool {
	k := map[string]bool{}
	for _, s := range h.Steps {
		k[s.Kind] = true
	}
	return k
}

func TestReviewsAndReceiptsAreTrue(t *testing.T) {
	for _, k := range artifactKinds {
		t.Run(k.name, func(t *testing.T) {
			a := makeArtifacts(t, k)
			for _, r := range reviewRules {
				if why := r.check(a); why != "" {
					t.Errorf("review: %s: %s\n%s", r.name, why, a.review)
				}
			}
			for _, r := range receiptRules {
				if why := r.check(a); why != "" {
					t.Errorf("receipt: %s: %s\n%s", r.name, why, a.receipt)
				}
			}
		})
	}
}
