package rollouttest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/relayctl/relayctl/rollout"
)

// FileDialer hands out Sims kept as JSON files in Dir, one a host
// (NAME.json): a Sim outlives the process, so a CLI script can plan, apply
// and verify the same simulated fleet in separate commands. A host without
// a file is unreachable. Each Sim is saved when it is closed.
type FileDialer struct{ Dir string }

var _ rollout.HostDialer = FileDialer{}

// DialHost loads the named Sim.
func (d FileDialer) DialHost(ctx context.Context, name string) (rollout.Host, error) {
	s, err := LoadSim(d.file(name))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("dial tcp %s:22: connection refused", name)
	}
	if err != nil {
		return nil, err
	}
	if s.RefuseDial != "" {
		return nil, rollout.Refusal(errors.New(s.RefuseDial))
	}
	return savedOnClose{s, d.file(name)}, nil
}

func (d FileDialer) file(name string) string { return filepath.Join(d.Dir, name+".json") }

// Save writes the Sim's state (not its channels, fetch function or the
// primitives it saw).
func (s *Sim) Save(file string) error {
	s.mu.Lock()
	b, err := json.MarshalIndent(s, "", "  ")
	s.mu.Unlock()
	if err != nil {
		return err
	}
	return os.WriteFile(file, b, 0o600)
}

// LoadSim reads a Sim saved with Save.
func LoadSim(file string) (*Sim, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	s := NewSim("")
	if err := json.Unmarshal(b, s); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return s, nil
}

type savedOnClose struct {
	*Sim
	file string
}

func (h savedOnClose) Close() error {
	h.Sim.Close()
	return h.Sim.Save(h.file)
}
