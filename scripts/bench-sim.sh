#!/usr/bin/env bash
# bench-sim.sh: the fleet simulator (cmd/relayctl/fleetsim_test.go) at
# 1,000, 10,000 and 50,000 simulated hosts behind a 1 Gbit/s and a 10
# Gbit/s uplink: relayctl plan and apply as they are, the CLI included,
# with only the hosts simulated (rollouttest.Sim with a network: latency,
# jitter, each host's own link, the controller's uplink that every upload
# shares with the SSH channel's window; injected upload failures and
# unreachable hosts). The release is relayd built from this checkout, and
# the hosts keep the relayd of PREVIOUS (40 commits earlier) in their
# store, which relayctl shipped before: a release upgrade, sent as a zstd
# patch. SCENARIOS=fresh adds the hosts that keep no release before (the
# release goes zstd-compressed). Each run is a process of its own, RUNS
# times, and the tables give the median of each figure. Needs no root and
# no lab: it changes nothing on the machine. See docs/bench-fleet.md.
#
# Settings (environment):
#   SIZES="1000 10000 50000"  fleet sizes
#   UPLINKS="1 10"  the controller's uplink, Gbit/s
#   SCENARIOS="upgrade"  upgrade (a patch from the release before), fresh (none before)
#   RUNS=3          runs per size (medians)
#   PREVIOUS=HEAD~40  the commit whose relayd the hosts keep
#   PARALLEL=200    relayctl --parallel
#   LATENCY=20ms JITTER=10ms CONNECT=8 (round trips) RESTART=70ms BANDWIDTH=100e6 (each host's link, bytes/s) WINDOW=2097152 (bytes)
#   FAIL=0.002 UNREACHABLE=0.001   shares of the hosts
#   WORK=DIR        where the results go (default: a new /tmp/bench-sim.XXXXXX)
#
# Output: a line per run on stderr, the tables on stdout (also WORK/table.txt).
set -euo pipefail

SIZES=${SIZES:-1000 10000 50000}
UPLINKS=${UPLINKS:-1 10}
SCENARIOS=${SCENARIOS:-upgrade}
RUNS=${RUNS:-3}
PREVIOUS=${PREVIOUS:-HEAD~40}
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
WORK=${WORK:-$(mktemp -d /tmp/bench-sim.XXXXXX)}
mkdir -p "$WORK"
command -v go >/dev/null || { echo "bench-sim: go not found" >&2; exit 1; }
[ -x /usr/bin/python3 ] || { echo "bench-sim: /usr/bin/python3 missing (makes the table)" >&2; exit 1; }

# relayd as make build builds it (static, stripped, its version marker),
# from this checkout and from PREVIOUS (its tree from git archive).
build_relayd() { # SRC VERSION OUT
	(cd "$1" && CGO_ENABLED=0 go build -trimpath -buildvcs=false \
		-ldflags "-s -w -X main.Version=$2 -X main.versionMarker=relayd-version:$2" -o "$3" ./cmd/relayd)
}
echo "bench-sim: building relayd here and at $PREVIOUS, and the simulator (the cmd/relayctl test binary)" >&2
rev=$(git -C "$REPO" rev-parse --short "$PREVIOUS")
rm -rf "$WORK/previous-src" && mkdir -p "$WORK/previous-src"
git -C "$REPO" archive "$rev" | tar -x -C "$WORK/previous-src"
build_relayd "$REPO" 1.8.0 "$WORK/relayd"
build_relayd "$WORK/previous-src" 1.7.0 "$WORK/relayd-previous"
(cd "$REPO" && go test -c -o "$WORK/relayctl.test" ./cmd/relayctl)
export FLEETSIM_PARALLEL=${PARALLEL:-200} FLEETSIM_LATENCY=${LATENCY:-20ms} FLEETSIM_JITTER=${JITTER:-10ms}
export FLEETSIM_CONNECT=${CONNECT:-8} FLEETSIM_RESTART=${RESTART:-70ms} FLEETSIM_BANDWIDTH=${BANDWIDTH:-100e6} FLEETSIM_WINDOW=${WINDOW:-2097152}
export FLEETSIM_ARTIFACT_FILE=$WORK/relayd FLEETSIM_PREVIOUS_FILE=$WORK/relayd-previous
export FLEETSIM_FAIL=${FAIL:-0.002} FLEETSIM_UNREACHABLE=${UNREACHABLE:-0.001}

for scenario in $SCENARIOS; do
	case $scenario in
	upgrade) previous=1 ;;
	fresh) previous=0 ;;
	*) echo "bench-sim: unknown scenario $scenario (upgrade, fresh)" >&2; exit 1 ;;
	esac
	for up in $UPLINKS; do
		for n in $SIZES; do
			for run in $(seq 1 "$RUNS"); do
				name=$scenario-$up-$n-$run
				echo "bench-sim: $n hosts, $up Gbit/s, $scenario, run $run" >&2
				(cd "$WORK" && FLEETSIM_HOSTS=$n FLEETSIM_UPLINK_GBIT=$up FLEETSIM_PREVIOUS=$previous FLEETSIM_OUT="$WORK/sim-$name.json" \
					./relayctl.test -test.run '^$' -test.bench '^BenchmarkFleetSim$' -test.benchtime 1x >"$WORK/sim-$name.txt" 2>&1) ||
					{ echo "bench-sim: run $name failed: see $WORK/sim-$name.txt" >&2; exit 1; }
				sed -n '1,5p' "$WORK/sim-$name.txt" >&2
			done
		done
	done
