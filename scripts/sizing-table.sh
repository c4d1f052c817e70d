#!/usr/bin/env bash
# sizing-table.sh: the sizing model against the real relayd, the table of
# docs/sizing.md. For rb 65536, 212992 and 1 MiB (relayd asks with
# SO_RCVBUFFORCE, so rmem_max is not touched), relayd is stopped with
# SIGSTOP for 1 and 3 ticks (20 Hz; 10 Hz for 1 MiB, whose 819-datagram
# bursts take the relay longer to drain) while players send on aligned ticks,
# at every player count from 5 below to 5 above the model's onset; then the
# bench ramps through the onset without a stall. Needs root (SIGSTOP of
# relayd, SO_RCVBUFFORCE, nice -10); takes about 5 minutes. Prints the
# Markdown table; the per-trial tables are in the test log with -v.
#   scripts/sizing-table.sh [-v]
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(mktemp)
trap 'rm -f "$out"' EXIT
echo "host: $(nproc) cores, $(uname -r), load average $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%Y-%m-%dT%H:%MZ)"
SIZING_TABLE="$out" go test -count=1 -timeout 30m -run '^TestStallModel$' "$@" ./relay/bench >&2
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
cat "$out"
