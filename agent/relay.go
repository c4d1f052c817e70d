package agent

import (
	"bytes"
	"strings"
)

// The relay's own family: observe (observe.go), the soak's sample of the
// relay socket's drop counters, and the drain gate through the relay's
// control plane. The relay is read inside its network namespace
// (netns.go, control.go).
var relayPrimitives = map[string]handler{"observe": observe, "sample": pSample, "relay-drain": pRelayDrain}

// maxDrainAnswer bounds the answer to a drain call: a status line and a
// short JSON body.
const maxDrainAnswer = 4 << 10

// pSample: BOUNDARY PID PORT CONTROL|-, DATA the relay socket's drop
// counters, framed as observe's: the host clock, ss, the namespace's UDP
// table and SNMP counters, and the relay's /status (unless -). ss without
// -p: the soak samples often, and -p reads every process's descriptors.
func pSample(s *session, r *request) answer {
	b, pid, port, control := r.arg(0), r.arg(1), r.arg(2), r.arg(3)
	switch {
	case !validBoundary(b):
		return errf("bad frame boundary")
	case !validPID(pid):
		return errf("bad pid")
	case !validPort(port):
		return errf("bad port")
	case control != "-" && !validControl(control):
		return errf("bad control address")
	}
	if !isDirFollowed("/proc/" + pid) {
		return errf("the relay (pid %s) is not running", pid)
	}
	f := &framer{boundary: b}
	f.line("clock", nowNanos(s))
	relayCounters(f, pid, port, false)
	if control != "-" {
		relayStatus(f, pid, control)
	}
	return dataAnswer(f.out.Bytes())
}

// pRelayDrain: PID HOST:PORT POST|DELETE, the relay's drain gate (no new
// lobbies) on or off through its control plane, in its network
// namespace: OK on an HTTP 200, else the answer's first line.
func pRelayDrain(s *session, r *request) answer {
	pid, control, verb := r.arg(0), r.arg(1), r.arg(2)
	switch {
	case !validPID(pid):
		return errf("bad pid")
	case verb != "POST" && verb != "DELETE":
		return errf("bad verb")
	case !validControl(control):
		return errf("bad control address")
	}
	b, _, err := controlCall(pid, control, verb+" /drain HTTP/1.0\r\n\r\n", maxDrainAnswer)
	if err != nil {
		return errf("%s /drain: %s", verb, err)
	}
	line, _, _ := bytes.Cut(b, []byte("\n"))
	line = bytes.TrimSuffix(line, []byte("\r"))
	if !httpOK(line) {
		if len(line) == 0 {
			line = []byte("no answer")
		}
		return errf("%s /drain: %s", verb, line)
	}
	return ok()
}

// httpOK: an HTTP status line that says 200.
func httpOK(line []byte) bool {
	f := strings.Fields(string(line))
	return len(f) >= 2 && strings.HasPrefix(f[0], "HTTP/") && f[1] == "200"
}
