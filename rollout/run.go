package rollout

import (
	"crypto/rand"
	"encoding/hex"
	"strings"
	"time"

	"github.com/relayctl/relayctl/internal/whoami"
	"github.com/relayctl/relayctl/plans"
)

// A run is one apply, resume or stage of a plan (and, later, a rollback):
// a record of its own, never overwritten. Its receipt, beside the plan and
// on each host it reached, says which run it was, who ran it, from where,
// with which relayctl, and each host the key it accepted.

// Kinds of run.
const (
	RunApply  = "apply"  // relayctl apply PLAN
	RunResume = "resume" // relayctl apply PLAN --resume: the one recovery command
	RunStage  = "stage"  // relayctl stage PLAN, apply --stage-only
)

// RunInfo is a run's identity, as every receipt records it: the run's id,
// its kind, who ran it and with what. Nothing in it is a secret.
type RunInfo struct {
	ID       string    `json:"run_id,omitempty"`
	Kind     string    `json:"kind,omitempty"`
	Operator *Operator `json:"operator,omitempty"`
	Relayctl *Build    `json:"relayctl,omitempty"`
}

// Operator is who ran relayctl, on which machine (internal/whoami).
type Operator struct {
	// User is the name of the user relayctl ran as ("unknown" when none
	// was found); UserFrom says where the name came from: whoami.FromPasswd,
	// FromNSS, FromEnv ($USER, a claim) or FromNone. UID is the kernel's,
	// which no one can claim. A receipt from before they were recorded has
	// neither.
	User     string `json:"user"`
	UID      *int   `json:"uid,omitempty"`
	UserFrom string `json:"user_from,omitempty"`
	// SudoUser is who ran it through sudo (SUDO_USER), when it ran so: a
	// claim of the environment, recorded as it was, not proven.
	SudoUser string `json:"sudo_user,omitempty"`
	Machine  string `json:"machine"`
}

// Who is the user as a person reads it: the name, the uid, and where the
// name came from unless /etc/passwd said it (whoami.Identity.String); the
// name alone from a receipt that has no uid.
func (o *Operator) Who() string {
	if o.UID == nil {
		return o.User
	}
	name := o.User
	if o.UserFrom == whoami.FromNone {
		name = ""
	}
	return whoami.Identity{UID: *o.UID, Name: name, Source: o.UserFrom}.String()
}

// Build is the relayctl that ran: its version and the commit it was built
// from ("" when the build did not say).
type Build struct {
	Version string `json:"version"`
	Commit  string `json:"commit,omitempty"`
}

// RunIDLayout is the time part of a run id: UTC to the millisecond, so
// run ids (and the receipt names made of them) sort as the runs began.
const RunIDLayout = "20060102T150405.000Z"

// NewRunID is a run id: when the run began and 32 random bits, e.g.
// 20261130T193916.123Z-3f9a2c1b.
func NewRunID(now time.Time) string {
	var b [4]byte
	rand.Read(b[:])
	return now.UTC().Format(RunIDLayout) + "-" + hex.EncodeToString(b[:])
}

// ValidRunID reports whether id has a run id's shape (and so is safe in a
// file name).
func ValidRunID(id string) bool {
	t, r, ok := strings.Cut(id, "Z-")
	if !ok || len(r) != 8 || strings.Trim(r, "0123456789abcdef") != "" {
		return false
	}
	_, err := time.Parse(RunIDLayout, t+"Z")
	return err == nil
}

// HostReceiptsKept is how many receipts a host keeps under
// /var/lib/relayctl/receipts (each with its filed journal, when it has
// one): the commit of a run removes the oldest beyond it.
const HostReceiptsKept = 100

// HostReceiptName is the name a run's receipt is filed under on a host
// (NAME.json, its journal NAME.journal): the run's id first, so the names
// sort as the runs began, then the plan and its checksum's first 12 hex
// digits.
func HostReceiptName(p *plans.Plan, runID string) string {
	sum := strings.TrimPrefix(p.Checksum, "sha256:")
	if len(sum) > 12 {
		sum = sum[:12]
	}
	return runID + "-" + p.Name + "-" + sum
}

// SSHIdentity is how a host's connection was made: the remote user, the
// key the host accepted (its type and SHA256 fingerprint, as ssh-keygen -l
// prints it) and the host key relayctl checked. Empty where the transport
// has none (a simulated host).
type SSHIdentity struct {
	User    string `json:"user,omitempty"`
	Key     string `json:"key,omitempty"`
	HostKey string `json:"host_key,omitempty"`
}
