package shellhost

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/relayctl/relayctl/internal/agenttest"
	"github.com/relayctl/relayctl/internal/lab"
	"github.com/relayctl/relayctl/plans"
	"github.com/relayctl/relayctl/tune"
)

// The Go host agent's observe against observe.sh: for the same words on
// the same host, relayctl makes the same facts of both (but the clock,
// and the machine, which only the agent reports), and the agent's
// sections are observe.sh's, in its order (but the machine, and the
// forms of an upload it decodes itself where observe.sh looked for the
// host's gzip and zstd: on this machine and the lab's, which have zstd
// 1.4.5 or later, the same facts). Each case runs a real relayd,
// read back by real ss from the real kernel.

// parityRunner runs argv on a host with stdin, and returns its stdout.
type parityRunner func(ctx context.Context, argv []string, stdin []byte) ([]byte, error)

// parityLocal runs commands on this machine, in the network namespace ns
// (a path under /run/netns; "" for the initial one), as an SSH session
// there would.
func parityLocal(ns string) parityRunner {
	return func(ctx context.Context, argv []string, stdin []byte) ([]byte, error) {
		if ns != "" {
			argv = append([]string{"nsenter", "--net=" + ns, "--"}, argv...)
		}
		c := exec.CommandContext(ctx, argv[0], argv[1:]...)
		c.Stdin = bytes.NewReader(stdin)
		var errb bytes.Buffer
		c.Stderr = &errb
		out, err := c.Output()
		if err != nil {
			return out, fmt.Errorf("%s: %w: %s", argv[0], err, errb.String())
		}
		return out, nil
	}
}

