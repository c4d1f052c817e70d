package plans

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/relayctl/relayctl/relay/capability"
	"github.com/relayctl/relayctl/relay/config"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

const labService = `    manager: command
    start: [/opt/relay/bin/relay-service, start]
    stop: [/opt/relay/bin/relay-service, stop]
    pid_file: /opt/relay/run/relayd.pid
`

// incidentSpec is the fix from the background story, for a command-managed relay.
func incidentSpec(t *testing.T, edit func(string) string) *Spec {
	t.Helper()
	src := strings.Replace(goodSpec, "    manager: systemd\n    name: relayd\n", labService, 1)
	src = strings.Replace(src, "  - root@10.0.0.5:2222\n", "", 1)
	src = strings.Replace(src, "  net.ipv4.udp_mem: \"  764688\t1019584 1529376 \"\n", "", 1)
	if edit != nil {
		src = edit(src)
	}
	s, err := ParseSpec("plans/ashburn.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// incidentFacts is the relay host of the story: the kernel's 212,992-byte
// defaults, release 1.7.0 running without asking for a buffer, 26,498 drops.
func incidentFacts() *Facts {
	cfg := config.Default()
	cfg.Listen = "0.0.0.0:7788"
	return &Facts{
		Host: "relay-ash-1", Address: "10.0.0.4:22", User: "root", Hostname: "relay-ash-1",
		Kernel: "6.18.44", InitialNetns: true,
		Sysctls: map[string]SysctlFact{
			"net.core.rmem_max":     {Exists: true, Value: "212992", Writable: true},
			"net.core.rmem_default": {Exists: true, Value: "212992", Writable: true},
		},
		SysctlFiles: []ConfFile{
			{Path: "/etc/sysctl.d/99-sysctl.conf", Content: "#kernel.domainname = example.com\n"},
			{Path: "/usr/lib/sysctl.d/50-pid-max.conf", Content: "kernel.pid_max = 4194304\n"},
			{Path: "/etc/sysctl.conf", Content: "#kernel.domainname = example.com\n"},
		},
		Release: RelayRelease{Current: "1.7.0", CurrentRaw: "/opt/relay/releases/1.7.0", Installed: []string{"1.7.0"}, RunningExe: "/opt/relay/releases/1.7.0/relayd"},
		Config:  FileFact{Exists: true, Content: string(cfg.Render())},
		Service: ServiceFact{Running: true, PID: 4242},
		Socket:  SocketFact{Found: true, Port: 7788, Rcvbuf: 212992, Drops: 26498, ProcUDPDrops: 26498, RcvbufErrors: 26498, InErrors: 26498},
	}
}

var testArtifact = Artifact{SHA256: strings.Repeat("ab", 32), Size: 9000000, VersionFrom: capability.FromMarker}

func makePlan(t *testing.T, s *Spec, f ...*Facts) *Plan {
	t.Helper()
	p, err := Make(Input{Spec: s, Facts: f, Artifact: testArtifact, Steps: testSteps})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// testSteps stands in for rollout.Steps, which plans cannot import: one
// step for a host that changes.
func testSteps(p *Plan, h *HostPlan) []Step {
	if h.Action != ActionChange {
		return []Step{}
	}
	return []Step{{Phase: PhaseWindow, Kind: "restart", Title: "restart relay once (the test's step list; rollout.Steps gives the real ones)",
		Undo: "restart relay once more on the old release (the test's)"}}
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	file := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(file, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("read golden file (run go test ./plans -update to create it): %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the golden file; if the change is intended, run go test ./plans -update and review the diff\n--- got:\n%s", name, got)
	}
}

func TestIncidentPlan(t *testing.T) {
	p := makePlan(t, incidentSpec(t, nil), incidentFacts())
	h := p.Hosts[0]
	if h.Action != ActionChange {
		t.Fatalf("action: got %s, want change (blockers %v)", h.Action, h.Blockers)
	}
	if got, want := h.Readback.Expected, 8388608; got != want {
		t.Errorf("expected rb: got %d, want %d (2 × min(4194304, 8388608))", got, want)
	}
	if h.Release.Action != "upgrade" || !h.Restart {
		t.Errorf("release: got %+v restart=%v, want upgrade with a restart", h.Release, h.Restart)
	}
	if len(h.Warnings) != 0 {
		t.Errorf("warnings: got %q, want none", h.Warnings)
	}
	if cfg, d := h.File(RoleRelayConfig), h.File(RoleSysctlDropIn); !cfg.Change || !d.Change || d.Exists || h.Sysctls[0].Change != true {
		t.Errorf("config %+v, drop-in %+v: want both changed, the drop-in created", cfg, d)
	}
	if got := h.Sysctls[0].DecidedAtBoot; got != "/etc/sysctl.d/90-relayctl.conf:2" {
		t.Errorf("decided at boot: got %q, want our drop-in, line 2", got)
	}
	body, err := p.JSON()
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "incident.plan", body)
	golden(t, "incident.plan.md", p.Markdown("incident.plan"))
}

func TestPlanDeterministic(t *testing.T) {
	a := incidentFacts()
	b := incidentFacts()
	b.Host = "relay-ash-2"
	spec := incidentSpec(t, func(s string) string {
		return strings.Replace(s, "  - relay-ash-1\n", "  - relay-ash-1\n  - relay-ash-2\n", 1)
	})
	p1, _ := makePlan(t, spec, a, b).JSON()
	p2, _ := makePlan(t, spec, b, a).JSON()
	if !bytes.Equal(p1, p2) {
		t.Error("the same inputs in another order gave different plan bytes")
	}
	loaded, err := Load("x.plan", p1)
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	p3, _ := loaded.JSON()
	if !bytes.Equal(p1, p3) {
		t.Error("a loaded plan does not re-encode to the same bytes")
	}
}

func TestLoadRefusesEditedPlan(t *testing.T) {
	body, _ := makePlan(t, incidentSpec(t, nil), incidentFacts()).JSON()
	edited := bytes.Replace(body, []byte(`"expected_rb": 8388608`), []byte(`"expected_rb": 8388609`), 1)
	if bytes.Equal(edited, body) {
		t.Fatal("edit did not apply")
	}
	if _, err := Load("x.plan", edited); err == nil || !strings.Contains(err.Error(), "edited after review") {
		t.Errorf("got %v, want a checksum error", err)
	}
	future := bytes.Replace(body, []byte(fmt.Sprintf(`"format_version": %d`, FormatVersion)), []byte(`"format_version": 9`), 1)
	if _, err := Load("x.plan", future); err == nil || !strings.Contains(err.Error(), "format_version: 9") {
		t.Errorf("got %v, want a format error", err)
	}
}

// appliedFacts is the incident host after a successful apply.
func appliedFacts(t *testing.T, s *Spec) *Facts {
	f := incidentFacts()
	first := makePlan(t, s, f).Hosts[0]
	f.Sysctls["net.core.rmem_max"] = SysctlFact{Exists: true, Value: "8388608", Writable: true}
	f.SysctlFiles = append(f.SysctlFiles, ConfFile{Path: "/etc/sysctl.d/90-relayctl.conf", Content: first.File(RoleSysctlDropIn).Content})
	f.Release = RelayRelease{Current: "1.8.0", CurrentRaw: "/opt/relay/releases/1.8.0", Installed: []string{"1.7.0", "1.8.0"}, RunningExe: "/opt/relay/releases/1.8.0/relayd"}
	f.Config = FileFact{Exists: true, Content: first.File(RoleRelayConfig).Content}
	f.Socket.Rcvbuf = 8388608
	return f
}

func TestPlanOfAppliedHostIsEmpty(t *testing.T) {
	s := incidentSpec(t, nil)
	p := makePlan(t, s, appliedFacts(t, s))
	if h := p.Hosts[0]; h.Action != ActionNone || h.Restart || h.File(RoleSysctlDropIn).Change || h.File(RoleRelayConfig).Change {
		t.Errorf("got action %s, restart %v; want none, no restart, no file change (warnings %v)", h.Action, h.Restart, h.Warnings)
	}
	if p.Changes() {
		t.Error("Changes() is true for an applied host")
	}
}

func TestWhitespaceIsNoChange(t *testing.T) {
	s := incidentSpec(t, func(src string) string {
		return strings.Replace(src, "  net.core.rmem_max: 8388608\n", "  net.core.rmem_max: 8388608\n  net.ipv4.udp_mem: 764688 1019584 1529376\n", 1)
	})
	f := appliedFacts(t, incidentSpec(t, nil))
	f.Sysctls["net.ipv4.udp_mem"] = SysctlFact{Exists: true, Value: "764688\t1019584\t1529376", Writable: true}
	h := makePlan(t, s, f).Hosts[0]
	for _, c := range h.Sysctls {
		if c.Key == "net.ipv4.udp_mem" && c.Change {
			t.Errorf("udp_mem read back tab-separated was planned as a change")
		}
	}
}

func TestPlanWarningsAndBlockers(t *testing.T) {
	tests := []struct {
		name    string
		spec    func(string) string
		facts   func(*Facts)
		allowDG bool
		action  string
		want    string // in a warning or blocker
	}{
		{
			name:   "silent cap",
			spec:   func(s string) string { return strings.Replace(s, "so_rcvbuf: 4194304", "so_rcvbuf: 16777216", 1) },
			action: ActionChange,
			want:   "net.core.rmem_max is 8388608",
		},
		{
			name:   "relay never asks",
			spec:   func(s string) string { return strings.Replace(s, "  so_rcvbuf: 4194304\n", "", 1) },
			action: ActionChange,
			want:   "212992",
		},
		{
			name: "shadowed drop-in",
			facts: func(f *Facts) {
				f.SysctlFiles = append(f.SysctlFiles, ConfFile{Path: "/etc/sysctl.d/99-zz-tuning.conf", Content: "net.core.rmem_max = 212992\n"})
			},
			action: ActionChange,
			want:   "/etc/sysctl.d/99-zz-tuning.conf:1 sets it to 212992",
		},
		{
			name: "read-only in a container",
			facts: func(f *Facts) {
				f.InitialNetns = false
				f.Sysctls["net.core.rmem_max"] = SysctlFact{Exists: true, Value: "212992", Writable: false}
			},
			action: ActionBlocked,
			want:   "net.core.rmem_max is read-only in this host's network namespace",
		},
		{
			name:   "downgrade without flag",
			facts:  func(f *Facts) { f.Release.Current = "1.9.0"; f.Release.CurrentRaw = "/opt/relay/releases/1.9.0" },
			action: ActionBlocked,
			want:   "a downgrade needs plan --allow-downgrade",
		},
		{
			name:    "downgrade allowed",
			facts:   func(f *Facts) { f.Release.Current = "1.9.0"; f.Release.CurrentRaw = "/opt/relay/releases/1.9.0" },
			allowDG: true,
			action:  ActionChange,
			want:    "a restart was already pending", // running exe is 1.7.0's
		},
		{
			name: "unknown key on this kernel",
			spec: func(s string) string {
				return strings.Replace(s, "  net.core.rmem_max: 8388608\n", "  net.core.rmem_max: 8388608\n  net.core.busy_read: 50\n", 1)
			},
			action: ActionBlocked,
			want:   "net.core.busy_read does not exist on this host",
		},
		{
			name: "capacity not met",
			spec: func(s string) string {
				s = strings.Replace(s, "  so_rcvbuf: 4194304\n", "", 1)
				return s + "capacity: {players: 200, hz: 60, packet_size: 200, stall: 50ms}\n"
			},
			action: ActionChange,
			want:   "the relay socket's rb 212992 does not meet the promised capacity (200 players at 60 Hz, 200-byte datagrams, a 50 ms stall)",
		},
		{
			name: "a typo in a key: the nearest known key",
			spec: func(s string) string {
				return strings.Replace(s, "  net.core.rmem_max: 8388608\n", "  net.core.rmem_max: 8388608\n  net.core.rmem_defualt: 262144\n", 1)
			},
			action: ActionBlocked,
			want:   "net.core.rmem_defualt does not exist on this host (kernel 6.18.44): nothing can set it; did you mean net.core.rmem_default? Otherwise remove it from the spec",
		},
		{
			name:   "relay not running",
			facts:  func(f *Facts) { f.Service = ServiceFact{Detail: "not running"}; f.Socket = SocketFact{Port: 7788} },
			action: ActionChange,
			want:   "the relay is not running now",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := incidentSpec(t, tt.spec)
			f := incidentFacts()
			if tt.facts != nil {
				tt.facts(f)
			}
			p, err := Make(Input{Spec: s, Facts: []*Facts{f}, Artifact: testArtifact, AllowDowngrade: tt.allowDG, Steps: testSteps})
			if err != nil {
				t.Fatal(err)
			}
			h := p.Hosts[0]
			if h.Action != tt.action {
				t.Errorf("action: got %s, want %s (blockers %q)", h.Action, tt.action, h.Blockers)
			}
			all := strings.Join(append(append([]string{}, h.Blockers...), h.Warnings...), "\n")
			if !strings.Contains(all, tt.want) {
				t.Errorf("got notes:\n%s\nwant one containing %q", all, tt.want)
			}

		})
	}
}

func TestFingerprintDrift(t *testing.T) {
	s := incidentSpec(t, nil)
	f := incidentFacts()
	h := makePlan(t, s, f).Hosts[0]

	f2 := incidentFacts()
	f2.Socket.Drops = 99999 // counters move without drift
	f2.Service.PID = 1
	if got := makePlan(t, s, f2).Hosts[0].Fingerprint; got != h.Fingerprint {
		t.Errorf("moving counters changed the fingerprint")
	}
	f2.Sysctls["net.core.rmem_max"] = SysctlFact{Exists: true, Value: "425984", Writable: true}
	h2 := makePlan(t, s, f2).Hosts[0]
	if h2.Fingerprint == h.Fingerprint {
		t.Fatal("a changed rmem_max kept the fingerprint")
	}
	d := Diff(h.Facts, h2.Facts)
	if len(d) != 1 || d[0].Name != "sysctl net.core.rmem_max" || d[0].Planned != "212992" || d[0].Observed != "425984" {
		t.Errorf("diff: got %+v, want one drift of sysctl net.core.rmem_max 212992 → 425984", d)
	}
}

func TestMakeRefusesArtifactMismatch(t *testing.T) {
	s := incidentSpec(t, func(src string) string {
		return strings.Replace(src, "artifact: ../bin/relayd", "artifact: ../bin/relayd\n    sha256: "+strings.Repeat("0", 64), 1)
	})
	_, err := Make(Input{Spec: s, Facts: []*Facts{incidentFacts()}, Artifact: testArtifact, Steps: testSteps})
	if err == nil || !strings.Contains(err.Error(), "relay.release.sha256") {
		t.Errorf("got %v, want a sha256 mismatch naming relay.release.sha256", err)
	}
}

// The capacity check is the planned rb against the spec's promise:
// nothing the relay reports (players, counters, drops), which strangers'
// datagrams move, enters it or its warning.
func TestCapacityIgnoresWhatTheRelayReports(t *testing.T) {
	s := incidentSpec(t, func(src string) string {
		return src + "capacity: {players: 20000, hz: 60, packet_size: 200, stall: 50ms}\n"
	})
	quiet := incidentFacts()
	est := 0
	quiet.RelayStatus = &RelayStatusFact{Read: true, Version: "1.7.0", PID: 4242, Players: 0, PlayersEstablished: &est}
	busy := incidentFacts()
	many := 150
	busy.RelayStatus = &RelayStatusFact{Read: true, Version: "1.7.0", PID: 4242, Players: 4096, PlayersEstablished: &many, Lobbies: 4096,
		RxPackets: 1 << 40, RxDrops: 1 << 30, Forwarded: 1 << 39}
	busy.Socket.Drops, busy.Socket.RcvbufErrors, busy.Socket.InDatagrams = 1<<30, 1<<30, 1<<40
	a, b := makePlan(t, s, quiet).Hosts[0], makePlan(t, s, busy).Hosts[0]
	if a.Capacity == nil || b.Capacity == nil || *a.Capacity != *b.Capacity {
		t.Fatalf("capacity with an idle relay %+v, with a flooded one %+v: want the same", a.Capacity, b.Capacity)
	}
	warn := func(h *HostPlan) (w []string) {
		for _, x := range h.Warnings {
			if strings.Contains(x, "promised capacity") {
				w = append(w, x)
			}
		}
		return w
	}
	if wa, wb := warn(a), warn(b); len(wa) != 1 || strings.Join(wa, "") != strings.Join(wb, "") {
		t.Errorf("capacity warnings: %q and %q; want the same one", wa, wb)
	}
}

// A spec's promise is checked against each host's planned rb, and the
// review shows the margin.
func TestPlanCapacity(t *testing.T) {
	s := incidentSpec(t, func(src string) string {
		return src + "capacity: {players: 200, hz: 60, packet_size: 200, stall: 50ms}\n"
	})
	p := makePlan(t, s, incidentFacts())
	h := p.Hosts[0]
	if h.Capacity == nil || !h.Capacity.Meets || h.Capacity.Rcvbuf != 8388608 {
		t.Fatalf("capacity: %+v, want rb 8388608 meeting the promise", h.Capacity)
	}
	if md := string(p.Markdown("x.plan")); !strings.Contains(md, "- Capacity: rb 8388608 holds") || !strings.Contains(md, "meets the promise") {
		t.Errorf("the review lacks the capacity line:\n%s", md)
	}
	if err := Validate(reload(t, p)); err != nil {
		t.Errorf("a plan with a capacity: %v", err)
	}
	bad := strings.Replace(string(s.Source), "players: 200", "players: -1", 1)
	if _, err := ParseSpec("c.yaml", []byte(bad)); err == nil || !strings.Contains(err.Error(), "capacity.players: want a whole number from 1") {
		t.Errorf("bad players: %v", err)
	}
	bad = strings.Replace(string(s.Source), "stall: 50ms", "stall: soon", 1)
	if _, err := ParseSpec("c.yaml", []byte(bad)); err == nil || !strings.Contains(err.Error(), "capacity.stall: want a duration") {
		t.Errorf("bad stall: %v", err)
	}
}

// The plan written one host at a time is, byte for byte, json.Encoder's
// encoding of the whole plan, its checksum the sha256 of that encoding
// with checksum ""; Load refuses bytes that are not that encoding of
// their content even with a checksum recomputed over them.
func TestPlanStreamsItsCanonicalBytes(t *testing.T) {
	s := incidentSpec(t, func(y string) string {
		return strings.Replace(y, "  - relay-ash-1\n", "  - relay-ash-1\n  - relay-ash-2\n", 1)
	})
	f2 := incidentFacts()
	f2.Host = "relay-ash-2"
	for _, p := range []*Plan{makePlan(t, s, incidentFacts(), f2), {FormatVersion: FormatVersion, Hosts: []*HostPlan{}}} {
		got, err := p.JSON()
		if err != nil {
			t.Fatal(err)
		}
		whole := func(c Plan) []byte {
			var b bytes.Buffer
			enc := json.NewEncoder(&b)
			enc.SetIndent("", "  ")
			enc.SetEscapeHTML(false)
			enc.Encode(&c)
			return b.Bytes()
		}
		c := *p
		c.Checksum = ""
		sum := sha256.Sum256(whole(c))
		c.Checksum = "sha256:" + hex.EncodeToString(sum[:])
		if want := whole(c); !bytes.Equal(got, want) {
			t.Errorf("streamed:\n%s\nwhole:\n%s", got, want)
		}
		if _, err := Load("x.plan", got); err != nil {
			t.Errorf("load: %v", err)
		}
	}
	// Another encoding of the same content, its checksum made to match.
	body, _ := makePlan(t, incidentSpec(t, nil), incidentFacts()).JSON()
	fv := fmt.Sprintf(`"format_version": %d,`, FormatVersion)
	odd := bytes.Replace(body, []byte(fv), []byte(strings.Replace(fv, ",", " ,", 1)), 1)
	var p Plan
	json.Unmarshal(odd, &p)
	blank := bytes.Replace(odd, []byte(p.Checksum), nil, 1)
	sum := sha256.Sum256(blank)
	odd = bytes.Replace(odd, []byte(p.Checksum), []byte("sha256:"+hex.EncodeToString(sum[:])), 1)
	if _, err := Load("x.plan", odd); err == nil || !strings.Contains(err.Error(), "edited after review") {
		t.Errorf("a plan in bytes relayctl does not write: %v", err)
	}
	// The same content and checksum, respaced: the bytes signed and
	// reviewed are not these.
	spaced := bytes.Replace(body, []byte("\n  \"hosts\": ["), []byte("\n  \"hosts\":  ["), 1)
	if _, err := Load("x.plan", spaced); bytes.Equal(spaced, body) || err == nil || !strings.Contains(err.Error(), "edited after review") {
		t.Errorf("a respaced plan with its checksum: %v", err)
	}
}
