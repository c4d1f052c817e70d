package main

import (
	"fmt"

	"github.com/urfave/cli/v2"
)

// helpCommand is "relayctl help [COMMAND]", the same pages as --help. It is
// the app's only help subcommand: under a command, "help" would be an
// argument (a host may be called help).
func helpCommand() *cli.Command {
	return &cli.Command{
		Name:      "help",
		Usage:     "show the commands, or one command's flags and examples",
		ArgsUsage: "[COMMAND]",
		Description: `Prints what relayctl --help prints, or with a command what
relayctl COMMAND --help prints, on stdout.

Examples:
   relayctl help
   relayctl help apply
   relayctl man | man -l -`,
		Action: func(c *cli.Context) error {
			switch c.NArg() {
			case 0:
				return cli.ShowAppHelp(c)
			case 1:
				name := c.Args().First()
				if c.App.Command(name) == nil {
					text := fmt.Sprintf("help: unknown command %q", name)
					if near := nearest(name, commandNames(c.App)); near != "" {
						text += fmt.Sprintf("; did you mean %s?", near)
					}
					return usageError(text, "relayctl help lists the commands")
				}
				return cli.ShowCommandHelp(c, name)
			}
			return usageError("help takes one command at most", "relayctl help apply")
		},
	}
}

// commandNames are the commands a user may type.
func commandNames(app *cli.App) []string {
	var names []string
	for _, cmd := range app.Commands {
		if !cmd.Hidden {
			names = append(names, cmd.Name)
		}
	}
	return names
}
