package rollout

// Unit tests of the apply engine's logic (canary, fleet stop, outcomes,
// rollback, locks, journals, drift) against in-process fake hosts. The
// real thing is proven against lab hosts in cmd/relayctl/lab_test.go.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/relayctl/relayctl/plans"
	"github.com/relayctl/relayctl/relay/config"
)

const fakeSpec = `name: fake
hosts: [%s]
sysctl:
  net.core.rmem_max: 8388608
relay:
  so_rcvbuf: 4194304
  release: {version: 1.8.0, artifact: relayd}
  service:
    manager: command
    start: [/opt/relay/bin/relay-service, start]
    stop: [/opt/relay/bin/relay-service, stop]
    pid: [/opt/relay/bin/relay-service, pid]
`

// fakeHost is a relay host in memory: its facts, and what each apply
// command does to them.
type fakeHost struct {
	mu        sync.Mutex
	name      string
	facts     *plans.Facts
	plan      *plans.HostPlan
	unreach   bool
	lockBusy  bool
	failIn    string // a window step kind that fails
	badRB     bool   // the restarted relay reads back the default rb
	dropConn  bool   // the connection dies inside the window
	inWindow  chan struct{}
	releaseWG chan struct{}
	restarts  int
	commands  []string
	staged    string // what the last stage sent on stdin
}

func newFakeHost(name string) *fakeHost {
	cfg := config.Default()
	cfg.Listen = "0.0.0.0:7788"
	return &fakeHost{name: name, facts: &plans.Facts{
		Host: name, Address: name + ":22", User: "root", Kernel: "6.18.44", InitialNetns: true,
		Sysctls: map[string]plans.SysctlFact{
			"net.core.rmem_max":     {Exists: true, Value: "212992", Writable: true},
			"net.core.rmem_default": {Exists: true, Value: "212992", Writable: true},
		},
		SysctlFiles: []plans.ConfFile{},
		Release:     plans.RelayRelease{Current: "1.7.0", CurrentRaw: "/opt/relay/releases/1.7.0", Installed: []string{"1.7.0"}, RunningExe: "/opt/relay/releases/1.7.0/relayd"},
		Config:      plans.FileFact{Exists: true, Content: string(cfg.Render())},
		Service:     plans.ServiceFact{Running: true, PID: 100},
		Socket:      plans.SocketFact{Found: true, Port: 7788, Rcvbuf: 212992},
	}}
}

func (h *fakeHost) clone() *plans.Facts {
	b, _ := json.Marshal(h.facts)
	var f plans.Facts
	json.Unmarshal(b, &f)
	return &f
}

// frames renders facts the way observe.sh prints them.
func frames(f *plans.Facts, q Query, boundary string) []byte {
	var b bytes.Buffer
	emit := func(name string, status int, data string) {
		fmt.Fprintf(&b, "%s %s\n%s\n%s end %d\n", boundary, name, data, boundary, status)
	}
	emit("clock", 0, strconv.FormatInt(time.Now().UnixNano(), 10))
	emit("kernel", 0, f.Kernel)
	emit("netns-probe", 0, "644")
	for _, k := range q.Keys {
		s := f.Sysctls[k]
		if !s.Exists {
			emit("sysctl "+k, 2, "absent")
			continue
		}
		emit("sysctl "+k, 0, s.Value+"\n")
		w := "no"
		if s.Writable {
			w = "yes"
		}
		emit("sysctl-writable "+k, 0, w+"\n")
	}
	for _, cf := range f.SysctlFiles {
		emit("file "+cf.Path, 0, cf.Content)
	}
	emit("current-link", 0, f.Release.CurrentRaw+"\n")
	emit("releases", 0, strings.Join(f.Release.Installed, "\n")+"\n")
	if f.Config.Exists {
		emit("relay-config", 0, f.Config.Content)
	} else {
		emit("relay-config", 2, "absent\n")
	}
	if f.Journal != "" {
		emit("journal", 0, f.Journal)
	}
	if f.Service.Running {
		emit("service", 0, strconv.Itoa(f.Service.PID)+"\n")
		emit("relay-exe", 0, f.Release.RunningExe+"\n")
	} else {
		emit("service", 3, "")
	}
	if f.Socket.Found {
		emit("ss", 0, fmt.Sprintf("UNCONN 0 0 0.0.0.0:%d 0.0.0.0:* skmem:(r0,rb%d,t0,tb212992,f0,w0,o0,bl0,d%d)\n", f.Socket.Port, f.Socket.Rcvbuf, f.Socket.Drops))
	} else {
		emit("ss", 0, "")
	}
	return b.Bytes()
}

