// Package agenttest builds relayctl's host agent from the source in this
// tree, once per test process, for tests that run it on real hosts (the
// machine itself, the lab's): they hold the agent as it is now, not the
// build `make agent` last embedded (agentbin's own test holds that to the
// source).
package agenttest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"

	"github.com/relayctl/relayctl/agentbin"
)

var (
	once  sync.Once
	built agentbin.Set
	err   error
)

// Set is the agent built for this machine, as relayctl ships it (static,
// reproducible flags).
func Set(t testing.TB) agentbin.Set {
	t.Helper()
	once.Do(func() { built, err = build() })
	if err != nil {
		t.Fatalf("build relayctl-agent: %v", err)
	}
	return built
}

// MustSet is Set for a TestMain, which has no testing.TB.
func MustSet() agentbin.Set {
	once.Do(func() { built, err = build() })
	if err != nil {
		panic("build relayctl-agent: " + err.Error())
	}
	return built
}

func build() (agentbin.Set, error) {
	dir, err := os.MkdirTemp("", "relayctl-agent-build-")
	if err != nil {
		return nil, err
	}
	out := filepath.Join(dir, agentbin.FileName(runtime.GOARCH))
	c := exec.Command("go", "build", "-trimpath", "-buildvcs=false", "-ldflags", "-s -w", "-o", out, "github.com/relayctl/relayctl/cmd/relayctl-agent")
	c.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH)
	if b, err := c.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("%v: %s", err, b)
	}
	b, err := os.ReadFile(out)
	os.RemoveAll(dir)
	if err != nil {
		return nil, err
	}
	return agentbin.Set{agentbin.New(runtime.GOARCH, b)}, nil
}
