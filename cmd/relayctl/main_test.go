package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/relayctl/relayctl/internal/invprogram"
	"github.com/relayctl/relayctl/internal/lab"
	"github.com/relayctl/relayctl/plans"
	"github.com/relayctl/relayctl/rollout"
	"github.com/relayctl/relayctl/rollout/rollouttest"
	"github.com/relayctl/relayctl/tune"
)

// The CLI's behaviour (exit codes, messages, artifacts) is pinned by the
// scripts in testdata/script. UPDATE_SCRIPTS=1 rewrites their golden files.
//
// Tests never read the machine's own /etc/relayctl/allowed_signers: the
// scripts get $WORK/etc/relayctl/allowed_signers (absent unless a script
// writes it), the in-process tests a path that does not exist unless a test
// sets systemAllowedSigners itself. The same for the machine's list of
// inventory programs (systemInventoryPrograms): a script's is
// $WORK/etc/relayctl/inventory-programs.
//
// Nor the user's release cache (wire.Cache): the in-process tests share
// one under the temporary folder (a test that needs its own sets
// XDG_CACHE_HOME), each script has $WORK/.cache.
func TestMain(m *testing.M) {
	systemAllowedSigners = filepath.Join(os.TempDir(), "relayctl-tests-have-no-system-signers", "allowed_signers")
	systemInventoryPrograms = filepath.Join(os.TempDir(), "relayctl-tests-have-no-system-signers", "inventory-programs")
	os.Setenv("XDG_CACHE_HOME", filepath.Join(os.TempDir(), "relayctl-tests-cache"))
	testscript.Main(removingBuilds{m}, map[string]func(){
		"relayctl": func() {
			if v := os.Getenv(testSystemSigners); v != "" {
				systemAllowedSigners = v
			}
			if v := os.Getenv(testSystemPrograms); v != "" {
				systemInventoryPrograms = v
			}
			if v := os.Getenv(testCache); v != "" {
				os.Setenv("XDG_CACHE_HOME", v)
			}
			if d := os.Getenv(testSimDir); d != "" {
				testHosts = rollouttest.FileDialer{Dir: d}
			}
			os.Exit(run(os.Args, os.Stdin, os.Stdout, os.Stderr))
		},
	})
}

// removingBuilds runs the tests, then removes what they built to run
// (relayd's builds, relayctl's): the builds outlive every test.
type removingBuilds struct{ m *testing.M }

func (r removingBuilds) Run() int {
	code := lab.RunRemovingBuilds(r.m)
	if relayctlBuild.path != "" {
		os.RemoveAll(filepath.Dir(relayctlBuild.path))
	}
	return code
}

// testSystemSigners is how a script's relayctl learns its system
// allowed_signers file.
const testSystemSigners = "RELAYCTL_TEST_SYSTEM_ALLOWED_SIGNERS"

// testSystemPrograms is how a script's relayctl learns its system list of
// inventory programs.
const testSystemPrograms = "RELAYCTL_TEST_SYSTEM_INVENTORY_PROGRAMS"

// testCache is a script's release cache folder ($WORK/.cache).
const testCache = "RELAYCTL_TEST_CACHE"

// testSimDir is where a script's simulated hosts live ("sim" makes them):
// with it set, relayctl talks to them instead of over SSH.
const testSimDir = "RELAYCTL_TEST_SIM_DIR"

func TestScripts(t *testing.T) {
	testscript.Run(t, testscript.Params{
		Dir:           "testdata/script",
		UpdateScripts: os.Getenv("UPDATE_SCRIPTS") == "1",
		Setup: func(env *testscript.Env) error {
			// The kernel the shipped list of sysctls comes from, for cmpenv.
			env.Setenv("KNOWN_KERNEL", tune.KnownSysctlsKernel())
			env.Setenv(testSystemSigners, filepath.Join(env.WorkDir, "etc", "relayctl", "allowed_signers"))
			env.Setenv(testSystemPrograms, filepath.Join(env.WorkDir, "etc", "relayctl", "inventory-programs"))
			env.Setenv(testCache, filepath.Join(env.WorkDir, ".cache"))
			// The repository's example files, as the README names them.
			return copyExamples(filepath.Join("..", "..", "plans", "examples"), filepath.Join(env.WorkDir, "plans", "examples"))
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){"relayctl-exit": relayctlExit, "plan-edit": planEdit, "json": jsonField,
			"sim": simHosts, "json-set": jsonSet, "build-relayd": buildRelayd},
		Condition: func(cond string) (bool, error) {
			if cond == "root" {
				return os.Geteuid() == 0, nil
			}
			return false, fmt.Errorf("unknown condition %q", cond)
		},
	})
}

// relayctlExit is "relayctl-exit N ARGS...": run relayctl and want exit
// status N, since plan's 2 and verify's 3 are answers, not failures.
func relayctlExit(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) < 2 {
		ts.Fatalf("usage: relayctl-exit CODE ARGS...")
	}
	want, err := strconv.Atoi(args[0])
	if err != nil {
		ts.Fatalf("relayctl-exit: bad code %q", args[0])
	}
	cmd := exec.Command("relayctl", args[1:]...)
	cmd.Dir = ts.Getenv("WORK")
	cmd.Env = append(os.Environ(), "PATH="+ts.Getenv("PATH"), testSystemSigners+"="+ts.Getenv(testSystemSigners), testSimDir+"="+ts.Getenv(testSimDir),
		testCache+"="+ts.Getenv(testCache), testSystemPrograms+"="+ts.Getenv(testSystemPrograms))
	cmd.Stdout, cmd.Stderr = ts.Stdout(), ts.Stderr()
	got := 0
	if err := cmd.Run(); err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			ts.Fatalf("relayctl-exit: %v", err)
		}
		got = ee.ExitCode()
	}
	if (got == want) == neg {
		ts.Fatalf("relayctl %s: exit %d, want %d", strings.Join(args[1:], " "), got, want)
	}
}

