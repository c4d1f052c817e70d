package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/urfave/cli/v2"
	"golang.org/x/crypto/ssh"

	"github.com/relayctl/relayctl/plans/approval"
	"github.com/relayctl/relayctl/rollout/sshrun"
)

func approveCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:      "approve",
		Usage:     "sign a reviewed plan with your SSH key, so apply --require-approval accepts exactly these bytes",
		ArgsUsage: "PLAN",
		Description: `Checks the plan as apply would (against the spec it records), that
PLAN.md beside it is its review as relayctl renders it, and that it is a
plan to apply: one with more unreachable hosts than the budget it was made
with (plan failed on it) is refused unless --allow-unreachable. Then signs the plan
file's bytes with an SSH key in the format of ssh-keygen -Y sign, namespace
relayctl-plan, and writes the signature to PLAN.sig. Where an
allowed_signers file is configured (--require-approval FILE,
$RELAYCTL_REQUIRE_APPROVAL, or /etc/relayctl/allowed_signers on the machine
that applies), apply and stage then refuse the plan unless the signature
verifies with a key listed there; any edit of the plan after signing,
checksum recomputed or not, breaks the signature. namespaces= in that file
is an OpenSSH pattern list: "*,!relayctl-plan" refuses the key.

The same signature can be made, or checked, with OpenSSH alone:
   ssh-keygen -Y sign -f ~/.ssh/id_ed25519 -n relayctl-plan ashburn.plan
   ssh-keygen -Y verify -f allowed_signers -I alice@example.com -n relayctl-plan -s ashburn.plan.sig < ashburn.plan

Examples:
   relayctl approve ashburn.plan                       # the one key in ssh-agent
   relayctl approve ashburn.plan -i ~/.ssh/id_ed25519
   relayctl approve fleet.plan --allow-unreachable    # more hosts down than its budget: signed knowingly
   relayctl apply ashburn.plan --require-approval allowed_signers`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "identity", Aliases: []string{"i"}, Usage: "the private key `FILE` to sign with (default: the one key in ssh-agent)"},
			&cli.StringFlag{Name: "out", Aliases: []string{"o"}, Usage: "write the signature to `FILE` (default PLAN.sig)"},
			allowUnreachableFlag("sign"),
		},
		Action: func(c *cli.Context) error { return runApprove(c, e) },
	}
}

func runApprove(c *cli.Context, e *env) error {
	if c.NArg() != 1 {
		return withHint(errors.New("approve needs exactly one PLAN"), "relayctl approve ashburn.plan")
	}
	file := c.Args().First()
	p, raw, err := inspectPlan(file)
	if err != nil {
		return err
	}
	if err := overBudget(e, file, "approve", p, c.Bool("allow-unreachable")); err != nil {
		return err
	}
	// What the reviewer read must be this plan's review, not an edited one.
	review, err := os.ReadFile(file + ".md")
	switch {
	case errors.Is(err, os.ErrNotExist):
		fmt.Fprintf(e.stderr, "relayctl: no %s.md beside the plan; read the review with relayctl plan's output before approving\n", file)
	case err != nil:
		return fmt.Errorf("read review: %w", err)
	case !bytes.Equal(review, p.Markdown(filepath.Base(file))):
		return withHint(fmt.Errorf("%s.md is not the review of %s: one of them was edited after relayctl wrote them", file, file), "make the plan again and review what it writes")
	}
	signer, closeAgent, err := sshrun.Signer(c.String("identity"))
	if err != nil {
		return err
	}
	defer closeAgent()
	sig, err := approval.Sign(raw, signer)
	if err != nil {
		return err
	}
	out := c.String("out")
	if out == "" {
		out = file + ".sig"
	}
	if err := writeFileAtomic(out, sig, 0o644); err != nil {
		return err
	}
	pub := signer.PublicKey()
	fmt.Fprintf(e.stdout, "signed %s (checksum %s) with %s %s\n", file, p.Checksum, pub.Type(), ssh.FingerprintSHA256(pub))
	fmt.Fprintf(e.stderr, "relayctl: wrote %s; an allowed_signers line for this key: PRINCIPAL namespaces=\"%s\" %s", out, approval.Namespace, ssh.MarshalAuthorizedKey(pub))
	return nil
}
