package main

// Fleets against the lab: waves in order with the plan's
// counts, each failure-budget edge, the ledger and --resume (after a
// failure, after SIGINT, refusing another plan's ledger), staging ahead
// (twice uploads once, the apply after it uploads nothing), and releases
// the hosts fetch themselves from an HTTP server the test starts.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/relayctl/relayctl/internal/kerneltest"
	"github.com/relayctl/relayctl/internal/lab"
	"github.com/relayctl/relayctl/rollout"
	"github.com/relayctl/relayctl/uplink"
)

// specFor writes a spec for some of the lab's hosts, the lab spec's other
// lines unchanged, with extra appended (a rollout section), and returns
// its path and the plan's path beside it.
func (e *labEnv) specFor(name string, hosts []*lab.Host, extra string) (string, string) {
	e.t.Helper()
	src, err := os.ReadFile(e.spec)
	if err != nil {
		e.t.Fatal(err)
	}
	re := regexp.MustCompile(`(?s)hosts:\n(  - [^\n]+\n)+`)
	var list strings.Builder
	list.WriteString("hosts:\n")
	for _, h := range hosts {
		list.WriteString("  - " + h.Name + "\n")
	}
	spec := re.ReplaceAllLiteralString(string(src), list.String())
	spec = strings.Replace(spec, "name: lab-rcvbuf", "name: "+name, 1) + extra
	file := filepath.Join(e.dir, name+".yaml")
	if err := os.WriteFile(file, []byte(spec), 0o644); err != nil {
		e.t.Fatal(err)
	}
	return file, filepath.Join(e.dir, name+".plan")
}

func (e *labEnv) mustPlan(spec, plan string) {
	e.t.Helper()
	if code, out, errs := e.relayctl("plan", spec, "--out", plan, "--detailed-exitcode"); code != 2 {
		e.t.Fatalf("plan %s: exit %d\n%s\n%s", spec, code, out, errs)
	}
}

func readReceipt(t *testing.T, file string) rollout.FleetReceipt {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var r rollout.FleetReceipt
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return r
}

func readLedger(t *testing.T, plan string) rollout.Ledger {
	t.Helper()
	b, err := os.ReadFile(plan + ".ledger.json")
	if err != nil {
		t.Fatal(err)
	}
	var l rollout.Ledger
	if err := json.Unmarshal(b, &l); err != nil {
		t.Fatal(err)
	}
	return l
}

func receiptOutcomes(r rollout.FleetReceipt) string {
	var s []string
	for _, h := range r.Hosts {
		s = append(s, h.Host+"="+string(h.Outcome))
	}
	return strings.Join(s, " ")
}

func ledgerLine(l rollout.Ledger) string {
	var s []string
	for _, h := range l.Hosts {
		s = append(s, h.Host+"="+h.Outcome)
	}
	return strings.Join(s, " ")
}

// plant makes a host refuse the next apply: a symlink where relayctl
// stages the relay config (check-folders refuses it, nothing is written).
func plant(t *testing.T, h *lab.Host) {
	t.Helper()
	if out, err := h.Exec(context.Background(), "sh", "-c", "ln -sfn /opt/relay/victim /etc/relay/relayd.env.relayctl-new"); err != nil {
		t.Fatalf("%s: %v %s", h.Name, err, out)
	}
}

func unplant(t *testing.T, h *lab.Host) {
	t.Helper()
	if out, err := h.Exec(context.Background(), "rm", "-f", "/etc/relay/relayd.env.relayctl-new"); err != nil {
		t.Fatalf("%s: %v %s", h.Name, err, out)
	}
}

// unreachable points the lab's ssh_config entry of h at a closed port, so
// dialling it is refused; the returned func puts it back.
func (e *labEnv) unreachable(h *lab.Host) func() {
	e.t.Helper()
	orig, err := os.ReadFile(e.lab.SSHConfig)
	if err != nil {
		e.t.Fatal(err)
	}
	block := fmt.Sprintf("Host %s\n  HostName %s\n  Port %d\n", h.Name, h.HostName, h.Port)
	if !strings.Contains(string(orig), block) {
		e.t.Fatalf("no entry for %s in the lab's ssh_config", h.Name)
	}
	moved := strings.Replace(string(orig), block, fmt.Sprintf("Host %s\n  HostName %s\n  Port 1\n", h.Name, h.HostName), 1)
	os.WriteFile(e.lab.SSHConfig, []byte(moved), 0o644)
	return func() { os.WriteFile(e.lab.SSHConfig, orig, 0o644) }
}

