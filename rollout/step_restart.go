package rollout

import (
	"strconv"
	"strings"

	"github.com/relayctl/relayctl/plans"
)

// restart switches the relay once, the only moment players notice: with
// systemctl restart for a unit, the spec's stop then start commands (argv,
// no shell), or, where the plan says handoff, the spec's handoff command:
// the running relay passes its socket and lobbies to the new release. Its
// undo runs after every other undo: a restart of the restored release, a
// handoff back to it, or a stop if the relay was not running.
type restart struct {
	noStep
	svc        plans.PlanService
	wasRunning bool
	planned    bool // the plan restarts (false: a target step, for checks only)
	handoff    bool
	reload     bool // the plan reloads: the service re-applies its buffer on the socket it has
	// store: systemctl restart with the socket and lobbies kept in the
	// unit's file-descriptor store; clearStore: "window" or "rollback", when
	// that restart empties the store first (plans.HostPlan.ClearStore).
	store      bool
	clearStore string
}

func (s restart) describe() plans.Step {
	if s.reload {
		how := "systemctl reload " + s.svc.Name
		if s.svc.Manager == "command" {
			how = plans.Argv(s.svc.Reload)
		}
		return plans.Step{Phase: plans.PhaseWindow, Kind: KindReload, Title: "reload the service once (same process, same socket): " + how, Undo: s.undoText()}
	}
	if s.handoff {
		return plans.Step{Phase: plans.PhaseWindow, Kind: KindHandoff, Title: "hand the relay over once (same socket, lobbies kept): " + plans.Argv(s.svc.Handoff), Undo: s.undoText()}
	}
	how := "systemctl restart " + s.svc.Name
	switch {
	case s.svc.Manager == "command":
		how = plans.Argv(s.svc.Stop) + ", then " + plans.Argv(s.svc.Start)
	case s.store:
		how += ", its socket and lobbies kept in systemd's store"
	case s.clearStore == "window":
		how = "systemctl stop " + s.svc.Name + ", its file-descriptor store emptied, then systemctl restart " + s.svc.Name
	}
	return plans.Step{Phase: plans.PhaseWindow, Kind: KindRestart, Title: "restart relay once: " + how, Undo: s.undoText()}
}

// undoText says what undo does (below), and what it costs the players:
// the switch back is a second switch.
func (s restart) undoText() string {
	switch {
	case s.reload && s.svc.Manager == "systemd":
		return "systemctl reload-or-restart " + s.svc.Name + " with the old config back: the same process and socket, unless the reload had stopped the service"
	case s.reload:
		return "restart the service once more (" + plans.Argv(s.svc.Stop) + ", then " + plans.Argv(s.svc.Start) + ") with the old config back: a restart, every player cut"
	case s.clearStore == "rollback" && s.wasRunning:
		return "systemctl stop " + s.svc.Name + ", its file-descriptor store emptied, then systemctl restart " + s.svc.Name + " on the old release: every player cut again"
	case s.handoff:
		return "hand the relay back to the old release (" + plans.Argv(s.svc.Handoff) + "; same socket, lobbies kept); if the handoff itself failed, the old relay still serves and nothing is undone"
	case s.wasRunning && s.store:
		return "systemctl restart " + s.svc.Name + " on the old release, its socket and lobbies kept in systemd's store where the old release takes them"
	case s.wasRunning && s.svc.Manager == "command":
		return "restart the relay once more on the old release (" + plans.Argv(s.svc.Stop) + ", then " + plans.Argv(s.svc.Start) + "): every lobby cut again"
	case s.wasRunning:
		return "systemctl restart " + s.svc.Name + " once more on the old release: every lobby cut again"
	}
	return "stop the relay again (it was not running)"
}

func (s restart) do() []Op {
	switch {
	case s.reload:
		return []Op{s.service("reload")}
	case s.handoff:
		return []Op{s.service("handoff")}
	case s.clearStore == "window":
		return s.cleared()
	}
	return []Op{s.service("restart")}
}

// starter is a switch that can start the planned release on its own: what
// completing a window does when its switch was done and no relay runs.
type starter interface{ start() []Op }

// start starts the planned release whatever the switch (a handoff or a
// reload needs a running relay): the manager's restart, from an empty
// store when the window empties it.
func (s restart) start() []Op {
	if s.clearStore == "window" {
		return s.cleared()
	}
	return []Op{s.service("restart")}
}

// cleared is a restart from an empty store: stop (which empties it on
// systemd 252), clear what a preserved store (254+) kept, then start the
// release, which binds its own socket.
func (s restart) cleared() []Op {
	return []Op{s.service("stop"), op("clear-fdstore", s.svc.Name), s.serviceOp("restart")}
}

// undo: a reload's is a reload with the config put back (systemd's
// reload-or-restart, which starts a service the reload stopped); the
// command manager restarts, which needs nothing of the reload to have
// worked.
func (s restart) undo() []Op {
	switch {
	case s.reload && s.svc.Manager == "systemd":
		return []Op{s.service("reload-or-restart")}
	case s.clearStore == "rollback" && s.wasRunning:
		return s.cleared()
	case s.handoff:
		return []Op{s.service("handoff")}
	case s.wasRunning:
		return []Op{s.service("restart")}
	}
	return []Op{s.service("stop")}
}

// traits: the switch. A handoff that failed left the old relay serving its
// socket (the new process gives it back), so there is nothing to undo; a
// failed restart may have stopped the relay, so it restarts the restored
// release.
func (s restart) traits() traits { return traits{switches: true, handsOver: s.handoff} }

