#!/usr/bin/env bash
# make demo-bench: the whole incident on one lab host.
#
#   1. relayd 1.7.0 (it never asks for a buffer) on the kernel's 212,992-byte
#      defaults; a ramp of lobbies of eight finds the knee, and the four drop
#      counters (ss d, /proc/net/udp drops, RcvbufErrors, the relay's
#      rx_drops) are compared;
#   2. relayctl plan + apply ship net.core.rmem_max with relayd 1.8.0 asking
#      for 4 MiB, in one window, verified by read-back;
#   3. the same ramp again.
#
# The relay runs in the machine's network namespace here (the bench sends
# to it on 127.0.0.1), so RcvbufErrors counts every UDP socket of that
# namespace: the bench marks a step invalid when its own sockets drop, so in
# valid steps the delta is the relay's. Needs root; restores
# net.core.rmem_max and rmem_default at the end. RAMP and STEP override the
# ramp (default 40:480:40, 3s a step).
set -euo pipefail
cd "$(dirname "$0")/.."
RAMP=${RAMP:-40:480:40}
STEP=${STEP:-3s}

. scripts/demo-lib.sh
demo_start demo-bench "${DEMO_DIR:-demo-bench}"

say "One lab host, relayd 1.7.0 in the machine's network namespace"
./bin/relaylab up --dir "$dir/lab" --hosts 1 --no-relay-netns --relayd "$dir/relayd-1.7.0" --relay-version 1.7.0

say "Before: the relay socket"
./bin/relaylab exec --dir "$dir/lab" lab-1 -- ss -H -O -u -l -n -m 'sport = :7788'
say "Before: ramp $RAMP players, lobbies of 8, 60 Hz, 200-byte datagrams"
./bin/relayctl bench --relay 127.0.0.1:7788 --control 127.0.0.1:7789 \
	--players "$RAMP" --step-duration "$STEP" --lobby-base 0 \
	--ssh lab-1 --relay-pid "$(./bin/relaylab exec --dir "$dir/lab" lab-1 -- /opt/relay/bin/relay-service pid)" "${ssh_flags[@]}" \
	--plot "$dir/before.svg" | tee "$dir/before.txt"

write_fix_spec "$dir/fix.yaml" demo-bench-rcvbuf
say "relayctl plan"
plan_changes "$dir/fix.yaml" "$dir/fix.plan"
say "relayctl apply"
./bin/relayctl apply "$dir/fix.plan" "${ssh_flags[@]}" 2>/dev/null

say "After: the relay socket"
./bin/relaylab exec --dir "$dir/lab" lab-1 -- ss -H -O -u -l -n -m 'sport = :7788'
say "After: the same ramp"
./bin/relayctl bench --relay 127.0.0.1:7788 --control 127.0.0.1:7789 \
	--players "$RAMP" --step-duration "$STEP" --lobby-base 0 \
	--ssh lab-1 --relay-pid "$(./bin/relaylab exec --dir "$dir/lab" lab-1 -- /opt/relay/bin/relay-service pid)" "${ssh_flags[@]}" \
	--plot "$dir/after.svg" | tee "$dir/after.txt"

say "Charts: $dir/before.svg and $dir/after.svg; tables: $dir/before.txt and $dir/after.txt"