// hostJournal is the filed journal of the apply of plan on h: the time
// its run began and ended on the machine's clock (all lab hosts share it).
func hostJournal(t *testing.T, h *lab.Host, plan string) (begin, end time.Time) {
	t.Helper()
	out, err := h.Exec(context.Background(), "sh", "-c", "cat /var/lib/relayctl/receipts/*-"+plan+"-*.journal")
	if err != nil {
		t.Fatalf("%s: %v", h.Name, err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	parse := func(l string) time.Time {
		ts, err := time.Parse(time.RFC3339Nano, strings.Fields(l)[0])
		if err != nil {
			t.Fatalf("%s: journal line %q: %v", h.Name, l, err)
		}
		return ts
	}
	return parse(lines[0]), parse(lines[len(lines)-1])
}

// Waves run in the plan's order and counts: the review shows them, the
// receipt records them, and on the hosts' own clock every host of a wave
// began after every host of the wave before had ended.
func TestLabFleetWavesInOrder(t *testing.T) {
	e := startLab(t, make([]lab.HostOptions, 5), nil)
	spec, plan := e.specFor("waves", e.lab.Hosts, "rollout:\n  waves: [1, 2, 100%]\n")
	e.mustPlan(spec, plan)
	md, _ := os.ReadFile(plan + ".md")
	for _, want := range []string{"waves 1, 2, 100% (from the spec) → 1 + 2 + 2 host(s)", "  - wave 2: 2 host(s), lab-2 … lab-3\n"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("review lacks %q:\n%s", want, md)
		}
	}
	code, out, errs := e.relayctl("apply", plan, "--parallel", "2")
	if code != 0 {
		t.Fatalf("apply: exit %d\n%s\n%s", code, out, errs)
	}
	if !strings.Contains(errs, "5 host(s) in 3 wave(s) of 1 + 2 + 2 (waves 1, 2, 100%, the plan's rollout)") {
		t.Errorf("apply did not say its waves:\n%s", errs)
	}
	r := readReceipt(t, plan+".receipt.json")
	var waves []string
	for _, w := range r.Waves {
		waves = append(waves, strings.Join(w.Hosts, ","))
	}
	if got, want := strings.Join(waves, " | "), "lab-1 | lab-2,lab-3 | lab-4,lab-5"; got != want {
		t.Errorf("waves: got %s, want %s", got, want)
	}
	wave := map[string]int{}
	begin, end := map[string]time.Time{}, map[string]time.Time{}
	for _, h := range e.lab.Hosts {
		begin[h.Name], end[h.Name] = hostJournal(t, h, "waves")
	}
	for _, w := range r.Waves {
		for _, h := range w.Hosts {
			wave[h] = w.Wave
		}
	}
	for a := range wave {
		for b := range wave {
			if wave[b] == wave[a]+1 && !begin[b].After(end[a]) {
				t.Errorf("%s (wave %d) began %s, before %s (wave %d) ended %s", b, wave[b], begin[b].Format(time.RFC3339Nano), a, wave[a], end[a].Format(time.RFC3339Nano))
			}
		}
	}
	for _, h := range e.lab.Hosts {
		if _, rb, _ := e.socket(h); rb != 8388608 {
			t.Errorf("%s: rb %d", h.Name, rb)
		}
	}
}

// Each budget edge on real hosts, a refused host (a planted symlink) and
// an unreachable one (a closed port) standing for failures: exactly at a
// budget goes on, over it stops the wave and every later one, and a wave
// where nothing applied stops at any budget.
func TestLabFleetFailureBudgets(t *testing.T) {
	e := startLab(t, make([]lab.HostOptions, 15), nil)
	hs := e.lab.Hosts
	tests := []struct {
		name    string
		hosts   []*lab.Host
		args    []string
		fault   func() func()
		want    string
		stopped string
	}{
		{"at both budgets", hs[0:5], []string{"--waves", "1,2,100%", "--max-failures", "1", "--max-unreachable", "1"},
			func() func() { plant(t, hs[1]); return e.unreachable(hs[3]) },
			"lab-1=applied lab-2=refused lab-3=applied lab-4=unreachable lab-5=applied", ""},
		{"over the budget", hs[5:10], []string{"--waves", "1,3,100%", "--max-failures", "1", "--parallel", "1"},
			func() func() { plant(t, hs[6]); plant(t, hs[7]); return func() {} },
			"lab-6=applied lab-7=refused lab-8=refused lab-9=not started lab-10=not started",
			"stopped: wave 2: 2 of its 3 hosts failed, rolled back or were refused, over its budget of 1 (max failures 1)"},
		{"a whole wave failing", hs[10:15], []string{"--waves", "1,2,100%", "--max-failures", "100%"},
			func() func() { plant(t, hs[11]); plant(t, hs[12]); return func() {} },
			"lab-11=applied lab-12=refused lab-13=refused lab-14=not started lab-15=not started",
			"stopped: wave 2: none of its 2 hosts applied (2 failed, rolled back or refused; 0 unreachable)"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec, plan := e.specFor(fmt.Sprintf("budget-%d", i), tt.hosts, "")
			e.mustPlan(spec, plan)
			restore := tt.fault()
			code, out, errs := e.relayctl(append([]string{"apply", plan}, tt.args...)...)
			restore()
			t.Logf("apply %v: exit %d\nstdout:\n%s\nstderr:\n%s", tt.args, code, out, errs)
			if code != 1 {
				t.Errorf("apply: exit %d, want 1 (not every host applied)", code)
			}
			r := readReceipt(t, plan+".receipt.json")
			if got := receiptOutcomes(r); got != tt.want {
				t.Errorf("outcomes:\n got %s\nwant %s\nstdout:\n%s\nstderr:\n%s", got, tt.want, out, errs)
			}
			if tt.stopped != "" && !strings.Contains(out, tt.stopped) || tt.stopped == "" && strings.Contains(out, "stopped:") {
				t.Errorf("stdout:\n%s\nwant %q", out, tt.stopped)
			}
			if l := readLedger(t, plan); ledgerLine(l) != tt.want {
				t.Errorf("ledger: %s", ledgerLine(l))
			}
			for _, h := range r.Hosts {
				if h.Outcome == rollout.NotStarted {
					var lh *lab.Host
					for _, x := range tt.hosts {
						if x.Name == h.Host {
							lh = x
						}
					}
					if _, rb, _ := e.socket(lh); rb != 212992 {
						t.Errorf("%s not started but its rb is %d", h.Host, rb)
					}
				}
			}
		})
	}
}

