package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/relayctl/relayctl/rollout"
	"github.com/relayctl/relayctl/rollout/rollouttest"
)

// hintWorld is a fleet of Sims kept in files (rollouttest.FileDialer, as
// the CLI scripts use), a spec for it, and the CLI run in-process.
type hintWorld struct {
	t                *testing.T
	dir, spec, plan  string
	lastOut, lastErr string
}

func newHintWorld(t *testing.T, hosts ...string) *hintWorld {
	t.Helper()
	w := &hintWorld{t: t, dir: t.TempDir()}
	w.spec, w.plan = filepath.Join(w.dir, "spec.yaml"), filepath.Join(w.dir, "x.plan")
	os.MkdirAll(filepath.Join(w.dir, "sim"), 0o700)
	for _, h := range hosts {
		w.save(rollouttest.NewSim(h))
	}
	os.WriteFile(filepath.Join(w.dir, "relayd"), []byte("a release"), 0o644)
	os.WriteFile(filepath.Join(w.dir, "relayd-1.8.1"), []byte("a fixed release"), 0o644)
	w.writeSpec("")
	testHosts = rollouttest.FileDialer{Dir: filepath.Join(w.dir, "sim")}
	t.Cleanup(func() { testHosts = nil })
	t.Chdir(w.dir) // a hint's relative files (--out back.plan) land here
	return w
}

// mustPlan plans the spec into PLAN: a plan made, blocked or not.
func (w *hintWorld) mustPlan(words ...string) {
	w.t.Helper()
	if code := w.run(append([]string{"plan", "SPEC", "--out", "PLAN"}, words...)...); code > 1 {
		w.t.Fatalf("plan: exit %d\n%s", code, w.lastErr)
	}
}

const hintSpec = `name: hints
hosts: [h1, h2]
sysctl:
  net.core.rmem_max: 8388608
relay:
  port: 7788
  so_rcvbuf: 4194304
  release:
    version: 1.8.0
    artifact: relayd
  service:
    manager: command
    start: [/opt/relay/bin/relay-service, start]
    stop: [/opt/relay/bin/relay-service, stop]
    pid_file: /opt/relay/run/relayd.pid
`

// writeSpec writes the spec with extra appended (sections of its own).
func (w *hintWorld) writeSpec(extra string) { w.edit(func(string) string { return hintSpec + extra }) }

func (w *hintWorld) edit(f func(string) string) {
	old, _ := os.ReadFile(w.spec)
	os.WriteFile(w.spec, []byte(f(string(old))), 0o644)
}

func (w *hintWorld) sim(name string) *rollouttest.Sim {
	s, err := rollouttest.LoadSim(filepath.Join(w.dir, "sim", name+".json"))
	if err != nil {
		w.t.Fatal(err)
	}
	return s
}

func (w *hintWorld) save(s *rollouttest.Sim) {
	if err := s.Save(filepath.Join(w.dir, "sim", s.Name+".json")); err != nil {
		w.t.Fatal(err)
	}
}

// change edits a Sim between commands, as an operator or a fault would.
func (w *hintWorld) change(name string, f func(*rollouttest.Sim)) {
	s := w.sim(name)
	f(s)
	w.save(s)
}

// run runs relayctl with words, SPEC and PLAN standing for the world's files.
func (w *hintWorld) run(words ...string) int {
	args := []string{"relayctl"}
	for _, a := range words {
		args = append(args, strings.NewReplacer("SPEC", w.spec, "PLAN", w.plan).Replace(a))
	}
	var out, errb bytes.Buffer
	code := run(args, strings.NewReader(""), &out, &errb)
	w.lastOut, w.lastErr = out.String(), errb.String()
	return code
}

// host is a host's line of the last receipt of plan.
func (w *hintWorld) host(plan, name string) rollout.HostReceipt {
	var rc rollout.FleetReceipt
	b, err := os.ReadFile(plan + ".receipt.json")
	if err != nil || json.Unmarshal(b, &rc) != nil {
		w.t.Fatalf("receipt of %s: %v", plan, err)
	}
	for _, h := range rc.Hosts {
		if h.Host == name {
			return h
		}
	}
	w.t.Fatalf("no %s in the receipt of %s", name, plan)
	return rollout.HostReceipt{}
}

