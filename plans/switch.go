package plans

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/relayctl/relayctl/relay/capability"
	"github.com/relayctl/relayctl/tune"
)

// Switches of the relay in a window.
const (
	SwitchRestart = "restart"
	SwitchHandoff = "handoff"
	SwitchReload  = "reload"
	SwitchFDStore = "fdstore" // systemctl restart, the socket and lobbies kept in systemd's store
)

// planSwitch decides how the window switches the relay, and says why: a
// reload where the service re-applies its buffer on the socket it has and
// nothing else needs a restart; under systemd a restart that keeps the
// socket and lobbies in the unit's store where relay and release can
// (storeSwitch); under the command manager a handoff (the running relay
// passes its socket and lobbies to the new release, which sets its own
// SO_RCVBUF on it) where the spec asks for one and both support it; a
// plain restart otherwise.
func planSwitch(h *HostPlan, p *Plan, f *Facts) {
	noReload := ""
	if p.Relay.Service.ReloadKeepsSocket {
		if noReload = reloadBlocked(h, p, f); noReload == "" {
			h.Switch, h.SwitchWhy = SwitchReload, reloadWhy(p)
			return
		}
	}
	if p.Relay.Service.Manager == "systemd" && p.Relay.Control != "" {
		storeSwitch(h, p, f)
	} else {
		h.Switch, h.SwitchWhy = restartOrHandoff(p, h, f)
	}
	if noReload != "" {
		h.SwitchWhy += "; not a reload: " + noReload
	}
}

// reloadBlocked says why a reload would not give the service its planned
// buffer, "" when it would: the service re-applies its buffer on reload
// (relay.service.reload_keeps_socket) with setsockopt on the socket it
// has, so a reload covers the config files and the sysctls, not a new
// release, a unit drop-in or rmem_default (read only when a socket is
// made).
func reloadBlocked(h *HostPlan, p *Plan, f *Facts) string {
	switch {
	case h.Release.Action != ReleaseKeep:
		return "a new release (" + h.Release.Planned + ") needs a restart"
	case !f.Service.Running:
		return "the service is not running"
	case !f.Socket.Found:
		return "no socket of the service was found to keep"
	case p.Relay.SORcvbuf == 0:
		return "the service never calls setsockopt(SO_RCVBUF) (relay.so_rcvbuf is 0): its sockets take rmem_default when they are made, so only new sockets get the planned buffer"
	}
	for _, fc := range h.Files {
		if r, _ := Role(fc.Role); fc.Change && r.Reload {
			return "the " + fc.Role + " " + fc.Path + " changes, which systemd reads only at a restart"
		}
	}
	return ""
}

func reloadWhy(p *Plan) string {
	how := "systemctl reload " + p.Relay.Service.Name
	if p.Relay.Service.Manager == "command" {
		how = Argv(p.Relay.Service.Reload)
	}
	return how + ": the service re-applies its buffer on reload with the socket it has (relay.service.reload_keeps_socket), and nothing else this window changes needs a restart; the read-back checks the same socket inode"
}

// restartOrHandoff decides between a restart and a handoff (planSwitch).
func restartOrHandoff(p *Plan, h *HostPlan, f *Facts) (string, string) {
	svc := p.Relay.Service
	st := f.RelayStatus
	version, caps := p.releaseTarget(h)
	switch {
	case svc.Manager == "systemd":
		return SwitchRestart, "systemctl restart " + svc.Name + ": its new sockets take the planned buffer (a service without a control plane cannot say it would keep them through systemd's store)"
	case len(svc.Handoff) == 0:
		return SwitchRestart, "the spec gives no relay.service.handoff command"
	case !slices.Contains(caps, capability.Handoff):
		return SwitchRestart, fmt.Sprintf("release %s does not hand over (its capabilities: %s)", version, orNone(strings.Join(caps, " ")))
	case !f.Service.Running:
		return SwitchRestart, "the relay is not running: it is started"
	case st == nil || !st.Read:
		return SwitchRestart, "the running relay's /status could not be read, so whether it hands over is unknown"
	case st.Handoff != handoffProtocol(capability.Handoff):
		return SwitchRestart, fmt.Sprintf("the running relay %s does not offer a handoff (its /status says %q); after this restart it will", st.Version, st.Handoff)
	case st.HandoffSocket != p.Relay.HandoffSocket:
		return SwitchRestart, fmt.Sprintf("the running relay listens for a handoff on %s, the spec says %s; after this restart they agree", orNone(st.HandoffSocket), p.Relay.HandoffSocket)
	}
	return SwitchHandoff, fmt.Sprintf("the running relay (%s) and release %s both hand over (%s) on %s: same socket, lobbies kept", st.Version, version, capability.Handoff, p.Relay.HandoffSocket)
}

// handoffProtocol is the protocol of a capability ("handoff=unix/1" →
// "unix/1"), as /status names it.
func handoffProtocol(c string) string {
	_, proto, _ := strings.Cut(c, "=")
	return proto
}

