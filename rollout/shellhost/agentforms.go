package shellhost

import (
	"sync"

	"github.com/relayctl/relayctl/uplink"
)

// agentForms holds each form of an agent once encoded, by the form, the
// agent's sha256 and the patch base's: every host that needs the agent
// in that form is sent the same bytes, so a fleet of hosts new to this
// relayctl costs one compression, not one a host (8 MB through gzip is
// about half a CPU-second).
var agentForms struct {
	mu sync.Mutex
	m  map[string]*agentForm
}

type agentForm struct {
	once sync.Once
	data []byte
	err  error
}

// encodeAgent is uplink.Encode(form, bin, base), done once a key.
func encodeAgent(form, key string, bin, base []byte) ([]byte, error) {
	agentForms.mu.Lock()
	if agentForms.m == nil {
		agentForms.m = map[string]*agentForm{}
	}
	f, ok := agentForms.m[form+" "+key]
	if !ok {
		f = &agentForm{}
		agentForms.m[form+" "+key] = f
	}
	agentForms.mu.Unlock()
	f.once.Do(func() { f.data, f.err = uplink.Encode(form, bin, base) })
	return f.data, f.err
}