func (h *fakeHost) Run(ctx context.Context, cmd string, stdin io.Reader, stdout, stderr io.Writer) error {
	h.mu.Lock()
	h.commands = append(h.commands, cmd)
	h.mu.Unlock()
	switch {
	case strings.HasPrefix(cmd, "sh -s --"):
		q := QueryForPlan(&plans.Plan{Relay: plans.PlannedRelay{Port: 7788}, Sysctl: []plans.PlannedSysctl{{Key: "net.core.rmem_max"}}})
		boundary := strings.Fields(cmd)[3] // sh -s -- BOUNDARY ...
		h.mu.Lock()
		out := frames(h.facts, q, boundary)
		h.mu.Unlock()
		stdout.Write(out)
		return nil
	case strings.Contains(cmd, " relayctl lock "):
		if h.lockBusy {
			fmt.Fprint(stdout, "BUSY\nrelayctl devel (pid 1 on elsewhere) since 2026-11-30T00:00:00Z, plan other\n")
			return &ExitError{Status: 75}
		}
		fmt.Fprint(stdout, "LOCKED\n")
		io.Copy(io.Discard, stdin) // held until released
		return nil
	case strings.Contains(cmd, " relayctl stage "):
		b, _ := io.ReadAll(stdin)
		h.mu.Lock()
		h.staged = string(b)
		h.mu.Unlock()
		fmt.Fprint(stdout, "STEP begin x\nDONE begin\n")
		return nil
	case strings.Contains(cmd, " relayctl run ") && strings.HasSuffix(cmd, " window"):
		return h.window(stdout)
	case strings.Contains(cmd, " relayctl run ") && strings.HasSuffix(cmd, " rollback"):
		h.mu.Lock()
		defer h.mu.Unlock()
		h.facts.Sysctls["net.core.rmem_max"] = plans.SysctlFact{Exists: true, Value: "212992", Writable: true}
		h.facts.Release.Current, h.facts.Release.CurrentRaw = "1.7.0", "/opt/relay/releases/1.7.0"
		h.facts.Service.PID++
		h.facts.Socket.Rcvbuf = 212992
		h.restarts++
		fmt.Fprint(stdout, "STEP restart command\nDONE restart\n")
		return nil
	case strings.Contains(cmd, " relayctl clear "):
		h.mu.Lock()
		h.facts.Journal = ""
		h.mu.Unlock()
		fmt.Fprint(stdout, "CLEARED /var/lib/relayctl/receipts/abandoned-x\n")
		return nil
	case strings.Contains(cmd, " relayctl commit "):
		io.Copy(io.Discard, stdin)
		fmt.Fprint(stdout, "COMMITTED\n")
		return nil
	}
	return fmt.Errorf("fake host: unexpected command %.60q", cmd)
}

