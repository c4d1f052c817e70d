// Package agentbin carries relayctl's host agent (cmd/relayctl-agent),
// built for every machine relayctl ships it to, and says each build's
// sha256: a host runs the agent only once its bytes hash to the sha256
// this relayctl was built with (rollout/shellhost's bootstrap).
//
// The binaries are built by `make agent` into bin/ (static, reproducible:
// the same commit and Go toolchain give the same bytes), before relayctl
// itself; a relayctl built without them plans nothing and says how to
// build them.
package agentbin

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
)

//go:embed bin
var files embed.FS

// Binary is one build of the agent.
type Binary struct {
	Arch    string // GOARCH: amd64, arm64
	Machine string // what uname -m says on such a host: x86_64, aarch64
	SHA256  string
	Bytes   []byte
}

// Set is the agent built for each machine relayctl supports.
type Set []Binary

// Machines relayctl ships the agent to: GOARCH and uname -m.
var Machines = []struct{ Arch, Machine string }{{"amd64", "x86_64"}, {"arm64", "aarch64"}}

// FileName is a build's name in bin/.
func FileName(arch string) string { return "relayctl-agent-linux-" + arch }

// ErrNotBuilt is a relayctl built without its agent.
var ErrNotBuilt = errors.New("this relayctl was built without its host agent (bin/relayctl-agent-linux-*): build it with make build, or make agent before go build")

// Embedded is the agent this relayctl was built with.
func Embedded() (Set, error) {
	var set Set
	for _, m := range Machines {
		b, err := fs.ReadFile(files, "bin/"+FileName(m.Arch))
		if err != nil {
			return nil, fmt.Errorf("%w: %s missing", ErrNotBuilt, FileName(m.Arch))
		}
		set = append(set, New(m.Arch, b))
	}
	return set, nil
}

// New is a build of the agent for arch.
func New(arch string, b []byte) Binary {
	sum := sha256.Sum256(b)
	bin := Binary{Arch: arch, SHA256: hex.EncodeToString(sum[:]), Bytes: b}
	for _, m := range Machines {
		if m.Arch == arch {
			bin.Machine = m.Machine
		}
	}
	return bin
}

// For is the build for a host whose uname -m is machine.
func (s Set) For(machine string) (Binary, bool) {
	for _, b := range s {
		if b.Machine == machine {
			return b, true
		}
	}
	return Binary{}, false
}
