package rollout

import (
	"fmt"
	"strconv"

	"github.com/relayctl/relayctl/plans"
)

// readBack is the proof: the relay socket's rb as ss shows it in the relay
// process's own network namespace, and the relay's /status agreeing. Its
// primitives are the engine's observe, so it has none of its own.
type readBack struct {
	noStep
	port, expected   int
	control, version string
}

func (s readBack) describe() plans.Step {
	return plans.Step{Phase: plans.PhaseVerify, Kind: KindReadBack, Value: strconv.Itoa(s.expected),
		Title: titlef("read back: ss in the relay's network namespace shows rb %d on UDP port %d; the relay's /status on %s agrees", s.expected, s.port, s.control)}
}

func (s readBack) checks(c *checkCtx) []Check {
	rb := "no socket"
	if c.after.Socket.Found {
		rb = strconv.FormatUint(c.after.Socket.Rcvbuf, 10)
	}
	out := []Check{check(fmt.Sprintf("ss rb on udp/%d", s.port), strconv.Itoa(s.expected), rb)}
	if st := c.after.RelayStatus; st != nil && st.Read {
		out = append(out,
			check("relay /status so_rcvbuf_effective", strconv.Itoa(s.expected), strconv.Itoa(st.SORcvbufEffective)),
			check("relay /status version", s.version, st.Version))
	}
	return out
}

func (s readBack) restored(c *checkCtx) []Check {
	if !c.before.Socket.Found {
		return nil
	}
	return []Check{check(fmt.Sprintf("ss rb on udp/%d", s.port), strconv.FormatUint(c.before.Socket.Rcvbuf, 10), strconv.FormatUint(c.after.Socket.Rcvbuf, 10))}
}
