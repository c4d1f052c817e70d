package main

import (
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"
)

// The CLI's behaviour (exit codes, messages, artifacts) is pinned by the
// scripts in testdata/script. UPDATE_SCRIPTS=1 rewrites their golden files.
func TestMain(m *testing.M) {
	testscript.Main(m, map[string]func(){
		"relayctl": func() { os.Exit(run(os.Args, os.Stdin, os.Stdout, os.Stderr)) },
	})
}

func TestScripts(t *testing.T) {
	testscript.Run(t, testscript.Params{
		Dir:           "testdata/script",
		UpdateScripts: os.Getenv("UPDATE_SCRIPTS") == "1",
		Cmds:          map[string]func(ts *testscript.TestScript, neg bool, args []string){"relayctl-exit": relayctlExit},
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
	cmd.Env = append(os.Environ(), "PATH="+ts.Getenv("PATH"))
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