// StoreRestartGap is the gap a restart through systemd's store is planned
// with: the time the port has no reader while systemd stops one relayd and
// starts the next, datagrams queueing meanwhile in the stored socket at
// its old rb. Measured on the lab's systemd 252 (docs/restart.md): a gap
// of 55 ms median, systemctl restart 50-85 ms; 100 ms leaves room.
const StoreRestartGap = 100 * time.Millisecond

// storeSwitch decides a systemd relay's switch: a restart that keeps the
// socket and lobbies in systemd's file-descriptor store when the running
// relay keeps them there, the release can take them, and the unit has a
// store; otherwise a plain restart, and whether it must empty the store
// first (a release that binds its own socket cannot start while systemd
// holds the port) or on rollback.
func storeSwitch(h *HostPlan, p *Plan, f *Facts) {
	svc, st := p.Relay.Service, f.RelayStatus
	how := "systemctl restart " + svc.Name
	version, capList := p.releaseTarget(h)
	releaseTakes := slices.Contains(capList, capability.FDStore)
	unitHas := f.Service.FDStoreMax > 0
	runningKeeps := st != nil && st.Read && st.FDStore == fdstoreProtocol()
	caps := orNone(strings.Join(capList, " "))
	h.Switch = SwitchRestart
	switch {
	case !f.Service.Running:
		h.SwitchWhy = how + ": the relay is not running: it is started"
		if releaseTakes && unitHas {
			h.ClearStore = "rollback"
		}
	case st == nil || !st.Read:
		h.SwitchWhy = how + ": the running relay's /status could not be read, so whether it keeps its socket in systemd's store is unknown"
		h.ClearStore = "rollback"
	case runningKeeps && !releaseTakes:
		h.ClearStore = "window"
		h.SwitchWhy = fmt.Sprintf("%s: the running relay keeps its socket in systemd's store, but release %s cannot take it from there (its capabilities: %s): the window stops the relay, empties the store and starts %s on a socket of its own; every player is cut", how, version, caps, version)
	case runningKeeps && listenChanges(h):
		h.SwitchWhy = how + ": the listen address changes, so relayd binds a new socket and drops the stored one"
	case runningKeeps:
		h.Switch = SwitchFDStore
		h.SwitchWhy = fmt.Sprintf("%s: the running relay (%s) keeps its socket and lobbies in systemd's file-descriptor store and release %s takes them from it (%s): same socket, lobbies kept, this release's SO_RCVBUF set on it", how, st.Version, version, capability.FDStore)
		planStoreGap(h, p)
	case releaseTakes && unitHas:
		h.ClearStore = "rollback"
		h.SwitchWhy = fmt.Sprintf("%s: the running relay %s does not keep its socket in systemd's store (its /status says fdstore %q): this window restarts; the next keeps the socket", how, st.Version, st.FDStore)
	case releaseTakes:
		h.SwitchWhy = fmt.Sprintf("%s: the unit %s has no file-descriptor store (FileDescriptorStoreMax=0): install relay/dist/relayd.service (docs/systemd.md), and the window after keeps the socket", how, svc.Name)
	default:
		h.SwitchWhy = fmt.Sprintf("%s: release %s does not keep its socket in systemd's store (its capabilities: %s)", how, version, caps)
	}
}

func fdstoreProtocol() string { return handoffProtocol(capability.FDStore) }

// listenChanges reports whether the plan changes the relay config's listen
// key.
func listenChanges(h *HostPlan) bool {
	if h.Undo != nil {
		return h.Undo.Listen // a rollback's: its record of the window
	}
	return ListenChanges(h)
}

// ListenChanges reports whether a host plan's relay config changes the
// listen key (for the receipt's record of the window: Undo.Listen).
func ListenChanges(h *HostPlan) bool {
	fc := h.File(RoleRelayConfig)
	if fc == nil {
		return false
	}
	for _, k := range fc.Changes {
		if k.Key == RelaydKeys.Listen && k.Change != KeyKept {
			return true
		}
	}
	return false
}

// planStoreGap checks the old rb against the promise over a restart's gap:
// until the new release sets its own SO_RCVBUF on the stored socket, the
// datagrams that arrive queue in it at the old buffer.
func planStoreGap(h *HostPlan, p *Plan) {
	if p.Capacity == nil || !h.Readback.CurrentFound {
		return
	}
	promise := *p.Capacity
	promise.Stall = max(promise.Stall, StoreRestartGap)
	c := tune.CheckCapacity(promise, int(h.Readback.Current))
	h.StoreGap = &c
	if !c.Meets {
		h.Warnings = append(h.Warnings, fmt.Sprintf("the restart through systemd's store leaves the port without a reader for about %s, datagrams queueing in the socket at its old rb %d, which holds %s at the promised rate: some will be dropped in the gap; raise the old buffer first (a window that changes only the sysctl and SO_RCVBUF), or drain the host",
			tune.Millis(promise.Stall), h.Readback.Current, tune.Millis(c.Absorbs)))
	}
}

// SwitchLabel is how a review names a switch.
func SwitchLabel(sw string) string {
	if sw == SwitchFDStore {
		return "restart, socket kept in systemd's store"
	}
	return sw
}
