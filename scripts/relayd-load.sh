#!/usr/bin/env bash
# relayd-load.sh: forwarded datagrams per second of relayd on loopback, with
# batching (RELAYD_BATCH=64) and without (RELAYD_BATCH=1) in the same run,
# plus relayd's CPU seconds per million forwarded datagrams. Lobbies of 8
# (fan-out 7), 120-byte datagrams. Extra arguments go to relayload, e.g.
#   scripts/relayd-load.sh -seconds 10 -runs 5
# With BASELINE=REV (a commit, tag or branch), relayd built from REV runs
# interleaved with this tree's, in its own wire version:
#   BASELINE=a7a8c82 scripts/relayd-load.sh -seconds 5 -runs 5 -batches 64
# Needs root for --so-rcvbuf-force (the load's window must fit the buffer).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/demo-lib.sh
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
build_release load "$bin/relayd"
build_tool ./internal/cmd/relayload "$bin/relayload"
base=()
if [ -n "${BASELINE:-}" ]; then
	rev=$(git rev-parse --verify --quiet "${BASELINE}^{commit}") || { echo "relayd-load: BASELINE=$BASELINE: not a commit here" >&2; exit 1; }
	mkdir "$bin/baseline"
	git archive "$rev" | tar -x -C "$bin/baseline"
	# Built as build_release builds this tree's, from the baseline's own tree.
	(cd "$bin/baseline" && CGO_ENABLED=0 go build -trimpath -buildvcs=false \
		-ldflags "-s -w -X main.Version=baseline-${rev:0:7}" -o "$bin/relayd-baseline" ./cmd/relayd)
	base=(-baseline "$bin/relayd-baseline")
	echo "baseline: relayd of $rev"
fi
echo "host: $(nproc) cores, $(uname -r), load average $(cut -d' ' -f1-3 /proc/loadavg)"
"$bin/relayload" -relayd "$bin/relayd" "${base[@]}" "$@"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
