package main

import (
	"fmt"
	"io"
	"os"
	"runtime/pprof"
)

// startProfile writes a CPU profile of this run to the file that
// RELAYCTL_CPUPROFILE names, for docs/bench-apply.md's profiles (go tool
// pprof bin/relayctl FILE). It returns the function that ends it.
func startProfile(stderr io.Writer) func() {
	file := os.Getenv("RELAYCTL_CPUPROFILE")
	if file == "" {
		return func() {}
	}
	f, err := os.Create(file)
	if err != nil {
		fmt.Fprintf(stderr, "relayctl: warning: RELAYCTL_CPUPROFILE: %v\n", err)
		return func() {}
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		fmt.Fprintf(stderr, "relayctl: warning: RELAYCTL_CPUPROFILE: %v\n", err)
		return func() {}
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}
}