// agentFile is the agent built from this tree (internal/agenttest) as a
// file of root's, to run as relayctl's bootstrap would.
func agentFile(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "relayctl-agent")
	if err := os.WriteFile(p, agenttest.Set(t)[0].Bytes, 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// observeScriptOn is observe.sh on a host: its frames.
func observeScriptOn(t *testing.T, run parityRunner, a []string) []Frame {
	t.Helper()
	b, err := newBoundary()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := run(ctx, append([]string{"sh", "-c", observeScript, "relayctl-observe"}, a...), []byte(b+"\n"))
	if err != nil {
		t.Fatalf("observe.sh: %v", err)
	}
	frames, err := ParseFrames(out, b)
	if err != nil {
		t.Fatalf("observe.sh: %v", err)
	}
	return frames
}

// observeAgentOn is the agent's observe on a host, a session's lockless
// first request as relayctl will send it: its frames.
func observeAgentOn(t *testing.T, run parityRunner, agent, state string, a []string) []Frame {
	t.Helper()
	b, err := newBoundary()
	if err != nil {
		t.Fatal(err)
	}
	req := fmt.Sprintf("observe\t0\t0\t%d\t%s\n%s\n", len(a), b, strings.Join(a, "\n"))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := run(ctx, []string{agent, "serve", state}, []byte(req))
	if err != nil {
		t.Fatalf("agent: %v", err)
	}
	head, data, _ := bytes.Cut(out, []byte("\n"))
	if n, err := strconv.Atoi(strings.TrimPrefix(string(head), "DATA ")); err != nil || n != len(data) {
		t.Fatalf("agent: answered %q with %d bytes", head, len(data))
	}
	frames, err := ParseFrames(data, b)
	if err != nil {
		t.Fatalf("agent: %v", err)
	}
	return frames
}

// factsJSON is relayctl's facts of frames, without what moves by itself
// between two reads (the clock) and the machine, as JSON to compare.
func factsJSON(t *testing.T, frames []Frame, q Query) string {
	t.Helper()
	f, err := FactsFromFrames(frames, q)
	if err != nil {
		t.Fatalf("facts: %v", err)
	}
	f.ClockNanos, f.Arch = 0, ""
	b, _ := json.MarshalIndent(f, "", " ")
	return string(b)
}

// frameNames are the frames' names in order, but those of skip.
func frameNames(frames []Frame, skip ...string) []string {
	var out []string
	for _, fr := range frames {
		if !slices.Contains(skip, fr.Name) {
			out = append(out, fr.Name)
		}
	}
	return out
}

// checkParity observes the host both ways and compares. A host's global
// values can move between the two reads (another test on this machine
// sets rmem_max): the pair is read again, at most three times, and must
// agree once; a difference of the agent's own shows every time.
func checkParity(t *testing.T, run parityRunner, agent, state string, q Query) *plans.Facts {
	t.Helper()
	a, err := args(q)
	if err != nil {
		t.Fatal(err)
	}
	var shJSON, goJSON string
	var shNames, goNames []string
	for range 3 {
		sh := observeScriptOn(t, run, a)
		gof := observeAgentOn(t, run, agent, state, a)
		shJSON, goJSON = factsJSON(t, sh, q), factsJSON(t, gof, q)
		// Only the agent says the machine, and what it decodes itself in
		// place of the host's gzip and zstd.
		shNames, goNames = frameNames(sh, "gzip", "zstd"), frameNames(gof, "arch", "decoders")
		if shJSON == goJSON && slices.Equal(shNames, goNames) {
			f, _ := FactsFromFrames(gof, q)
			if f.Arch == "" {
				t.Error("the agent reports no machine")
			}
			return f
		}
	}
	if !slices.Equal(shNames, goNames) {
		t.Errorf("sections:\nobserve.sh %q\nagent      %q", shNames, goNames)
	}
	if shJSON != goJSON {
		t.Errorf("facts differ:\nobserve.sh %s\nagent      %s", shJSON, goJSON)
	}
	return nil
}

// parityHost is a relay host on this machine, in a folder of root's
// alone: a release of relayd, the current link, its config, the state
// folder with receipts, and two network namespaces (the session's and
// the relay's own), loopback up.
type parityHost struct {
	root, state, pidFile string
	sessNS, relayNS      string
	relayd               string
}

func newParityHost(t *testing.T) *parityHost {
	t.Helper()
	lab.Require(t)
	relayd := lab.BuildRelayd(t, "1.9.0")
	root, err := os.MkdirTemp("/run", "relayctl-parity-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(root, 0o755)
	t.Cleanup(func() { os.RemoveAll(root) })
	h := &parityHost{root: root, state: root + "/state", pidFile: root + "/run/relayd.pid"}
	for _, d := range []string{"releases/1.9.0", "etc", "run", "bin", "state/receipts"} {
		if err := os.MkdirAll(root+"/"+d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(relayd)
	if err != nil {
		t.Fatal(err)
	}
	h.relayd = root + "/releases/1.9.0/relayd"
	parityWrite(t, h.relayd, string(b), 0o755)
	paritySymlink(t, "releases/1.9.0", root+"/current")
	paritySymlink(t, h.relayd, root+"/bin/relayd")
	parityWrite(t, root+"/etc/relayd.env", "RELAYD_SO_RCVBUF=1048576\nTOKEN=s3cret\n", 0o600)
	sum := strings.Repeat("c0", 32)
	parityWrite(t, h.state+"/receipts/2026-01-01T00-00-00Z-r1-c0c0c0c0c0c0.json", `{"plan": "p", "plan_checksum": "sha256:`+sum+`", "outcome": "applied", "drops_after": {"ss_drops": 3, "proc_udp_drops": 3}, "undo": {"receipt": "2026-01-01T00-00-00Z-r1-c0c0c0c0c0c0"}}`, 0o644)
	parityWrite(t, h.state+"/receipts/2026-01-02T00-00-00Z-r2-c0c0c0c0c0c0.json", `{"plan": "p", "outcome": "staged"}`, 0o644)
	if err := os.Mkdir(h.state+"/receipts/2026-01-01T00-00-00Z-r1-c0c0c0c0c0c0.backups", 0o700); err != nil {
		t.Fatal(err)
	}
	parityWrite(t, h.state+"/receipts/2026-01-01T00-00-00Z-r1-c0c0c0c0c0c0.backups/backup-relay-config", "", 0o600)
	h.sessNS, h.relayNS = newNamedNetns(t), newNamedNetns(t)
	return h
}

func parityWrite(t *testing.T, p, s string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(p, []byte(s), mode); err != nil {
		t.Fatal(err)
	}
}

func paritySymlink(t *testing.T, target, p string) {
	t.Helper()
	if err := os.Symlink(target, p); err != nil {
		t.Fatal(err)
	}
}

// newNamedNetns is a network namespace of its own (ip netns), its
// loopback up: its path.
func newNamedNetns(t *testing.T) string {
	t.Helper()
	b, _ := newBoundary()
	name := "relayctl-parity-" + b[len(b)-8:]
	for _, argv := range [][]string{{"ip", "netns", "add", name}, {"ip", "-n", name, "link", "set", "lo", "up"}} {
		if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%q: %v: %s", argv, err, out)
		}
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "del", name).Run() })
	return "/run/netns/" + name
}

// startRelayd starts the release in network namespace ns, its pid in the
// pid file (root's, 0644), and waits until its control plane listens.
func (h *parityHost) startRelayd(t *testing.T, ns string) int {
	t.Helper()
	c := exec.Command("nsenter", "--net="+ns, "--", h.relayd, "--config", os.DevNull, "--listen", "127.0.0.1:7788", "--control", "127.0.0.1:7789", "--so-rcvbuf", "1048576")
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Process.Kill(); c.Wait() })
	parityWrite(t, h.pidFile, strconv.Itoa(c.Process.Pid)+"\n", 0o644)
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		out, _ := exec.Command("nsenter", "--net="+ns, "--", "ss", "-H", "-t", "-l", "-n", "sport = :7789").Output()
		if len(bytes.TrimSpace(out)) > 0 {
			return c.Process.Pid
		}
		if time.Now().After(deadline) {
			t.Fatal("relayd did not listen on its control address within 20 s")
		}
	}
}

