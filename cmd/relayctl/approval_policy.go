package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"time"
	"unicode"

	"github.com/urfave/cli/v2"

	"github.com/relayctl/relayctl/internal/trust"
	"github.com/relayctl/relayctl/internal/whoami"
	"github.com/relayctl/relayctl/plans"
	"github.com/relayctl/relayctl/plans/approval"
	"github.com/relayctl/relayctl/rollout"
)

// systemAllowedSigners is the machine's allowed_signers file: when it
// exists, apply and stage on this machine require a plan signed by a key
// it lists, whatever the flags and environment, unless --skip-approval
// says otherwise in so many words (and the receipt records it). A team
// turns approval on once, here, and no run can forget it. Tests point it
// elsewhere; nothing else changes it. The help names the machine's
// (machineAllowedSigners), whatever the tests point it at.
var systemAllowedSigners = machineAllowedSigners

const machineAllowedSigners = "/etc/relayctl/allowed_signers"

const envRequireApproval = "RELAYCTL_REQUIRE_APPROVAL"

// approvalFlags are apply's and stage's flags about who approved the plan.
func approvalFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "require-approval", Usage: "refuse the plan unless PLAN.sig is a signature of it by a key in this allowed_signers `FILE` (default: $" + envRequireApproval + ", else " + machineAllowedSigners + " when it exists)"},
		&cli.StringFlag{Name: "skip-approval", Usage: "run the plan unsigned although an allowed_signers file is configured, for this `REASON`, which the receipt records with who ran it"},
		&cli.StringFlag{Name: "signature", Usage: "the plan's signature `FILE` (default PLAN.sig)"},
		&cli.StringFlag{Name: "checksum", Usage: "refuse the plan unless its checksum is this `sha256:...` (copied from the review)"},
	}
}

// signersInForce is the allowed_signers file that decides, and what named
// it: the flag, else the environment, else the system file if it exists.
// "" when none is configured. The system file is looked up without
// following a link and any error but "does not exist" is one: a check
// that cannot tell whether approval is on must not take it as off.
func signersInForce(c *cli.Context) (file, from string, err error) {
	if c.IsSet("require-approval") {
		if c.String("require-approval") == "" {
			return "", "", errors.New("--require-approval needs the allowed_signers FILE")
		}
		return c.String("require-approval"), "--require-approval", nil
	}
	if v := os.Getenv(envRequireApproval); v != "" {
		return v, envRequireApproval, nil
	}
	_, err = os.Lstat(systemAllowedSigners)
	switch {
	case err == nil:
		return systemAllowedSigners, systemAllowedSigners, nil
	case errors.Is(err, fs.ErrNotExist):
		return "", "", nil
	}
	return "", "", fmt.Errorf("check for %s: %w (approval may be required; refusing rather than guessing)", systemAllowedSigners, err)
}

// decideApproval enforces --checksum and the approval in force, before
// anything connects, and says how it was decided, for the receipt.
func decideApproval(c *cli.Context, e *env, file string, p *plans.Plan, raw []byte) (*rollout.Approval, error) {
	if want := c.String("checksum"); want != "" && want != p.Checksum {
		return nil, fmt.Errorf("%s has checksum %s, not the %s you gave: it is not the plan that was reviewed", file, p.Checksum, want)
	}
	signers, from, err := signersInForce(c)
	if err != nil {
		return nil, err
	}
	if c.IsSet("skip-approval") {
		return skipApproval(c, e, file, signers, from)
	}
	if signers == "" {
		return &rollout.Approval{Decision: rollout.ApprovalNotConfigured}, nil
	}
	allowed, err := readSigners(signers, from)
	if err != nil {
		return nil, err
	}
	sigFile := c.String("signature")
	if sigFile == "" {
		sigFile = file + ".sig"
	}
	sig, err := readRegular(sigFile, 1<<20)
	if errors.Is(err, os.ErrNotExist) {
		return nil, withHint(fmt.Errorf("%w: no %s, and %s (from %s) requires a signature", approval.ErrNoSignature, sigFile, signers, from),
			fmt.Sprintf("a reviewer approves it with relayctl approve %s; to run it unsigned, say why: --skip-approval REASON (the receipt records it)", file))
	}
	if err != nil {
		return nil, fmt.Errorf("read signature: %w", err)
	}
	who, err := approval.Verify(raw, sig, allowed, signers, time.Now())
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	fmt.Fprintf(e.stderr, "relayctl: %s approved by %s\n", file, plans.Visible(who.String()))
	return &rollout.Approval{Decision: rollout.ApprovalSigned, AllowedSigners: signers, From: from, Signer: who.String(), Signature: sigFile,
		SignerKey: who.KeyType + " " + who.Fingerprint, SignersLine: fmt.Sprintf("%s:%d", who.File, who.Line)}, nil
}

// skipApproval is --skip-approval REASON: allowed only where there is an
// approval to skip and not beside --require-approval, which asks for one.
func skipApproval(c *cli.Context, e *env, file, signers, from string) (*rollout.Approval, error) {
	reason := strings.TrimSpace(c.String("skip-approval"))
	switch {
	case c.IsSet("require-approval"):
		return nil, errors.New("--skip-approval and --require-approval contradict each other; give one")
	case signers == "":
		return nil, withHint(fmt.Errorf("--skip-approval: no allowed_signers file is configured (--require-approval, $%s, %s), so there is no approval to skip", envRequireApproval, systemAllowedSigners),
			"leave the flag out")
	case reason == "" || len(reason) > 200 || strings.IndexFunc(reason, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0:
		return nil, errors.New(`--skip-approval needs a reason of printable text, at most 200 bytes, e.g. --skip-approval "outage 4711: rmem_max by hand"`)
	}
	who := whoami.Current().String()
	fmt.Fprintf(e.stderr, "relayctl: warning: %s runs without approval although %s (from %s) requires one: --skip-approval %q, recorded in the receipt\n", file, signers, from, reason)
	return &rollout.Approval{Decision: rollout.ApprovalSkipped, AllowedSigners: signers, From: from,
		SkippedBy: fmt.Sprintf("--skip-approval %q", reason), User: who}, nil
}

// readSigners reads the allowed_signers file, which is the trust root of
// every approval: a file, or any folder above it, that someone else could
// write would let them approve any plan (a folder two levels up lets them
// move the file's folder aside and put their own in its place), so each
// must be root's or ours and writable by its owner alone.
func readSigners(file, from string) ([]byte, error) {
	data, err := readRegular(file, 1<<20)
	if err != nil {
		return nil, fmt.Errorf("read allowed signers (from %s): %w", from, err)
	}
	if err := trust.Chain(file); err != nil {
		return nil, withHint(fmt.Errorf("allowed signers %s (from %s): %w: whoever can write it can approve any plan", file, from, err),
			"chown root and chmod go-w the file and every folder above it")
	}
	return data, nil
}
