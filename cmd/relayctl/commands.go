package main

import "github.com/urfave/cli/v2"

// commands lists the subcommands; each lives in its own file. None has a
// help subcommand of its own: a host named h or help is a host (--help
// still works); relayctl help COMMAND shows a command's help.
// Usage mistakes are reported by usage.go.
func commands(e *env) []*cli.Command {
	cmds := []*cli.Command{
		validateCommand(e),
		planCommand(e),
		showCommand(e),
		factsCommand(e),
		applyCommand(e),
		stageCommand(e),
		approveCommand(e),
		rollbackCommand(e),
		verifyCommand(e),
		historyCommand(e),
		benchCommand(e),
		sizeCommand(e),
		completionCommand(e),
		manCommand(e),
		helpCommand(),
	}
	for _, c := range cmds {
		c.HideHelpCommand = true
		c.OnUsageError = onUsageError
		c.Before = checkFlags
	}
	return cmds
}

// checkFlags is every command's Before: what urfave/cli cannot check of
// its flags.
func checkFlags(c *cli.Context) error {
	if err := checkRequired(c); err != nil {
		return err
	}
	return checkKeepalive(c)
}
