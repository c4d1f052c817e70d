package main

import "github.com/urfave/cli/v2"

// commands lists the subcommands; each lives in its own file.
func commands(e *env) []*cli.Command {
	return []*cli.Command{
		planCommand(e),
		factsCommand(e),
		applyCommand(e),
		approveCommand(e),
		verifyCommand(e),
		benchCommand(e),
		sizeCommand(e),
	}
}
