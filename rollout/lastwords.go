package rollout

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/relayctl/relayctl/plans"
)

// lastWords keeps the relay's own account of a window that failed, in the
// receipt and at the end of the failure's reason, where the operator
// looks first: systemd's journal of the unit, or under the command
// manager the end of the relay's log (relay.service.log) when the
// read-back found the relay not running. A relay that started and then
// died says why there, not in its start's output, which the start's
// failure quotes already.
func (hr *hostRun) lastWords(ctx context.Context) {
	hr.unitLog(ctx, hr.stopped)
	if tail := lastLines(hr.res.UnitLog, 4); tail != "" {
		hr.failure = fmt.Errorf("%w; its journal ends: %s", hr.failure, tail)
		return
	}
	svc := hr.p.Relay.Service
	if svc.Manager != "command" || svc.Log == "" || hr.res.After == nil || hr.res.After.Service.Running {
		return
	}
	err := hr.host.Run(ctx, []Op{op("relay-log", svc.Log)}, func(_ int, r Result) error {
		hr.res.RelayLog = r.Value
		return nil
	})
	var oe *OpError
	switch {
	case errors.As(err, &oe):
		hr.failure = fmt.Errorf("%w; its log could not be read: %s", hr.failure, plans.Visible(oe.Msg))
	case err == nil && strings.TrimSpace(hr.res.RelayLog) != "":
		hr.failure = fmt.Errorf("%w; its log ends: %s", hr.failure, logEnd(hr.res.RelayLog))
	}
}

// logEnd is what a reason quotes of a relay's log: its last 4 lines,
// joined with " | "; from the line a Go program's crash begins with
// (panic:, fatal error:, or a signal's name) when the end holds one, since
// what follows it is a stack trace.
func logEnd(log string) string {
	var lines []string
	for _, l := range strings.Split(log, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	from := max(0, len(lines)-4)
	for i, l := range lines {
		if strings.HasPrefix(l, "panic: ") || strings.HasPrefix(l, "fatal error: ") || goSignal(l) {
			from = i
			break
		}
	}
	end := min(len(lines), from+4)
	return plans.Visible(strings.Join(lines[from:end], " | "))
}

// goSignal is the line Go's runtime starts a crash by a signal with:
// "SIGSEGV: segmentation violation".
func goSignal(l string) bool {
	name, _, ok := strings.Cut(l, ": ")
	if !ok || len(name) < 5 || !strings.HasPrefix(name, "SIG") {
		return false
	}
	return strings.Trim(name[3:], "ABCDEFGHIJKLMNOPQRSTUVWXYZ") == ""
}
