#!/usr/bin/env bash
# relayd-load.sh: forwarded datagrams per second of relayd on loopback, with
# batching (RELAYD_BATCH=64) and without (RELAYD_BATCH=1) in the same run,
# plus relayd's CPU seconds per million forwarded datagrams. Lobbies of 8
# (fan-out 7), 120-byte datagrams. Extra arguments go to relayload, e.g.
#   scripts/relayd-load.sh -seconds 10 -runs 5
# Needs root for --so-rcvbuf-force (the load's window must fit the buffer).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/demo-lib.sh
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
build_release load "$bin/relayd"
build_tool ./internal/cmd/relayload "$bin/relayload"
echo "host: $(nproc) cores, $(uname -r), load average $(cut -d' ' -f1-3 /proc/loadavg)"
"$bin/relayload" -relayd "$bin/relayd" "$@"
