package plans

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/relayctl/relayctl/tune"
)

// Fingerprinted lists, sorted by name, every observed fact a plan's actions
// depend on, so that equal fingerprints mean apply derives the same steps.
// Counters and PIDs are left out: they move without anything drifting.
// The current link (at link) counts by the folder it names: "releases/1.7.0"
// and "/opt/relay/releases/1.7.0" beside /opt/relay/current are one place,
// not drift.
func Fingerprinted(f *Facts, keys []string, link string) []FactEntry {
	var e []FactEntry
	add := func(name, value string) { e = append(e, FactEntry{Name: name, Value: value}) }
	add("kernel", f.Kernel)
	add("ssh session in initial network namespace", strconv.FormatBool(f.InitialNetns))
	for _, k := range keys {
		sf := f.Sysctls[k]
		v := "(absent)"
		if sf.Exists {
			v = tune.Normalize(sf.Value)
			if !sf.Writable {
				v += " (read-only)"
			}
		}
		add("sysctl "+k, v)
	}
	for _, cf := range f.SysctlFiles {
		add("file "+cf.Path, "sha256:"+sha256Text(cf.Content))
	}
	current := "(none)"
	if f.Release.CurrentRaw != "" {
		current = ResolveLink(link, f.Release.CurrentRaw)
	}
	add("release current", current)
	add("releases installed", orNone(strings.Join(f.Release.Installed, " ")))
	add("relay running", strconv.FormatBool(f.Service.Running))
	add("relay executable", orNone(f.Release.RunningExe))
	rb := "(no socket)"
	if f.Socket.Found {
		rb = strconv.FormatUint(f.Socket.Rcvbuf, 10)
	}
	for _, s := range f.Socket.All[min(1, len(f.Socket.All)):] { // the first is the one above
		rb += " " + strconv.FormatUint(s.Rcvbuf, 10)
	}
	add("relay socket rb", rb)
	hand := "(none)"
	if st := f.RelayStatus; st != nil && st.Read && st.Handoff != "" {
		hand = st.Handoff + " on " + st.HandoffSocket
	}
	add("relay handoff", hand)
	// The masked content's hash: the same whether the facts came from the
	// host or from relayctl facts --json, which masks the secrets.
	switch {
	case f.Config.Unsafe != "":
		add("relay config", "(not read: "+f.Config.Unsafe+")")
	case f.Config.Exists:
		add("relay config", "sha256:"+MaskedSHA256(f.Config.Content))
	default:
		add("relay config", "(absent)")
	}
	for _, p := range sortedKeys(f.Files) {
		ff := f.Files[p]
		switch {
		case ff.Unsafe != "":
			add("file written "+p, "(not read: "+ff.Unsafe+")")
		case ff.Exists:
			add("file written "+p, "sha256:"+sha256Text(MaskGeneric(ff.Content)))
		default:
			add("file written "+p, "(absent)")
		}
	}
	if d := f.UnitDropIn; d != nil {
		v := "(absent)"
		if d.Exists {
			v = "sha256:" + sha256Text(d.Content)
		}
		add("unit drop-in", v)
	}
	sort.Slice(e, func(i, j int) bool { return e[i].Name < e[j].Name })
	return e
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Fingerprint hashes the fingerprinted facts.
func Fingerprint(e []FactEntry) string {
	h := sha256.New()
	for _, f := range e {
		fmt.Fprintf(h, "%s=%s\n", f.Name, f.Value)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// Drift is one fact that changed since the plan was made.
type Drift struct {
	Name     string `json:"name"`
	Planned  string `json:"planned"`
	Observed string `json:"observed"`
}

// Diff lists the facts that differ between the plan's and a new observation.
func Diff(planned, observed []FactEntry) []Drift {
	pm, om := map[string]string{}, map[string]string{}
	var names []string
	for _, f := range planned {
		pm[f.Name] = f.Value
		names = append(names, f.Name)
	}
	for _, f := range observed {
		om[f.Name] = f.Value
		if _, ok := pm[f.Name]; !ok {
			names = append(names, f.Name)
		}
	}
	sort.Strings(names)
	var d []Drift
	for _, n := range names {
		pv, pok := pm[n]
		ov, ook := om[n]
		if !pok {
			pv = "(not present)"
		}
		if !ook {
			ov = "(not present)"
		}
		if pv != ov {
			d = append(d, Drift{Name: n, Planned: pv, Observed: ov})
		}
	}
	return d
}
