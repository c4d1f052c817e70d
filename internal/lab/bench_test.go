package lab_test

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/relayctl/relayctl/internal/lab"
)

// BenchmarkStart measures starting a lab of 1 and 20 hosts (Close is not
// timed) and reports each idle sshd's memory: RSS, and PSS, which splits
// shared pages between the sshds and is the better per-host cost.
func BenchmarkStart(b *testing.B) {
	for _, n := range []int{1, 20} {
		b.Run(fmt.Sprintf("hosts=%d", n), func(b *testing.B) {
			lab.Require(b)
			o := lab.Options{Hosts: make([]lab.HostOptions, n)}
			var rss, pss float64
			for b.Loop() {
				o.Dir = b.TempDir()
				l, err := lab.Start(b.Context(), o)
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				for _, h := range l.Hosts {
					rss += memKiB(b, h.SSHDPID, "status", "VmRSS:")
					pss += memKiB(b, h.SSHDPID, "smaps_rollup", "Pss:")
				}
				if err := l.Close(); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			hosts := float64(b.N * n)
			b.ReportMetric(rss/hosts, "rss-KiB/host")
			b.ReportMetric(pss/hosts, "pss-KiB/host")
		})
	}
}

func memKiB(b *testing.B, pid int, file, field string) float64 {
	b.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/%s", pid, file))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), field); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			if err != nil {
				b.Fatalf("parse %s %s: %v", file, field, err)
			}
			return kb
		}
	}
	b.Fatalf("no %s in /proc/%d/%s", field, pid, file)
	return 0
}