done

/usr/bin/python3 - "$WORK" "$RUNS" "$rev" "$SCENARIOS" "$UPLINKS" $SIZES <<'PY' | tee "$WORK/table.txt"
import json, statistics, sys
work, runs, rev, scenarios, uplinks, sizes = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4].split(), sys.argv[5].split(), sys.argv[6:]
def med(rs, f):
    return statistics.median(f(r) for r in rs)
def load(sc, up, n):
    return [json.load(open("%s/sim-%s-%s-%s-%d.json" % (work, sc, up, n, i))) for i in range(1, runs + 1)]
first = load(scenarios[0], uplinks[0], sizes[0])[0]
c = first["Config"]
print("bench-sim  %s, %d CPUs, load at start %s; --parallel %d, latency %.0f ms + jitter up to %.0f ms a round trip, %d to connect, restart %.0f ms, each host's link %.0f MB/s, "
      "SSH window %d KiB; release relayd %d bytes, the one before from %s; %.1f%% of hosts fail their upload, %.1f%% unreachable; medians of %d runs" % (
      first["GoVersion"], first["CPUs"], first["Load"], c["Parallel"], c["Latency"] / 1e6, c["Jitter"] / 1e6, c["Connect"], c["Restart"] / 1e6, c["Bandwidth"] / 1e6,
      c["Window"] >> 10, first["ReleaseBytes"], rev, c["Fail"] * 100, c["Unreachable"] * 100, runs))
print()
print("| hosts | uplink | release | apply wall | fleet walk | lower bound | walk / bound | through the uplink a host | of it the release | round trips a host |")
print("| ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for sc in scenarios:
    for up in uplinks:
        for n in sizes:
            rs = load(sc, up, n)
            rel = rs[0]["ReleaseBytes"]
            forms = ", ".join("%s" % k for k in sorted(rs[0]["Forms"]))
            print("| %s | %s Gbit/s | %s | %.1f s | %.1f s | %.1f s | **%.2f×** | %.0f B (**%.1f%%**) | %.0f B (%.1f%%, %s) | %.1f |" % (
                format(int(n), ","), up, {"upgrade": "upgrade", "fresh": "none before"}[sc], med(rs, lambda r: r["Apply"]["WallSeconds"]),
                med(rs, lambda r: r["WalkSeconds"]), med(rs, lambda r: r["BoundSeconds"]), med(rs, lambda r: r["WalkSeconds"] / r["BoundSeconds"]),
                med(rs, lambda r: r["UplinkPerHost"]), 100 * med(rs, lambda r: r["UplinkPerHost"]) / rel,
                med(rs, lambda r: r["ReleasePerHost"]), 100 * med(rs, lambda r: r["ReleasePerHost"]) / rel, forms,
                med(rs, lambda r: r["ApplyRoundTripsPerHost"])))
print()
print("The engine's own costs (%s, %s Gbit/s):" % (scenarios[0], uplinks[0]))
print()
print("| hosts | apply CPU per host | apply peak RSS | plan wall | plan CPU per host | plan peak RSS | kept per host | ledger save, median (p99) | plan file | review | receipt JSON / Markdown |")
print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for n in sizes:
    rs = load(scenarios[0], uplinks[0], n)
    print("| %s | %.2f ms | %.0f MiB | %.1f s | %.2f ms | %.0f MiB | %.0f B | %.1f (%.0f) µs | %.1f MB | %.0f lines | %.1f MB / %.0f lines |" % (
        format(int(n), ","), med(rs, lambda r: r["Apply"]["CPUMsPerHost"]), med(rs, lambda r: r["Apply"]["PeakRSSMiB"]),
        med(rs, lambda r: r["Plan"]["WallSeconds"]), med(rs, lambda r: r["Plan"]["CPUMsPerHost"]), med(rs, lambda r: r["Plan"]["PeakRSSMiB"]),
        med(rs, lambda r: r["RetainedPerHost"]), med(rs, lambda r: r["LedgerMedianUS"]), med(rs, lambda r: r["LedgerP99US"]),
        med(rs, lambda r: r["PlanBytes"]) / 1e6, med(rs, lambda r: r["ReviewLines"]), med(rs, lambda r: r["ReceiptJSONBytes"]) / 1e6,
        med(rs, lambda r: r["ReceiptMDLines"])))
print()
for n in sizes:
    r = load(scenarios[0], uplinks[0], n)[0]
    print("%s hosts: %d waves; outcomes %s; simulated hosts %.0f MiB of the peak; live view %.0f KB drawn; the review: %s" % (
        format(int(n), ","), r["Waves"], ", ".join("%d %s" % (v, k) for k, v in sorted(r["Outcomes"].items())), r["SimMiB"],
        r["LiveViewBytes"] / 1e3, r["ReviewUplink"]))
PY
