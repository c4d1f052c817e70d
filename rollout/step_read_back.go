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
	status := "; the relay's /status on " + s.control + " agrees"
	if s.control == "" {
		status = " (the service has no control plane to ask)"
	}
	return plans.Step{Phase: plans.PhaseVerify, Kind: KindReadBack, Value: strconv.Itoa(s.expected),
		Title: titlef("read back: ss in the service's network namespace shows rb %d on every one of its sockets on UDP port %d%s", s.expected, s.port, status)}
}

func (s readBack) checks(c *checkCtx) []Check {
	rb := "no socket"
	if c.after.Socket.Found {
		rb = strconv.FormatUint(c.after.Socket.Rcvbuf, 10)
	}
	out := []Check{check(fmt.Sprintf("ss rb on udp/%d", s.port), strconv.Itoa(s.expected), rb)}
	// Every other socket of the service on the port (workers, IPv6) is
	// checked by the same kernel rule.
	for _, o := range c.after.Socket.All[min(1, len(c.after.Socket.All)):] {
		out = append(out, check(fmt.Sprintf("ss rb on udp/%d %s (pid %d)", s.port, o.Local, o.PID), strconv.Itoa(s.expected), strconv.FormatUint(o.Rcvbuf, 10)))
	}
	if st := c.after.RelayStatus; st != nil && st.Read {
		out = append(out,
			check("relay /status so_rcvbuf_effective", strconv.Itoa(s.expected), strconv.Itoa(st.SORcvbufEffective)),
			check("relay /status version", s.version, st.Version))
	}
	return out
}

func (s readBack) hostChecks(*checkCtx) []HostCheck {
	return []HostCheck{{Kind: "rb", Args: []string{strconv.Itoa(s.expected)}}}
}

func (s readBack) restored(c *checkCtx) []Check {
	if !c.before.Socket.Found {
		return nil
	}
	return []Check{check(fmt.Sprintf("ss rb on udp/%d", s.port), strconv.FormatUint(c.before.Socket.Rcvbuf, 10), strconv.FormatUint(c.after.Socket.Rcvbuf, 10))}
}