// After a failure stops the fleet, the ledger names every host, the ones
// never started included; --resume goes on with exactly those and never
// touches an applied host again; a ledger of another plan is refused.
func TestLabFleetResumeAfterFailure(t *testing.T) {
	e := startLab(t, make([]lab.HostOptions, 4), nil)
	hs := e.lab.Hosts
	e.mustPlan(e.spec, e.plan)
	plant(t, hs[1])
	code, out, errs := e.relayctl("apply", e.plan, "--parallel", "1")
	if code != 1 || !strings.Contains(errs, "lab-2: fix on the host what each reason names (a folder's owner, a host key, a full disk), then relayctl apply "+e.plan+" --resume") ||
		!strings.Contains(errs, "relayctl apply "+e.plan+" --resume goes on with 2 host(s) as they are (lab-3 lab-4)") {
		t.Fatalf("apply: exit %d, want 1 and the resume hint\n%s\n%s", code, out, errs)
	}
	l := readLedger(t, e.plan)
	if got := ledgerLine(l); got != "lab-1=applied lab-2=refused lab-3=not started lab-4=not started" {
		t.Fatalf("ledger: %s", got)
	}
	if !strings.Contains(l.Hosts[3].Reason, "the rollout stopped before this host started: wave 2: 1 of its 3 hosts") {
		t.Errorf("ledger reason of a host never started: %q", l.Hosts[3].Reason)
	}
	pid, _, _ := e.socket(hs[0])
	receipts := func(h *lab.Host) string {
		out, _ := h.Exec(context.Background(), "ls", "/var/lib/relayctl/receipts")
		return string(out)
	}
	before := receipts(hs[0])

	unplant(t, hs[1])
	code, out, errs = e.relayctl("apply", e.plan, "--resume")
	if code != 0 {
		t.Fatalf("resume: exit %d\n%s\n%s", code, out, errs)
	}
	if !strings.Contains(errs, "resuming "+e.plan+".ledger.json (run 2): 3 of 4 host(s) not applied or unchanged; the 1 others are checked") {
		t.Errorf("resume did not say what it resumes:\n%s", errs)
	}
	if p2, _, _ := e.socket(hs[0]); p2 != pid || receipts(hs[0]) != before {
		t.Errorf("lab-1 was touched again: pid %d → %d, receipts %q → %q", pid, p2, before, receipts(hs[0]))
	}
	r := readReceipt(t, e.plan+".receipt.json")
	if r.Hosts[0].FromLedger != "applied in run 1" || r.Run != 2 {
		t.Errorf("receipt: lab-1 from ledger %q, run %d", r.Hosts[0].FromLedger, r.Run)
	}
	if got := ledgerLine(readLedger(t, e.plan)); got != "lab-1=applied lab-2=applied lab-3=applied lab-4=applied" {
		t.Errorf("ledger after resume: %s", got)
	}
	for _, h := range hs {
		if _, rb, _ := e.socket(h); rb != 8388608 {
			t.Errorf("%s: rb %d", h.Name, rb)
		}
	}

	// Another plan (made now, every host as planned: another checksum)
	// refuses the first plan's ledger before it connects.
	other := filepath.Join(e.dir, "other.plan")
	if code, out, errs := e.relayctl("plan", e.spec, "--out", other, "--detailed-exitcode"); code != 0 {
		t.Fatalf("plan again: exit %d\n%s\n%s", code, out, errs)
	}
	ledger, _ := os.ReadFile(e.plan + ".ledger.json")
	os.WriteFile(other+".ledger.json", ledger, 0o600)
	code, _, errs = e.relayctl("apply", other, "--resume")
	if code != 1 || !strings.Contains(errs, "the ledger belongs to another plan: it was written for plan lab-rcvbuf with checksum "+l.Checksum) {
		t.Errorf("resume with another plan's ledger: exit %d\n%s", code, errs)
	}
	if receipts(hs[0]) != before {
		t.Error("a host was touched")
	}
}