// hintCase is one outcome and reason the engine ends a host with: how to
// make it (setup, then an apply), what the hint must name, the operator's
// part it asks for (fix, done before following it, nil for none), and the
// proof that following it made progress or said why nothing can.
type hintCase struct {
	name    string
	host    string // the host the case is about
	outcome rollout.Outcome
	next    string
	setup   func(w *hintWorld) []string // the apply's words
	follow  [][]string                  // the commands the hint names, in order
	fix     func(w *hintWorld)
	// moved checks the follow-up: state changed, or (code != 0) the
	// follow said why nothing can change.
	moved func(w *hintWorld, code int)
}

// applied: the host ends applied in the receipt of plan.
func applied(plan, host string) func(w *hintWorld, code int) {
	return func(w *hintWorld, code int) {
		if h := w.host(w.dir+"/"+plan, host); code != 0 || h.Outcome != rollout.Applied {
			w.t.Errorf("after the hint: exit %d, %s %s (%s)\n%s\n%s", code, host, h.Outcome, h.Reason, w.lastOut, w.lastErr)
		}
	}
}

func plain(w *hintWorld) []string { return []string{"apply", "PLAN"} }

// Every outcome and reason the engine ends a host with gets a next step;
// following the printed hint on a Sim fleet makes progress, or the hint
// says why nothing can (a rejected release: --resume is refused), and
// what does.
func TestEveryHintMovesForward(t *testing.T) {
	cases := []hintCase{
		{name: "unreachable in the run", host: "h2", outcome: rollout.Unreachable, next: rollout.NextResume,
			setup: func(w *hintWorld) []string {
				w.mustPlan()
				os.Rename(w.dir+"/sim/h2.json", w.dir+"/h2.away")
				return []string{"apply", "PLAN", "--waves", "100%"}
			},
			fix:    func(w *hintWorld) { os.Rename(w.dir+"/h2.away", w.dir+"/sim/h2.json") },
			follow: [][]string{{"apply", "PLAN", "--resume"}}, moved: applied("x.plan", "h2")},
		{name: "connection lost in the window", host: "h1", outcome: rollout.Failed, next: rollout.NextResume,
			setup: func(w *hintWorld) []string {
				w.change("h1", func(s *rollouttest.Sim) { s.CrashAfter = "restart" })
				w.mustPlan()
				return append(plain(w), "--reconnects", "0") // a host it cannot dial again
			},
			follow: [][]string{{"apply", "PLAN", "--resume"}}, moved: applied("x.plan", "h1")},
		{name: "a host key refused", host: "h1", outcome: rollout.Refused, next: rollout.NextFix,
			setup: func(w *hintWorld) []string {
				w.mustPlan()
				w.change("h1", func(s *rollouttest.Sim) { s.RefuseDial = "ssh: handshake failed: knownhosts: key mismatch" })
				return plain(w)
			},
			fix:    func(w *hintWorld) { w.change("h1", func(s *rollouttest.Sim) { s.RefuseDial = "" }) },
			follow: [][]string{{"apply", "PLAN", "--resume"}}, moved: applied("x.plan", "h1")},
		{name: "a stage that failed on the host", host: "h1", outcome: rollout.Failed, next: rollout.NextFix,
			setup: func(w *hintWorld) []string {
				w.mustPlan()
				w.change("h1", func(s *rollouttest.Sim) { s.FailOp, s.FailMsg = "keep", "write: No space left on device" })
				return plain(w)
			},
			fix:    func(w *hintWorld) { w.change("h1", func(s *rollouttest.Sim) { s.FailOp = "" }) },
			follow: [][]string{{"apply", "PLAN", "--resume"}}, moved: applied("x.plan", "h1")},
		{name: "drifted since the plan", host: "h1", outcome: rollout.Refused, next: rollout.NextNewPlan,
			setup: func(w *hintWorld) []string {
				w.mustPlan()
				w.change("h1", func(s *rollouttest.Sim) { s.Sysctls["net.core.rmem_default"] = "425984" })
				return plain(w)
			},
			follow: [][]string{{"plan", "SPEC", "--out", "PLAN"}, {"apply", "NEW"}}, moved: applied("x.plan", "h1")},
		{name: "blocked in the plan", host: "h1", outcome: rollout.Refused, next: rollout.NextUnblock,
			setup: func(w *hintWorld) []string {
				w.edit(func(s string) string {
					return strings.Replace(s, "  net.core.rmem_max: 8388608\n", "  net.core.rmem_max: 8388608\n  net.ipv4.ip_local_port_range: 1500 3000\n", 1)
				})
				for _, h := range []string{"h1", "h2"} {
					w.change(h, func(s *rollouttest.Sim) {
						s.Sysctls["net.ipv4.ip_local_port_range"], s.Sysctls["net.ipv4.ip_unprivileged_port_start"] = "32768 60999", "2000"
					})
				}
				w.mustPlan()
				return plain(w)
			},
			fix: func(w *hintWorld) { // what the blocker names: lower the host's unprivileged start
				for _, h := range []string{"h1", "h2"} {
					w.change(h, func(s *rollouttest.Sim) { s.Sysctls["net.ipv4.ip_unprivileged_port_start"] = "1024" })
				}
			},
			follow: [][]string{{"plan", "SPEC", "--out", "PLAN"}, {"apply", "NEW"}}, moved: applied("x.plan", "h1")},
		{name: "a value the kernel refused", host: "h1", outcome: rollout.RolledBack, next: rollout.NextSpec,
			setup: func(w *hintWorld) []string {
				w.mustPlan()
				w.change("h1", func(s *rollouttest.Sim) { s.RefuseValue = "net.core.rmem_max 8388608" })
				return plain(w)
			},
			fix: func(w *hintWorld) {
				w.edit(func(s string) string { return strings.Replace(s, "rmem_max: 8388608", "rmem_max: 4194304", 1) })
			},
			follow: [][]string{{"validate", "SPEC"}, {"plan", "SPEC", "--out", "PLAN"}, {"apply", "NEW"}}, moved: applied("x.plan", "h1")},
		{name: "a release that did not read back", host: "h1", outcome: rollout.RolledBack, next: rollout.NextSpec,
			setup: func(w *hintWorld) []string {
				w.mustPlan()
				w.change("h1", func(s *rollouttest.Sim) { s.IgnoreRB = true })
				return []string{"apply", "PLAN", "--verify-timeout", "300ms"}
			},
			fix: func(w *hintWorld) { // a fixed release, which takes its buffer
				w.edit(func(s string) string {
					return strings.Replace(s, "version: 1.8.0\n    artifact: relayd", "version: 1.8.1\n    artifact: relayd-1.8.1", 1)
				})
				w.change("h1", func(s *rollouttest.Sim) { s.IgnoreRB = false })
			},
			follow: [][]string{{"validate", "SPEC"}, {"plan", "SPEC", "--out", "PLAN"}, {"apply", "NEW"}}, moved: applied("x.plan", "h1")},
		{name: "not started after a release that did not read back", host: "h2", outcome: rollout.NotStarted, next: rollout.NextRejected,
			setup: func(w *hintWorld) []string {
				w.mustPlan()
				w.change("h1", func(s *rollouttest.Sim) { s.IgnoreRB = true })
				return []string{"apply", "PLAN", "--verify-timeout", "300ms"}
			},
			// Not --resume, which would deploy the release onto h1 again:
			// refused, touching nothing; a fixed release goes on.
			fix: func(w *hintWorld) {
				code := w.run("apply", "PLAN", "--resume")
				if code != 1 || !strings.Contains(w.lastErr, "failed on h1 and was rolled back there") || w.sim("h1").Restarts != 2 || w.sim("h2").Restarts != 0 {
					w.t.Fatalf("--resume after h1 failed: exit %d, h1 restarted %d times, h2 %d; want refused, nothing changed\n%s", code, w.sim("h1").Restarts, w.sim("h2").Restarts, w.lastErr)
				}
				w.edit(func(s string) string {
					return strings.Replace(s, "version: 1.8.0\n    artifact: relayd", "version: 1.8.1\n    artifact: relayd-1.8.1", 1)
				})
				w.change("h1", func(s *rollouttest.Sim) { s.IgnoreRB = false })
			},
			follow: [][]string{{"plan", "SPEC", "--out", "PLAN"}, {"apply", "NEW"}}, moved: applied("x.plan", "h2")},
		{name: "rolled back by the host itself", host: "h1", outcome: rollout.RolledBack, next: rollout.NextSpec,
			setup: func(w *hintWorld) []string {
				w.change("h1", func(s *rollouttest.Sim) { s.CrashAfter, s.IgnoreRB = "restart", true })
				w.mustPlan()
				// The run is cut off in the window and cannot come back; the
				// host's own read-back does not hold, and it rolls back.
				w.run("apply", "PLAN", "--reconnects", "0", "--verify-timeout", "300ms")
				return []string{"apply", "PLAN", "--resume"}
			},
			fix: func(w *hintWorld) {
				w.edit(func(s string) string {
					return strings.Replace(s, "version: 1.8.0\n    artifact: relayd", "version: 1.8.1\n    artifact: relayd-1.8.1", 1)
				})
				w.change("h1", func(s *rollouttest.Sim) { s.IgnoreRB = false })
			},
			follow: [][]string{{"validate", "SPEC"}, {"plan", "SPEC", "--out", "PLAN"}, {"apply", "NEW"}}, moved: applied("x.plan", "h1")},
		{name: "a rollback that failed", host: "h1", outcome: rollout.Failed, next: rollout.NextUndo,
			setup: func(w *hintWorld) []string {
				w.mustPlan()
				w.change("h1", func(s *rollouttest.Sim) {
					s.IgnoreRB, s.FailOp, s.FailMsg = true, "restore-link", "point /opt/relay/current back: Input/output error"
				})
				return []string{"apply", "PLAN", "--verify-timeout", "300ms"}
			},
			fix:    func(w *hintWorld) { w.change("h1", func(s *rollouttest.Sim) { s.FailOp = "" }) },
			follow: [][]string{{"apply", "PLAN", "--resume", "--recover", "rollback"}},
			moved: func(w *hintWorld, code int) {
				if h := w.host(w.plan, "h1"); h.Outcome != rollout.RolledBack || h.State != rollout.StateAsWas || w.sim("h1").Link != "/opt/relay/releases/1.7.0" {
					w.t.Errorf("after --recover rollback: %s (%s), link %s; want rolled back, as it was\n%s", h.Outcome, h.State, w.sim("h1").Link, w.lastErr)
				}
			}},
		{name: "a soak regression rolled back", host: "h1", outcome: rollout.RolledBack, next: rollout.NextRejected,
			setup: func(w *hintWorld) []string {
				w.writeSpec("rollout:\n  soak: {duration: 1s, interval: 250ms, baseline: 0s}\n")
				for _, h := range []string{"h1", "h2"} {
					w.change(h, func(s *rollouttest.Sim) {
						s.Load = map[string]*rollouttest.SimLoad{"1.7.0": {Datagrams: 2000}, "1.8.0": {Datagrams: 2000, Drops: 400}, "1.8.1": {Datagrams: 2000}}
					})
				}
				w.mustPlan()
				return plain(w)
			},
			// The hint names a fixed release, not --resume, which is
			// refused, says why, and changes nothing.
			fix: func(w *hintWorld) {
				code := w.run("apply", "PLAN", "--resume")
				if code != 1 || !strings.Contains(w.lastErr, "a soak judged this plan's release a regression") || w.sim("h1").Link != "/opt/relay/releases/1.7.0" || w.sim("h2").Restarts != 0 {
					w.t.Fatalf("--resume after a regression: exit %d, h1 on %s, h2 restarted %d times; want refused, nothing changed\n%s", code, w.sim("h1").Link, w.sim("h2").Restarts, w.lastErr)
				}
				w.edit(func(s string) string {
					return strings.Replace(s, "version: 1.8.0\n    artifact: relayd", "version: 1.8.1\n    artifact: relayd-1.8.1", 1)
				})
			},
			follow: [][]string{{"plan", "SPEC", "--out", "PLAN"}, {"apply", "NEW"}}, moved: applied("x.plan", "h2")},
		{name: "a soak regression kept", host: "h1", outcome: rollout.Applied, next: rollout.NextRejected,
			setup: func(w *hintWorld) []string {
				w.writeSpec("rollout:\n  soak: {duration: 1s, interval: 250ms, baseline: 0s, on_regression: keep}\n")
				w.change("h1", func(s *rollouttest.Sim) {
					s.Load = map[string]*rollouttest.SimLoad{"1.7.0": {Datagrams: 2000}, "1.8.0": {Datagrams: 2000, Drops: 400}}
				})
				w.mustPlan()
				return plain(w)
			},
			follow: [][]string{{"rollback", "PLAN", "--out", "back.plan"}},
			moved: func(w *hintWorld, code int) {
				back := filepath.Join(w.dir, "back.plan")
				if code != 0 || w.run("apply", back) != 0 || w.sim("h1").Link != "/opt/relay/releases/1.7.0" {
					w.t.Errorf("rollback of the kept host: exit %d, link %s\n%s\n%s", code, w.sim("h1").Link, w.lastOut, w.lastErr)
				}
			}},
		// A soak without traffic stops the rollout; --resume alone would
		// soak the next canary, still without players, and stop again: the
		// hint names --soak 0 (on without the evidence) and no_traffic.
		{name: "not started after a soak without traffic", host: "h2", outcome: rollout.NotStarted, next: rollout.NextResume,
			setup: func(w *hintWorld) []string {
				w.writeSpec("rollout:\n  soak: {duration: 1s, interval: 250ms, baseline: 0s}\n")
				w.mustPlan()
				return plain(w)
			},
			follow: [][]string{{"apply", "PLAN", "--resume", "--soak", "0"}}, moved: applied("x.plan", "h2")},
		{name: "a soak without traffic rolled back", host: "h1", outcome: rollout.RolledBack, next: rollout.NextWait,
			setup: func(w *hintWorld) []string {
				w.writeSpec("rollout:\n  soak: {duration: 1s, interval: 250ms, baseline: 0s, no_traffic: rollback}\n")
				w.mustPlan()
				return plain(w)
			},
			follow: [][]string{{"apply", "PLAN", "--resume", "--soak", "0"}}, moved: applied("x.plan", "h1")},
		{name: "another plan's window", host: "h1", outcome: rollout.Refused, next: rollout.NextOtherPlan,
			setup: func(w *hintWorld) []string {
				other := filepath.Join(w.dir, "other.yaml")
				os.WriteFile(other, []byte(strings.Replace(hintSpec, "name: hints", "name: other", 1)), 0o644)
				w.run("plan", other, "--out", w.dir+"/other.plan")
				w.mustPlan()
				w.change("h1", func(s *rollouttest.Sim) { s.DropIn = "restart" })
				w.run("apply", w.dir+"/other.plan", "--reconnects", "0")
				return plain(w)
			},
			follow: [][]string{{"apply", "THAT_PLAN", "--resume"}},
			moved: func(w *hintWorld, code int) {
				if h := w.host(w.dir+"/other.plan", "h1"); h.Outcome != rollout.Applied || h.Recovery != rollout.RecoveryCompletedByHost {
					w.t.Errorf("that plan's --resume: %s (%s)\n%s", h.Outcome, h.Recovery, w.lastErr)
				}
			}},
		{name: "another plan's window, its file not here", host: "h1", outcome: rollout.Refused, next: rollout.NextOtherPlan,
			setup: func(w *hintWorld) []string {
				other := filepath.Join(w.dir, "other.yaml")
				os.WriteFile(other, []byte(strings.Replace(hintSpec, "name: hints", "name: other", 1)), 0o644)
				os.Mkdir(w.dir+"/elsewhere", 0o755)
				w.run("plan", other, "--out", w.dir+"/elsewhere/other.plan")
				w.mustPlan()
				w.change("h1", func(s *rollouttest.Sim) { s.DropIn = "restart" })
				w.run("apply", w.dir+"/elsewhere/other.plan", "--reconnects", "0")
				return plain(w)
			},
			// The hint says no plan file here has that checksum, and the
			// way without it: check the host, then --clear-journal.
			fix: func(w *hintWorld) {
				want := "a run of plan other (checksum sha256:"
				if hint := hintLine(w.lastErr, "h1"); !strings.Contains(hint, want) || !strings.Contains(hint, "no plan file in "+w.dir+" has that checksum") || !strings.Contains(hint, "/var/lib/relayctl/journal") {
					w.t.Errorf("the hint does not name the plan, say none is in %s, or name the journal:\n%s", w.dir, hint)
				}
			},
			follow: [][]string{{"verify", "PLAN"}, {"apply", "PLAN", "--resume", "--clear-journal"}},
			// The journal is archived and the host goes on past it (here to
			// a new plan: the other plan's window changed it since x.plan).
			moved: func(w *hintWorld, code int) {
				if h := w.host(w.plan, "h1"); !strings.Contains(w.lastErr, "h1: the journal of plan other") || !strings.Contains(w.lastErr, "archived at your request") || h.Next == rollout.NextOtherPlan {
					w.t.Errorf("--clear-journal after checking the host: exit %d, %s (next %s)\n%s", code, h.Outcome, h.Next, w.lastErr)
				}
			}},
		{name: "the lock held", host: "h1", outcome: rollout.Refused, next: rollout.NextWait,
			setup: func(w *hintWorld) []string {
				w.mustPlan()
				w.change("h1", func(s *rollouttest.Sim) { s.LockBusy = true })
				return plain(w)
			},
			fix:    func(w *hintWorld) { w.change("h1", func(s *rollouttest.Sim) { s.LockBusy = false }) },
			follow: [][]string{{"apply", "PLAN", "--resume"}}, moved: applied("x.plan", "h1")},
		{name: "outside the window", host: "h1", outcome: rollout.Refused, next: rollout.NextWait,
			setup: func(w *hintWorld) []string {
				w.writeSpec("window:\n  not_before: 2001-01-01T00:00:00Z\n  not_after: 2001-01-01T01:00:00Z\n")
				w.mustPlan()
				return plain(w)
			},
			follow: [][]string{{"apply", "PLAN", "--resume", "--ignore-window"}}, moved: applied("x.plan", "h1")},
		{name: "players at the drain deadline", host: "h1", outcome: rollout.Skipped, next: rollout.NextPlayers,
			setup: func(w *hintWorld) []string {
				w.writeSpec("drain:\n  max_players: 0\n  deadline: 1s\n  poll: 100ms\n  on_deadline: skip\n")
				w.change("h1", func(s *rollouttest.Sim) { s.Players = []int{5} })
				w.change("h2", func(s *rollouttest.Sim) { s.Players = []int{0} })
				w.mustPlan()
				return []string{"apply", "PLAN", "--waves", "100%"}
			},
			fix:    func(w *hintWorld) { w.change("h1", func(s *rollouttest.Sim) { s.Players = []int{0} }) },
			follow: [][]string{{"apply", "PLAN", "--resume"}}, moved: applied("x.plan", "h1")},
		{name: "players at an aborting deadline", host: "h1", outcome: rollout.Refused, next: rollout.NextPlayers,
			setup: func(w *hintWorld) []string {
				w.writeSpec("drain:\n  max_players: 0\n  deadline: 1s\n  poll: 100ms\n  on_deadline: abort\n")
				w.change("h1", func(s *rollouttest.Sim) { s.Players = []int{5} })
				w.change("h2", func(s *rollouttest.Sim) { s.Players = []int{0} })
				w.mustPlan()
				return plain(w)
			},
			fix:    func(w *hintWorld) { w.change("h1", func(s *rollouttest.Sim) { s.Players = []int{0} }) },
			follow: [][]string{{"apply", "PLAN", "--resume"}}, moved: applied("x.plan", "h1")},
		{name: "a journal that cannot be read", host: "h1", outcome: rollout.Refused, next: rollout.NextJournal,
			setup: func(w *hintWorld) []string {
				w.mustPlan()
				w.change("h1", func(s *rollouttest.Sim) { s.Journal = "not a journal\n" })
				return plain(w)
			},
			follow: [][]string{{"verify", "PLAN"}, {"apply", "PLAN", "--resume", "--clear-journal"}}, moved: applied("x.plan", "h1")},
		{name: "not read when planned", host: "h2", outcome: rollout.NotPlanned, next: rollout.NextNewPlan,
			setup: func(w *hintWorld) []string {
				os.Rename(w.dir+"/sim/h2.json", w.dir+"/h2.away")
				w.mustPlan("--max-unreachable", "1")
				os.Rename(w.dir+"/h2.away", w.dir+"/sim/h2.json")
				return plain(w)
			},
			follow: [][]string{{"plan", "SPEC", "--out", "PLAN"}, {"apply", "NEW"}}, moved: applied("x.plan", "h2")},
		{name: "not started after a failure", host: "h2", outcome: rollout.NotStarted, next: rollout.NextResume,
			setup: func(w *hintWorld) []string {
				w.mustPlan()
				w.change("h1", func(s *rollouttest.Sim) { s.FailOp, s.FailMsg = "keep", "write: No space left on device" })
				return plain(w)
			},
			fix:    func(w *hintWorld) { w.change("h1", func(s *rollouttest.Sim) { s.FailOp = "" }) },
			follow: [][]string{{"apply", "PLAN", "--resume"}}, moved: applied("x.plan", "h2")},
	}
	seenNext := map[string]bool{}
	seenOutcome := map[rollout.Outcome]bool{}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := newHintWorld(t, "h1", "h2")
			w.run(c.setup(w)...)
			h := w.host(w.plan, c.host)
			if h.Outcome != c.outcome || h.Next != c.next {
				t.Fatalf("%s: got %s, next %q (%s); want %s, next %q\n%s\n%s", c.host, h.Outcome, h.Next, h.Reason, c.outcome, c.next, w.lastOut, w.lastErr)
			}
			seenNext[c.next], seenOutcome[c.outcome] = true, true
			hint := hintLine(w.lastErr, c.host)
			for _, cmd := range c.follow {
				named := "relayctl " + w.named(cmd)
				if !strings.Contains(hint, named) {
					t.Fatalf("the hint does not name %q:\n%s", named, hint)
				}
			}
			if c.fix != nil {
				c.fix(w)
			}
			code := 0
			for _, cmd := range c.follow {
				switch cmd[1] {
				case "THAT_PLAN":
					cmd = []string{cmd[0], w.dir + "/other.plan", cmd[2]}
				case "NEW": // made in the world's plan file
					cmd = []string{cmd[0], "PLAN"}
				}
				code = w.run(cmd...)
			}
			c.moved(w, code)
		})
	}
	for _, n := range rollout.Nexts {
		if !seenNext[n] {
			t.Errorf("no case ends with next %q", n)
		}
	}
	for _, o := range rollout.Outcomes {
		if !seenOutcome[o] && o != rollout.Unchanged && o != rollout.Staged {
			t.Errorf("no case ends with outcome %q", o)
		}
	}
}

// named is a command as a hint names it: SPEC and PLAN its files, but a
// file to write (--out) as the hint leaves it for the operator to choose.
func (w *hintWorld) named(cmd []string) string {
	var out []string
	for i, a := range cmd {
		switch {
		case i > 0 && cmd[i-1] == "--out":
		case a == "SPEC":
			a = w.spec
		case a == "THAT_PLAN": // the other plan's file, found by its checksum
			a = w.dir + "/other.plan"
		case a == "PLAN":
			a = w.plan
		case a == "NEW": // a new plan, the file the hint leaves to the operator
			a = "PLAN"
		}
		out = append(out, a)
	}
	return strings.Join(out, " ")
}

// hintLine is the hint that names host, from relayctl's stderr.
func hintLine(stderr, host string) string {
	for _, l := range strings.Split(stderr, "\n") {
		if strings.HasPrefix(l, "relayctl: hint: ") && strings.Contains(l, host) {
			return l
		}
	}
	return ""
}