// query is relayctl's query of the host: the command manager with its
// pid file, the relay's control plane, verify's receipt.
func (h *parityHost) query() Query {
	return Query{Keys: []string{"net.core.rmem_max", "net.core.rmem_default", "net.core.somaxconn", "net.ipv4.udp_mem", "net.core.no_such_key", "vm.compact_memory"},
		Port: 7788, Control: "127.0.0.1:7789", LastApply: true,
		Paths:   plans.PlanPaths{Current: h.root + "/current", Releases: h.root + "/releases", RelayConfig: h.root + "/etc/relayd.env", StateDir: h.state, SysctlFile: tune.SysctlDirs[0] + "/90-relayctl.conf"},
		Service: plans.PlanService{Manager: "command", PIDFile: h.pidFile}}
}

func TestAgentObserveParity(t *testing.T) {
	h := newParityHost(t)
	agent := agentFile(t)
	t.Run("no relay running", func(t *testing.T) {
		parityWrite(t, h.pidFile, "999999999\n", 0o644)
		q := h.query()
		q.LastApply, q.UndoOf = false, "sha256:"+strings.Repeat("c0", 32)
		if f := checkParity(t, parityLocal(h.sessNS), agent, h.state, q); f != nil && (f.Service.Running || f.Undo == nil || len(f.Undo.Backups) != 1) {
			t.Errorf("service %+v, undo %+v", f.Service, f.Undo)
		}
	})
	t.Run("a pid file others can write", func(t *testing.T) {
		os.Chmod(h.pidFile, 0o666)
		defer os.Chmod(h.pidFile, 0o644)
		if f := checkParity(t, parityLocal(h.sessNS), agent, h.state, h.query()); f != nil && !strings.Contains(f.Service.Detail, "only root may write it") {
			t.Errorf("service %+v", f.Service)
		}
	})
	pid := h.startRelayd(t, h.sessNS)
	t.Run("command manager, the relay in the session's namespace", func(t *testing.T) {
		f := checkParity(t, parityLocal(h.sessNS), agent, h.state, h.query())
		if f != nil && (f.Service.PID != pid || !f.Socket.Found || f.Socket.OwnNetns || f.RelayStatus == nil || !f.RelayStatus.Read || f.LastApply == nil) {
			t.Errorf("service %+v, socket %+v, status %+v, last apply %+v", f.Service, f.Socket, f.RelayStatus, f.LastApply)
		}
	})
}

