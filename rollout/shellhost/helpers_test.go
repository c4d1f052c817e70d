package shellhost

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"context"
	"strconv"

	"github.com/relayctl/relayctl/internal/agenttest"

	"github.com/relayctl/relayctl/plans"
	"github.com/relayctl/relayctl/rollout"
)

// The tests here speak rollout's types through short names.
type (
	SSHIdentity = rollout.SSHIdentity
	Op          = rollout.Op
	Result      = rollout.Result
	Query       = rollout.Query
)

var (
	ErrLocked     = rollout.ErrLocked
	ErrUnsafeHost = rollout.ErrUnsafeHost
)

type OpError = rollout.OpError

func op(kind string, args ...string) Op { return Op{Kind: kind, Args: args} }

// keepOp offers bytes by their sha256, as the engine's keep does.
func keepOp(path, sha string, data []byte, mode string) Op {
	o := op("keep", path, sha, strconv.Itoa(len(data)), mode)
	o.Data, o.Offer = data, true
	return o
}

// restartOp is the command manager's restart: the stop then the start words.
func restartOp(svc plans.PlanService) Op {
	o := op("restart", "command", strconv.Itoa(len(svc.Stop)), strconv.Itoa(len(svc.Start)))
	o.Argv = append(append([]string{}, svc.Stop...), svc.Start...)
	return o
}

// lock takes the host lock: a session's first primitive.
func lock(h *Host, owner string) error {
	return h.Run(context.Background(), []Op{op("lock", owner)}, nil)
}

func unlock(h *Host) error { return h.Run(context.Background(), []Op{op("unlock")}, nil) }

// observeOn reads h's facts (in its session when locked).
func observeOn(h *Host, q Query) (*plans.Facts, error) {
	var f *plans.Facts
	err := h.Run(context.Background(), []Op{{Kind: "observe", Query: &q}}, func(_ int, r Result) error {
		f = r.Facts
		return nil
	})
	return f, err
}

// observeWith reads a host's facts over r without its lock, as plan does
// (the agent kept in a state folder of the test's own).
func observeWith(t *testing.T, r Runner, name string, q Query) (*plans.Facts, error) {
	return observeOn(New(name, runnerConn{r}, filepath.Join(rootDir(t), "state"), agenttest.Set(t), nil), q)
}

type runnerConn struct{ Runner }

func (runnerConn) Close() error          { return nil }
func (runnerConn) Address() string       { return "local" }
func (runnerConn) User() string          { return "root" }
func (runnerConn) Identity() SSHIdentity { return SSHIdentity{User: "root"} }

// agentCmd is the agent built from this tree run as a session of its own
// on this machine (its binary in a folder only root can write).
func agentCmd(t *testing.T, state string) *exec.Cmd {
	t.Helper()
	bin := filepath.Join(rootDir(t), "relayctl-agent")
	if err := os.WriteFile(bin, agenttest.Set(t)[0].Bytes, 0o700); err != nil {
		t.Fatal(err)
	}
	return exec.Command(bin, "serve", state)
}
