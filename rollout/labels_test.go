package rollout_test

// Rollouts by label against simulated hosts: waves per region in order,
// each with its canary; a region over its budget stops before the next;
// --only and the ledger; --resume within the selection. The same against
// lab hosts: cmd/relayctl/lab_inventory_test.go.

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

const regionSpec = `name: regions
hosts:
  inventory: hosts.ini
  pattern: relays
  labels: [region]
sysctl:
  net.core.rmem_max: 8388608
relay:
  so_rcvbuf: 4194304
  release: {version: 1.8.0, artifact: relayd}
  service:
    manager: command
    start: [/opt/relay/bin/relay-service, start]
    stop: [/opt/relay/bin/relay-service, stop]
    pid_file: /opt/relay/run/relayd.pid
rollout:
  by: region
%s`

// regionFleet makes simulated hosts in regions ("ash:3 fra:2": ash1 ash2
// ash3 fra1 fra2, interleaved in the inventory) and a plan for them.
func regionFleet(t *testing.T, regions string, extra string) (rollouttest.Dialer, *plans.Plan, plans.InventoryInput, map[string]*rollouttest.Sim) {
	t.Helper()
	var ini strings.Builder
	d, sims := rollouttest.Dialer{}, map[string]*rollouttest.Sim{}
	var names []string
	for _, rc := range strings.Fields(regions) {
		r, n, _ := strings.Cut(rc, ":")
		var k int
		fmt.Sscan(n, &k)
		fmt.Fprintf(&ini, "[%s]\n", r)
		for i := 1; i <= k; i++ {
			name := fmt.Sprintf("%s%d", r, i)
			fmt.Fprintf(&ini, "%s\n", name)
			names = append(names, name)
		}
		fmt.Fprintf(&ini, "[%s:vars]\nregion=%s\n", r, r)
	}
	ini.WriteString("[relays:children]\n")
	for _, rc := range strings.Fields(regions) {
		r, _, _ := strings.Cut(rc, ":")
		ini.WriteString(r + "\n")
	}
	in := plans.InventoryInput{Path: "hosts.ini", Data: []byte(ini.String())}
	spec, err := plans.ParseSpec("regions.yaml", []byte(fmt.Sprintf(regionSpec, extra)))
	if err != nil {
		t.Fatal(err)
	}
	if _, errs := spec.SelectHosts(in); len(errs) > 0 {
		t.Fatal(errs)
	}
	var facts []*plans.Facts
	for _, name := range names {
		s := rollouttest.NewSim(name)
		d[name], sims[name] = s, s
		facts = append(facts, s.Facts())
	}
	p, err := plans.Make(plans.Input{Spec: spec, Facts: facts, Artifact: plans.Artifact{SHA256: artifactSHA, Size: 3, VersionFrom: capability.FromNone}, Steps: rollout.Steps})
	if err != nil {
		t.Fatal(err)
	}
	return d, reload(t, p), in, sims
}

