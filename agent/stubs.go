package agent

// Families another change fills in.
var (
	relayPrimitives = map[string]handler{"observe": observe, "sample": notYet, "relay-drain": notYet}
)

func notYet(s *session, r *request) answer { return errf("%s: not in this agent yet", r.kind) }
