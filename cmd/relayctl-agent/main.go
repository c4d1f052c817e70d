// Command relayctl-agent is relayctl's host agent: relayctl starts it on a
// host, one process a session, and it carries out the primitives relayctl
// sends on its standard input (package agent).
package main

import (
	"os"

	"github.com/relayctl/relayctl/agent"
)

func main() { os.Exit(agent.Main(os.Args, os.Stdin, os.Stdout, os.Stderr)) }
