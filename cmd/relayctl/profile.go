package main

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/pprof"
)

// startProfile writes a CPU profile of this run to the file that
// RELAYCTL_CPUPROFILE names, for docs/bench-apply.md's profiles (go tool
// pprof bin/relayctl FILE). It returns the function that ends it.
//
// RELAYCTL_MEMPROFILE names a file for a heap profile written when the
// run ends: what it still holds then (go tool pprof -sample_index
// inuse_space), as docs/bench-fleet.md looks for relayctl's memory per host.
func startProfile(stderr io.Writer) func() {
	heap := heapProfile(stderr)
	cpu := cpuProfile(stderr)
	return func() { cpu(); heap() }
}

func heapProfile(stderr io.Writer) func() {
	file := os.Getenv("RELAYCTL_MEMPROFILE")
	if file == "" {
		return func() {}
	}
	return func() {
		f, err := os.Create(file)
		if err == nil {
			runtime.GC()
			err = pprof.WriteHeapProfile(f)
			f.Close()
		}
		if err != nil {
			fmt.Fprintf(stderr, "relayctl: warning: RELAYCTL_MEMPROFILE: %v\n", err)
		}
	}
}

func cpuProfile(stderr io.Writer) func() {
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
