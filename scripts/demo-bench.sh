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
# Both ramps carry the capacity gate of the incident's rule, "a region must
# carry twice what is promised" (--promise 100 --factor 2), and the demo
# ends with both verdicts: no before the fix (exit 4), yes after (exit 0).
# Before the fix, relayctl size says what the promise needs and checks the
# fix's spec against it.
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
lab_up --dir "$dir/lab" --hosts 1 --no-relay-netns --relayd "$dir/relayd-1.7.0" --relay-version 1.7.0

say "Before: the relay socket"
./bin/relaylab exec --dir "$dir/lab" lab-1 -- ss -H -O -u -l -n -m 'sport = :7788'
# bench_gate NAME LOBBY_BASE [FLAGS...]: the ramp with the gate, its table
# in $dir/NAME.txt and its report in $dir/NAME.json; the verdict's exit
# status goes to $dir/NAME.exit (0 carried, 4 short, 1 the bench was the limit).
bench_gate() {
	local code=0 name=$1 base=$2
	shift 2
	./bin/relayctl bench --relay 127.0.0.1:7788 --control 127.0.0.1:7789 \
		--players "$RAMP" --step-duration "$STEP" --lobby-base "$base" --promise 100 --factor 2 \
		--ssh lab-1 --relay-pid "$(./bin/relaylab exec --dir "$dir/lab" lab-1 -- /opt/relay/bin/relay-service pid)" "${ssh_flags[@]}" \
		--json-out "$dir/$name.json" "$@" >"$dir/$name.txt" || code=$?
	set -- "$name"
	cat "$dir/$1.txt"
	echo "$code" >"$dir/$1.exit"
	[ "$code" = 0 ] || [ "$code" = 4 ] || { echo "demo-bench: bench exited $code: the bench, not the relay, was the limit (see above)" >&2; exit 1; }
}

say "Before: ramp $RAMP players, lobbies of 8, 60 Hz, 200-byte datagrams, gate 2 × 100 players"
bench_gate before 0

write_fix_spec "$dir/fix.yaml" demo-bench-rcvbuf
say "relayctl size: what 200 players and a 50 ms stall need, and what the fix's spec gives"
code=0
./bin/relayctl size --players 200 --lobby-size 8 --hz 60 --packet-size 200 --stall 50ms --spec "$dir/fix.yaml" || code=$?
[ "$code" = 0 ] || { echo "demo-bench: the fix's spec does not meet the promise (size exited $code)" >&2; exit 1; }
say "relayctl plan"
plan_changes "$dir/fix.yaml" "$dir/fix.plan"
say "relayctl apply"
./bin/relayctl apply "$dir/fix.plan" "${ssh_flags[@]}" 2>/dev/null

say "After: the relay socket"
./bin/relaylab exec --dir "$dir/lab" lab-1 -- ss -H -O -u -l -n -m 'sport = :7788'
say "After: the same ramp, the same gate"
bench_gate after 0 --plot-before "$dir/before.json" --plot "$dir/incident.png" --plot "$dir/incident.svg"

say "The chart: $dir/incident.png (and .svg): before and after on the same axes, each knee and the gate marked; tables: $dir/before.txt and $dir/after.txt (--wide, or the .json reports, have every counter)"
say "The gate: a region must carry twice what is promised"
verdict() { sed -n 's/^gate: \(.*\)$/\1/p' "$dir/$1.txt" | tail -1; }
echo "before the fix: $(verdict before) (exit $(cat "$dir/before.exit"))"
echo "after the fix:  $(verdict after) (exit $(cat "$dir/after.exit"))"
[ "$(cat "$dir/after.exit")" = 0 ] || { echo "demo-bench: after the fix the relay still falls short of the gate" >&2; exit 1; }