// planEdit is "plan-edit PLAN FIELD JSON": set one field of a plan file
// (a dotted path into its JSON; a number indexes a list) and recompute its
// checksum, as anyone who can write the plan file can.
func planEdit(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 3 {
		ts.Fatalf("usage: plan-edit PLAN FIELD JSON")
	}
	file := ts.MkAbs(args[0])
	doc := setJSON(ts, file, args[1], args[2])
	// Re-encode through the plan type, so the bytes and checksum are the
	// ones relayctl itself would write for this content.
	b, err := json.Marshal(doc)
	ts.Check(err)
	var p plans.Plan
	ts.Check(json.Unmarshal(b, &p))
	out, err := p.JSON()
	ts.Check(err)
	ts.Check(os.WriteFile(file, out, 0o600))
}

// jsonSet is "json-set FILE FIELD JSON": set one field of a JSON file, as
// plan-edit does, without a checksum (a simulated host's faults).
func jsonSet(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 3 {
		ts.Fatalf("usage: json-set FILE FIELD JSON")
	}
	file := ts.MkAbs(args[0])
	b, err := json.MarshalIndent(setJSON(ts, file, args[1], args[2]), "", "  ")
	ts.Check(err)
	ts.Check(os.WriteFile(file, b, 0o600))
}

// setJSON reads file and sets the value at a dotted path in it.
func setJSON(ts *testscript.TestScript, file, path, value string) map[string]any {
	data, err := os.ReadFile(file)
	ts.Check(err)
	var doc map[string]any
	ts.Check(json.Unmarshal(data, &doc))
	var v any
	ts.Check(json.Unmarshal([]byte(value), &v))
	var cur any = doc
	keys := strings.Split(path, ".")
	for i, k := range keys {
		last := i == len(keys)-1
		switch c := cur.(type) {
		case map[string]any:
			if last {
				c[k] = v
			} else {
				cur = c[k]
			}
		case []any:
			n, err := strconv.Atoi(k)
			ts.Check(err)
			if last {
				c[n] = v
			} else {
				cur = c[n]
			}
		default:
			ts.Fatalf("%s: %s is not an object or a list", file, strings.Join(keys[:i], "."))
		}
	}
	return doc
}

// buildRelayd is "build-relayd OUT [GO BUILD FLAGS...]": go build of
// cmd/relayd into OUT with those flags, as an operator might build it.
func buildRelayd(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) < 1 || neg {
		ts.Fatalf("usage: build-relayd OUT [FLAGS...]")
	}
	ts.Check(lab.BuildRelaydWith(context.Background(), ts.MkAbs(args[0]), args[1:]...))
}

// simHosts is "sim NAME...": simulated hosts on the incident's defaults
// (rollouttest.NewSim), kept in $WORK/sim, that relayctl then talks to.
func simHosts(ts *testscript.TestScript, neg bool, args []string) {
	dir := ts.MkAbs("sim")
	ts.Check(os.MkdirAll(dir, 0o700))
	for _, name := range args {
		ts.Check(rollouttest.NewSim(name).Save(filepath.Join(dir, name+".json")))
	}
	ts.Setenv(testSimDir, dir)
}

// jsonField is "json FILE PATH WANT": decode FILE (or stdout, the last
// command's) as JSON and check the value at PATH (dotted; a number indexes
// a list; "@len" is the length of a list or object) equals WANT, itself JSON.
// So --json output is checked field by field as a program reads it.
func jsonField(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 3 {
		ts.Fatalf("usage: json FILE|stdout PATH WANT")
	}
	data := ts.ReadFile(args[0])
	var doc any
	if err := json.Unmarshal([]byte(data), &doc); err != nil {
		ts.Fatalf("json: %s is not JSON: %v", args[0], err)
	}
	cur := doc
	if args[1] != "." {
		for _, k := range strings.Split(args[1], ".") {
			switch c := cur.(type) {
			case map[string]any:
				if k == "@len" {
					cur = float64(len(c))
					continue
				}
				v, ok := c[k]
				if !ok {
					ts.Fatalf("json: %s has no %q at %s", args[0], k, args[1])
				}
				cur = v
			case []any:
				if k == "@len" {
					cur = float64(len(c))
					continue
				}
				n, err := strconv.Atoi(k)
				if err != nil || n < 0 || n >= len(c) {
					ts.Fatalf("json: %s: index %q out of range (%d items) at %s", args[0], k, len(c), args[1])
				}
				cur = c[n]
			default:
				ts.Fatalf("json: %s: %q of a %T at %s", args[0], k, cur, args[1])
			}
		}
	}
	var want any
	if err := json.Unmarshal([]byte(args[2]), &want); err != nil {
		ts.Fatalf("json: want %q is not JSON: %v", args[2], err)
	}
	got, _ := json.Marshal(cur)
	wantB, _ := json.Marshal(want)
	if (string(got) == string(wantB)) == neg {
		ts.Fatalf("json: %s %s = %s, want %s", args[0], args[1], got, wantB)
	}
}

// copyExamples copies the files of the repository's plans/examples.
func copyExamples(src, dst string) error {
	entries, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// loadPlan is readCheckedPlan for the tests' plans, whose hosts come from
// no inventory program.
func loadPlan(file string) (rollout.Checked, []byte, error) {
	return readCheckedPlan(file, invprogram.Allow{})
}
