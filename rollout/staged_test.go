package rollout_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/relayctl/relayctl/plans"
	"github.com/relayctl/relayctl/relay/capability"
	"github.com/relayctl/relayctl/rollout"
	"github.com/relayctl/relayctl/rollout/rollouttest"
)

// planFor makes a plan of spec (fakeSpec's hosts and service) for sims as
// they are now.
func planFor(t *testing.T, sims []*rollouttest.Sim, release, extra string) *plans.Plan {
	t.Helper()
	var names []string
	var facts []*plans.Facts
	for _, s := range sims {
		names = append(names, s.Name)
		facts = append(facts, s.Facts())
	}
	src := strings.Replace(fakeSpec, "release: {version: 1.8.0, artifact: relayd}", release, 1)
	spec, err := plans.ParseSpec("fake.yaml", []byte(fmt.Sprintf(src, strings.Join(names, ", "), extra)))
	if err != nil {
		t.Fatal(err)
	}
	p, err := plans.Make(plans.Input{Spec: spec, Facts: facts, Artifact: plans.Artifact{SHA256: artifactSHA, Size: 3, VersionFrom: capability.FromNone}, Steps: rollout.Steps})
	if err != nil {
		t.Fatal(err)
	}
	return reload(t, p)
}

func stage(t *testing.T, d rollout.HostDialer, p *plans.Plan, o rollout.ApplyOptions) *rollout.Report {
	t.Helper()
	o.Artifact, o.VerifyTimeout = artifact, 300*time.Millisecond
	rep, err := rollout.Stage(context.Background(), d, checked(t, p), o)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// Staging ahead changes nothing in force and uploads the release, config
// and drop-in once; a second staging sends nothing; the apply after it
// finds the staged release (drift toward the plan, its sha256 checked on
// the host) and files, uploads nothing, and restarts once.
func TestStageThenApply(t *testing.T) {
	d, p, sims := fleet(t, 2, "window: {not_before: 2026-12-02T04:00:00Z, not_after: 2026-12-02T05:00:00Z}\n")
	s := sims[0]
	pid, link := s.PID, s.Link
	rep := stage(t, d, p, rollout.ApplyOptions{Parallel: 2}) // outside the window: staging is before it
	if got := outcomes(rep); got != "h1=staged h2=staged" || !rep.Succeeded() {
		t.Fatalf("stage: %s (%s)", got, rep.Hosts[0].Reason)
	}
	h := rep.Hosts[0]
	if s.PID != pid || s.Link != link || s.Restarts != 0 || s.Sysctls["net.core.rmem_max"] != "212992" || !s.Releases["1.8.0"] {
		t.Errorf("stage changed what is in force: pid %d→%d, link %s, restarts %d, rmem_max %s; release placed %v", pid, s.PID, s.Link, s.Restarts, s.Sysctls["net.core.rmem_max"], s.Releases["1.8.0"])
	}
	if h.BytesUploaded != int64(s.Uploaded) || s.Uploaded <= len(artifact) || h.State != rollout.StateAsWas {
		t.Errorf("stage uploaded %d bytes by its count, %d by the host's; state %q", h.BytesUploaded, s.Uploaded, h.State)
	}
	for _, o := range s.Ops {
		switch o.Kind {
		case "backup", "backup-link", "sysctl", "rename", "link", "restart":
			t.Errorf("stage sent %s", o.Kind)
		}
	}

	uploaded := s.Uploaded
	rep = stage(t, d, p, rollout.ApplyOptions{Parallel: 2})
	if h := rep.Hosts[0]; h.Outcome != rollout.Staged || h.BytesUploaded != 0 || s.Uploaded != uploaded {
		t.Errorf("second stage: %s, %d bytes by its count, host received %d more", h.Outcome, h.BytesUploaded, s.Uploaded-uploaded)
	}
	if len(rep.Hosts[0].TowardPlan) != 1 || rep.Hosts[0].TowardPlan[0].Name != "releases installed" {
		t.Errorf("second stage: toward plan %+v", rep.Hosts[0].TowardPlan)
	}

	rep = applyWith(t, context.Background(), d, p, rollout.ApplyOptions{Parallel: 2, IgnoreWindow: true})
	if got := outcomes(rep); got != "h1=applied h2=applied" {
		t.Fatalf("apply after stage: %s (%s)", got, rep.Hosts[0].Reason)
	}
	h = rep.Hosts[0]
	if h.BytesUploaded != 0 || s.Uploaded != uploaded || s.Restarts != 1 {
		t.Errorf("apply after stage: %d bytes by its count, the host got %d more, %d restarts", h.BytesUploaded, s.Uploaded-uploaded, s.Restarts)
	}
	if len(h.TowardPlan) != 1 || h.TowardPlan[0].Name != "releases installed" || h.TowardPlan[0].Observed != "1.7.0 1.8.0" {
		t.Errorf("toward plan: %+v", h.TowardPlan)
	}
	var kinds []string
	for _, st := range h.Steps {
		kinds = append(kinds, st.Kind)
	}
	if !strings.Contains(strings.Join(kinds, " "), "check-folders check-release stage-file stage-file") {
		t.Errorf("apply after stage ran %v, want the staged release checked on the host", kinds)
	}
}

// Staged ahead is drift toward the plan only when the planned release is
// what appeared: another release appearing is a stale plan.
func TestStagedReleaseDriftIsNarrow(t *testing.T) {
	d, p, sims := fleet(t, 1, "")
	sims[0].Releases["1.9.0"] = true
	if rep := applyWith(t, context.Background(), d, p, rollout.ApplyOptions{}); rep.Hosts[0].Outcome != rollout.Refused || !strings.Contains(rep.Hosts[0].Reason, "stale") {
		t.Errorf("another release appeared: %s (%s), want refused as stale", rep.Hosts[0].Outcome, rep.Hosts[0].Reason)
	}
}

// The release store is keyed by content: the same bytes under another
// version are not uploaded again.
func TestSameBytesOtherVersionNotUploaded(t *testing.T) {
	d, p, sims := fleet(t, 1, "")
	if rep := applyWith(t, context.Background(), d, p, rollout.ApplyOptions{}); rep.Hosts[0].Outcome != rollout.Applied {
		t.Fatal(rep.Hosts[0].Reason)
	}
	up := sims[0].Uploaded
	p2 := planFor(t, sims, "release: {version: 1.8.1, artifact: relayd}", "")
	rep := applyWith(t, context.Background(), d, p2, rollout.ApplyOptions{})
	h := rep.Hosts[0]
	if h.Outcome != rollout.Applied || !sims[0].Releases["1.8.1"] || sims[0].Link != "/opt/relay/releases/1.8.1" {
		t.Fatalf("1.8.1: %s (%s)", h.Outcome, h.Reason)
	}
	if h.BytesUploaded != 0 || sims[0].Uploaded != up {
		t.Errorf("the same bytes as 1.8.0 were uploaded again: %d bytes", sims[0].Uploaded-up)
	}
}

// A release with a url is fetched by the host itself and checked there;
// a wrong sha256 or a failed fetch refuses the host with nothing changed.
func TestFetchRelease(t *testing.T) {
	url := "release: {version: 1.8.0, url: \"http://127.0.0.1:8080/relayd-1.8.0\", sha256: " + artifactSHA + "}"
	tests := []struct {
		name  string
		fetch func(string) ([]byte, error)
		want  rollout.Outcome
		why   string
	}{
		{"good", func(u string) ([]byte, error) { return artifact, nil }, rollout.Applied, ""},
		{"wrong bytes", func(u string) ([]byte, error) { return []byte("abd"), nil }, rollout.Refused,
			"stage: fetch release: the file fetched from http://127.0.0.1:8080/relayd-1.8.0 has sha256 a52d159f262b2c6ddb724a61840befc36eb30c88877a4030b65cbe86298449c9, want " + artifactSHA + " (nothing was written)"},
		{"404", func(u string) ([]byte, error) { return nil, errors.New("The requested URL returned error: 404") }, rollout.Refused,
			"stage: fetch release: fetch http://127.0.0.1:8080/relayd-1.8.0: The requested URL returned error: 404 (nothing was written)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sims := []*rollouttest.Sim{rollouttest.NewSim("h1")}
			d := rollouttest.Dialer{"h1": sims[0]}
			p := planFor(t, sims, url, "")
			if p.Relay.URL == "" {
				t.Fatal("the plan lost the url")
			}
			sims[0].Fetch = tt.fetch
			rep, err := rollout.Apply(context.Background(), d, checked(t, p), rollout.ApplyOptions{VerifyTimeout: 300 * time.Millisecond}) // no artifact: the host fetches
			if err != nil {
				t.Fatal(err)
			}
			h := rep.Hosts[0]
			if h.Outcome != tt.want || (tt.why != "" && h.Reason != tt.why) {
				t.Errorf("got %s (%s), want %s (%s)", h.Outcome, h.Reason, tt.want, tt.why)
			}
			for _, o := range sims[0].Ops {
				if o.Kind == "keep" && strings.Contains(o.Args[0], "/.sha256/") {
					t.Errorf("relayctl uploaded the release: %v", o.Args)
				}
			}
			if tt.want == rollout.Applied && sims[0].Fetched != len(artifact) {
				t.Errorf("the host fetched %d bytes", sims[0].Fetched)
			}
			if tt.want == rollout.Refused && (sims[0].Releases["1.8.0"] || sims[0].Restarts != 0 || sims[0].Link != "/opt/relay/releases/1.7.0") {
				t.Errorf("a refused fetch changed the host: %+v", sims[0].Releases)
			}
		})
	}
}
