package hostfacts

import (
	"strconv"
	"strings"

	"github.com/relayctl/relayctl/plans"
	"github.com/relayctl/relayctl/rollout"
	"github.com/relayctl/relayctl/tune"
)

// MaxObserveOutput bounds what one observe may print: every file in it is
// bounded on the host already, this is the last line of defence.
const MaxObserveOutput = 16 << 20

// Args are observe's words for the query: the request's argv lines.
func Args(q rollout.Query) ([]string, error) {
	if err := q.Validate(); err != nil {
		return nil, err
	}
	a := []string{strconv.Itoa(q.Port), q.Paths.Current, q.Paths.Releases, q.Paths.RelayConfig, q.Paths.StateDir,
		q.Service.Manager, q.Service.Name, q.Service.PIDFile, strings.Join(q.Keys, ","), q.Control, strconv.Itoa(plans.MaxHostFile), unitDropIn(q.Service),
		orDash(q.Program), orDash(strings.Join(q.Files, ",")), "-"}
	switch {
	case q.LastApply:
		a[len(a)-1] = "last-apply"
	case q.UndoOf != "":
		a[len(a)-1] = "undo:" + strings.TrimPrefix(q.UndoOf, "sha256:")
	}
	return append(a, tune.SysctlDirs...), nil
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// unitDropIn is the drop-in relayctl owns for a systemd relay, or "-".
func unitDropIn(s plans.PlanService) string {
	if s.Manager != "systemd" {
		return "-"
	}
	return plans.UnitDropInPath(s.Name)
}