func TestAgentObserveParityRelayInItsOwnNamespace(t *testing.T) {
	h := newParityHost(t)
	agent := agentFile(t)
	pid := h.startRelayd(t, h.relayNS)
	run := parityLocal("") // the session in the machine's namespace, the relay in its own
	t.Run("command manager", func(t *testing.T) {
		f := checkParity(t, run, agent, h.state, h.query())
		if f != nil && (f.Service.PID != pid || !f.Socket.Found || !f.Socket.OwnNetns || f.RelayStatus == nil || !f.RelayStatus.Read || f.RelayStatus.PID != pid) {
			t.Errorf("service %+v, socket %+v, status %+v", f.Service, f.Socket, f.RelayStatus)
		}
	})
	t.Run("found by its socket", func(t *testing.T) {
		q := h.query()
		q.Service = plans.PlanService{Manager: "none"}
		if f := checkParity(t, run, agent, h.state, q); f != nil && (f.Service.PID != pid || f.Service.FoundBy == "") {
			t.Errorf("service %+v", f.Service)
		}
	})
	t.Run("an installed program", func(t *testing.T) {
		q := h.query()
		q.Program = h.root + "/bin/relayd"
		if f := checkParity(t, run, agent, h.state, q); f != nil && f.Service.PID != pid {
			t.Errorf("service %+v", f.Service)
		}
	})
	// The drain gate through the agent, in the relay's namespace: relayd
	// checks its caller is root by the connection's owner there.
	for _, tt := range []struct {
		verb string
		want bool
	}{{"POST", true}, {"DELETE", false}} {
		req := fmt.Sprintf("lock\tparity\nrelay-drain\t0\t0\t0\t%d\t127.0.0.1:7789\t%s\nsync\t0\t0\t0\n", pid, tt.verb)
		out, err := run(context.Background(), []string{agent, "serve", h.state}, []byte(req))
		if err != nil || !strings.HasPrefix(string(out), "LOCKED") || !strings.HasSuffix(string(out), "\nOK\nOK\n") {
			t.Fatalf("%s /drain: %v %q", tt.verb, err, out)
		}
		a, _ := args(h.query())
		f, _ := FactsFromFrames(observeAgentOn(t, run, agent, h.state, a), h.query())
		if f.RelayStatus == nil || f.RelayStatus.Draining != tt.want {
			t.Errorf("after %s /drain: status %+v, want draining %v", tt.verb, f.RelayStatus, tt.want)
		}
	}
}

// On a systemd host: the unit's facts from systemctl, its cgroup's
// processes, the relay in the namespace relay-netns.service made.
func TestLabAgentObserveParitySystemd(t *testing.T) {
	lab.RequireSystemd(t)
	relayd := lab.BuildRelayd(t, "1.9.0")
	agent := agentFile(t)
	l := lab.StartT(t, lab.Options{Hosts: []lab.HostOptions{{Systemd: true, Relay: &lab.RelayInstall{Binary: relayd, Version: "1.9.0", Start: true}}}})
	h := l.Hosts[0]
	dst, err := h.Path("/usr/local/sbin/relayctl-agent")
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(agent)
	if err != nil {
		t.Fatal(err)
	}
	parityWrite(t, dst, string(b), 0o755)
	run := func(ctx context.Context, argv []string, stdin []byte) ([]byte, error) {
		c := h.Command(ctx, argv...)
		c.Stdin = bytes.NewReader(stdin)
		return c.Output()
	}
	pid, err := h.RelayPID(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	q := Query{Keys: []string{"net.core.rmem_max", "net.core.somaxconn", "net.core.no_such_key"}, Port: 7788, Control: "127.0.0.1:7789",
		Paths: plans.PlanPaths(plans.DefaultPaths), Service: plans.PlanService{Manager: "systemd", Name: lab.RelayUnit}}
	f := checkParity(t, run, "/usr/local/sbin/relayctl-agent", plans.DefaultPaths.StateDir, q)
	if f != nil && (f.Service.PID != pid || f.Service.ActiveState != "active" || !f.Socket.Found || !f.Socket.OwnNetns || f.RelayStatus == nil || !f.RelayStatus.Read || f.UnitDropIn == nil) {
		t.Errorf("service %+v, socket %+v, status %+v, drop-in %+v", f.Service, f.Socket, f.RelayStatus, f.UnitDropIn)
	}
}