// SIGINT while the canary is in its window: it finishes, the rest never
// start, the ledger says so; --resume applies the rest and leaves the
// canary alone.
func TestLabFleetResumeAfterSIGINT(t *testing.T) {
	bin := buildRelayctl(t)
	e := startLab(t, make([]lab.HostOptions, 3), slowStop)
	e.mustPlan(e.spec, e.plan)
	cmd := exec.Command(bin, "apply", e.plan, "--parallel", "2",
		"--ssh-config", e.lab.SSHConfig, "--known-hosts", e.lab.KnownHosts, "--identity", e.lab.Identity)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitJournal(t, e.lab.Hosts[0], "start restart")
	cmd.Process.Signal(syscall.SIGINT)
	if err := cmd.Wait(); err == nil {
		t.Errorf("interrupted apply exited 0")
	}
	l := readLedger(t, e.plan)
	if got := ledgerLine(l); got != "lab-1=applied lab-2=not started lab-3=not started" || !strings.Contains(l.Hosts[1].Reason, "interrupted") {
		t.Fatalf("ledger after SIGINT: %s (%q)\nstdout:\n%s\nstderr:\n%s", got, l.Hosts[1].Reason, out.String(), errb.String())
	}
	pid, _, _ := e.socket(e.lab.Hosts[0])
	code, o2, errs := e.relayctl("apply", e.plan, "--resume")
	if code != 0 || !strings.Contains(o2, "applied:       3") {
		t.Fatalf("resume: exit %d\n%s\n%s", code, o2, errs)
	}
	if p2, _, _ := e.socket(e.lab.Hosts[0]); p2 != pid {
		t.Errorf("the canary was restarted again: pid %d → %d", pid, p2)
	}
	for _, h := range e.lab.Hosts[1:] {
		if _, rb, _ := e.socket(h); rb != 8388608 {
			t.Errorf("%s: rb %d after resume", h.Name, rb)
		}
	}
}