func (h *fakeHost) window(stdout io.Writer) error {
	if h.inWindow != nil {
		close(h.inWindow)
		<-h.releaseWG
	}
	if h.dropConn {
		fmt.Fprint(stdout, "STEP set-sysctl net.core.rmem_max\n")
		return errors.New("ssh: connection lost")
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, kind := range []string{"set-sysctl", "set-link", "restart"} {
		fmt.Fprintf(stdout, "STEP %s x\n", kind)
		if kind == h.failIn {
			fmt.Fprintf(stdout, "FAIL %s start: relayd exited\n", kind)
			return &ExitError{Status: 1}
		}
		switch kind {
		case "set-sysctl":
			h.facts.Sysctls["net.core.rmem_max"] = plans.SysctlFact{Exists: true, Value: "8388608", Writable: true}
		case "set-link":
			h.facts.Release.Current, h.facts.Release.CurrentRaw = "1.8.0", "/opt/relay/releases/1.8.0"
		case "restart":
			fmt.Fprintf(stdout, "CLOCK %d\n", time.Now().UnixNano())
			h.restarts++
			h.facts.Service.PID++
			h.facts.Socket.Rcvbuf = 8388608
			if h.badRB {
				h.facts.Socket.Rcvbuf = 212992
			}
			h.facts.Config = plans.FileFact{Exists: true, Content: h.plan.Config.Planned}
			h.facts.SysctlFiles = []plans.ConfFile{{Path: h.plan.DropIn.Path, Content: h.plan.DropIn.Planned}}
		}
		fmt.Fprintf(stdout, "DONE %s\n", kind)
	}
	return nil
}

type fakeConn struct{ *fakeHost }

func (c fakeConn) Close() error    { return nil }
func (c fakeConn) Address() string { return c.name + ":22" }
func (c fakeConn) User() string    { return "root" }

type fakeFleet map[string]*fakeHost

func (f fakeFleet) Dial(ctx context.Context, host string) (Conn, error) {
	h := f[host]
	if h.unreach {
		return nil, errors.New("dial tcp: connection refused")
	}
	return fakeConn{h}, nil
}

// fleet makes n fake hosts and a plan for them.
func fleet(t *testing.T, n int) (fakeFleet, *plans.Plan, []*fakeHost) {
	t.Helper()
	var names []string
	ff := fakeFleet{}
	var hosts []*fakeHost
	var facts []*plans.Facts
	for i := 1; i <= n; i++ {
		h := newFakeHost(fmt.Sprintf("h%d", i))
		names = append(names, h.name)
		ff[h.name] = h
		hosts = append(hosts, h)
		facts = append(facts, h.clone())
	}
	s, err := plans.ParseSpec("fake.yaml", []byte(fmt.Sprintf(fakeSpec, strings.Join(names, ", "))))
	if err != nil {
		t.Fatal(err)
	}
	p, err := plans.Make(plans.Input{Spec: s, Facts: facts, Artifact: plans.Artifact{SHA256: strings.Repeat("a", 64), Size: 3}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.JSON(); err != nil { // fills the checksum
		t.Fatal(err)
	}
	for i, h := range hosts {
		h.plan = p.Hosts[i]
	}
	return ff, p, hosts
}

func applyFake(t *testing.T, ctx context.Context, ff fakeFleet, p *plans.Plan, parallel int) *Report {
	t.Helper()
	rep, err := Apply(ctx, ff, p, ApplyOptions{Parallel: parallel, Artifact: []byte("abc"), VerifyTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func outcomes(rep *Report) string {
	var s []string
	for _, h := range rep.Hosts {
		s = append(s, h.Host+"="+string(h.Outcome))
	}
	return strings.Join(s, " ")
}

func TestApplyFleetOutcomes(t *testing.T) {
	tests := []struct {
		name     string
		hosts    int
		parallel int
		setup    func([]*fakeHost)
		want     string
	}{
		{"all apply", 3, 2, nil, "h1=applied h2=applied h3=applied"},
		{"canary fails: nobody else starts", 3, 2, func(h []*fakeHost) { h[0].failIn = "restart" }, "h1=rolled back h2=not started h3=not started"},
		{"first failure stops new hosts", 4, 1, func(h []*fakeHost) { h[1].badRB = true }, "h1=applied h2=rolled back h3=not started h4=not started"},
		{"unreachable is not failed", 2, 1, func(h []*fakeHost) { h[0].unreach = true }, "h1=unreachable h2=not started"},
		{"lock held elsewhere", 1, 1, func(h []*fakeHost) { h[0].lockBusy = true }, "h1=refused"},
		{"connection lost in the window", 1, 1, func(h []*fakeHost) { h[0].dropConn = true }, "h1=failed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ff, p, hosts := fleet(t, tt.hosts)
			if tt.setup != nil {
				tt.setup(hosts)
			}
			rep := applyFake(t, context.Background(), ff, p, tt.parallel)
			if got := outcomes(rep); got != tt.want {
				t.Errorf("got %s, want %s", got, tt.want)
				for _, h := range rep.Hosts {
					t.Logf("%s: %s", h.Host, h.Reason)
				}
			}
			for i, h := range rep.Hosts {
				if h.Outcome == Applied && (hosts[i].restarts != 1 || h.Restarts != 1) {
					t.Errorf("%s applied with %d restarts on the host (%d counted), want exactly 1", h.Host, hosts[i].restarts, h.Restarts)
				}
				if h.Outcome == RolledBack && h.State != StateAsWas {
					t.Errorf("%s rolled back but state %q", h.Host, h.State)
				}
			}
		})
	}
}

func TestApplyLostConnectionSaysJournal(t *testing.T) {
	ff, p, hosts := fleet(t, 1)
	hosts[0].dropConn = true
	rep := applyFake(t, context.Background(), ff, p, 1)
	if h := rep.Hosts[0]; !strings.Contains(h.State, "journal") || h.Restarts != 0 {
		t.Errorf("got state %q, %d restarts; want the journal named and no rollback attempted blind", h.State, h.Restarts)
	}
	for _, c := range hosts[0].commands {
		if strings.HasSuffix(c, " rollback") {
			t.Error("rolled back over a lost connection without knowing the host's state")
		}
	}
}

func TestApplyRefusesUnfinishedJournal(t *testing.T) {
	ff, p, hosts := fleet(t, 1)
	hosts[0].facts.Journal = "2026-11-30T04:00:00Z start window\n2026-11-30T04:00:00Z start set-sysctl net.core.rmem_max\n"
	rep := applyFake(t, context.Background(), ff, p, 1)
	h := rep.Hosts[0]
	if h.Outcome != Refused || !strings.Contains(h.Reason, "start set-sysctl net.core.rmem_max") || h.Journal == "" {
		t.Errorf("got %s: %s; want refused quoting the journal's last line", h.Outcome, h.Reason)
	}
	// A journal of a run that never reached its window does not block.
	ff, p, hosts = fleet(t, 1)
	hosts[0].facts.Journal = "2026-11-30T04:00:00Z start stage begin fake\n"
	if rep := applyFake(t, context.Background(), ff, p, 1); rep.Hosts[0].Outcome != Applied {
		t.Errorf("stage-only journal: got %s (%s), want applied", rep.Hosts[0].Outcome, rep.Hosts[0].Reason)
	}
}

func TestApplyStaleAndAlreadyApplied(t *testing.T) {
	ff, p, hosts := fleet(t, 2)
	hosts[0].facts.Sysctls["net.core.rmem_default"] = plans.SysctlFact{Exists: true, Value: "425984", Writable: true}
	rep := applyFake(t, context.Background(), ff, p, 1)
	h := rep.Hosts[0]
	if h.Outcome != Refused || len(h.Drift) != 1 || h.Drift[0].Name != "sysctl net.core.rmem_default" || h.Drift[0].Observed != "425984" {
		t.Errorf("got %s drift %+v; want refused with rmem_default drifted to 425984", h.Outcome, h.Drift)
	}
	if hosts[0].restarts != 0 {
		t.Error("a stale host was restarted")
	}

	ff, p, hosts = fleet(t, 1)
	applyFake(t, context.Background(), ff, p, 1)
	rep = applyFake(t, context.Background(), ff, p, 1)
	if rep.Hosts[0].Outcome != Unchanged || hosts[0].restarts != 1 {
		t.Errorf("second apply: got %s with %d restarts in all, want unchanged and still 1", rep.Hosts[0].Outcome, hosts[0].restarts)
	}
}

// A global key set through another host of the same machine (containers,
// or the lab) is a drift toward the plan, not a stale plan.
func TestApplyDriftTowardPlan(t *testing.T) {
	ff, p, hosts := fleet(t, 1)
	hosts[0].facts.Sysctls["net.core.rmem_max"] = plans.SysctlFact{Exists: true, Value: "8388608", Writable: true}
	rep := applyFake(t, context.Background(), ff, p, 1)
	if h := rep.Hosts[0]; h.Outcome != Applied || hosts[0].restarts != 1 {
		t.Fatalf("got %s (%s) with %d restarts, want applied with one", h.Outcome, h.Reason, hosts[0].restarts)
	}
	if !strings.Contains(hosts[0].staged, "FILE window ") || strings.Contains(hosts[0].staged, "set-sysctl\tnet.core.rmem_max\t8388608") {
		t.Errorf("the staged window still sets a key that already holds its planned value:\n%s", hosts[0].staged)
	}
	// Toward another value is stale.
	ff, p, hosts = fleet(t, 1)
	hosts[0].facts.Sysctls["net.core.rmem_max"] = plans.SysctlFact{Exists: true, Value: "4194304", Writable: true}
	if rep := applyFake(t, context.Background(), ff, p, 1); rep.Hosts[0].Outcome != Refused {
		t.Errorf("rmem_max moved elsewhere: got %s, want refused", rep.Hosts[0].Outcome)
	}
}

func TestApplyRefusesOutsideWindow(t *testing.T) {
	ff, p, hosts := fleet(t, 1)
	p.Window = &plans.PlanWindow{NotBefore: "2026-12-02T04:00:00Z", NotAfter: "2026-12-02T05:00:00Z"}
	for _, tt := range []struct {
		now    string
		ignore bool
		want   Outcome
	}{
		{"2026-12-02T03:59:59Z", false, Refused},
		{"2026-12-02T05:00:01Z", false, Refused},
		{"2026-12-02T03:00:00Z", true, Applied},
	} {
		now, _ := time.Parse(time.RFC3339, tt.now)
		rep, err := Apply(context.Background(), ff, p, ApplyOptions{Artifact: []byte("abc"), VerifyTimeout: 300 * time.Millisecond,
			Now: func() time.Time { return now }, IgnoreWindow: tt.ignore})
		if err != nil {
			t.Fatal(err)
		}
		h := rep.Hosts[0]
		if h.Outcome != tt.want {
			t.Errorf("at %s (ignore %v): got %s (%s), want %s", tt.now, tt.ignore, h.Outcome, h.Reason, tt.want)
		}
		if h.Outcome == Refused && (!strings.Contains(h.Reason, "outside the plan's window") || hosts[0].restarts != 0) {
			t.Errorf("at %s: reason %q, %d restarts; want the window named and no restart", tt.now, h.Reason, hosts[0].restarts)
		}
	}
}

func TestApplyInterruptFinishesWindow(t *testing.T) {
	ff, p, hosts := fleet(t, 3)
	hosts[0].inWindow = make(chan struct{})
	hosts[0].releaseWG = make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-hosts[0].inWindow
		cancel() // SIGINT while the canary is in its window
		close(hosts[0].releaseWG)
	}()
	rep := applyFake(t, ctx, ff, p, 2)
	if got := outcomes(rep); got != "h1=applied h2=not started h3=not started" {
		t.Errorf("got %s, want the canary to finish its window and nobody else to start", got)
	}
	if !strings.Contains(rep.Hosts[1].Reason, "interrupted") {
		t.Errorf("reason: got %q, want interrupted", rep.Hosts[1].Reason)
	}
}

func TestBuildScriptQuotesNothingAndRefusesTabs(t *testing.T) {
	_, p, _ := fleet(t, 1)
	s, err := buildScript(p, p.Hosts[0], []byte("abc"))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(s.window, "|"); got != "set-sysctl\tnet.core.rmem_max\t8388608|move-file\t/etc/sysctl.d/90-relayctl.conf.relayctl-new\t/etc/sysctl.d/90-relayctl.conf|set-link\t/opt/relay/current\t/opt/relay/releases/1.8.0|move-file\t/etc/relay/relayd.env.relayctl-new\t/etc/relay/relayd.env|restart\tcommand\t" {
		t.Errorf("window list: got %q", got)
	}
	if got := strings.Join(s.rollback, "|"); !strings.HasPrefix(got, "set-sysctl\tnet.core.rmem_max\t212992|") {
		t.Errorf("rollback list: got %q", got)
	}
	bad := *p
	bad.Relay.Service.Start = []string{"/opt/relay/bin/relay-service", "start\tnow"}
	if err := ValidatePlan(&bad); err == nil {
		t.Error("a tab in a command word was accepted")
	}
	bad = *p
	bad.Sysctl = []plans.PlannedSysctl{{Key: "net.core.rmem_max", Value: "1; reboot"}}
	if err := ValidatePlan(&bad); err == nil {
		t.Error("a non-numeric rmem_max in a hand-edited plan was accepted")
	}
}
