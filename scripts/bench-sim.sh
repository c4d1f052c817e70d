#!/usr/bin/env bash
# bench-sim.sh: the fleet simulator (cmd/relayctl/fleetsim_test.go) at
# 1,000, 10,000 and 50,000 simulated hosts: relayctl plan and apply as they
# are, the CLI included, with only the hosts simulated (rollouttest.Sim
# with a network: latency, jitter, bandwidth; injected upload failures and
# unreachable hosts). Each size runs in a process of its own, RUNS times,
# and the table gives the median of each figure. Needs no root and no
# lab: it changes nothing on the machine. See docs/bench-fleet.md.
#
# Settings (environment):
#   SIZES="1000 10000 50000"  fleet sizes
#   RUNS=3          runs per size (medians)
#   PARALLEL=200    relayctl --parallel
#   LATENCY=20ms JITTER=10ms BANDWIDTH=100e6 (bytes/s) ARTIFACT=9000000 (bytes)
#   FAIL=0.002 UNREACHABLE=0.001   shares of the hosts
#   WORK=DIR        where the results go (default: a new /tmp/bench-sim.XXXXXX)
#
# Output: a line per run on stderr, the table on stdout (also WORK/table.txt).
set -euo pipefail

SIZES=${SIZES:-1000 10000 50000}
RUNS=${RUNS:-3}
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
WORK=${WORK:-$(mktemp -d /tmp/bench-sim.XXXXXX)}
mkdir -p "$WORK"
command -v go >/dev/null || { echo "bench-sim: go not found" >&2; exit 1; }
[ -x /usr/bin/python3 ] || { echo "bench-sim: /usr/bin/python3 missing (makes the table)" >&2; exit 1; }

echo "bench-sim: building the simulator (the cmd/relayctl test binary)" >&2
(cd "$REPO" && go test -c -o "$WORK/relayctl.test" ./cmd/relayctl)
export FLEETSIM_PARALLEL=${PARALLEL:-200} FLEETSIM_LATENCY=${LATENCY:-20ms} FLEETSIM_JITTER=${JITTER:-10ms}
export FLEETSIM_BANDWIDTH=${BANDWIDTH:-100e6} FLEETSIM_ARTIFACT=${ARTIFACT:-9000000}
export FLEETSIM_FAIL=${FAIL:-0.002} FLEETSIM_UNREACHABLE=${UNREACHABLE:-0.001}

for n in $SIZES; do
	for run in $(seq 1 "$RUNS"); do
		echo "bench-sim: $n hosts, run $run" >&2
		(cd "$WORK" && FLEETSIM_HOSTS=$n FLEETSIM_OUT="$WORK/sim-$n-$run.json" \
			./relayctl.test -test.run '^$' -test.bench '^BenchmarkFleetSim$' -test.benchtime 1x >"$WORK/sim-$n-$run.txt" 2>&1) ||
			{ echo "bench-sim: $n hosts, run $run failed: see $WORK/sim-$n-$run.txt" >&2; exit 1; }
		sed -n '1,4p' "$WORK/sim-$n-$run.txt" >&2
	done
done

/usr/bin/python3 - "$WORK" "$RUNS" $SIZES <<'PY' | tee "$WORK/table.txt"
import json, statistics, sys
work, runs, sizes = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
def med(rs, f):
    return statistics.median(f(r) for r in rs)
first = None
rows = []
for n in sizes:
    rs = [json.load(open("%s/sim-%s-%d.json" % (work, n, i))) for i in range(1, runs + 1)]
    first = first or rs[0]
    rows.append((n, rs))
c = first["Config"]
print("bench-sim  %s, %d CPUs, load at start %s; --parallel %d, latency %.0f ms + jitter up to %.0f ms a round trip, %.0f MB/s, release %d bytes; "
      "%.1f%% of hosts fail their upload, %.1f%% unreachable; medians of %d runs" % (first["GoVersion"], first["CPUs"], first["Load"], c["Parallel"],
      c["Latency"] / 1e6, c["Jitter"] / 1e6, c["Bandwidth"] / 1e6, c["Artifact"], c["Fail"] * 100, c["Unreachable"] * 100, runs))
print()
print("| hosts | apply wall | fleet walk / model | apply CPU per host | apply peak RSS | plan wall | plan CPU per host | plan peak RSS | kept per host | ledger save, median (p99) | plan file | review | receipt JSON / Markdown |")
print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for n, rs in rows:
    print("| %s | %.1f s | %.1f / %.1f s (%.3f×) | %.2f ms | %.0f MiB | %.1f s | %.2f ms | %.0f MiB | %.0f B | %.1f (%.0f) µs | %.1f MB | %.0f lines | %.1f MB / %.0f lines |" % (
        format(int(n), ","), med(rs, lambda r: r["Apply"]["WallSeconds"]), med(rs, lambda r: r["WalkSeconds"]), med(rs, lambda r: r["ModelSeconds"]),
        med(rs, lambda r: r["WalkSeconds"] / r["ModelSeconds"]), med(rs, lambda r: r["Apply"]["CPUMsPerHost"]), med(rs, lambda r: r["Apply"]["PeakRSSMiB"]),
        med(rs, lambda r: r["Plan"]["WallSeconds"]), med(rs, lambda r: r["Plan"]["CPUMsPerHost"]), med(rs, lambda r: r["Plan"]["PeakRSSMiB"]),
        med(rs, lambda r: r["RetainedPerHost"]), med(rs, lambda r: r["LedgerMedianUS"]), med(rs, lambda r: r["LedgerP99US"]),
        med(rs, lambda r: r["PlanBytes"]) / 1e6, med(rs, lambda r: r["ReviewLines"]), med(rs, lambda r: r["ReceiptJSONBytes"]) / 1e6,
        med(rs, lambda r: r["ReceiptMDLines"])))
print()
for n, rs in rows:
    r = rs[0]
    print("%s hosts: %d waves; outcomes %s; simulated hosts %.0f MiB of the peak; live view %.0f KB drawn; %.1f round trips a host (plan %.1f)" % (
        format(int(n), ","), r["Waves"], ", ".join("%d %s" % (v, k) for k, v in sorted(r["Outcomes"].items())), r["SimMiB"],
        r["LiveViewBytes"] / 1e3, r["ApplyRoundTripsPerHost"], r["PlanRoundTripsPerHost"]))
PY