// Staging ahead, outside the window: nothing in force changes, the
// release, config and drop-in arrive once (bytes counted by relayctl as it
// sends them), a second stage sends nothing, and the apply in the window
// finds them, checks them and sends nothing.
func TestLabStageAheadUploadsOnce(t *testing.T) {
	e := startLab(t, make([]lab.HostOptions, 2), func(s string) string {
		return s + "window:\n  not_before: 2030-01-01T04:00:00Z\n  not_after: 2030-01-01T05:00:00Z\n"
	})
	release, err := os.ReadFile(lab.BuildRelayd(t, "1.8.0"))
	if err != nil {
		t.Fatal(err)
	}
	e.mustPlan(e.spec, e.plan)
	type state struct {
		pid  int
		rb   uint64
		link string
		cfg  string
	}
	look := func(h *lab.Host) state {
		pid, rb, _ := e.socket(h)
		link, _ := h.Exec(context.Background(), "readlink", "/opt/relay/current")
		cfg, _ := h.Exec(context.Background(), "cat", "/etc/relay/relayd.env")
		return state{pid, rb, string(link), string(cfg)}
	}
	before := map[string]state{}
	for _, h := range e.lab.Hosts {
		before[h.Name] = look(h)
	}

	code, out, errs := e.relayctl("stage", e.plan)
	if code != 0 || !strings.Contains(out, "staged:        2") {
		t.Fatalf("stage: exit %d\n%s\n%s", code, out, errs)
	}
	r := readReceipt(t, e.plan+".stage.json")
	for _, h := range r.Hosts {
		// The lab's hosts have zstd: the release goes compressed (package uplink).
		u := h.Upload
		if h.Outcome != rollout.Staged || u == nil || u.Form != uplink.Zstd || u.Size != int64(len(release)) || u.Bytes*100 > u.Size*45 ||
			h.BytesUploaded <= u.Bytes || h.BytesUploaded > u.Bytes+4096 {
			t.Errorf("%s: %s with %d bytes uploaded (%+v); want staged with the release zstd-compressed (of %d bytes), config and drop-in", h.Host, h.Outcome, h.BytesUploaded, u, len(release))
		}
	}
	for _, h := range e.lab.Hosts {
		if now := look(h); now != before[h.Name] {
			t.Errorf("%s: stage changed what is in force: %+v → %+v", h.Name, before[h.Name], now)
		}
		if out, err := h.Exec(context.Background(), "sh", "-c", "sha256sum /opt/relay/releases/1.8.0/relayd /opt/relay/releases/.sha256/*/relayd; ls /etc/relay/relayd.env.relayctl-new /etc/sysctl.d/90-relayctl.conf.relayctl-new"); err != nil {
			t.Errorf("%s: staged files: %v %s", h.Name, err, out)
		}
	}
	if got := kerneltest.Read(t, "net.core.rmem_max"); got != incidentRmem {
		t.Errorf("stage changed rmem_max to %s", got)
	}

	code, out, errs = e.relayctl("stage", e.plan)
	if code != 0 || !strings.Contains(out, "uploaded: 0 bytes in all") {
		t.Errorf("second stage: exit %d, want nothing uploaded\n%s\n%s", code, out, errs)
	}

	code, out, errs = e.relayctl("apply", e.plan, "--ignore-window")
	if code != 0 {
		t.Fatalf("apply after stage: exit %d\n%s\n%s", code, out, errs)
	}
	r = readReceipt(t, e.plan+".receipt.json")
	for _, h := range r.Hosts {
		if h.Outcome != rollout.Applied || h.BytesUploaded != 0 {
			t.Errorf("%s: %s with %d bytes uploaded; want applied with none", h.Host, h.Outcome, h.BytesUploaded)
		}
		var toward []string
		for _, d := range h.TowardPlan {
			toward = append(toward, d.Name)
		}
		if !strings.Contains(strings.Join(toward, ","), "releases installed") {
			t.Errorf("%s: toward the plan %v, want the staged release", h.Host, toward)
		}
		var kinds []string
		for _, s := range h.Steps {
			kinds = append(kinds, s.Kind)
		}
		if strings.Contains(strings.Join(kinds, " "), rollout.KindPlaceRelease) || !strings.Contains(strings.Join(kinds, " "), rollout.KindCheckRelease) {
			t.Errorf("%s: steps %v; want the staged release checked, not placed", h.Host, kinds)
		}
	}
	md, _ := os.ReadFile(e.plan + ".receipt.md")
	if !strings.Contains(string(md), "- Toward the plan already: releases installed: planned `1.7.0`, now `1.7.0 1.8.0`") {
		t.Errorf("the receipt does not show the staged release:\n%s", md)
	}
	for _, h := range e.lab.Hosts {
		if _, rb, _ := e.socket(h); rb != 8388608 {
			t.Errorf("%s: rb %d after apply", h.Name, rb)
		}
	}
}

