package shellhost

import (
	"bufio"
	"bytes"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/relayctl/relayctl/agentbin"
	"github.com/relayctl/relayctl/rollout"
	"github.com/relayctl/relayctl/rollout/hostfacts"
	"github.com/relayctl/relayctl/uplink"
)

// A session on a host runs relayctl's host agent (package agent), a
// static binary relayctl carries for each machine it supports
// (agentbin). The session's command is boot.sh, a few lines of POSIX
// shell: it execs the agent from STATE_DIR/agent/SHA256 once the bytes
// there hash to the sha256 this relayctl was built with, in folders root
// alone can change, or answers NEED: relayctl then sends the agent, in
// the smallest form the host can take (a zstd patch from an agent it
// keeps, which the kept agent decodes itself; gzip; the bytes as they
// are), in a command of its own, and runs the session again.

//go:embed boot.sh
var bootScript string

// errNeedAgent is the bootstrap's NEED: the host lacks this agent.
type errNeedAgent struct {
	machine string
	kept    []string // sha256s of agents the host keeps
	gzip    bool
}

func (e *errNeedAgent) Error() string {
	return "the host lacks relayctl's agent for " + e.machine
}

// shas are the agent's sha256s for the bootstrap: MACHINE=SHA256, ...
func shas(set agentbin.Set) string {
	var out []string
	for _, b := range set {
		out = append(out, b.Machine+"="+b.SHA256)
	}
	return strings.Join(out, ",")
}

// bootCommand is the bootstrap in mode (serve, or install and its words).
func (h *Host) bootCommand(mode ...string) string {
	return Command(append([]string{"sh", "-c", bootScript, "relayctl-boot", h.state, shas(h.agents), mode[0]}, mode[1:]...)...)
}

// errNoState is the bootstrap's NONE: a read-only call found no state
// folder on the host, so no agent and nothing to read (and nothing made).
var errNoState = errors.New("the host has no relayctl state folder")

// bootAnswer reads a first line that is the bootstrap's, not the agent's:
// NEED (the agent is not there), UNSAFE (its folder is not root's alone),
// NONE (no state folder, for a read-only call). It returns nil for any
// other line, which is the agent's.
func bootAnswer(line, state string) error {
	word, rest, _ := strings.Cut(line, " ")
	switch word {
	case "NEED":
		f := strings.Fields(rest)
		if len(f) != 3 {
			return fmt.Errorf("start relayctl's agent: unexpected answer %q", hostfacts.Clip(line))
		}
		e := &errNeedAgent{machine: f[0], gzip: f[2] == "gzip"}
		if f[1] != "-" {
			e.kept = strings.Split(f[1], ",")
		}
		return e
	case "UNSAFE":
		return fmt.Errorf("%w: %s: make it owned by root and writable by root alone", rollout.ErrUnsafeHost, rest)
	case "FAILED":
		return fmt.Errorf("start relayctl's agent: %s", rest)
	case "NONE":
		return errNoState
	}
	return nil
}

// install sends the host the agent for its machine, in the smallest form
// it can take, in a command of its own.
func (h *Host) install(ctx context.Context, need *errNeedAgent) error {
	bin, ok := h.agents.For(need.machine)
	if !ok {
		return fmt.Errorf("%w: relayctl carries no agent for a %s host (it has one for %s)", rollout.ErrUnsafeHost, need.machine, machines(h.agents))
	}
	enc, base, data := h.agentForm(bin, need)
	mode := []string{"install", bin.SHA256, strconv.Itoa(len(data)), enc}
	if base != "" {
		mode = append(mode, base)
	}
	var out, errb bytes.Buffer
	err := h.count.Run(ctx, h.bootCommand(mode...), bytes.NewReader(data), &out, &errb)
	line, _, _ := strings.Cut(out.String(), "\n")
	if line == "INSTALLED" {
		if h.cache != nil {
			h.cache.PutRelease(bin.Bytes) // the base of the next patch
		}
		return nil
	}
	if berr := bootAnswer(line, h.state); berr != nil {
		return berr
	}
	return fmt.Errorf("install relayctl's agent: %v %s", err, strings.TrimSpace(errb.String()))
}

// agentForm is the form the agent goes in: a zstd patch from an agent the
// host keeps whose bytes relayctl still has, else gzip where the host has
// it, else the bytes as they are.
func (h *Host) agentForm(bin agentbin.Binary, need *errNeedAgent) (enc, base string, data []byte) {
	if h.cache != nil {
		for _, k := range need.kept {
			old, err := h.cache.Release(k)
			if err != nil {
				continue
			}
			if p, err := encodeAgent(uplink.ZstdPatch, bin.SHA256+" "+k, bin.Bytes, old); err == nil {
				return uplink.ZstdPatch, k, p
			}
		}
	}
	if need.gzip {
		if p, err := encodeAgent(uplink.Gzip, bin.SHA256, bin.Bytes, nil); err == nil {
			return uplink.Gzip, "", p
		}
	}
	return uplink.Raw, "", bin.Bytes
}

func machines(set agentbin.Set) string {
	var out []string
	for _, b := range set {
		out = append(out, b.Machine)
	}
	return strings.Join(out, ", ")
}

// withAgent runs call, and once more after installing the agent when the
// host lacked it; what, when not "", says what failed.
func (h *Host) withAgent(ctx context.Context, what string, call func() error) error {
	err := call()
	var need *errNeedAgent
	if errors.As(err, &need) {
		if err = h.install(ctx, need); err == nil {
			err = call()
		}
	}
	if err != nil && what != "" {
		var oe *rollout.OpError
		if !errors.As(err, &oe) && !strings.HasPrefix(err.Error(), what+": ") {
			err = fmt.Errorf("%s: %w", what, err)
		}
	}
	return err
}

// firstLine reads a session's first answer line, the bootstrap's or the
// agent's.
func firstLine(r *bufio.Reader, state string) (string, error) {
	line, err := readLine(r)
	if err != nil {
		return "", err
	}
	if berr := bootAnswer(line, state); berr != nil {
		return "", berr
	}
	return line, nil
}
