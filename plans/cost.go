package plans

import "fmt"

// What each switch cost the bench's players on the lab (docs/restart.md:
// 64 players in lobbies of 8 at 60 Hz, 200-byte datagrams, 322,560
// deliveries planned per step, medians of 5 runs), in the bench's own
// units: deliveries lost, lobbies and players cut, the time no socket was
// bound or no process read it. Each Measured is quoted from
// docs/restart.md word for word, line breaks aside
// (TestSwitchCostsQuoteRestartMD), so the review says only what was
// measured.
var (
	// MeasuredRestart is a plain restart, through relay-service and
	// through relayctl apply.
	MeasuredRestart = "loses 672–1,050 deliveries of 322,560 (72–126 datagrams; 18–21 ms with no socket bound) and cuts all 8 lobbies and 64 players"
	// MeasuredHandoff is relayd's handoff through relayctl apply.
	MeasuredHandoff = "loses and cuts nothing with all 64 players playing, on the same socket"
	// MeasuredFDStore is a restart that keeps the socket in systemd's store.
	MeasuredFDStore = "loses nothing and cuts nobody"
)

// SwitchCost says what the window's switch of the relay costs its
// players, with what the lab measured for that switch, and what the drain
// gate does first.
func SwitchCost(p *Plan, h *HostPlan) string {
	var cost string
	switch {
	case !h.Restart:
		return "none: the window does not restart, hand over or reload the relay; its players keep playing"
	case h.Switch == SwitchHandoff:
		cost = "none measured: the running relay passes its socket and lobbies to the new release; on the lab a handoff " + MeasuredHandoff + " (docs/restart.md)"
	case h.Switch == SwitchFDStore:
		cost = "none measured: systemd keeps the socket and lobbies in its file-descriptor store across the restart; on the lab such a restart " + MeasuredFDStore + ", about 55 ms with no process reading the socket while datagrams queue at the old rb (docs/restart.md)"
	case h.Switch == SwitchReload:
		cost = "not measured by the bench: a reload keeps the process and its socket (the read-back checks the same pid and inodes); what its players notice is the service's own"
	default:
		cost = "every lobby and player the relay holds is cut: a restart ends the process and its socket; on the lab a plain restart " + MeasuredRestart + " (docs/restart.md)"
	}
	if d := p.Drain; d != nil {
		cost += fmt.Sprintf("; the drain gate first waits up to %v for at most %d players, then %s", d.Deadline, d.MaxPlayers, deadlineCost(d.OnDeadline, h.Switch))
	}
	return cost
}

// deadlineCost is what the drain gate's deadline policy does.
func deadlineCost(policy, sw string) string {
	switch policy {
	case DrainForce:
		if sw == SwitchRestart {
			return "switches anyway: a plain restart's cost, later"
		}
		return "switches anyway"
	case DrainSkip:
		return "leaves the host for a later run (skipped)"
	}
	return "refuses the host, changing nothing"
}