// A release the hosts fetch from a url, served by an HTTP server this test
// starts on a loopback address the lab hosts reach: fetched and checked on
// the host with nothing uploaded; a wrong sha256, a 404 and a timeout each
// refuse the host with nothing changed.
func TestLabURLRelease(t *testing.T) {
	bin := lab.BuildRelayd(t, "1.8.0")
	release, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(release)
	sha := hex.EncodeToString(sum[:])
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/relayd-1.8.0":
			w.Write(release)
		case "/slow":
			select {
			case <-time.After(10 * time.Second):
			case <-r.Context().Done():
			}
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()

	e := startLab(t, make([]lab.HostOptions, 4), nil)
	withURL := func(name string, h *lab.Host, url, sha string) (string, string) {
		spec, plan := e.specFor(name, []*lab.Host{h}, "")
		src, _ := os.ReadFile(spec)
		re := regexp.MustCompile(`    artifact: [^\n]+\n`)
		out := re.ReplaceAllLiteralString(string(src), "    url: "+url+"\n    sha256: "+sha+"\n")
		os.WriteFile(spec, []byte(out), 0o644)
		return spec, plan
	}
	other := strings.Repeat("ab", 32)
	tests := []struct {
		name, url, sha string
		args           []string
		want           string // in the host's line; "" for applied
	}{
		{"bad-sha", srv.URL + "/relayd-1.8.0", other, nil,
			"refused (as it was): stage: fetch release: the file fetched from " + srv.URL + "/relayd-1.8.0 has sha256 " + sha + ", want " + other + " (nothing was written)"},
		{"not-found", srv.URL + "/missing", sha, nil,
			"refused (as it was): stage: fetch release: fetch " + srv.URL + "/missing: the requested URL returned error: 404 (nothing was written)"},
		{"timeout", srv.URL + "/slow", sha, []string{"--fetch-timeout", "2s"},
			"refused (as it was): stage: fetch release: fetch " + srv.URL + "/slow: timed out after "},
		{"good", srv.URL + "/relayd-1.8.0", sha, nil, ""},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := e.lab.Hosts[i]
			spec, plan := withURL("url-"+tt.name, h, tt.url, tt.sha)
			e.mustPlan(spec, plan)
			md, _ := os.ReadFile(plan + ".md")
			if !strings.Contains(string(md), "fetched by each host from `"+tt.url+"`") {
				t.Errorf("the review does not name the url:\n%s", md)
			}
			pid, rb, _ := e.socket(h)
			code, out, errs := e.relayctl(append([]string{"apply", plan}, tt.args...)...)
			r := readReceipt(t, plan+".receipt.json")
			if tt.want == "" {
				if code != 0 || r.Hosts[0].BytesUploaded > 4096 {
					t.Errorf("apply: exit %d, %d bytes uploaded; want applied with no release upload\n%s\n%s", code, r.Hosts[0].BytesUploaded, out, errs)
				}
				if _, rb, _ := e.socket(h); rb != 8388608 {
					t.Errorf("rb %d", rb)
				}
				return
			}
			if code != 1 || !strings.Contains(out, h.Name+": "+tt.want) {
				t.Errorf("apply: exit %d\nstdout:\n%s\nwant %q\nstderr:\n%s", code, out, tt.want, errs)
			}
			if p2, rb2, _ := e.socket(h); p2 != pid || rb2 != rb {
				t.Errorf("the relay changed: pid %d → %d, rb %d → %d", pid, p2, rb, rb2)
			}
			ls, _ := h.Exec(context.Background(), "sh", "-c", "ls -A /opt/relay/releases /opt/relay/releases/.sha256/* 2>/dev/null")
			if strings.Contains(string(ls), "1.8.0") || strings.Contains(string(ls), "relayd") || strings.Contains(string(ls), ".relayctl") {
				t.Errorf("something was written: %s", ls)
			}
		})
	}
	// Every lab host's curl really went to the server: the good one's store
	// holds exactly the served bytes.
	out, err := e.lab.Hosts[3].Exec(context.Background(), "sha256sum", "/opt/relay/releases/.sha256/"+sha+"/relayd")
	if err != nil || !strings.HasPrefix(string(out), sha) {
		t.Errorf("store: %v %s", err, out)
	}
}
