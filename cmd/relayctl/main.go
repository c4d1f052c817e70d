// Command relayctl tunes Linux hosts and rolls out releases of a UDP relay in
// one restart window, proven by reading the result back from the kernel.
package main

import "os"

func main() {
	os.Exit(run(os.Args, os.Stdin, os.Stdout, os.Stderr))
}