func applyFrom(t *testing.T, d rollout.HostDialer, p *plans.Plan, in plans.InventoryInput, o rollout.ApplyOptions) *rollout.Report {
	t.Helper()
	c, err := rollout.CheckPlanFrom(p, in)
	if err != nil {
		t.Fatal(err)
	}
	o.Artifact, o.VerifyTimeout = artifact, 300*time.Millisecond
	rep, err := rollout.Apply(context.Background(), d, c, o)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func waveLine(rep *rollout.Report) string {
	var s []string
	for _, w := range rep.Waves {
		s = append(s, w.Group+":"+strings.Join(w.Hosts, ","))
	}
	return strings.Join(s, " ")
}

// Region after region, each with its own canary, every host of a wave
// ending before the next wave's first starts.
func TestWavesByRegion(t *testing.T) {
	d, p, in, _ := regionFleet(t, "ash:3 fra:2 sin:2", "  order: [fra]\n")
	ev := &events{}
	rep := applyFrom(t, recordingDialer{d, ev}, p, in, rollout.ApplyOptions{Parallel: 5})
	if got, want := waveLine(rep), "region=fra:fra1 region=fra:fra2 region=ash:ash1 region=ash:ash2,ash3 region=sin:sin1 region=sin:sin2"; got != want {
		t.Errorf("waves:\n got %s\nwant %s", got, want)
	}
	if got := outcomes(rep); strings.Count(got, "=applied") != 7 {
		t.Errorf("outcomes: %s", got)
	}
	wave := map[string]int{}
	for _, w := range rep.Waves {
		for _, h := range w.Hosts {
			wave[h] = w.Wave
		}
	}
	ended := map[int]int{} // wave → hosts ended so far
	for _, e := range ev.log {
		kind, host, _ := strings.Cut(e, " ")
		w := wave[host]
		if kind == "start" && w > 1 && ended[w-1] < len(rep.Waves[w-2].Hosts) {
			t.Errorf("%s (wave %d) started before wave %d ended: %v", host, w, w-1, ev.log)
		}
		if kind == "end" {
			ended[w]++
		}
	}
	if rep.Hosts[0].Labels["region"] != "ash" {
		t.Errorf("the receipt's hosts carry their labels: %+v", rep.Hosts[0].Labels)
	}
}

// A region over its budget stops the rollout there: the next region's
// hosts are not started; a region's own budget (rollout.budgets) lets
// its failures through where the default would not.
func TestRegionOverBudgetStopsBeforeTheNext(t *testing.T) {
	d, p, in, sims := regionFleet(t, "ash:3 fra:3 sin:2", "  waves: [1, 100%]\n  budgets: {ash: {max_failures: 1}}\n")
	sims["ash3"].IgnoreRB = true // rolled back: within ash's budget of 1
	sims["fra2"].IgnoreRB = true // over fra's (the default, 0)
	rep := applyFrom(t, d, p, in, rollout.ApplyOptions{Parallel: 5})
	want := "ash1=applied ash2=applied ash3=rolled back fra1=applied fra2=rolled back fra3=applied sin1=not started sin2=not started"
	if got := outcomes(rep); got != want {
		t.Errorf("outcomes:\n got %s\nwant %s", got, want)
	}
	if !strings.Contains(rep.Stopped, "wave 4 (region=fra): 1 of its 2 hosts failed, rolled back or were refused, over its budget of 0") {
		t.Errorf("stopped: %q", rep.Stopped)
	}
	if sims["sin1"].Restarts != 0 {
		t.Errorf("sin1 restarted: the next region started")
	}
}

// --only works on one region's hosts; the ledger keeps the others' lines
// from the run before, and --resume goes on within the same selection.
func TestOnlyAndResumeWithinIt(t *testing.T) {
	d, p, in, sims := regionFleet(t, "ash:3 fra:2", "  waves: [1, 100%]\n")
	var saved []byte
	save := func(b []byte) error { saved = append([]byte(nil), b...); return nil }
	led := func() *rollout.Ledger {
		l, err := rollout.LoadLedger("x.ledger.json", saved, p)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	onlyFra, _ := plans.ParseSelector([]string{"region=fra"})
	rep := applyFrom(t, d, p, in, rollout.ApplyOptions{Parallel: 2, Only: onlyFra, SaveLedger: save})
	if got := outcomes(rep); got != "fra1=applied fra2=applied" {
		t.Errorf("--only region=fra: %s", got)
	}
	if rep.Outside != 3 || rep.Only != "region=fra" {
		t.Errorf("report: only %q, outside %d", rep.Only, rep.Outside)
	}
	if sims["ash1"].Restarts != 0 {
		t.Error("ash1 was touched")
	}

	// ash next, its second wave stopped by ash3: fra's lines are kept.
	sims["ash3"].IgnoreRB = true
	onlyAsh, _ := plans.ParseSelector([]string{"region=ash"})
	rep = applyFrom(t, d, p, in, rollout.ApplyOptions{Parallel: 1, Only: onlyAsh, Outside: led(), SaveLedger: save})
	if rep.Stopped == "" {
		t.Error("ash3 rolled back over a budget of 0, yet the rollout did not stop")
	}
	l := led()
	var line []string
	for _, h := range l.Hosts {
		line = append(line, h.Host+"="+h.Outcome)
	}
	if got, want := strings.Join(line, " "), "ash1=applied ash2=applied ash3=rolled back fra1=applied fra2=applied"; got != want {
		t.Errorf("ledger:\n got %s\nwant %s", got, want)
	}
	if l.Run != 2 || strings.Join(l.Only, " ") != "region=ash" || l.Hosts[3].Run != 1 {
		t.Errorf("ledger run %d, only %v, fra1's run %d", l.Run, l.Only, l.Hosts[3].Run)
	}

	// --resume, within ash: ash3 again after a canary of its own, fra not
	// even confirmed (it is outside the selection).
	sims["ash3"].IgnoreRB = false
	ev := &events{}
	rep = applyFrom(t, recordingDialer{d, ev}, p, in, rollout.ApplyOptions{Parallel: 1, Only: onlyAsh, Resume: led(), SaveLedger: save})
	if got := outcomes(rep); got != "ash1=applied ash2=applied ash3=applied" {
		t.Errorf("resumed: %s", got)
	}
	if log := strings.Join(ev.log, " "); strings.Contains(log, "fra") {
		t.Errorf("the resume within ash dialled fra: %s", log)
	}
	if rep.Hosts[0].FromLedger == "" || rep.Hosts[2].FromLedger != "" {
		t.Errorf("from ledger: %q %q", rep.Hosts[0].FromLedger, rep.Hosts[2].FromLedger)
	}
}

// A plan whose hosts came from an inventory is checked against it: the
// inventory as it is now must select the same hosts.
func TestCheckPlanNeedsTheInventory(t *testing.T) {
	_, p, in, _ := regionFleet(t, "ash:2", "")
	if _, err := rollout.CheckPlan(p); !errors.Is(err, plans.ErrNeedsInventory) {
		t.Errorf("CheckPlan of an inventory plan: %v", err)
	}
	in.Data = append([]byte("[ash]\nash3\n"), in.Data...)
	if _, err := rollout.CheckPlanFrom(p, in); !errors.Is(err, plans.ErrFleetChanged) {
		t.Errorf("a host added to the inventory: %v", err)
	}
}