// service is the restart, stop or handoff primitive for the relay's
// manager; its answer is the host clock when the relay stopped.
func (s restart) service(verb string) Op {
	o := s.serviceOp(verb)
	o.clock = true
	return o
}

func (s restart) serviceOp(verb string) Op {
	if s.svc.Manager == "systemd" {
		return op(verb, "systemd", s.svc.Name)
	}
	if verb == "handoff" || verb == "reload" {
		argv := s.svc.Handoff
		if verb == "reload" {
			argv = s.svc.Reload
		}
		o := op(verb, "command", strconv.Itoa(len(argv)))
		o.Argv = append(o.Argv, argv...)
		return o
	}
	o := op(verb, "command", strconv.Itoa(len(s.svc.Stop)))
	o.Argv = append(o.Argv, s.svc.Stop...)
	if verb == "restart" {
		o.Args = append(o.Args, strconv.Itoa(len(s.svc.Start)))
		o.Argv = append(o.Argv, s.svc.Start...)
	}
	return o
}

func (s restart) checks(c *checkCtx) []Check {
	out := []Check{check("relay running", "true", strconv.FormatBool(c.after.Service.Running))}
	if s.reload && s.planned && c.before != nil {
		// A reload keeps the process and every socket: the same pid and
		// inodes before and after are the proof it was not a restart.
		out = append(out, check("service reloaded, not restarted (pid)", strconv.Itoa(c.before.Service.PID), strconv.Itoa(c.after.Service.PID)),
			check("service sockets kept (ss inodes)", inodes(c.before.Socket), inodes(c.after.Socket)))
		return out
	}
	if s.planned && c.before != nil && c.before.Service.Running {
		got := "same pid " + strconv.Itoa(c.after.Service.PID)
		if c.after.Service.PID != c.before.Service.PID {
			got = "new pid"
		}
		out = append(out, check("relay restarted", "new pid", got))
	}
	// A restart through the store keeps the socket: the same inode, and
	// the new relay says it took the socket from the store and the state
	// the old one saved when it stopped.
	if s.store && s.planned && c.before != nil {
		out = append(out, check("relay socket kept in systemd's store (ss inode)", strconv.FormatUint(c.before.Socket.Inode, 10), strconv.FormatUint(c.after.Socket.Inode, 10)))
		from, state, took := "unknown", "unknown", "unknown"
		if st := c.after.RelayStatus; st != nil && st.Read {
			from, state, took = st.SocketFrom, st.FDStoreState, strconv.Itoa(st.HandoffFromPID)
		}
		out = append(out, check("relay /status socket from", "fdstore", from),
			check("relay /status lobbies restored from", "final", state),
			check("relay /status took over from pid", strconv.Itoa(c.before.Service.PID), took))
	}
	// A handoff keeps the socket: the same inode before and after is the
	// proof, and the new relay names the one it took over from.
	if s.handoff && s.planned && c.before != nil {
		out = append(out, check("relay socket kept (ss inode)", strconv.FormatUint(c.before.Socket.Inode, 10), strconv.FormatUint(c.after.Socket.Inode, 10)))
		from := "unknown"
		if st := c.after.RelayStatus; st != nil && st.Read {
			from = strconv.Itoa(st.HandoffFromPID)
		}
		out = append(out, check("relay /status took over from pid", strconv.Itoa(c.before.Service.PID), from))
	}
	// systemctl restart sets NRestarts to 0; systemd restarting a relay
	// that died since (Restart=on-failure) counts it up. A relay that flaps
	// is not one that started.
	if s.svc.Manager == "systemd" && s.planned && c.before != nil {
		out = append(out, check("systemd restarts of "+s.svc.Name+" on its own since the window", "0", strconv.Itoa(c.after.Service.Restarts)))
	}
	return out
}

// hostChecks: the relay runs, a new process where the plan restarts a
// running one (a reload keeps its process: nothing to tell apart), from the
// folder of the release this plan leaves it on (runsFrom).
func (s restart) hostChecks(c *checkCtx) []HostCheck {
	old := "-"
	if s.planned && !s.reload && c.before != nil && c.before.Service.Running && c.before.Service.PID > 0 {
		old = strconv.Itoa(c.before.Service.PID)
	}
	return []HostCheck{{Kind: "pid", Args: []string{old, runsFrom(c.p, c.h)}}}
}

// runsFrom is the release folder the relay runs from once host h's window
// is done, as its plan planned it: the folder its switch points the link
// at (for a rollback plan, the release the window it undoes replaced, not
// the spec's: releaseFor), or, where the plan keeps the release, the one
// the link pointed at when the plan was made; "-" (any) for a plan that
// ships no release. The host judges a window it ends alone by this: a
// check against the spec's release would roll a completed rollback back.
func runsFrom(p *plans.Plan, h *plans.HostPlan) string {
	switch {
	case p.Relay.Kind == plans.ReleaseKindNone:
		return "-"
	case h.Release.Action != plans.ReleaseKeep:
		return releaseFor(p, h).dir
	case h.Previous.CurrentLink != "":
		return plans.ResolveLink(p.Paths.Current, h.Previous.CurrentLink)
	}
	return "-"
}

func (s restart) restored(c *checkCtx) []Check {
	return []Check{check("relay running", strconv.FormatBool(c.before.Service.Running), strconv.FormatBool(c.after.Service.Running))}
}

// inodes are a socket fact's inodes, every socket's, in order.
func inodes(f plans.SocketFact) string {
	if !f.Found {
		return "no socket"
	}
	if len(f.All) == 0 {
		return strconv.FormatUint(f.Inode, 10)
	}
	var out []string
	for _, s := range f.All {
		out = append(out, strconv.FormatUint(s.Inode, 10))
	}
	return strings.Join(out, " ")
}
